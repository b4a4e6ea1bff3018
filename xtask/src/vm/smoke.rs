// SPDX-License-Identifier: GPL-2.0-only
//! `cargo xtask vm smoke`: boot (by default one) guest and check that it lists the NIC,
//! loads and unloads the Rust sample module and powers off cleanly.
//!
//! The guests run [`SMOKE_CMD`] (`trapeze_cmd=` on the kernel command line). Each passes
//! when its console shows the NIC as PCI `1af4:1110`, the sample module's init and exit
//! lines and the kernel's power-down, and QEMU exits with status 0.

use super::report::Mode;
use super::session::{Common, GuestCount, Prepared, Setup};

/// What the smoke test runs in the guest: load and unload the Rust sample module.
const SMOKE_CMD: &str = "insmod /lib/modules/rust_minimal.ko && rmmod rust_minimal";

#[derive(clap::Args)]
pub struct SmokeArgs {
    #[command(flatten)]
    count: GuestCount,
    #[command(flatten)]
    common: Common,
}

pub(super) fn run(a: SmokeArgs) -> anyhow::Result<()> {
    let setup = Setup { guests: a.count.guests, cmd: Some(SMOKE_CMD.to_string()), ..Setup::default() };
    let mut s = Prepared::build(&a.common, false)?.start(&a.common, setup)?;
    s.boot()?;
    let all_off = s.wait(a.common.timeout, false)?;
    let failures = s.report(true, |g| {
        let module = if g.report.rust_loaded { "loaded and unloaded" } else { "NOT loaded" };
        (g.report.ok(Mode::Smoke), format!("Rust module: {module}"))
    });
    s.finish(all_off, a.common.timeout, &failures, "smoke test", "smoke test passed")
}
