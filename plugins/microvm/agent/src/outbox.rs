//! The one writer to the host. Every frame goes out whole under one lock,
//! so frames of different streams never interleave. A failed write means
//! the host is gone: the agent halts.

use std::io::Write;
use std::sync::Mutex;

use sandbox_microvm_proto::Frame;

use crate::power::{self, Role};
use crate::{lock, log};

pub struct Outbox<W> {
    out: Mutex<W>,
    role: Role,
}

impl<W: Write> Outbox<W> {
    pub fn new(out: W, role: Role) -> Self {
        Self {
            out: Mutex::new(out),
            role,
        }
    }

    /// Sends one frame; blocks while the host does not read.
    pub fn send(&self, frame: &Frame) {
        let mut out = lock(&self.out);
        if let Err(e) = frame.write_to(&mut *out) {
            log!("cannot write to the host: {e}");
            power::halt(self.role, false);
        }
    }
}
