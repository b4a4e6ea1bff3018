// SPDX-License-Identifier: GPL-2.0-only
//! A process run to completion within a time limit, for the process tests (each includes
//! this file by `#[path]`): one still running at the limit is killed, and the test fails
//! naming it and what it wrote to stderr.

#![allow(dead_code)] // each includer uses its own part

use std::fmt::Debug;
use std::process::{Child, Command, Output, Stdio};
use std::time::{Duration, Instant};

/// Wait for `child` (started by `what`) within `limit`; its output.
pub fn wait_within(mut child: Child, what: &dyn Debug, limit: Duration) -> Output {
    let t0 = Instant::now();
    while child.try_wait().expect("wait").is_none() {
        if t0.elapsed() > limit {
            let _ = child.kill();
            let out = child.wait_with_output().expect("reap");
            panic!("{what:?} still running after {limit:?}: {}", String::from_utf8_lossy(&out.stderr));
        }
        std::thread::sleep(Duration::from_millis(10));
    }
    child.wait_with_output().expect("collect output")
}

/// Run `cmd` (stdin empty, stdout and stderr captured) to completion within `limit`.
pub fn run(mut cmd: Command, limit: Duration) -> Output {
    let child = cmd.stdout(Stdio::piped()).stderr(Stdio::piped()).stdin(Stdio::null()).spawn().expect("spawn");
    wait_within(child, &cmd, limit)
}
