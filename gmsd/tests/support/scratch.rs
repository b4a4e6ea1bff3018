// SPDX-License-Identifier: GPL-2.0-only
//! A scratch directory for a process test, removed when it is dropped (each test file
//! includes this one by `#[path]`).

use std::path::PathBuf;

/// A scratch directory under the system's temporary directory, named by the test's tag
/// and this process.
pub struct Dir(pub PathBuf);

impl Dir {
    pub fn new(tag: &str) -> Dir {
        let d = std::env::temp_dir().join(format!("gmsd-test-{tag}-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&d);
        std::fs::create_dir_all(&d).unwrap();
        Dir(d)
    }

    pub fn join(&self, p: &str) -> PathBuf {
        self.0.join(p)
    }
}

impl Drop for Dir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}
