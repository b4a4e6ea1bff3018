// SPDX-License-Identifier: GPL-2.0-only
//! `cargo xtask vm run`: boot guests that run given shell commands and/or a script, then
//! power off; it passes when each guest lists the NIC and powers off cleanly.
//!
//! `--cmd` reaches the guests base64-encoded as `trapeze_cmd=` on the kernel command line;
//! `--script` is embedded in the initramfs as `/etc/trapeze/run.sh` and runs after it.

use super::report::Mode;
use super::session::{Common, GuestCount, Prepared, Setup};
use std::path::PathBuf;

#[derive(clap::Args)]
pub struct RunArgs {
    #[command(flatten)]
    count: GuestCount,
    /// Shell commands every guest runs before powering off.
    #[arg(long, value_name = "SHELL")]
    cmd: Option<String>,
    /// A script embedded in the initramfs as /etc/trapeze/run.sh, run after --cmd.
    #[arg(long, value_name = "FILE")]
    script: Option<PathBuf>,
    /// Do not echo the guests' console output (from /init on) to the terminal while they
    /// run; print the lines that matter at the end.
    #[arg(long)]
    quiet: bool,
    #[command(flatten)]
    common: Common,
}

pub(super) fn run(a: RunArgs) -> anyhow::Result<()> {
    let setup = Setup { guests: a.count.guests, script: a.script, cmd: a.cmd, ..Setup::default() };
    let mut s = Prepared::build(&a.common, false)?.start(&a.common, setup)?;
    s.boot()?;
    let all_off = s.wait(a.common.timeout, !a.quiet)?;
    let failures = s.report(a.quiet, |g| {
        let module = if g.report.rust_loaded { "loaded and unloaded" } else { "-" };
        (g.report.ok(Mode::Plain), format!("Rust module: {module}"))
    });
    s.finish(all_off, a.common.timeout, &failures, "vm run", "all guests powered off")
}
