// SPDX-License-Identifier: GPL-2.0-only
//! `cargo xtask vm blk-test`: the GMS block device `/dev/gms0` on its RAM backend.
//!
//! Builds `trapeze.ko` and boots (by default) one guest with `kernel-crate/guest/blk.sh`,
//! which tests `/dev/gms0` on its RAM backend (`gms_disk_mb=`): data round trips with
//! dropped caches, O_DIRECT, a tar file round trip, rmmod while the disk is open, reload,
//! failing and stalling pages. It passes when the console shows the script's PASS lines
//! and its total with no FAIL, the script's status 0, no oops/BUG/WARNING, and a clean
//! power-off.

use super::report::{yes_no, Mode};
use super::session::{Common, GuestCount, Prepared, Setup};

/// The guest's script, relative to the workspace root.
const SCRIPT: &str = "kernel-crate/guest/blk.sh";
/// Shortest power-off wait (boot, three loads, 8 MiB round trips under TCG, a 2 s request
/// timeout).
const MIN_TIMEOUT: u64 = 300;

#[derive(clap::Args)]
pub struct BlkTestArgs {
    #[command(flatten)]
    count: GuestCount,
    #[command(flatten)]
    common: Common,
}

pub(super) fn run(a: BlkTestArgs) -> anyhow::Result<()> {
    let timeout = a.common.timeout.max(MIN_TIMEOUT);
    let setup =
        Setup { guests: a.count.guests, script: Some(crate::workspace_root().join(SCRIPT)), ..Setup::default() };
    let mut s = Prepared::build(&a.common, true)?.start(&a.common, setup)?;
    s.boot()?;
    let all_off = s.wait(timeout, false)?;
    let failures = s.report(true, |g| {
        let r = &g.report;
        let what = format!(
            "gms0 checks: {} passed, {} failed{}; script status 0: {}; kernel quiet: {}",
            r.blk_passed,
            r.blk_failed,
            if r.blk_done { "" } else { " (script did not finish)" },
            yes_no(r.script_ok),
            yes_no(!r.kernel_trouble),
        );
        (r.ok(Mode::BlkTest), what)
    });
    s.finish(all_off, timeout, &failures, "blk test", "blk test passed")
}
