// SPDX-License-Identifier: GPL-2.0-only
//! `cargo xtask test`: every test the project has, fast ones first. This is the README's
//! test command and what `.ci/run` calls.

use std::time::Instant;

#[derive(clap::Args)]
pub struct TestArgs {
    /// Skip building the riscv32 firmware image.
    #[arg(long)]
    no_image: bool,
}

pub fn run(a: TestArgs) -> anyhow::Result<()> {
    let t0 = Instant::now();
    step("system packages for the flashed NIC's emulator", crate::prereq::ensure_emulator_build_deps)?;
    step("unit, property and integration tests (host)", || {
        crate::cargo(&["test", "--workspace", "--locked"])
    })?;
    if !a.no_image {
        step("firmware image: riscv32imac build and NIC-memory budget", || {
            crate::cargo(&["run", "--quiet", "--locked", "-p", "xtask", "--", "build"])
        })?;
    }
    eprintln!("xtask test: all stages passed in {:.0?}", t0.elapsed());
    Ok(())
}

fn step(what: &str, f: impl FnOnce() -> anyhow::Result<()>) -> anyhow::Result<()> {
    eprintln!("\n==> {what}");
    let t = Instant::now();
    f().map_err(|e| e.context(format!("stage failed: {what}")))?;
    eprintln!("==> ok: {what} ({:.1?})", t.elapsed());
    Ok(())
}
