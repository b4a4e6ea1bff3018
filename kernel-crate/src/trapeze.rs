// SPDX-License-Identifier: GPL-2.0-only
//! `trapeze.ko`: the Trapeze NIC driver for the virtual programmable NIC, which QEMU
//! guests see as PCI device 1af4:1110 (ivshmem-doorbell: BAR2 = NIC memory, MSI-X vector 0
//! = the NIC's host interrupt).
//!
//! Layout: `unsafe` code lives only in [`sys`], the thin shell over the C API 6.12 has no
//! Rust abstractions for (PCI, IRQ, DMA, module parameters); [`driver`] is the driver body
//! (probe, interrupt handler, remove), [`nicmem`] reaches NIC memory through the BAR,
//! [`proto`] is the ping/pong test message, [`stats`] the counters, and [`tpz`] compiles
//! the NIC interface and host API from the same source files as user space.
//!
//! Parameters: `node=` (this node's id; default: the id the NIC publishes),
//! `ping_peer=` (ping that node at load and check the pong), `ping_bytes=` (its payload,
//! default 4096), and the read-only `/sys/module/trapeze/parameters/stats`.

use core::sync::atomic::Ordering;
use kernel::{c_str, prelude::*};

mod blk;
mod driver;
mod gms_backend;
mod net;
mod nicmem;
mod proto;
mod stats;
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
        // A bad `gms_fail_ms=` refuses the load itself (not only each NIC's probe).
        driver::gms_fail_ms()?;
        let gms_disk = blk::GmsDisk::ram_from_params()?;
        let pci = sys::pci::Registration::register(c_str!("trapeze"), &driver::IDS, module)?;
        pr_info!(
            "loaded (node={}, ping_peer={}): {} NIC(s) bound\n",
            sys::param::NODE.get(),
            sys::param::PING_PEER.get(),
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
