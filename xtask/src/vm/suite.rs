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

use super::cluster::{Ask, OnLine};
use super::report::{suite_summary, trouble_context, yes_no, KERNEL_TROUBLE};
use super::session::{Common, Prepared, Setup};

/// The guests' script, relative to the workspace root.
const SCRIPT: &str = "kernel-crate/guest/suite.sh";
/// Shortest power-off wait (boot, mke2fs and 2 MiB through GMS under TCG, failure
/// detection, the bounded reads after the kill, the victim's second boot and rejoin, two
/// unloads).
const MIN_TIMEOUT: u64 = 420;
/// The suite's cluster: A, B, C and D.
const GUESTS: u16 = 4;
/// What A (guest 0) asks of the host, in order: kill C (guest 2), boot it again, then
/// kill D (guest 3) for good.
const ASKS: [(&str, Ask); 3] = [
    ("trapeze-suite: KILL node 2", Ask::Kill(2)),
    ("trapeze-suite: RESTART node 2", Ask::Boot(2)),
    ("trapeze-suite: KILL node 3", Ask::Kill(3)),
];

#[derive(clap::Args)]
pub struct SuiteArgs {
    #[command(flatten)]
    common: Common,
}

pub(super) fn run(a: SuiteArgs) -> anyhow::Result<()> {
    let timeout = a.common.timeout.max(MIN_TIMEOUT);
    let setup = Setup {
        guests: GUESTS,
        script: Some(crate::workspace_root().join(SCRIPT)),
        asks: ASKS.iter().map(|&(line, ask)| OnLine::new(0, line, ask)).collect(),
        ..Setup::default()
    };
    let mut s = Prepared::build(&a.common, true)?.start(&a.common, setup)?;
    s.boot()?;
    let all_off = s.wait(timeout, false)?;
    let mut failures = Vec::new();
    for (line, ask) in ASKS {
        let (Ask::Kill(victim) | Ask::Boot(victim)) = ask;
        let g = s.cluster.guests.iter().find(|g| g.idx == victim);
        let done = match ask {
            Ask::Kill(_) => g.is_some_and(|g| g.killed.is_some()),
            Ask::Boot(_) => g.is_some_and(|g| g.first_console.is_some()),
        };
        if !done {
            failures.push(format!("{ask:?} was never done (guest 0 did not print \"{line}\", or too late)"));
        }
    }
    for g in s.cluster.guests.iter() {
        let Some(first) = &g.first_console else { continue };
        // The report below reads its second life's console; the first must be quiet too.
        let text = std::fs::read_to_string(first).unwrap_or_default();
        if KERNEL_TROUBLE.iter().any(|t| text.contains(t)) {
            eprintln!("  guest {}'s first life: the console around its first kernel-trouble line:", g.idx);
            for l in trouble_context(&text) {
                eprintln!("    ! {l}");
            }
            failures.push(format!("guest {}'s first life (console {})", g.idx, first.display()));
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
            let life = match (g.killed, g.restarted) {
                (true, false) => "killed mid-run as asked".to_string(),
                (killed, _) => format!(
                    "{}rmmod clean: {}; script status 0: {}",
                    if killed { "killed mid-run and booted again as asked; " } else { "" },
                    yes_no(r.trapeze_removed),
                    yes_no(r.script_ok)
                ),
            };
            format!(
                "server: trapeze.ko up: {}; {life}; kernel quiet: {}",
                yes_no(r.trapeze_up),
                yes_no(!r.kernel_trouble)
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
