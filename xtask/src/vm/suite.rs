// SPDX-License-Identifier: GPL-2.0-only
//! `cargo xtask vm suite`: the guest suite (`kernel-crate/guest/suite.sh`, a stage of
//! `cargo xtask test`).
//!
//! Four GMS members; guest 0 (A) keeps two copies of every page of `/dev/gms0` on the
//! other three (B, C, D), puts an ext2 file system on it, writes files, verifies their
//! md5sums after dropping its caches and remounting, writes probe pages, then prints
//! `trapeze-suite: KILL node 2` with a reader and a writer running; xtask then SIGKILLs
//! guest 2's QEMU and NIC (C, a server) and A checks that no write or read fails, every
//! byte reads back and the copies C held are re-made on B or D; then it prints
//! `trapeze-suite: RESTART node 2`, xtask boots guest 2 again (a new NIC and QEMU: node 2
//! with a new incarnation and empty memory), and A checks that C is admitted again and
//! stores its writes; then A unloads under load. It passes when A's PASS lines and total
//! show no FAIL, B, D and C's second life loaded and unloaded cleanly, guest 2 was killed
//! and booted again on request, no console (C's first life's included) shows an
//! oops/BUG/WARNING, and every guest powers off; it prints the lines the issue asks for
//! (module load, data verified, replicas, failure case, restart, clean unload).

use super::cluster::KillOn;
use super::report::{suite_summary, trouble_context, yes_no, KERNEL_TROUBLE, SUITE_KILL, SUITE_RESTART};
use super::session::{Common, Prepared, Setup};

/// The guests' script, relative to the workspace root.
const SCRIPT: &str = "kernel-crate/guest/suite.sh";
/// Shortest power-off wait (boot, mke2fs and 2 MiB through GMS under TCG, failure
/// detection, the bounded reads after the kill, the victim's second boot and rejoin, two
/// unloads).
const MIN_TIMEOUT: u64 = 420;
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
        kill_on: Some(KillOn { watch, line, victim, done: None, restart: Some(SUITE_RESTART) }),
        ..Setup::default()
    };
    let mut s = Prepared::build(&a.common, true)?.start(&a.common, setup)?;
    s.boot()?;
    let all_off = s.wait(timeout, false)?;
    let mut failures = Vec::new();
    let g = s.cluster.guests.iter().find(|g| g.idx == victim);
    if g.is_none_or(|g| g.killed.is_none()) {
        failures.push(format!("guest {victim} was never killed (guest 0 did not ask, or asked too late)"));
    }
    match g.and_then(|g| g.first_console.clone()) {
        None => {
            failures.push(format!("guest {victim} was never booted again (guest 0 did not ask, or asked too late)"))
        }
        Some(first) => {
            // The report below reads its second life's console; the first must be quiet too.
            let text = std::fs::read_to_string(&first).unwrap_or_default();
            if KERNEL_TROUBLE.iter().any(|t| text.contains(t)) {
                eprintln!("  guest {victim}'s first life: the console around its first kernel-trouble line:");
                for l in trouble_context(&text) {
                    eprintln!("    ! {l}");
                }
                failures.push(format!("guest {victim}'s first life (console {})", first.display()));
            }
        }
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
                "server: trapeze.ko up: {}; {}rmmod clean: {}; script status 0: {}; kernel quiet: {}",
                yes_no(r.trapeze_up),
                if g.killed { "killed mid-run and booted again as asked; " } else { "" },
                yes_no(r.trapeze_removed),
                yes_no(r.script_ok),
                yes_no(!r.kernel_trouble),
            )
        };
        (r.suite_ok(g.idx, g.killed, g.restarted), what)
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
