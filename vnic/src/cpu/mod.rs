// SPDX-License-Identifier: GPL-2.0-only
//! The NIC processor's flashed mode: the riscv32imac firmware image on an emulated core
//! ([`flashed`], cargo feature `flashed`, on by default: it builds unicorn, which needs
//! cmake and libclang), loading images into NIC memory ([`load`]), and the firmware log
//! it produces ([`FwLog`]). Native mode (the firmware
//! crate linked into this process) lives in `nic.rs`.

#[cfg(feature = "flashed")]
#[allow(unsafe_code)] // the emulator's cross-thread stop handle: a documented unsafe module
pub mod flashed;
pub mod load;

/// Without the `flashed` feature there is no emulator: the image helpers remain, and a
/// request to run an image is refused by `Nic::start` with an error saying so.
#[cfg(not(feature = "flashed"))]
pub mod flashed {
    pub use super::load::{fault, load, text_checksum, ImageMemory};

    /// Nothing to stop: no emulated core exists in this build.
    #[derive(Clone, Default)]
    pub struct CoreStopper;

    impl CoreStopper {
        pub fn stop(&self) {}
    }
}

use std::collections::VecDeque;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Mutex;

/// Firmware log lines kept for status.
pub const LOG_LINES: usize = 100;

/// The most recent decoded firmware log lines of one NIC (across firmware loads).
#[derive(Debug, Default)]
pub struct FwLog {
    lines: Mutex<VecDeque<String>>,
    total: AtomicU64,
}

impl FwLog {
    pub fn push(&self, line: String) {
        let mut l = self.lines.lock().unwrap_or_else(|e| e.into_inner());
        if l.len() == LOG_LINES {
            l.pop_front();
        }
        l.push_back(line);
        self.total.fetch_add(1, Ordering::Relaxed);
    }

    /// The last [`LOG_LINES`] lines, oldest first.
    pub fn recent(&self) -> Vec<String> {
        self.lines.lock().unwrap_or_else(|e| e.into_inner()).iter().cloned().collect()
    }

    /// Lines logged since the NIC was created.
    pub fn total(&self) -> u64 {
        self.total.load(Ordering::Relaxed)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn log_keeps_the_last_lines() {
        let log = FwLog::default();
        for i in 0..LOG_LINES + 5 {
            log.push(format!("line {i}"));
        }
        let r = log.recent();
        assert_eq!(r.len(), LOG_LINES);
        assert_eq!(r[0], "line 5");
        assert_eq!(r.last().unwrap(), &format!("line {}", LOG_LINES + 4));
        assert_eq!(log.total(), LOG_LINES as u64 + 5);
    }
}
