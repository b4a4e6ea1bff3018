// SPDX-License-Identifier: GPL-2.0-only
//! `cargo xtask vm disks`: disk identities on `/dev/gms0` (`kernel-crate/guest/disks.sh`,
//! a stage of `cargo xtask test`).
//!
//! Four GMS members: guests 2 and 3 (B, C) serve; guests 0 and 1 (A, A') store nothing
//! and load disks. (a) A loads `gms_disk_id=alpha`, A' `gms_disk_id=beta`, on the same
//! servers; each writes its own pattern over the same page numbers and reads back only
//! its own data, every byte, also after the other wrote. (b) A' loads alpha while A holds
//! it: I/O fails with EIO and the kernel log names the identity and node 0; alpha reads
//! back unchanged. (c) A loads `gms_disk_id=gamma` with one copy of each page, prints
//! `trapeze-disks: KILL node 3`, xtask SIGKILLs guest 3 (C, its QEMU and NIC); once C is
//! declared failed and the volume's label and map have a copy on B, A loads gamma again
//! with C still in `gms_nodes=`: C, never heard by that load, is not a member (logged as
//! not heard, never as heard); every written page reads back or fails with EIO (at least
//! one of each, none as zeros or other bytes), the pages never written read as zeros, a
//! new page written then reads back; a new disk of two copies with only B alive is warned
//! about at load and its write fails with EIO. It passes when A's and A''s
//! PASS lines and totals show no FAIL, B loaded and unloaded cleanly, C was killed as
//! asked, no console shows an oops/BUG/WARNING, and every guest but C powered off.

use super::cluster::{Ask, OnLine};
use super::report::{pass_fail, printable, yes_no};
use super::session::{Common, Prepared, Setup};

/// The guests' script, relative to the workspace root.
const SCRIPT: &str = "kernel-crate/guest/disks.sh";
/// Shortest power-off wait (boot, the two disks' writes and reloads under TCG, four
/// failure detections of 5 s, the reload's reads of the lost pages, B's unload).
const MIN_TIMEOUT: u64 = 600;
/// A, A', B and C.
const GUESTS: u16 = 4;
/// The server killed mid-run (C).
const VICTIM: u16 = 3;
/// What A (guest 0) asks of the host.
const KILL: &str = "trapeze-disks: KILL node 3";
/// The prefix of the script's lines.
const PREFIX: &str = "trapeze-disks: ";

#[derive(clap::Args)]
pub struct DisksArgs {
    #[command(flatten)]
    common: Common,
}

pub(super) fn run(a: DisksArgs) -> anyhow::Result<()> {
    let timeout = a.common.timeout.max(MIN_TIMEOUT);
    let setup = Setup {
        guests: GUESTS,
        script: Some(crate::workspace_root().join(SCRIPT)),
        asks: vec![OnLine::new(0, KILL, Ask::Kill(VICTIM))],
        ..Setup::default()
    };
    let mut s = Prepared::build(&a.common, true)?.start(&a.common, setup)?;
    s.boot()?;
    let all_off = s.wait(timeout, false)?;
    let mut failures = Vec::new();
    if !s.cluster.guests.iter().any(|g| g.idx == VICTIM && g.killed.is_some()) {
        failures.push(format!("guest {VICTIM} was never killed (guest 0 did not print \"{KILL}\", or too late)"));
    }
    failures.extend(s.report(false, |g| {
        let r = &g.report;
        let quiet = !r.kernel_trouble && r.nic_listed;
        match g.idx {
            0 | 1 => {
                let (passed, failed, done) = pass_fail(g.console, PREFIX);
                let ok = quiet
                    && r.powered_off
                    && r.trapeze_up
                    && r.trapeze_removed
                    && r.script_ok
                    && done
                    && passed > 0
                    && failed == 0;
                let what = format!(
                    "{} checks: {passed} passed, {failed} failed{}; script status 0: {}; kernel quiet: {}",
                    if g.idx == 0 { "alpha, gamma" } else { "beta, alpha refused" },
                    if done { "" } else { " (script did not finish)" },
                    yes_no(r.script_ok),
                    yes_no(!r.kernel_trouble),
                );
                (ok, what)
            }
            VICTIM => {
                let what = format!(
                    "server: trapeze.ko up: {}; killed mid-run as asked: {}; kernel quiet: {}",
                    yes_no(r.trapeze_up),
                    yes_no(g.killed),
                    yes_no(!r.kernel_trouble)
                );
                (quiet && r.trapeze_up && g.killed, what)
            }
            _ => r.server_verdict(),
        }
    }));
    for idx in [0, 1] {
        eprintln!("{} (guest {idx}):", if idx == 0 { "A: alpha, then gamma" } else { "A': beta, then alpha" });
        let console = s.console(idx);
        for l in console.lines().map(printable).filter(|l| l.starts_with(PREFIX)) {
            eprintln!("    | {l}");
        }
    }
    s.finish(all_off, timeout, &failures, "disks test", "disks test passed")
}
