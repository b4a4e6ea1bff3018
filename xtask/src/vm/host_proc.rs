// SPDX-License-Identifier: GPL-2.0-only
//! Host processes beside a guest (`gmblockd`, nbdkit): each killed on drop with its output
//! in a log, the wait for a TCP listener while they must stay alive, and the QEMU network
//! by which a guest reaches them ([`USER_NET`]). Shared by [`nbd_test`](super::nbd_test)
//! and [`md_bench`](super::md_bench).

use super::cluster::tail;
use anyhow::{bail, ensure, Context};
use std::fs;
use std::net::TcpStream;
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

/// QEMU arguments for a guest's virtio-net on QEMU's user-mode network: the guest is
/// 10.0.2.15 on a network of its own, the host's 127.0.0.1 is 10.0.2.2 (the guest scripts'
/// `user_net_up`). `romfile=`: no iPXE option ROM (the kernel is booted directly).
pub(super) const USER_NET: [&str; 4] = ["-netdev", "user,id=net0", "-device", "virtio-net-pci,netdev=net0,romfile="];

/// A host process of a run: killed on drop, its output in a log.
pub(super) struct HostProc {
    name: &'static str,
    child: Child,
    log: PathBuf,
}

impl HostProc {
    pub(super) fn start(name: &'static str, mut cmd: Command, log: PathBuf) -> anyhow::Result<HostProc> {
        let out = fs::File::create(&log).with_context(|| format!("creating {}", log.display()))?;
        cmd.stdin(Stdio::null()).stdout(out.try_clone()?).stderr(out);
        let child = cmd.spawn().with_context(|| format!("starting {name}"))?;
        eprintln!("  {name}: pid {} (log {})", child.id(), log.display());
        Ok(HostProc { name, child, log })
    }

    /// It must still run: an exit is an error with its log's tail.
    pub(super) fn alive(&mut self) -> anyhow::Result<()> {
        if let Some(st) = self.child.try_wait()? {
            bail!("{} exited ({st}): {}", self.name, tail(&fs::read_to_string(&self.log).unwrap_or_default(), 8));
        }
        Ok(())
    }

    pub(super) fn stop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

impl Drop for HostProc {
    fn drop(&mut self) {
        self.stop();
    }
}

/// Wait up to 20 s for something to accept TCP connections on 127.0.0.1:`port`; every
/// process in `procs` must stay alive meanwhile.
pub(super) fn wait_listening(port: u16, procs: &mut [HostProc]) -> anyhow::Result<()> {
    let t = Instant::now();
    while TcpStream::connect(("127.0.0.1", port)).is_err() {
        for p in procs.iter_mut() {
            p.alive()?;
        }
        ensure!(t.elapsed() < Duration::from_secs(20), "nothing listened on 127.0.0.1:{port} within 20 s");
        std::thread::sleep(Duration::from_millis(50));
    }
    Ok(())
}
