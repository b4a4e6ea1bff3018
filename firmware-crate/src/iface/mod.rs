// SPDX-License-Identifier: GPL-2.0-only
//! The host↔NIC interface, defined once: NIC-memory layout, ring entries, the IPT and
//! payload tokens, the wire packet, and the MMIO register map of the NIC processor.
//!
//! Everything here is plain `core` (no other crate, no `crate::` paths) because the kernel
//! module compiles these files directly with `#[path]`. Fields are little-endian 32-bit
//! words at fixed offsets, read and written through [`mem::NicMemory`], so the same
//! definitions serve the firmware (which owns NIC memory), a user-space host mapping it,
//! and the kernel driver reaching it through a PCI BAR. The optional `zerocopy` feature
//! adds byte-view derives for the wire header; nothing in the kernel build needs it.
//!
//! Ownership of every shared word is single-writer at any moment; the protocol for each
//! structure is documented beside it ([`entry`] for the rings, [`ipt`] for the IPT).

pub mod entry;
pub mod ipt;
pub mod layout;
pub mod mem;
pub mod regs;
pub mod wire;
