// SPDX-License-Identifier: GPL-2.0-only
//! Test harness: the library's testbed, plus building the flashable image on demand.
#![allow(dead_code)]

pub use trapeze_vnic::testbed::*;

/// Build the flashable image (or read `$TRAPEZE_FW_IMAGE`) and return its bytes. The
/// path comes from cargo's own report, so any target directory works.
pub fn build_image() -> Result<Vec<u8>, String> {
    use std::path::{Path, PathBuf};
    if let Some(p) = std::env::var_os("TRAPEZE_FW_IMAGE") {
        return std::fs::read(&p).map_err(|e| format!("TRAPEZE_FW_IMAGE={}: {e}", Path::new(&p).display()));
    }
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).parent().expect("vnic has a parent").to_path_buf();
    let cargo = std::env::var("CARGO").unwrap_or_else(|_| "cargo".into());
    let out = std::process::Command::new(cargo)
        .args(["build", "-p", "trapeze-firmware", "--bin", "trapeze-fw", "--features", "image"])
        .args(["--target", "riscv32imac-unknown-none-elf", "--profile", "fw"])
        .arg("--message-format=json-render-diagnostics")
        .env("DEFMT_LOG", "info")
        .current_dir(root)
        .stderr(std::process::Stdio::inherit())
        .output()
        .map_err(|e| format!("running cargo: {e}"))?;
    if !out.status.success() {
        return Err(format!("building the firmware image failed ({})", out.status));
    }
    let exe = String::from_utf8_lossy(&out.stdout)
        .lines()
        .filter_map(|l| serde_json::from_str::<serde_json::Value>(l).ok())
        .filter(|v| v["reason"] == "compiler-artifact" && v["target"]["name"] == "trapeze-fw")
        .find_map(|v| v["executable"].as_str().map(PathBuf::from))
        .ok_or("cargo reported no trapeze-fw executable")?;
    std::fs::read(&exe).map_err(|e| format!("{}: {e}", exe.display()))
}

/// The flashable image, built once per test process.
pub fn image_bytes() -> Vec<u8> {
    static BUILT: std::sync::OnceLock<Vec<u8>> = std::sync::OnceLock::new();
    BUILT.get_or_init(|| build_image().unwrap_or_else(|e| panic!("{e}"))).clone()
}

/// `n` NICs in `mode` on `link`, with `faults` per node and payload MTU `mtu`.
pub fn cluster(
    n: usize,
    mode: Mode,
    link: LinkKind,
    faults: &[trapeze_vnic::link::FaultConfig],
    mtu: u32,
) -> Vec<Node> {
    let opt = Options {
        faults: faults.to_vec(),
        mtu,
        image: (mode == Mode::Flashed).then(image_bytes),
        ..Options::default()
    };
    trapeze_vnic::testbed::cluster(n, mode, link, &opt).expect("testbed starts")
}
