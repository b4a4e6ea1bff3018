// SPDX-License-Identifier: GPL-2.0-only
//! `cargo xtask vm swap`: swap on network memory (`kernel-crate/guest/swap.sh`, a stage of
//! `cargo xtask test`).
//!
//! Three GMS members; guest 0 (A) makes `/dev/gms0` on the GMS backend its swap device,
//! pins most of its RAM in a ramfs and runs `trapeze-memhog` (guest-tools/, static, added
//! to the initramfs) over 1.5× what is left: every page goes out to B's and C's memory
//! and comes back verified; then `swapoff` (a tmpfs file swapped out meanwhile must come
//! back intact) and `rmmod`. It passes when A's PASS lines and total show no FAIL
//! (workload verified, swap used both ways, zero page errors and timeouts, no I/O error /
//! OOM / oops in dmesg, clean swapoff and rmmod, 0 errors in the disk's unload counters), B and C loaded and unloaded cleanly, no console shows an
//! oops/BUG/WARNING, and every guest powered off.

use super::bench_guests::append_files;
use super::initramfs::guest_tool;
use super::report::{pass_fail, printable, yes_no};
use super::session::{Common, Prepared, Setup};

/// The guests' script, relative to the workspace root.
const SCRIPT: &str = "kernel-crate/guest/swap.sh";
/// The workload, from guest-tools/.
const MEMHOG: &str = "trapeze-memhog";
/// Shortest power-off wait (boot, 56 MiB of swap and its traffic each way under TCG, swapoff,
/// the servers' failure detection of A after it unloaded).
const MIN_TIMEOUT: u64 = 420;
/// A and its two servers.
const GUESTS: u16 = 3;
/// The prefix of the script's lines.
const PREFIX: &str = "trapeze-swap: ";
/// Kernel lines in guest 0's console that mean swap on `/dev/gms0` failed: a guest whose
/// swap writes fail thrashes until the timeout, so these say why.
const SWAP_TROUBLE: [&str; 5] =
    ["I/O error, dev gms0", "Write-error on swap-device", "Read-error on swap-device", "Out of memory", "oom-kill"];

#[derive(clap::Args)]
pub struct SwapArgs {
    #[command(flatten)]
    common: Common,
}

pub(super) fn run(a: SwapArgs) -> anyhow::Result<()> {
    let timeout = a.common.timeout.max(MIN_TIMEOUT);
    let prepared = Prepared::build(&a.common, true)?;
    let memhog = guest_tool(MEMHOG)?;
    let setup = Setup { guests: GUESTS, script: Some(crate::workspace_root().join(SCRIPT)), ..Setup::default() };
    let mut s = prepared.start(&a.common, setup)?;
    append_files(&s.dir.join("initramfs.cpio.gz"), &[(format!("/usr/bin/{MEMHOG}"), memhog, 0o755)])?;
    s.boot()?;
    let all_off = s.wait(timeout, false)?;
    let mut failures = s.report(false, |g| {
        let r = &g.report;
        let base = r.nic_listed && r.powered_off && !r.kernel_trouble && r.trapeze_up && r.trapeze_removed;
        if g.idx == 0 {
            let (passed, failed, done) = pass_fail(g.console, PREFIX);
            let ok = base && r.script_ok && done && passed > 0 && failed == 0;
            let what = format!(
                "swap checks: {passed} passed, {failed} failed{}; rmmod clean: {}; script status 0: {}; kernel quiet: {}",
                if done { "" } else { " (script did not finish)" },
                yes_no(r.trapeze_removed),
                yes_no(r.script_ok),
                yes_no(!r.kernel_trouble),
            );
            (ok, what)
        } else {
            r.server_verdict()
        }
    });
    let console = s.console(0);
    eprintln!("swap on /dev/gms0 (guest 0):");
    for l in console.lines().map(printable).filter(|l| l.starts_with(PREFIX) || l.contains("/dev/gms0 on GMS:")) {
        eprintln!("    | {l}");
    }
    let trouble: Vec<String> =
        console.lines().map(printable).filter(|l| SWAP_TROUBLE.iter().any(|t| l.contains(t))).collect();
    if let Some(first) = trouble.first() {
        eprintln!("guest 0's kernel: {} line(s) of swap trouble, the first: {first}", trouble.len());
        failures.push(format!("swap I/O errors or OOM in guest 0's kernel log ({} lines)", trouble.len()));
    }
    s.finish(all_off, timeout, &failures, "swap test", "swap test passed")
}
