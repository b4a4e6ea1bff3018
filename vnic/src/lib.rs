// SPDX-License-Identifier: GPL-2.0-only
//! The virtual programmable NIC (work in progress; see the module docs as they land).

pub mod link;
pub mod dma;
pub mod shm;
pub mod engines;
pub mod host;
pub mod nic;
pub mod control;
pub mod fdpass;
pub mod image;
pub mod cpu;
pub mod ivshmem;
pub mod testbed;
pub mod rpc;
pub mod gms;
