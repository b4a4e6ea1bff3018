// SPDX-License-Identifier: GPL-2.0-only
//! `gmsd` daemons as child processes, for the daemon tests and the benches (each includes
//! this file by `#[path]`): started (and started again, each start with a log of its own),
//! killed with SIGKILL, killed when dropped, paused, their logs printed when a test
//! panics (or on [`Daemons::print_logs`]); and the polling of their `stat`.

#![allow(dead_code)] // each includer uses its own part

use gms::prelude::PageId;
use gmsd::client::Client;
use gmsd::proto::{PutOutcome, Stat};
use std::io;
use std::net::UdpSocket;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

/// The daemons of one run and the directory of their sockets and logs.
pub struct Daemons {
    children: Vec<Option<Child>>,
    starts: Vec<u32>,
    dir: PathBuf,
    /// Daemon `n`'s command, all but its `--socket`.
    command: Box<dyn Fn(u16) -> Command>,
}

impl Daemons {
    /// `nodes` daemons, none started yet; `command(n)` starts daemon `n` (its node id,
    /// link, peers and options: [`Daemons::spawn`] adds the control socket).
    pub fn new(tag: &str, nodes: u16, command: impl Fn(u16) -> Command + 'static) -> io::Result<Daemons> {
        let dir = std::env::temp_dir().join(format!("gmsd-{tag}-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir)?;
        let n = usize::from(nodes);
        Ok(Daemons { children: (0..n).map(|_| None).collect(), starts: vec![0; n], dir, command: Box::new(command) })
    }

    /// Daemon `n`'s control socket.
    pub fn sock(&self, n: u16) -> PathBuf {
        self.dir.join(format!("gmsd-{n}.sock"))
    }

    /// Start daemon `n` (again), its stderr in `gmsd-N.START.log`.
    pub fn spawn(&mut self, n: u16) -> io::Result<()> {
        let i = usize::from(n);
        self.starts[i] += 1;
        let log = std::fs::File::create(self.dir.join(format!("gmsd-{n}.{}.log", self.starts[i])))?;
        let mut cmd = (self.command)(n);
        cmd.arg("--socket").arg(self.sock(n)).stdout(Stdio::null()).stderr(log);
        self.children[i] = Some(cmd.spawn()?);
        Ok(())
    }

    /// `kill -9` daemon `n` and reap it.
    pub fn kill(&mut self, n: u16) -> io::Result<()> {
        if let Some(mut c) = self.children[usize::from(n)].take() {
            c.kill()?;
            c.wait()?;
        }
        Ok(())
    }

    /// Stop every running daemon (SIGSTOP), or let them go on (SIGCONT): a stopped
    /// cluster takes no core from one being measured.
    pub fn pause(&self, stop: bool) -> io::Result<()> {
        let sig = if stop { rustix::process::Signal::STOP } else { rustix::process::Signal::CONT };
        for c in self.children.iter().flatten() {
            let pid = rustix::process::Pid::from_raw(c.id() as i32).ok_or_else(|| io::Error::other("pid 0"))?;
            rustix::process::kill_process(pid, sig)?;
        }
        Ok(())
    }

    /// Wait (at most `limit`) until every daemon has every other as a live member.
    pub fn wait_all_up(&self, limit: Duration) -> Result<(), String> {
        let nodes = self.children.len();
        for n in 0..nodes as u16 {
            poll_until(limit, Duration::from_millis(20), &format!("gmsd {n} to hear its peers"), || {
                stat(&self.sock(n)).filter(|s| s.members.len() == nodes && s.nodes.iter().all(|m| m.alive))
            })?;
        }
        Ok(())
    }

    /// Run daemon `n` on CPU `cpu` only.
    pub fn pin(&self, n: u16, cpu: usize) -> io::Result<()> {
        let c = self.children[usize::from(n)].as_ref().ok_or_else(|| io::Error::other("not running"))?;
        let pid = rustix::process::Pid::from_raw(c.id() as i32).ok_or_else(|| io::Error::other("pid 0"))?;
        let mut set = rustix::thread::CpuSet::new();
        set.set(cpu);
        rustix::thread::sched_setaffinity(Some(pid), &set).map_err(io::Error::from)
    }

    /// Daemon `n`'s process id, while it runs.
    pub fn pid(&self, n: u16) -> Option<u32> {
        self.children[usize::from(n)].as_ref().map(Child::id)
    }

    /// Daemon `n`'s log since its last start.
    pub fn log(&self, n: u16) -> String {
        let start = self.starts[usize::from(n)];
        std::fs::read_to_string(self.dir.join(format!("gmsd-{n}.{start}.log"))).unwrap_or_default()
    }

    /// Every daemon's logs, on stderr.
    pub fn print_logs(&self) {
        let mut logs: Vec<_> = std::fs::read_dir(&self.dir).into_iter().flatten().flatten().collect();
        logs.sort_by_key(|e| e.file_name());
        for e in logs.iter().filter(|e| e.file_name().to_string_lossy().ends_with(".log")) {
            let text = std::fs::read_to_string(e.path()).unwrap_or_default();
            eprintln!("---- {} ----\n{text}", e.file_name().to_string_lossy());
        }
    }
}

impl Drop for Daemons {
    fn drop(&mut self) {
        for n in 0..self.children.len() as u16 {
            let _ = self.kill(n);
        }
        if std::thread::panicking() {
            self.print_logs();
        }
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

/// `n` distinct free UDP ports on 127.0.0.1 (held open together, so they differ; closed
/// before the daemons bind them).
pub fn udp_ports(n: u16) -> io::Result<Vec<u16>> {
    let socks = (0..n).map(|_| UdpSocket::bind("127.0.0.1:0")).collect::<io::Result<Vec<_>>>()?;
    socks.iter().map(|s| s.local_addr().map(|a| a.port())).collect()
}

/// `gmsd` as node `n` of daemons on 127.0.0.1 at `ports` (UDP), with `args`.
pub fn over_udp(ports: &[u16], n: u16, args: &[&str]) -> Command {
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_gmsd"));
    cmd.args(["--node", &n.to_string(), "--listen", &format!("127.0.0.1:{}", ports[usize::from(n)])]).args(args);
    for (m, port) in ports.iter().enumerate().filter(|&(m, _)| m != usize::from(n)) {
        cmd.args(["--peer", &format!("{m}=127.0.0.1:{port}")]);
    }
    cmd
}

/// Put pages `ids` of space `vol` through `c`, each with `content(id)`, made a few hundred at
/// a time; one outcome per page, in order.
pub fn put_pages(
    c: &mut Client,
    vol: u64,
    ids: &[u64],
    content: impl Fn(u64) -> Vec<u8>,
) -> anyhow::Result<Vec<PutOutcome>> {
    let mut out = Vec::with_capacity(ids.len());
    for batch in ids.chunks(256) {
        let data: Vec<Vec<u8>> = batch.iter().map(|&i| content(i)).collect();
        let items: Vec<(PageId, &[u8])> =
            batch.iter().zip(&data).map(|(&i, d)| (PageId::new(vol, i), &d[..])).collect();
        out.extend(c.put_many(&items)?);
    }
    Ok(out)
}

/// The daemon's `stat` (`None`: it does not answer).
pub fn stat(path: &Path) -> Option<Stat> {
    Client::connect(path).ok()?.stat().ok()
}

/// The daemon's own row: the pages it holds.
pub fn held(s: &Stat) -> u64 {
    s.nodes.iter().find(|m| m.node == s.node).map_or(0, |m| m.held)
}

/// Poll `f` every `every` until it gives a value; an error naming `what` after `limit`.
pub fn poll_until<T>(
    limit: Duration,
    every: Duration,
    what: &str,
    mut f: impl FnMut() -> Option<T>,
) -> Result<T, String> {
    let t0 = Instant::now();
    loop {
        if let Some(v) = f() {
            return Ok(v);
        }
        if t0.elapsed() > limit {
            return Err(format!("timed out after {limit:?} waiting for {what}"));
        }
        std::thread::sleep(every);
    }
}

/// [`poll_until`] every 20 ms, panicking (a test's failure) on the timeout.
pub fn wait_for<T>(limit: Duration, what: &str, f: impl FnMut() -> Option<T>) -> T {
    poll_until(limit, Duration::from_millis(20), what, f).unwrap_or_else(|e| panic!("{e}"))
}
