// SPDX-License-Identifier: GPL-2.0-only
//! `cargo xtask vm suite`: the guest suite (`kernel-crate/guest/suite.sh`, a stage of
//! `cargo xtask test`).
//!
//! Four GMS members; guest 0 (A) keeps two copies of every page of `/dev/gms0` on the
//! other three (B, C, D), puts an ext2 file system on it, writes files, verifies their
//! md5sums after dropping its caches and remounting, writes probe pages, then prints
//! `trapeze-suite: KILL node 2` with a reader and a writer running; xtask then SIGKILLs
//! guest 2's QEMU and NIC (C, a server) and A checks that no write or read fails, every
//! byte reads back and the copies C held are re-made on B or D, then unloads under load.
//! It passes when A's PASS lines and total show no FAIL, guests 1 and 3 (B, D) loaded and
//! unloaded cleanly, guest 2 was killed on request, no console shows an oops/BUG/WARNING,
//! and A, B and D power off; it prints the lines the issue asks for (module load, data
//! verified, replicas, failure case, clean unload).

use super::cluster::KillOn;
use super::report::SUITE_KILL;
use super::report::{suite_summary, yes_no};
use super::session::{Common, Prepared, Setup};

/// The guests' script, relative to the workspace root.
const SCRIPT: &str = "kernel-crate/guest/suite.sh";
/// Shortest power-off wait (boot, mke2fs and 2 MiB through GMS under TCG, failure
/// detection, the bounded reads after the kill, two unloads).
const MIN_TIMEOUT: u64 = 300;
/// The suite's cluster: A, B, C and D.
const GUESTS: u16 = 4;

#[derive(clap::Args)]
pub struct SuiteArgs {
    #[command(flatten)]
    common: Common,
}

pub(super) fn run(a: SuiteArgs) -> anyhow::Result<()> {
    let timeout = a.common.timeout.max(MIN_TIMEOUT);
    let (watch, line, victim) = SUITE_KILL;
    let setup = Setup {
        guests: GUESTS,
        script: Some(crate::workspace_root().join(SCRIPT)),
        kill_on: Some(KillOn { watch, line, victim, done: None }),
        ..Setup::default()
    };
    let mut s = Prepared::build(&a.common, true)?.start(&a.common, setup)?;
    s.boot()?;
    let all_off = s.wait(timeout, false)?;
    let mut failures = Vec::new();
    if !s.cluster.guests.iter().any(|g| g.idx == victim && g.killed.is_some()) {
        failures.push(format!("guest {victim} was never killed (guest 0 did not ask, or asked too late)"));
    }
    failures.extend(s.report(true, |g| {
        let r = &g.report;
        let what = if g.idx == 0 {
            format!(
                "suite checks: {} passed, {} failed{}; script status 0: {}; kernel quiet: {}",
                r.suite_passed,
                r.suite_failed,
                if r.suite_done { "" } else { " (script did not finish)" },
                yes_no(r.script_ok),
                yes_no(!r.kernel_trouble),
            )
        } else {
            format!(
                "server: trapeze.ko up: {}; {}; kernel quiet: {}",
                yes_no(r.trapeze_up),
                if g.killed {
                    "killed mid-run as asked".to_string()
                } else {
                    format!("rmmod clean: {}; script status 0: {}", yes_no(r.trapeze_removed), yes_no(r.script_ok))
                },
                yes_no(!r.kernel_trouble),
            )
        };
        (r.suite_ok(g.idx, g.killed), what)
    }));
    let lines = suite_summary(&s.console(0));
    if !lines.is_empty() {
        eprintln!("guest suite (guest 0):");
        for l in &lines {
            eprintln!("  {l}");
        }
    }
    s.finish(all_off, timeout, &failures, "guest suite", "guest suite passed")
}
