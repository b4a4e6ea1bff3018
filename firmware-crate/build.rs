// SPDX-License-Identifier: GPL-2.0-only
//! Build script: the firmware build id (a hash of this crate's sources) for every build,
//! and, for the riscv32 image only, the linker scripts (`memory.x` from this crate,
//! `link.x` from riscv-rt, `defmt.x` from defmt).

use std::env;
use std::fs;
use std::path::{Path, PathBuf};

fn main() {
    let manifest_dir = PathBuf::from(env::var_os("CARGO_MANIFEST_DIR").expect("set by cargo"));
    let out_dir = PathBuf::from(env::var_os("OUT_DIR").expect("set by cargo"));

    // A directory makes cargo re-run this script when anything below it changes.
    println!("cargo:rerun-if-changed=src");
    println!("cargo:rerun-if-changed=memory.x");
    println!("cargo:rerun-if-changed=Cargo.toml");
    println!("cargo:rerun-if-changed=build.rs");

    let id = build_id(&manifest_dir);
    println!("cargo:rustc-env=TRAPEZE_FW_BUILD_ID={id:#010x}");

    let arch = env::var("CARGO_CFG_TARGET_ARCH").unwrap_or_default();
    let os = env::var("CARGO_CFG_TARGET_OS").unwrap_or_default();
    if arch == "riscv32" && os == "none" {
        let memory_x = fs::read(manifest_dir.join("memory.x")).expect("read memory.x");
        fs::write(out_dir.join("memory.x"), memory_x).expect("write memory.x to OUT_DIR");
        println!("cargo:rustc-link-search={}", out_dir.display());
        // memory.x must come before riscv-rt's link.x, which uses its regions.
        println!("cargo:rustc-link-arg-bins=-Tmemory.x");
        println!("cargo:rustc-link-arg-bins=-Tlink.x");
        println!("cargo:rustc-link-arg-bins=-Tdefmt.x");
    }
}

/// FNV-1a (32-bit) over the crate's sources: every `src/**/*.rs`, `memory.x` and
/// `Cargo.toml`, in path order, each as its relative path, a NUL, its length and its bytes.
/// Any changed, added, removed or renamed source changes the id.
fn build_id(root: &Path) -> u32 {
    let mut files = Vec::new();
    collect_rs(&root.join("src"), &mut files);
    files.push(root.join("memory.x"));
    files.push(root.join("Cargo.toml"));
    let mut named: Vec<(String, PathBuf)> = files
        .into_iter()
        .map(|p| {
            let rel = p.strip_prefix(root).expect("below the crate root");
            let rel = rel.components().map(|c| c.as_os_str().to_string_lossy()).collect::<Vec<_>>();
            (rel.join("/"), p)
        })
        .collect();
    named.sort();

    let mut h = Fnv1a::new();
    for (rel, path) in &named {
        let bytes = fs::read(path).unwrap_or_else(|e| panic!("read {}: {e}", path.display()));
        h.update(rel.as_bytes());
        h.update(&[0]);
        h.update(&(bytes.len() as u64).to_le_bytes());
        h.update(&bytes);
    }
    h.finish()
}

fn collect_rs(dir: &Path, out: &mut Vec<PathBuf>) {
    let entries = fs::read_dir(dir).unwrap_or_else(|e| panic!("read {}: {e}", dir.display()));
    for entry in entries {
        let path = entry.expect("directory entry").path();
        if path.is_dir() {
            collect_rs(&path, out);
        } else if path.extension().is_some_and(|e| e == "rs") {
            out.push(path);
        }
    }
}

struct Fnv1a(u32);

impl Fnv1a {
    const OFFSET_BASIS: u32 = 0x811c_9dc5;
    const PRIME: u32 = 0x0100_0193;

    fn new() -> Self {
        Self(Self::OFFSET_BASIS)
    }
    fn update(&mut self, bytes: &[u8]) {
        for &b in bytes {
            self.0 = (self.0 ^ b as u32).wrapping_mul(Self::PRIME);
        }
    }
    fn finish(&self) -> u32 {
        self.0
    }
}
