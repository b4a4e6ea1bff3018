// SPDX-License-Identifier: GPL-2.0-only
//! `cargo xtask test`: every test the project has, fast ones first. This is the README's
//! test command and what `.ci/run` calls.

use std::time::Instant;

#[derive(clap::Args)]
pub struct TestArgs {
    /// Skip building the riscv32 firmware image.
    #[arg(long)]
    no_image: bool,
    /// Skip the guest stages (test kernel, QEMU guests on virtual NICs, the kernel module).
    #[arg(long)]
    no_vm: bool,
}

pub fn run(a: TestArgs) -> anyhow::Result<()> {
    let t0 = Instant::now();
    step("system packages for the flashed NIC's emulator", crate::prereq::ensure_emulator_build_deps)?;
    step("unit, property and integration tests (host)", || crate::cargo(&["test", "--workspace", "--locked"]))?;
    if !a.no_image {
        step("firmware image: riscv32imac build and NIC-memory budget", || {
            crate::cargo(&["run", "--quiet", "--locked", "-p", "xtask", "--", "build"])
        })?;
    }
    if !a.no_vm {
        // Heavy on a fresh machine (the kernel build, ~5-15 min on 2 cores), cached under
        // ~/.cache/trapeze afterwards: each step says whether it built or reused.
        step("guests: the cached Rust-enabled test kernel, one QEMU guest on a virtual NIC", || {
            crate::cargo(&["run", "--quiet", "--locked", "-p", "xtask", "--", "kernel"])?;
            crate::cargo(&["run", "--quiet", "--locked", "-p", "xtask", "--", "vm", "--smoke"])
        })?;
        step(
            "kernel module: three guests load trapeze.ko: ping 4 KB, NetRPC echo, GMS put/get, unload with calls in flight",
            || crate::cargo(&["run", "--quiet", "--locked", "-p", "xtask", "--", "vm", "--module-test"]),
        )?;
        step("block device: /dev/gms0 on its RAM backend (data, O_DIRECT, EIO and timeout paths, rmmod)", || {
            crate::cargo(&["run", "--quiet", "--locked", "-p", "xtask", "--", "vm", "--blk-test"])
        })?;
        step(
            "guest suite: ext2 on /dev/gms0 on GMS across 3 guests, data verified, a server killed, clean unload",
            || crate::cargo(&["run", "--quiet", "--locked", "-p", "xtask", "--", "vm", "--suite"]),
        )?;
        step(
            "host gmsd in the guests' cluster: a guest's /dev/gms0 pages stored on and read from a host gmsd",
            || crate::cargo(&["run", "--quiet", "--locked", "-p", "xtask", "--", "vm", "--gmsd-test"]),
        )?;
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
