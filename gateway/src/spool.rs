//! A push read whole before its verdict (an update of an existing ref,
//! whose pack tells a fast-forward from a force push) is kept in an unlinked
//! temporary file, never in memory: a push may be gigabytes. It is read
//! from there for the pack's commits, for the mirror when the pack cannot
//! tell, and once more when forwarded.

use std::fs::File;
use std::io::{Read, Seek, SeekFrom, Write};
use std::path::Path;

use bytes::Bytes;
use http_body_util::combinators::BoxBody;
use http_body_util::{BodyExt, StreamBody};
use hyper::body::{Frame, Incoming};

/// How much is read from the file at a time when forwarding.
const CHUNK: usize = 256 << 10;

/// The request, spooled.
pub struct Spool {
    file: File,
    len: u64,
}

impl Spool {
    /// An unlinked file in `dir` (made when absent).
    pub fn new(dir: &Path) -> Result<Self, String> {
        std::fs::create_dir_all(dir)
            .and_then(|()| tempfile::tempfile_in(dir))
            .map(|file| Self { file, len: 0 })
            .map_err(|e| format!("spooling the push in {}: {e}", dir.display()))
    }

    /// Writes `first` (what was read already), then the rest of `body`.
    /// The writes go to the page cache: short enough for the async threads.
    pub async fn take(&mut self, first: &[u8], body: &mut Incoming) -> Result<(), String> {
        self.write(first)?;
        while let Some(frame) = body.frame().await {
            let frame = frame.map_err(|e| format!("reading the push: {e}"))?;
            if let Ok(data) = frame.into_data() {
                self.write(&data)?;
            }
        }
        Ok(())
    }

    fn write(&mut self, data: &[u8]) -> Result<(), String> {
        self.file
            .write_all(data)
            .map_err(|e| format!("spooling the push: {e}"))?;
        self.len += data.len() as u64;
        Ok(())
    }

    pub fn len(&self) -> u64 {
        self.len
    }

    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// A handle reading from `offset` (it shares the file's position: one
    /// reader at a time).
    pub fn reader_at(&self, offset: u64) -> Result<File, String> {
        let mut file = self
            .file
            .try_clone()
            .map_err(|e| format!("reading the spooled push: {e}"))?;
        file.seek(SeekFrom::Start(offset))
            .map_err(|e| format!("reading the spooled push: {e}"))?;
        Ok(file)
    }

    /// The whole request as a body, read by a blocking task.
    pub fn into_body(self) -> Result<BoxBody<Bytes, hyper::Error>, String> {
        let mut file = self.reader_at(0)?;
        let (tx, rx) = tokio::sync::mpsc::channel::<Bytes>(4);
        tokio::task::spawn_blocking(move || {
            loop {
                let mut chunk = vec![0; CHUNK];
                let n = match file.read(&mut chunk) {
                    Ok(0) => return,
                    Ok(n) => n,
                    Err(e) => {
                        // The upstream gets a short body and refuses it.
                        tracing::warn!("reading the spooled push: {e}");
                        return;
                    }
                };
                chunk.truncate(n);
                if tx.blocking_send(Bytes::from(chunk)).is_err() {
                    return;
                }
            }
        });
        let frames = futures_util::stream::unfold(rx, |mut rx| async move {
            let chunk = rx.recv().await?;
            Some((Ok::<_, hyper::Error>(Frame::data(chunk)), rx))
        });
        Ok(StreamBody::new(frames).boxed())
    }
}
