// SPDX-License-Identifier: GPL-2.0-only
//! The Trapeze host API: what a host (a kernel or a user process) does with a NIC's
//! endpoint — the papers' `tpz_*` routines in Rust terms.
//!
//! [`endpoint::Endpoint`] is generic over how NIC memory is reached
//! ([`iface::mem::NicMemory`]), allocates nothing and uses only `core`, so the kernel
//! module compiles the same source files (`#[path]` modules beside `iface`; inside them,
//! paths go through `super::`, never `crate::`). [`keys::KeyGen`] makes the 48-bit IPT
//! protection keys from a secret seed the runtime supplies (getrandom in user space,
//! `get_random_bytes` in the kernel).

#![no_std]
#![forbid(unsafe_code)]

pub use trapeze_iface as iface;

pub mod endpoint;
pub mod keys;
