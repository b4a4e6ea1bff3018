// SPDX-License-Identifier: GPL-2.0-only
//! The virtual programmable NIC (work in progress; see the module docs as they land).

pub mod control;
pub mod cpu;
pub mod dma;
pub mod engines;
pub mod fdpass;
pub mod gms;
pub mod host;
pub mod image;
pub mod ivshmem;
pub mod link;
pub mod local;
pub mod nic;
pub mod rpc;
#[allow(unsafe_code)] // shared mappings: one of the documented unsafe modules
pub mod shm;
pub mod testbed;
