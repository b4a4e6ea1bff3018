// SPDX-License-Identifier: GPL-2.0-only
//! System packages the build needs beyond the Rust toolchain, checked before the cargo
//! step that needs them: installed with apt when running as root on Debian, otherwise
//! named exactly in the error.

use anyhow::{bail, Context};
use std::process::Command;

/// (package, what needs it)
const EMULATOR_DEPS: [(&str, &str); 2] = [
    ("cmake", "builds unicorn, the flashed NIC's riscv32 emulator"),
    ("libclang-dev", "bindgen generates unicorn's bindings"),
];

fn installed(pkg: &str) -> bool {
    Command::new("dpkg-query")
        .args(["-W", "-f=${Status}", pkg])
        .output()
        .is_ok_and(|o| String::from_utf8_lossy(&o.stdout).contains("install ok installed"))
}

fn have_command(cmd: &str) -> bool {
    Command::new(cmd).arg("--version").output().is_ok_and(|o| o.status.success())
}

/// Which of `pkgs` are not installed (cmake also counts as present when on PATH).
pub fn missing_packages<'a>(pkgs: &'a [(&'a str, &'a str)]) -> Vec<&'a (&'a str, &'a str)> {
    pkgs.iter().filter(|(p, _)| !(installed(p) || (*p == "cmake" && have_command("cmake")))).collect()
}

/// Make sure `pkgs` are installed, installing them with apt as root
/// (`--no-install-recommends`, waiting up to 5 minutes for another apt's lock).
pub fn ensure_packages(pkgs: &[(&str, &str)]) -> anyhow::Result<()> {
    let missing = missing_packages(pkgs);
    if missing.is_empty() {
        return Ok(());
    }
    let names: Vec<&str> = missing.iter().map(|(p, _)| *p).collect();
    let why: Vec<String> = missing.iter().map(|(p, w)| format!("{p} ({w})")).collect();
    let root = rustix::process::geteuid().is_root();
    if !root || !have_command("apt-get") {
        bail!(
            "missing system packages: {}. Install them with: sudo apt-get install --no-install-recommends {}",
            why.join(", "),
            names.join(" ")
        );
    }
    eprintln!("xtask: installing {} with apt-get ({})", names.join(" "), why.join(", "));
    let install = |update: bool| -> anyhow::Result<bool> {
        if update {
            let st = Command::new("apt-get").args(["-o", "DPkg::Lock::Timeout=300", "update"]).status()?;
            if !st.success() {
                return Ok(false);
            }
        }
        let st = Command::new("apt-get")
            .args(["-o", "DPkg::Lock::Timeout=300", "install", "-y", "--no-install-recommends"])
            .args(&names)
            .env("DEBIAN_FRONTEND", "noninteractive")
            .status()
            .context("running apt-get")?;
        Ok(st.success())
    };
    if !(install(false)? || install(true)?) {
        bail!("apt-get could not install {}", names.join(" "));
    }
    Ok(())
}

/// What building flashed mode (unicorn) needs.
pub fn ensure_emulator_build_deps() -> anyhow::Result<()> {
    ensure_packages(&EMULATOR_DEPS)
}

/// What `cargo xtask bench vm` copies into the guests for its NBD baseline (the binaries and
/// the shared libraries `ldd` lists for them).
const NBD_BENCH_DEPS: [(&str, &str); 3] = [
    ("nbd-client", "Linux's NBD client setup tool, run in guest A (busybox has no nbd-client applet)"),
    ("nbd-server", "serves the NBD baseline's RAM-backed export from guest B"),
    ("qemu-utils", "qemu-nbd, the host NBD server of the fair baseline (a RAM file in /dev/shm)"),
];

/// What the baseline of `cargo xtask bench block` runs beside `gmblockd`.
const BLOCK_BENCH_DEPS: [(&str, &str); 3] = [
    ("nbd-server", "serves the same file as the nbd-server baseline of bench block"),
    ("libnbd-bin", "nbdcopy, which reads the NBD sides of bench block through libnbd"),
    ("nbdkit", "runs gmblock's NBD export plugin and the nbdkit memory and file baselines of bench block"),
];

/// What `cargo xtask bench block`'s guest phase (`stripe_md`) copies into the guest.
const MD_BENCH_DEPS: [(&str, &str); 2] = [
    ("nbd-client", "bench block's guest phase connects the guest's kernel NBD client with it"),
    ("mdadm", "bench block's guest phase builds md RAID-0 over NBD devices with it"),
];

/// What the guest phase of `cargo xtask bench block` needs on the host.
pub fn ensure_md_bench_deps() -> anyhow::Result<()> {
    ensure_packages(&MD_BENCH_DEPS)
}

/// What the baseline of `cargo xtask bench block` needs.
pub fn ensure_block_bench_deps() -> anyhow::Result<()> {
    ensure_packages(&BLOCK_BENCH_DEPS)
}

/// What the baselines of `cargo xtask bench gms` run beside `gmsd`.
const GMS_BASELINE_DEPS: [(&str, &str); 3] = [
    ("nbdkit", "serves the nbdkit memory baseline of bench gms"),
    ("libnbd0", "the NBD client library bench gms reads that baseline with"),
    ("memcached", "the memcached GET baseline of bench gms"),
];

/// What the baselines of `cargo xtask bench gms` need.
pub fn ensure_gms_baseline_deps() -> anyhow::Result<()> {
    ensure_packages(&GMS_BASELINE_DEPS)
}

/// What the NBD baseline of `cargo xtask bench vm` needs.
pub fn ensure_nbd_bench_deps() -> anyhow::Result<()> {
    ensure_packages(&NBD_BENCH_DEPS)
}
