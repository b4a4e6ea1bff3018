// SPDX-License-Identifier: GPL-2.0-only
//! `cargo xtask vm gmsd-test`: one guest (node 0) and a host `gmsd` (node 1) on the
//! guests' UDP link in one GMS cluster ([`super::host_gmsd`]). The guest reads its pages
//! back one by one and then in one request (which the disk's store reads page by page;
//! it does not group reads into `GETPAGES` yet).
//!
//! Builds `trapeze.ko` and gmsd, boots the guest with `kernel-crate/guest/gmsd.sh` and
//! starts the daemon before the guest's QEMU, with one more UDP port in every NIC's peer
//! list. It passes when the guest lists the NIC and powers off cleanly, its `trapeze-gmsd:`
//! lines show no FAIL and end with a total of 0 failed, and the host's checks (`gms stat`
//! shows the pages held, `gms get` reads each one back) found what they look for.

use super::host_gmsd::HostGmsd;
use super::report::{printable, Mode};
use super::runtime::target_dir;
use super::session::{Common, Prepared, Setup};
use std::time::Duration;

/// The guest's script, relative to the workspace root.
const SCRIPT: &str = "kernel-crate/guest/gmsd.sh";
/// Shortest power-off wait.
const MIN_TIMEOUT: u64 = 240;
/// The guest is node 0, the host daemon node 1.
const GUESTS: u16 = 1;

#[derive(clap::Args)]
pub struct GmsdTestArgs {
    #[command(flatten)]
    common: Common,
}

pub(super) fn run(a: GmsdTestArgs) -> anyhow::Result<()> {
    let timeout = a.common.timeout.max(MIN_TIMEOUT);
    let prepared = Prepared::build(&a.common, true)?;
    eprintln!("==> host gmsd: cargo build -p trapeze-gmsd");
    crate::cargo(&["build", "--locked", "-p", "trapeze-gmsd"])?;
    // One more port: the host daemon's (node = GUESTS), in every NIC's peer list.
    let setup =
        Setup { guests: GUESTS, script: Some(crate::workspace_root().join(SCRIPT)), host_ports: 1, ..Setup::default() };
    let mut s = prepared.start(&a.common, setup)?;
    let peers: Vec<(u16, u16)> = (0..GUESTS).map(|k| (k, s.ports[k as usize])).collect();
    let bin = target_dir()?.join("debug");
    let host = HostGmsd::start(&bin, &s.dir, GUESTS, s.ports[GUESTS as usize], &peers, s.key.as_deref())?;
    s.boot()?;
    if let Some(g) = s.cluster.guests.first() {
        host.watch(g.console.clone(), Duration::from_secs(timeout));
    }
    let all_off = s.wait(timeout, false)?;
    let mut failures = s.report(true, |g| (g.report.ok(Mode::Plain), "with a host gmsd (its checks below)".into()));

    // The guest's own checks (writes and reads through the daemon) and the host's.
    let console = s.console(0);
    let lines: Vec<String> = console.lines().map(printable).filter(|l| l.starts_with("trapeze-gmsd: ")).collect();
    for l in &lines {
        eprintln!("    | {l}");
    }
    if lines.iter().any(|l| l.contains(": FAIL ")) || !lines.iter().any(|l| l.ends_with("passed, 0 failed")) {
        failures.push("guest 0's gmsd checks (a FAIL line, or no total)".into());
    }
    let (found, failed) = (host.found.lock().unwrap().clone(), host.failed.lock().unwrap().clone());
    for l in &found {
        eprintln!("host: {l}");
    }
    if found.len() < 2 || !failed.is_empty() {
        failures.push(format!(
            "host gmsd checks: {}",
            if failed.is_empty() { "did not run".to_string() } else { failed.join("; ") }
        ));
    }
    let tail = host.stop();
    if !failures.is_empty() {
        eprintln!("host gmsd log (tail):\n{tail}");
    }
    s.finish(all_off, timeout, &failures, "gmsd test", "gmsd test passed")
}
