// SPDX-License-Identifier: GPL-2.0-only
//! NIC memory through the ioremapped BAR: the [`NicMemory`] the shared interface and host
//! API code run on in the kernel.
//!
//! # Ordering (x86-64, which this driver targets; other architectures do not build)
//! Every access is one aligned 32-bit `ioread32`/`iowrite32` (a single `mov`), so each
//! word is read or written whole. The orderings [`NicMemory`] asks for map as follows:
//! * `Relaxed` — the plain access.
//! * `Acquire` load / `Release` store — the plain access too. x86 never reorders a load
//!   with later loads or stores, nor a store with earlier loads or stores (TSO), so the
//!   hardware gives both. The compiler cannot move memory accesses across the calls
//!   either: `ioread32`/`iowrite32` are out-of-line C functions, opaque to rustc, and
//!   Linux documents them as ordered against the CPU's accesses to DMA memory
//!   (`Documentation/memory-barriers.txt`, "KERNEL I/O BARRIER EFFECTS"): a receive frame
//!   read after the slot's state word sees what the NIC wrote before releasing the slot,
//!   and a payload written before a send slot is handed over is visible to the NIC.
//! * `SeqCst` store — the access followed by a full fence (`mfence`). x86 lets a store be
//!   passed by a later load (the store buffer); a real UC mapping would forbid that, but
//!   under QEMU TCG the BAR is host RAM and memory types are not emulated, so the fence
//!   is what keeps the IPT's store→load handshake (`iface::ipt`) correct.
//! * `SeqCst` load — the plain access (with the fence after every SeqCst store, this is
//!   the standard x86 mapping).
//!
//! The other party is the virtual NIC, a host process using `core` atomics on its own
//! mapping of the same memory; both follow the C++/Rust model's x86 mapping, so the
//! orderings compose.

#[cfg(not(target_arch = "x86_64"))]
compile_error!("nicmem.rs's ordering argument is for x86-64 (TSO); review it before porting");

use crate::stats::STATS;
use crate::sys::pci::IoMem;
use crate::tpz::iface::mem::NicMemory;
use core::sync::atomic::{fence, Ordering};

/// NIC memory: the BAR, as many bytes as the interface's memory map covers.
pub(crate) struct BarMem {
    io: IoMem,
    len: u32,
}

impl BarMem {
    /// `io` must map at least `len` bytes (`None` otherwise).
    pub(crate) fn new(io: IoMem, len: u32) -> Option<Self> {
        (io.len() >= len as usize).then_some(Self { io, len })
    }
}

impl NicMemory for BarMem {
    fn load(&self, off: u32, _order: Ordering) -> u32 {
        // Acquire and SeqCst need nothing more than the access itself (module doc).
        match (off < self.len).then(|| self.io.read32(off as usize)).flatten() {
            Some(v) => v,
            None => {
                STATS.bad_nic_access.inc();
                0
            }
        }
    }

    fn store(&self, off: u32, val: u32, order: Ordering) {
        if off >= self.len || !self.io.write32(off as usize, val) {
            STATS.bad_nic_access.inc();
            return;
        }
        if order == Ordering::SeqCst {
            fence(Ordering::SeqCst);
        }
    }

    fn len_bytes(&self) -> u32 {
        self.len
    }
}
