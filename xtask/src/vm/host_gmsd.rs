// SPDX-License-Identifier: GPL-2.0-only
//! The host `gmsd` of `cargo xtask vm gmsd-test`, which joins the guests' GMS cluster, and its checks.
//!
//! Guest 0 (`kernel-crate/guest/gmsd.sh`) loads trapeze.ko as node 0 with
//! `gms_nodes=0,1`; the host daemon is node 1 on the guests' UDP link (the guest NIC's
//! peer list names it, it names the NIC). Both speak the GMS heartbeat
//! (`gms::heartbeat`) and compute the same view number from the member set. The guest
//! writes pages to `/dev/gms0` (their only putpage target is the daemon) and reads them
//! back; once it prints `trapeze-gmsd: WRITTEN N` a watcher thread here asks the daemon
//! (`gms stat --json`) how many pages it holds and `gms get`s each page the guest wrote
//! (`DISK:p`: page p of the volume whose identity is the disk's, read by the daemon as a
//! reader) checking every byte, while the guest is still a member (its directory share
//! lives in it).

use anyhow::{bail, Context};
use std::fs;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

/// The identity of guest 0's disk: the default `gms_disk_id=` of node 0
/// (`kernel-crate/src/driver/params.rs`: `0x6d73_6730 << 32 | node`).
const DISK_ID: u64 = 0x6d73_6730_0000_0000;
const PAGE: usize = 4096;
const LINE: &str = "trapeze-gmsd: WRITTEN ";

/// Page `p` as the guest script writes it.
pub fn page_bytes(p: u64) -> Vec<u8> {
    format!("trapeze-gmsd page {p:05} -------\n").repeat(PAGE / 32).into_bytes()
}

/// The host daemon and what the watcher found.
pub struct HostGmsd {
    child: Child,
    pub log: PathBuf,
    socket: PathBuf,
    gms: PathBuf,
    pub found: Arc<Mutex<Vec<String>>>,
    pub failed: Arc<Mutex<Vec<String>>>,
}

impl HostGmsd {
    /// Start `gmsd --node node` on 127.0.0.1:`port` with the guests' NICs as peers, on the
    /// link's cluster `key` if it has one.
    pub fn start(
        bin_dir: &Path,
        dir: &Path,
        node: u16,
        port: u16,
        peers: &[(u16, u16)],
        key: Option<&Path>,
    ) -> anyhow::Result<HostGmsd> {
        let log = dir.join("gmsd.log");
        let socket = dir.join("gmsd.sock");
        let mut cmd = Command::new(bin_dir.join("gmsd"));
        cmd.args(["--node", &node.to_string(), "--listen", &format!("127.0.0.1:{port}")]);
        for (n, p) in peers {
            cmd.args(["--peer", &format!("{n}=127.0.0.1:{p}")]);
        }
        // The kernel sends a heartbeat every second and fails a member after 3 s; under
        // TCG a guest can stall longer, so the daemon waits 10 s.
        if let Some(key) = key {
            cmd.arg("--key").arg(key);
        }
        cmd.args(["--budget-mb", "8", "--dead-after-ms", "10000", "--op-timeout-ms", "2000"])
            .arg("--socket")
            .arg(&socket);
        let out = fs::File::create(&log)?;
        cmd.stdin(Stdio::null()).stdout(out.try_clone()?).stderr(out).env("RUST_LOG", "info");
        let child = cmd.spawn().context("starting gmsd")?;
        eprintln!("  host gmsd: node {node} on 127.0.0.1:{port}, pid {} (log {})", child.id(), log.display());
        Ok(HostGmsd { child, log, socket, gms: bin_dir.join("gms"), found: Arc::default(), failed: Arc::default() })
    }

    /// Watch `console` for the guest's `WRITTEN` line, then check the daemon (a thread).
    pub fn watch(&self, console: PathBuf, deadline: Duration) {
        let (gms, socket, found, failed) =
            (self.gms.clone(), self.socket.clone(), self.found.clone(), self.failed.clone());
        std::thread::spawn(move || {
            let t0 = Instant::now();
            let pages = loop {
                let text = fs::read_to_string(&console).unwrap_or_default();
                if let Some(n) =
                    text.lines().find_map(|l| l.split(LINE).nth(1).and_then(|r| r.trim().parse::<u64>().ok()))
                {
                    break n;
                }
                if t0.elapsed() > deadline {
                    failed.lock().unwrap().push("the guest never printed its WRITTEN line".into());
                    return;
                }
                std::thread::sleep(Duration::from_millis(200));
            };
            match check(&gms, &socket, pages) {
                Ok(lines) => found.lock().unwrap().extend(lines),
                Err(e) => failed.lock().unwrap().push(format!("{e:#}")),
            }
        });
    }

