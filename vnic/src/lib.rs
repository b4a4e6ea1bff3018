// SPDX-License-Identifier: GPL-2.0-only
//! The virtual programmable NIC, the device and nothing above it: NIC memory as a shared
//! memfd ([`shm`], reached as [`nicmem::NicMem`]), host memory reached only through registered DMA regions ([`dma`]),
//! software DMA engines behind the firmware's HAL ([`engines`]), the link between NICs
//! ([`link`]: in-process switch, UDP, raw Ethernet, with fault injection), the processor
//! running the firmware natively or as the flashed riscv32 image ([`nic`], [`cpu`],
//! [`image`]), and the ways in: a control socket for status, loading images and attaching
//! hosts ([`control`], over [`fdpass`], guarded by [`local`]) and an ivshmem-doorbell
//! server for QEMU guests ([`ivshmem`]); a link-level echo between NICs for
//! `trapeze-nic ping` ([`echo`]); an event trace of the engines for timing round
//! trips across NICs ([`trace`]). The `trapeze-nic` binary runs one NIC as a
//! process. Tests of this crate and the node's share a link backend wrapper
//! (`link::testing`, feature `test-support`).
//!
//! What runs on the host side — the host binding, the NetRPC and GMS runtimes, the
//! in-process cluster — is the `trapeze-node` crate, which depends on this one.

pub mod control;
pub mod cpu;
pub mod dma;
pub mod echo;
pub mod engines;
pub mod fdpass;
pub mod image;
pub mod ivshmem;
pub mod key;
pub mod link;
pub mod local;
pub mod nic;
pub mod nicmem;
#[allow(unsafe_code)] // shared mappings: one of the documented unsafe modules
pub mod shm;
pub mod trace;
