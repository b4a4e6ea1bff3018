// SPDX-License-Identifier: GPL-2.0-only
//! What the idle tests share (`vnic/tests/idle.rs` through `common`, and gmsd's
//! `tests/idle.rs` by `#[path]`): the limit, the window, a process's CPU time, and the
//! UDP loopback the processes under test talk over.

use std::net::UdpSocket;
use std::time::Duration;

/// The most of a core an idle process may use.
pub const LIMIT: f64 = 0.01;

/// How long the processes are left idle: `IDLE_TEST_SECS`, else 10 s.
pub fn idle_window() -> Duration {
    let secs = std::env::var("IDLE_TEST_SECS").ok().and_then(|s| s.parse().ok()).unwrap_or(10);
    Duration::from_secs(secs)
}

/// CPU time process `pid` has used, user and system, all its threads (`/proc/PID/stat`
/// fields 14 and 15, in clock ticks).
pub fn cpu_time(pid: u32) -> Duration {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat"))
        .unwrap_or_else(|e| panic!("/proc/{pid}/stat: {e} (the process exited?)"));
    // Field 2, the command, is in parentheses and may hold spaces: count from its end.
    let rest = &stat[stat.rfind(')').expect("a command in parentheses") + 1..];
    let fields: Vec<u64> = rest.split_whitespace().skip(1).take(13).map(|f| f.parse().unwrap_or(0)).collect();
    let ticks = fields[11] + fields[12];
    Duration::from_secs_f64(ticks as f64 / rustix::param::clock_ticks_per_second() as f64)
}

/// The idle tests talk over UDP on 127.0.0.1: fail saying so where it has none, rather
/// than with an error of the process under test.
pub fn require_loopback() {
    let probe = || -> std::io::Result<()> {
        let s = UdpSocket::bind("127.0.0.1:0")?;
        s.set_read_timeout(Some(Duration::from_secs(2)))?;
        s.send_to(b"probe", s.local_addr()?)?;
        s.recv(&mut [0u8; 8]).map(drop)
    };
    if let Err(e) = probe() {
        panic!("cannot run here: no UDP loopback on 127.0.0.1 ({e}); the processes under test talk over it");
    }
}
