// SPDX-License-Identifier: GPL-2.0-only
//! Fuzz targets for every parser of Trapeze-rs, as plain functions of the input bytes.
//!
//! Each target panics (an assertion of its oracle, or a panic in the code under test)
//! exactly when it found a bug; anything else the input does is fine. The same function
//! runs under libFuzzer (`fuzz_targets/NAME.rs`, `cargo xtask fuzz`) and in the corpus
//! replay on the stable toolchain (`tests/corpus.rs`, part of `cargo xtask test`), which
//! feeds it every file of `corpus/NAME/`.

pub mod answers;
pub mod elf;
pub mod firmware;
pub mod firmware_recv;
pub mod gms_bodies;
pub mod gmsd_proto;
pub mod host_recv;
pub mod ivshmem;
pub mod link;
pub mod rpc;
pub mod trace;
pub mod vnic_control;
pub mod wire;

/// A target: its name (the `fuzz_targets/` file stem) and its function.
pub type Target = (&'static str, fn(&[u8]));

/// Every target, by name.
pub const TARGETS: &[Target] = &[
    ("wire", targets::wire),
    ("link", targets::link),
    ("firmware_send", targets::firmware_send),
    ("host_recv", targets::host_recv),
    ("netrpc", targets::netrpc),
    ("gms_bodies", targets::gms_bodies),
    ("gmsd_proto", targets::gmsd_proto),
    ("vnic_control", targets::vnic_control),
    ("elf_image", targets::elf_image),
    ("firmware_recv", targets::firmware_recv),
    ("trace", targets::trace),
    ("ivshmem", targets::ivshmem),
];

/// One function per target, named like its `fuzz_targets/` file.
pub mod targets {
    pub use super::elf::fuzz as elf_image;
    pub use super::firmware::fuzz as firmware_send;
    pub use super::firmware_recv::fuzz as firmware_recv;
    pub use super::gms_bodies::fuzz as gms_bodies;
    pub use super::gmsd_proto::fuzz as gmsd_proto;
    pub use super::host_recv::fuzz as host_recv;
    pub use super::ivshmem::fuzz as ivshmem;
    pub use super::link::fuzz as link;
    pub use super::rpc::fuzz as netrpc;
    pub use super::trace::fuzz as trace;
    pub use super::vnic_control::fuzz as vnic_control;
    pub use super::wire::fuzz as wire;
}
