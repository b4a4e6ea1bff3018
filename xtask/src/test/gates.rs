// SPDX-License-Identifier: GPL-2.0-only
//! Tests gated on a prerequisite. Such a test carries `#[ignore = "needs: A, B — why"]`
//! with A, B from [`PREREQS`]; `xtask test` runs it (with `--ignored --exact`) when every
//! prerequisite it names is here, and otherwise leaves it listed as skipped. As root,
//! the packages behind them are installed first, as the other stages' packages are.

use super::report::{needs, Skip};
use super::run::Binary;
use std::collections::{BTreeMap, HashMap};
use std::process::Command;

/// The prerequisites a test may name, and how to tell each is here.
pub const PREREQS: [(&str, &str); 8] = [
    ("riscv32 target", "the riscv32imac-unknown-none-elf target of the pinned toolchain (xtask adds it)"),
    ("root", "root (network namespaces, raw sockets)"),
    ("ip", "the `ip` command (apt-get install iproute2)"),
    ("qemu", "qemu-system-x86_64 (apt-get install --no-install-recommends qemu-system-x86)"),
    ("vpclmulqdq", "a CPU with VPCLMULQDQ and AVX2 or AVX-512 (F, BW)"),
    ("nbdkit", "the `nbdkit` server (apt-get install nbdkit)"),
    ("nbdcopy", "libnbd's `nbdcopy` (apt-get install libnbd-bin)"),
    ("qemu-img", "`qemu-img` (apt-get install qemu-utils)"),
];

/// Packages behind the prerequisites: installed as root, named otherwise.
const PACKAGES: [(&str, &str); 7] = [
    ("qemu-system-x86", "the ivshmem test boots a real QEMU against the NIC's server"),
    ("iproute2", "the raw-Ethernet link test makes namespaces and a veth pair with `ip`"),
    ("nbdkit", "the NBD export's tests run gmblock's nbdkit plugin in it"),
    ("libnbd-bin", "the NBD export's tests read and write it with nbdcopy"),
    ("qemu-utils", "the NBD export's tests convert and compare images on it with qemu-img"),
    ("nbd-client", "the guest stage vm nbd-test connects a guest's kernel NBD client to the export with it"),
    ("e2fsprogs", "vm nbd-test makes ext4 in the guest with mke2fs and checks it on the host with e2fsck and debugfs"),
];

fn is_root() -> bool {
    rustix::process::geteuid().is_root()
}

fn runs(cmd: &str, arg: &str) -> bool {
    Command::new(cmd).arg(arg).output().is_ok_and(|o| o.status.success())
}

pub fn available(prereq: &str) -> bool {
    match prereq {
        "riscv32 target" => crate::toolchain::target_installed(crate::build::TARGET),
        "root" => is_root(),
        "ip" => runs("ip", "-V"),
        "qemu" => runs("qemu-system-x86_64", "--version"),
        "vpclmulqdq" => has_vpclmulqdq(),
        "nbdkit" => runs("nbdkit", "--version"),
        "nbdcopy" => runs("nbdcopy", "--version"),
        "qemu-img" => runs("qemu-img", "--version"),
        _ => false,
    }
}

#[cfg(target_arch = "x86_64")]
fn has_vpclmulqdq() -> bool {
    let avx512 = std::arch::is_x86_feature_detected!("avx512f") && std::arch::is_x86_feature_detected!("avx512bw");
    (avx512 || std::arch::is_x86_feature_detected!("avx2")) && std::arch::is_x86_feature_detected!("vpclmulqdq")
}

#[cfg(not(target_arch = "x86_64"))]
fn has_vpclmulqdq() -> bool {
    false
}

/// As root, install what the gated tests need; otherwise leave them to be skipped.
pub fn provide() -> anyhow::Result<()> {
    if is_root() {
        crate::prereq::ensure_packages(&PACKAGES)?;
    } else {
        eprintln!("xtask: not root: tests that need root, QEMU or iproute2 run only if those are already here");
    }
    Ok(())
}

/// For each test binary with gated tests: its `cargo test` selector (`--workspace --test X`),
/// the test names, and the first prerequisite that is missing, if one is.
pub fn plan(skipped: &[Skip], binaries: &HashMap<String, Binary>) -> Vec<(Vec<String>, Vec<String>, Option<String>)> {
    let mut by_binary: BTreeMap<&str, (Vec<String>, Vec<String>)> = BTreeMap::new();
    for s in skipped {
        if let Some(prereqs) = needs(&s.reason) {
            let e = by_binary.entry(s.binary.as_str()).or_default();
            e.0.push(s.name.clone());
            e.1.extend(prereqs.into_iter().filter(|p| !e.1.contains(p)).collect::<Vec<_>>());
        }
    }
    by_binary
        .into_iter()
        .filter_map(|(binary, (names, prereqs))| {
            let b = binaries.get(binary)?;
            let missing = prereqs.iter().find(|p| !available(p)).map(|p| describe(p));
            // `--workspace`, not `-p PKG`: features unify across the workspace, so only the
            // same selection rebuilds the same binary (the skip list names it by its hash).
            let mut sel = vec!["--workspace".to_string()];
            sel.extend(b.selector.iter().cloned());
            Some((sel, names, missing))
        })
        .collect()
}

fn describe(prereq: &str) -> String {
    PREREQS
        .iter()
        .find(|(p, _)| *p == prereq)
        .map_or_else(|| format!("`{prereq}` (unknown prerequisite)"), |(_, d)| d.to_string())
}

/// Why the guest stages cannot run here, if they cannot: they need QEMU, and the first
/// run installs the kernel's build packages, which takes root.
pub fn guests_unavailable() -> Option<String> {
    if is_root() || available("qemu") {
        None
    } else {
        Some(
            "needs: root — to install QEMU and the test kernel's build packages (or install qemu-system-x86 first)"
                .into(),
        )
    }
}
