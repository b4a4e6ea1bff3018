// SPDX-License-Identifier: GPL-2.0-only
//! `cargo xtask module`: build the kernel module `trapeze.ko` (`kernel-crate/`) against
//! the cached 6.12 kernel with the toolchain that built it (`cargo xtask kernel` first,
//! which is seconds when cached).
//!
//! The module is an out-of-tree Kbuild module built in place (6.12 has no `MO=`), so its
//! objects land in `kernel-crate/` (git-ignored there). Kbuild tracks every source file
//! rustc read, including the `#[path]` modules from `firmware-crate/` and `host/`, so an
//! edit there rebuilds the module. Any compiler warning fails the build; `--clippy` runs
//! the kernel's clippy lint set (`CLIPPY=1`), which includes
//! `undocumented_unsafe_blocks`.

use crate::kernel::{self, Kernel};
use anyhow::{bail, ensure, Context};
use std::path::PathBuf;
use std::process::Command;
use std::time::Instant;

/// The module's directory, relative to the workspace root.
pub const DIR: &str = "kernel-crate";
/// The module file Kbuild produces there.
pub const KO: &str = "trapeze.ko";

#[derive(clap::Args)]
pub struct ModuleArgs {
    /// Lint with clippy as the kernel configures it (`make CLIPPY=1`); warnings fail.
    #[arg(long)]
    clippy: bool,
    /// Remove the module's build output from kernel-crate/ and stop.
    #[arg(long)]
    clean: bool,
}

pub fn run(a: ModuleArgs) -> anyhow::Result<()> {
    let t0 = Instant::now();
    eprintln!("==> guest kernel (cargo xtask kernel)");
    let k = kernel::ensure(None, false)?;
    if a.clean {
        make(&k, &["clean"], false)?;
        println!("xtask module: cleaned {DIR}/ in {:.1?}", t0.elapsed());
        return Ok(());
    }
    let ko = build(&k, a.clippy)?;
    let size = std::fs::metadata(&ko)?.len();
    println!("module     {} ({} KiB)", ko.display(), size / 1024);
    if let Ok(out) = Command::new("modinfo").arg(&ko).output() {
        for l in String::from_utf8_lossy(&out.stdout).lines() {
            if ["parm:", "alias:", "vermagic:"].iter().any(|k| l.starts_with(k)) {
                println!("           {}", l.split_whitespace().collect::<Vec<_>>().join(" "));
            }
        }
    }
    println!("load       insmod {KO} node=N [ping_peer=M] (in a guest: cargo xtask vm --module-test)");
    println!("xtask module: done in {:.1?}", t0.elapsed());
    Ok(())
}

/// Build `trapeze.ko` (incrementally) and return its path. `clippy` lints it too.
pub fn build(k: &Kernel, clippy: bool) -> anyhow::Result<PathBuf> {
    let t = Instant::now();
    eprintln!("==> trapeze.ko: make M={DIR} modules{}", if clippy { " CLIPPY=1" } else { "" });
    let out = make(k, &["modules"], clippy)?;
    let warnings: Vec<&str> = out.lines().filter(|l| l.starts_with("warning")).collect();
    if !warnings.is_empty() {
        eprintln!("{out}");
        bail!("{} compiler warning(s) in {DIR}/ (shown above)", warnings.len());
    }
    let ko = crate::workspace_root().join(DIR).join(KO);
    ensure!(ko.exists(), "make succeeded but {} is missing", ko.display());
    eprintln!("    built {} in {:.1?}", ko.display(), t.elapsed());
    Ok(ko)
}

/// Run `make -C <kernel build> M=kernel-crate <toolchain vars> <targets>`; return its
/// combined output (printed, with an error, if it fails).
fn make(k: &Kernel, targets: &[&str], clippy: bool) -> anyhow::Result<String> {
    let dir = crate::workspace_root().join(DIR);
    let mut cmd = Command::new("make");
    cmd.arg("-C").arg(&k.paths.build).arg(format!("M={}", dir.display())).args(k.toolchain.make_vars());
    if clippy {
        let driver = k.toolchain.rustc.with_file_name("clippy-driver");
        ensure!(driver.exists(), "{} not found (rustup component add clippy)", driver.display());
        cmd.arg("CLIPPY=1").arg(format!("CLIPPY_DRIVER={}", driver.display()));
        // Lint every file, not only the ones changed since the last build.
        let _ = std::fs::remove_file(dir.join("src/trapeze.o"));
    }
    cmd.args(targets);
    let out = cmd.output().context("running make (cargo xtask kernel installs build-essential)")?;
    let text = format!("{}{}", String::from_utf8_lossy(&out.stdout), String::from_utf8_lossy(&out.stderr));
    if !out.status.success() {
        eprintln!("{text}");
        bail!("make {} in {DIR}/ failed ({})", targets.join(" "), out.status);
    }
    Ok(text)
}
