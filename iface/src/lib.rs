// SPDX-License-Identifier: GPL-2.0-only
//! The Trapeze host↔NIC interface, defined once: NIC-memory layout, ring entries, the IPT
//! and payload tokens, the wire packet, and the MMIO register map of the NIC processor.
//!
//! Every crate that talks across the host↔NIC boundary uses these definitions: the
//! firmware (which owns NIC memory, and re-exports this crate as `trapeze_firmware::iface`),
//! the host API (`trapeze-host`), the virtual NIC, and the kernel module, which compiles
//! these files directly as a `#[path]` module (`kernel-crate/src/tpz.rs`). So everything
//! here is plain `core` — no dependencies, no heap, no `unsafe` — and the files reach each
//! other through `super::` paths, never `crate::`.
//!
//! * [`layout`] — the NIC-memory map: image, control block, send and receive rings,
//!   IPT, staging buffers; offsets and sizes as constants.
//! * [`mem`] — [`mem::NicMemory`], how a side reaches NIC memory: little-endian 32-bit
//!   words at fixed offsets, with explicit orderings. The firmware, a user-space host
//!   mapping a device, and the kernel driver behind a PCI BAR each implement it.
//! * [`entry`] — views of send and receive ring entries and their ownership protocol.
//! * [`ipt`] — the IPT and payload tokens (IPT index + protection key) that let a NIC
//!   DMA into host memory only where the host allowed it.
//! * [`answer`] — the answer table: host memory a NIC sends by itself when a peer's
//!   request names it (one-sided reads).
//! * [`wire`] — the packet on the link: Trapeze header, control message, payload, CRC-32
//!   trailer.
//! * [`regs`] — the MMIO registers of the NIC processor.
//! * [`siphash`] — SipHash-2-4, for the secrets drawn from a seed (IPT keys, call
//!   generations).
//!
//! Ownership of every shared word is single-writer at any moment; the protocol for each
//! structure is documented beside it ([`entry`] for the rings, [`ipt`] for the IPT).

#![no_std]
#![forbid(unsafe_code)]

pub mod answer;
pub mod entry;
pub mod ipt;
pub mod layout;
pub mod mem;
pub mod regs;
pub mod siphash;
pub mod wire;
