// SPDX-License-Identifier: GPL-2.0-only
//! Trapeze NIC firmware: the control program of a programmable NIC, `#![no_std]`, no heap.
//!
//! * [`iface`] — the host↔NIC interface defined once for every crate (NIC-memory layout,
//!   ring entries, IPT and payload tokens, wire packet, MMIO registers): the `trapeze-iface`
//!   crate, re-exported here so `crate::iface::…` paths read as before.
//! * [`fw`] — the firmware: a resource-centred main loop that pipelines each packet
//!   through host bus, link out and link in (cut-through delivery with eager DMA), guards
//!   host memory with IPT token validation, drives the send and receive rings, and answers
//!   a peer's answerable request from its host's answer table by itself.
//! * [`hal`] — the DMA engines as the firmware sees them; implemented by the timing
//!   model, by the virtual NIC, and over MMIO in the flashed riscv32 image.
//! * `log` — `log::warn!` and friends: defmt in the riscv32 image (feature `defmt`),
//!   nothing anywhere else.
//! * [`sim`] (feature `sim`, std) — a deterministic discrete-time model of two NICs, their
//!   hosts and a link (bus and link bandwidths, per-transfer overheads) that runs the real
//!   firmware in simulated time: the basis of `cargo xtask bench dma` and of the
//!   scheduler property tests.
//!
//! The same crate builds the host library and, with the `image` feature for
//! `riscv32imac-unknown-none-elf`, the flashable image (`src/bin/trapeze-fw.rs`).

#![no_std]
#![deny(unsafe_op_in_unsafe_fn)]
#![forbid(clippy::undocumented_unsafe_blocks)]

#[cfg(feature = "std")]
extern crate std;

pub mod fw;
pub mod hal;
pub use trapeze_iface as iface;
pub(crate) mod log;
#[cfg(feature = "sim")]
pub mod sim;

pub use fw::{Config, Firmware};

/// FNV-1a hash of this crate's sources (see build.rs): the build id the firmware publishes
/// in `ctrl::FW_BUILD_ID`. The flashed image reports it, and so does the native firmware a
/// virtual NIC links in: the same sources give the same id in both.
pub const BUILD_ID: u32 = parse_hex_u32(env!("TRAPEZE_FW_BUILD_ID"));

/// Parse build.rs's `0x%08x` at compile time.
const fn parse_hex_u32(s: &str) -> u32 {
    let b = s.as_bytes();
    assert!(b.len() == 10 && b[0] == b'0' && b[1] == b'x', "TRAPEZE_FW_BUILD_ID: want 0x%08x");
    let mut v = 0u32;
    let mut i = 2;
    while i < b.len() {
        let d = match b[i] {
            c @ b'0'..=b'9' => c - b'0',
            c @ b'a'..=b'f' => c - b'a' + 10,
            c @ b'A'..=b'F' => c - b'A' + 10,
            _ => panic!("TRAPEZE_FW_BUILD_ID: not a hex digit"),
        };
        v = v << 4 | d as u32;
        i += 1;
    }
    v
}
