// SPDX-License-Identifier: GPL-2.0-only
//! `cargo xtask vm big-disk`: a 512 MiB `/dev/gms0` held by two servers with 320 MiB
//! budgets (`kernel-crate/guest/bigdisk.sh`, a stage of `cargo xtask test`).
//!
//! Guest 0 (A) writes a seeded pattern over every page of its disk and reads it all back
//! with `trapeze-blkbench` (guest-tools/, static, added to the initramfs), one copy of
//! each page, so guests 1 and 2 hold half of it each in page-sized frames. Then A loads
//! the module again with a 1 GiB disk, more than the servers hold: the first load's
//! pages must read back as written, new writes over them must read back new, and filling
//! the disk must fail with `ENOSPC`. It passes when A's PASS lines and total show no FAIL (every page verified,
//! pages stored, zero page errors and timeouts, dmesg quiet, clean rmmod with 0 errors;
//! the reload's checks), the servers loaded and unloaded cleanly, no console shows an
//! oops/BUG/WARNING, and every guest powered off.

use super::bench_guests::append_files;
use super::initramfs::guest_tool;
use super::report::{pass_fail, printable, yes_no};
use super::session::{Common, Prepared, Setup};

/// The guests' script, relative to the workspace root.
const SCRIPT: &str = "kernel-crate/guest/bigdisk.sh";
/// The workload, from guest-tools/.
const BLKBENCH: &str = "trapeze-blkbench";
/// Shortest power-off wait (boot, 512 MiB written and read back under TCG, the servers'
/// failure detection of A after it unloaded).
const MIN_TIMEOUT: u64 = 600;
/// A and its two servers.
const GUESTS: u16 = 3;
/// Guest RAM at least (MiB): a server's 320 MiB budget in frames, and its kernel.
const MIN_MEM: u32 = 576;
/// The prefix of the script's lines.
const PREFIX: &str = "trapeze-big: ";

#[derive(clap::Args)]
pub struct BigDiskArgs {
    #[command(flatten)]
    common: Common,
}

pub(super) fn run(mut a: BigDiskArgs) -> anyhow::Result<()> {
    let timeout = a.common.timeout.max(MIN_TIMEOUT);
    a.common.mem = a.common.mem.max(MIN_MEM);
    let prepared = Prepared::build(&a.common, true)?;
    let blkbench = guest_tool(BLKBENCH)?;
    let setup = Setup { guests: GUESTS, script: Some(crate::workspace_root().join(SCRIPT)), ..Setup::default() };
    let mut s = prepared.start(&a.common, setup)?;
    append_files(&s.dir.join("initramfs.cpio.gz"), &[(format!("/usr/bin/{BLKBENCH}"), blkbench, 0o755)])?;
    s.boot()?;
    let all_off = s.wait(timeout, false)?;
    let failures = s.report(false, |g| {
        let r = &g.report;
        let base = r.nic_listed && r.powered_off && !r.kernel_trouble && r.trapeze_up && r.trapeze_removed;
        if g.idx == 0 {
            let quiet = yes_no(!r.kernel_trouble);
            let (passed, failed, done) = pass_fail(g.console, PREFIX);
            let ok = base && r.script_ok && done && passed > 0 && failed == 0;
            let what = format!(
                "big-disk checks: {passed} passed, {failed} failed{}; script status 0: {}; kernel quiet: {quiet}",
                if done { "" } else { " (script did not finish)" },
                yes_no(r.script_ok),
            );
            (ok, what)
        } else {
            r.server_verdict()
        }
    });
    eprintln!("a 512 MiB /dev/gms0 (guest 0):");
    for l in s.console(0).lines().map(printable).filter(|l| l.starts_with(PREFIX) || l.contains("/dev/gms0 on GMS:")) {
        eprintln!("    | {l}");
    }
    s.finish(all_off, timeout, &failures, "big-disk test", "big-disk test passed")
}
