//! Finds the virtio-serial port the host named for the agent. The driver
//! lists ports as `/sys/class/virtio-ports/<dev>/name` and devtmpfs makes
//! `/dev/<dev>`; both appear asynchronously once the modules load, hence
//! the polling.

use std::fs::{self, File, OpenOptions};
use std::io;
use std::path::{Path, PathBuf};
use std::thread;
use std::time::{Duration, Instant};

const PORTS: &str = "/sys/class/virtio-ports";

/// Opens the port named `name` read-write, waiting up to `within`.
pub fn open(name: &str, within: Duration) -> io::Result<File> {
    let deadline = Instant::now() + within;
    loop {
        let last = match find(name) {
            Some(dev) => match OpenOptions::new().read(true).write(true).open(&dev) {
                Ok(port) => return Ok(port),
                Err(e) => format!("cannot open {}: {e}", dev.display()),
            },
            None => format!("no virtio-serial port named {name} in {PORTS}"),
        };
        if Instant::now() >= deadline {
            return Err(io::Error::new(
                io::ErrorKind::NotFound,
                format!("{last} after {within:?}"),
            ));
        }
        thread::sleep(Duration::from_millis(10));
    }
}

/// The device node of the port named `name`, if it is listed yet.
fn find(name: &str) -> Option<PathBuf> {
    fs::read_dir(PORTS).ok()?.flatten().find_map(|entry| {
        let listed = fs::read_to_string(entry.path().join("name")).ok()?;
        (listed.trim() == name).then(|| Path::new("/dev").join(entry.file_name()))
    })
}