    /// Stop the daemon (it is our child) and return its log's tail.
    pub fn stop(mut self) -> String {
        self.kill();
        let text = fs::read_to_string(&self.log).unwrap_or_default();
        let lines: Vec<&str> = text.lines().collect();
        lines[lines.len().saturating_sub(12)..].join("\n")
    }
}

impl HostGmsd {
    fn kill(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// An error or a signal on the way out must not leave the daemon running.
impl Drop for HostGmsd {
    fn drop(&mut self) {
        self.kill();
    }
}

fn gms(gms: &Path, socket: &Path, args: &[&str]) -> anyhow::Result<std::process::Output> {
    Command::new(gms).arg("--socket").arg(socket).args(["--timeout-s", "20"]).args(args).output().context("running gms")
}

/// `gms stat`: pages held > 0; `gms get` of each page the guest wrote: the right 4 KiB.
fn check(bin: &Path, socket: &Path, pages: u64) -> anyhow::Result<Vec<String>> {
    let mut lines = Vec::new();
    let out = gms(bin, socket, &["stat", "--json"])?;
    if !out.status.success() {
        bail!("gms stat failed: {}", String::from_utf8_lossy(&out.stderr));
    }
    let stat: serde_json::Value = serde_json::from_slice(&out.stdout).context("gms stat --json")?;
    let me = stat["node"].as_u64();
    let held = stat["nodes"]
        .as_array()
        .and_then(|ns| ns.iter().find(|n| n["node"].as_u64() == me))
        .and_then(|n| n["held"].as_u64())
        .context("gms stat: no held count for the daemon itself")?;
    let guest = stat["nodes"].as_array().and_then(|ns| ns.iter().find(|n| n["node"].as_u64() == Some(0))).cloned();
    lines.push(format!(
        "gms stat: the host gmsd holds {held} pages; members {}; guest 0 as the daemon sees it: {}",
        stat["members"],
        guest.clone().unwrap_or_default()
    ));
    // The guest's heartbeat as the daemon parsed it: alive, with the budget the guest
    // script loads the module with (gms_budget_pages=64).
    let guest_ok = guest.as_ref().is_some_and(|g| g["alive"] == true && g["budget"].as_u64() == Some(64));
    if !guest_ok {
        bail!("gms stat: the daemon does not see guest 0 alive with its 64-page budget: {guest:?}");
    }
    if held == 0 {
        bail!("gms stat: the host gmsd holds no page after the guest wrote {pages}");
    }
    let tmp = std::env::temp_dir().join(format!("xtask-gmsd-{}.bin", std::process::id()));
    let mut good = 0;
    for p in 0..pages {
        let page = format!("{DISK_ID:#x}:{p}");
        let out =
            gms(bin, socket, &["get", "--page", &page, "--network-only", "--out", tmp.to_str().context("temp path")?])?;
        let data = fs::read(&tmp).unwrap_or_default();
        let _ = fs::remove_file(&tmp);
        if !out.status.success() {
            bail!("gms get {page}: {}", String::from_utf8_lossy(&out.stderr).trim());
        }
        // A page reads back with exactly the bytes stored: the guest's 4 KiB, no padding.
        if data != page_bytes(p) {
            bail!(
                "gms get {page}: {} bytes, not the {PAGE} the guest wrote (first 32: {:?})",
                data.len(),
                String::from_utf8_lossy(&data[..data.len().min(32)])
            );
        }
        good += 1;
    }
    lines.push(format!(
        "gms get: all {good} pages the guest wrote read back on the host, exactly {PAGE} bytes each, every byte right"
    ));
    Ok(lines)
}

#[cfg(test)]
mod tests {
    #[test]
    fn pages_are_4_kib_of_their_line() {
        let p = super::page_bytes(7);
        assert_eq!(p.len(), 4096);
        assert_eq!(&p[..32], b"trapeze-gmsd page 00007 -------\n");
        assert_ne!(super::page_bytes(8), p);
    }
}
