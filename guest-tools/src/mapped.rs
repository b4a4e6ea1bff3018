// SPDX-License-Identifier: GPL-2.0-only
//! A read-only shared mapping of a whole file (`memmap2`), the one unsafe block of the
//! guest tools: `trapeze-filebench --mode mmap` reads a file through page faults.

use std::fs::File;

/// The file's bytes, mapped read-only and shared.
pub struct Mapped(memmap2::Mmap);

impl Mapped {
    /// Map all of `f` (opened for reading).
    pub fn new(f: &File) -> std::io::Result<Self> {
        // SAFETY: the mapping is read-only and shared; the only writer of the file is the
        // same tool's `write` mode, which has finished (fsync'd and closed) before a read
        // starts: nothing truncates or changes the file while it is mapped, so the slice
        // stays valid and unchanging for the mapping's lifetime.
        let m = unsafe { memmap2::Mmap::map(f)? };
        Ok(Mapped(m))
    }
    pub fn as_slice(&self) -> &[u8] {
        &self.0
    }
}
