// SPDX-License-Identifier: GPL-2.0-only
//! `cargo xtask module`: build the kernel module `trapeze.ko` (`kernel-crate/`) against
//! the cached 6.12 kernel with the toolchain that built it (`cargo xtask kernel` first,
//! which is seconds when cached).
//!
//! The module is an out-of-tree Kbuild module built in place (6.12 has no `MO=`), so its
//! objects land in `kernel-crate/` (git-ignored there). Kbuild tracks every source file
//! rustc read, including the `#[path]` modules from `iface/`, `host/`, `netrpc/` and
//! `gms/`, so an edit there rebuilds the module. Any compiler warning fails the build;
//! `--clippy` runs the kernel's clippy lint set (`CLIPPY=1`), which includes
//! `undocumented_unsafe_blocks`.
//!
//! After each build the module's stack use is checked ([`stack`], from `objdump -d -r`):
//! the kernel stack is 16 KiB with nothing to catch a slow overflow but a guard page,
//! NetRPC's `Rpc` and the GMS node are tens of KiB, and Rust does not promise to build a
//! value in place, so a chain of the module's frames deeper than [`MAX_STACK`] fails the
//! build, listing the chain.
//!
//! Builds are in place, so two at once (two checkouts' xtasks, or a test and a bench) would
//! write the same objects: every build and clean holds an exclusive lock on
//! `~/.cache/trapeze/module.lock` (`flock`, released when the process ends however it
//! ends), and a second one waits for it, saying so.

mod stack;

use crate::kernel::{self, Kernel};
use anyhow::{bail, ensure, Context};
use std::path::PathBuf;
use std::process::Command;
use std::time::Instant;

/// The module's directory, relative to the workspace root.
pub const DIR: &str = "kernel-crate";
/// The module file Kbuild produces there.
pub const KO: &str = "trapeze.ko";
/// Most stack the module's own frames may take along one call chain (bytes; [`stack`]).
/// The stack is 16 KiB, and the kernel's frames lie below the module's entry points and
/// above its calls into the kernel: a probe of 7.5 KiB with its callees and the PCI core's
/// frames overran it in a guest (2026-11-24: page tables overwritten), and a probe chain of
/// 10.7 KiB (probe 5.4 KiB, the disk's set-up 4.7 KiB) corrupted a slab next to the stack
/// (2026-11-25, `anon_vma_fork` oops after insmod). Since then the probe path builds its
/// large values in frames that do not nest (deepest chain 5.5 KiB, in remove).
pub const MAX_STACK: u64 = 6144;

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
        let _lock = BuildLock::take()?;
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
    println!(
        "load       insmod {KO} node=N [ping_peer=M] [gms_nodes=0,1,2 [gms_disk_pages=P]] (in guests: cargo xtask vm module-test)"
    );
    println!("xtask module: done in {:.1?}", t0.elapsed());
    Ok(())
}

/// Build `trapeze.ko` (incrementally) and return its path. `clippy` lints it too.
pub fn build(k: &Kernel, clippy: bool) -> anyhow::Result<PathBuf> {
    let _lock = BuildLock::take()?;
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
    check_stack(&ko)?;
    Ok(ko)
}

/// Fail if the module's deepest chain of its own stack frames exceeds [`MAX_STACK`]
/// ([`stack`]); print it, and the largest frame, either way.
fn check_stack(ko: &std::path::Path) -> anyhow::Result<()> {
    let out = Command::new("objdump")
        .args(["-d", "-r", "--no-show-raw-insn"])
        .arg(ko)
        .output()
        .context("running objdump (binutils) on the module")?;
    ensure!(out.status.success(), "objdump -d {} failed: {}", ko.display(), String::from_utf8_lossy(&out.stderr));
    let funcs = stack::parse(&String::from_utf8_lossy(&out.stdout));
    let name = |s: &str| format!("{:#}", rustc_demangle::demangle(s));
    if let Some((f, func)) = funcs.iter().max_by_key(|(n, f)| (f.frame, std::cmp::Reverse(*n))) {
        eprintln!("    largest stack frame: {} bytes ({})", func.frame, name(f));
    }
    let (total, chain) = stack::deepest(&funcs);
    eprintln!("    deepest call chain of the module's own frames: {total} bytes; limit {MAX_STACK}");
    for (f, frame) in &chain {
        eprintln!("      {frame:>6}  {}", name(f));
    }
    ensure!(
        total <= MAX_STACK,
        "{KO}: a chain of its functions takes {total} bytes of stack (above), more than {MAX_STACK} \
         (of the 16 KiB kernel stack; the kernel's frames below and above it need the rest)"
    );
    Ok(())
}

/// The exclusive lock on `~/.cache/trapeze/module.lock` for one build of `kernel-crate/`
/// (an advisory `flock`, held until dropped or the process exits).
struct BuildLock(#[allow(dead_code)] std::fs::File);

impl BuildLock {
    fn take() -> anyhow::Result<Self> {
        let dir = kernel::trapeze_cache()?;
        std::fs::create_dir_all(&dir).with_context(|| format!("creating {}", dir.display()))?;
        let path = dir.join("module.lock");
        let f = std::fs::OpenOptions::new()
            .create(true)
            .truncate(false)
            .write(true)
            .open(&path)
            .with_context(|| format!("opening {}", path.display()))?;
        match f.try_lock() {
            Ok(()) => {}
            Err(std::fs::TryLockError::WouldBlock) => {
                let t = Instant::now();
                eprintln!("    another build of {DIR}/ holds {}: waiting for it", path.display());
                f.lock().with_context(|| format!("locking {}", path.display()))?;
                eprintln!("    got the lock after {:.1?}", t.elapsed());
            }
            Err(std::fs::TryLockError::Error(e)) => {
                return Err(e).with_context(|| format!("locking {}", path.display()));
            }
        }
        Ok(BuildLock(f))
    }
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
