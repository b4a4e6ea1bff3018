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
