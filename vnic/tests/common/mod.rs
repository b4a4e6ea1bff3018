// SPDX-License-Identifier: GPL-2.0-only
//! Test harness: the library's testbed, plus building the flashable image on demand.
#![allow(dead_code)]

pub use trapeze_vnic::testbed::*;

/// The flashable image, built if missing (the riscv32 target comes with the pinned
/// toolchain).
pub fn image_bytes() -> Vec<u8> {
    static BUILT: std::sync::OnceLock<Vec<u8>> = std::sync::OnceLock::new();
    BUILT
        .get_or_init(|| {
            let root = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).parent().unwrap().to_path_buf();
            let cargo = std::env::var("CARGO").unwrap_or_else(|_| "cargo".into());
            let st = std::process::Command::new(cargo)
                .args([
                    "build", "-q", "-p", "trapeze-firmware", "--bin", "trapeze-fw", "--features", "image",
                    "--target", "riscv32imac-unknown-none-elf", "--profile", "fw",
                ])
                .current_dir(&root)
                .status()
                .expect("running cargo to build the firmware image");
            assert!(st.success(), "building the firmware image failed");
            let path = root.join("target/riscv32imac-unknown-none-elf/fw/trapeze-fw");
            std::fs::read(&path).unwrap_or_else(|e| panic!("reading {}: {e}", path.display()))
        })
        .clone()
}

/// `n` NICs in `mode` on `link`, with `faults` per node and payload MTU `mtu`.
pub fn cluster(n: usize, mode: Mode, link: LinkKind, faults: &[trapeze_vnic::link::FaultConfig], mtu: u32) -> Vec<Node> {
    let opt = Options {
        faults: faults.to_vec(),
        mtu,
        image: (mode == Mode::Flashed).then(image_bytes),
        ..Options::default()
    };
    trapeze_vnic::testbed::cluster(n, mode, link, &opt).expect("testbed starts")
}
