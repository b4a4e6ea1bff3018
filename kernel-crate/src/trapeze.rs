// SPDX-License-Identifier: GPL-2.0-only
//! `trapeze.ko`: the Trapeze NIC driver for the virtual programmable NIC, which QEMU
//! guests see as PCI device 1af4:1110 (ivshmem-doorbell: BAR2 = NIC memory, MSI-X vector 0
//! = the NIC's host interrupt).
//!
//! Layout, in layers; imports go down only (no module names one above it, and no two
//! name each other):
//!
//! * [`driver`] — the top: owns the device. Probe, the IRQ handler and the poll loop, the
//!   work items (deferred continuations, the GMS ticker), the GMS membership, remove; it
//!   takes the core lock, rings the doorbell, and calls everything below.
//! * [`selftest`] — the load-time tests (ping/pong, NetRPC echo, GMS put/get, calls left
//!   in flight for rmmod) and the echo service; the driver reaches them through
//!   `selftest::TestNic` and a few entry points.
//! * [`gms_backend`] — `/dev/gms0` on GMS: a client of the runtime, its functions run over
//!   the runtime's core with the lock held (the driver calls them).
//! * [`blk`] — the blk-mq disk `/dev/gms0` and its page backends' contract (`blk::ram`).
//! * [`net`] — the runtime: frames, the port, GMS's host, NetRPC, the GMS node and the
//!   global LRU (`net::stack::Core`).
//! * [`nicmem`] (NIC memory through the BAR), [`stats`] (the counters), [`tpz`] (the NIC
//!   interface, host API, NetRPC, GMS and runtime, compiled from the workspace's files).
//! * [`sys`] — the leaf: the thin shell over the C API 6.12 has no Rust abstractions for
//!   (PCI, IRQ, DMA, blk-mq, work items, module parameters). The only module where
//!   `unsafe` code is allowed: the crate denies it everywhere else.
//!
//! Each owner keeps its module parameters (`sys::param` places the tables): the driver's
//! (`node=`, `gms_nodes=`, …), the self-tests' (`ping_peer=`, `echo_peer=`, …), the
//! disk's (`gms_disk_mb=`, …) and the read-only `/sys/module/trapeze/parameters/stats`.

#![deny(unsafe_code)]

use core::sync::atomic::Ordering;
use kernel::{c_str, prelude::*};

mod blk;
mod driver;
mod gms_backend;
mod net;
mod nicmem;
mod selftest;
mod stats;
#[allow(unsafe_code)]
mod sys;
mod tpz;

module! {
    type: Trapeze,
    name: "trapeze",
    author: "Trapeze-rs",
    description: "Trapeze network memory: driver for the virtual programmable NIC",
    license: "GPL",
    alias: ["pci:v00001AF4d00001110sv*sd*bc*sc*i*"],
}

struct Trapeze {
    /// `/dev/gms0` (`gms_disk_mb` > 0); declared first so it goes before the NIC driver.
    _gms_disk: Option<blk::GmsDisk>,
    _pci: sys::pci::Registration<driver::TrapezeDriver>,
}

impl kernel::Module for Trapeze {
    fn init(module: &'static ThisModule) -> Result<Self> {
        // A parameter out of range refuses the load itself (not only each NIC's probe).
        driver::check_params()?;
        let gms_disk = blk::ram::disk_from_params(driver::gms_disk_asked())?;
        let pci = sys::pci::Registration::register(c_str!("trapeze"), &driver::IDS, module)?;
        pr_info!(
            "loaded (node={}, ping_peer={}): {} NIC(s) bound\n",
            driver::NODE.get(),
            selftest::ping_peer(),
            driver::BOUND.load(Ordering::Relaxed)
        );
        Ok(Self { _gms_disk: gms_disk, _pci: pci })
    }
}

impl Drop for Trapeze {
    fn drop(&mut self) {
        pr_info!("unloading\n");
    }
}
