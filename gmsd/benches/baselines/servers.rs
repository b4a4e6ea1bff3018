// SPDX-License-Identifier: GPL-2.0-only
//! The baselines' servers as child processes: `nbdkit memory` and `memcached`, each on a
//! free TCP port on 127.0.0.1, optionally pinned with `taskset`, killed when dropped; and
//! the CPU time a process has used, from the scheduler's own count.

use anyhow::{bail, Context};
use std::net::{TcpListener, TcpStream};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

/// A server process, killed and reaped when dropped.
pub struct Server {
    pub port: u16,
    child: Child,
}

impl Server {
    /// `nbdkit`'s memory plugin: a RAM disk of `bytes`, served over NBD.
    pub fn nbdkit(bytes: u64, cpu: Option<usize>) -> anyhow::Result<Server> {
        let port = free_port()?;
        let (p, size) = (port.to_string(), bytes.to_string());
        let args = ["--foreground", "--exit-with-parent", "--ipaddr", "127.0.0.1", "--port", &p, "memory", &size];
        Server::start("nbdkit", "nbdkit (apt-get install nbdkit)", &args, port, cpu)
    }

    /// `memcached` with one worker thread (one client connection: more would only sleep)
    /// and room for `bytes` of values.
    pub fn memcached(bytes: u64, cpu: Option<usize>) -> anyhow::Result<Server> {
        let port = free_port()?;
        let (p, mb) = (port.to_string(), (bytes >> 20).saturating_mul(2).max(64).to_string());
        let mut args = vec!["-l", "127.0.0.1", "-p", &p, "-U", "0", "-t", "1", "-m", &mb];
        // memcached refuses to run as root unless told which user to be.
        if rustix::process::geteuid().is_root() {
            args.extend(["-u", "root"]);
        }
        Server::start("memcached", "memcached (apt-get install memcached)", &args, port, cpu)
    }

    fn start(
        name: &'static str,
        install: &str,
        args: &[&str],
        port: u16,
        cpu: Option<usize>,
    ) -> anyhow::Result<Server> {
        let mut cmd = match cpu {
            Some(c) => {
                let mut t = Command::new("taskset");
                t.args(["-c", &c.to_string(), name]);
                t
            }
            None => Command::new(name),
        };
        cmd.args(args).stdin(Stdio::null()).stdout(Stdio::null());
        let child = cmd.spawn().with_context(|| format!("starting {install}"))?;
        let mut s = Server { port, child };
        let t = Instant::now();
        while TcpStream::connect(("127.0.0.1", port)).is_err() {
            if let Some(st) = s.child.try_wait()? {
                bail!("{name} exited at start ({st}): is {install} installed?");
            }
            if t.elapsed() > Duration::from_secs(10) {
                bail!("{name} did not listen on 127.0.0.1:{port} within 10 s");
            }
            std::thread::sleep(Duration::from_millis(20));
        }
        Ok(s)
    }

    pub fn pid(&self) -> u32 {
        self.child.id()
    }
}

impl Drop for Server {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// A TCP port free on 127.0.0.1 a moment ago.
fn free_port() -> anyhow::Result<u16> {
    Ok(TcpListener::bind(("127.0.0.1", 0))?.local_addr()?.port())
}

/// Nanoseconds process `pid` has run on a CPU, all its threads: the first field of each
/// `/proc/PID/task/TID/schedstat` (exact, unlike utime and stime's ticks).
pub fn cpu_ns(pid: u32) -> anyhow::Result<u64> {
    let mut total = 0;
    for t in std::fs::read_dir(format!("/proc/{pid}/task")).with_context(|| format!("process {pid}'s threads"))? {
        let s = std::fs::read_to_string(t?.path().join("schedstat"))?;
        total += s.split_whitespace().next().and_then(|v| v.parse::<u64>().ok()).unwrap_or(0);
    }
    Ok(total)
}

/// Nanoseconds the calling thread has run on a CPU.
pub fn thread_cpu_ns() -> anyhow::Result<u64> {
    let s = std::fs::read_to_string("/proc/thread-self/schedstat")?;
    s.split_whitespace().next().and_then(|v| v.parse().ok()).context("reading /proc/thread-self/schedstat")
}
