// SPDX-License-Identifier: GPL-2.0-only
//! Test harness: the node crate's testbed (NICs with user-space hosts attached), the
//! flashable image built once per test process.
#![allow(dead_code)]

pub mod idle;

pub use trapeze_node::testbed::*;

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
    trapeze_node::testbed::cluster(n, mode, link, &opt).expect("testbed starts")
}
