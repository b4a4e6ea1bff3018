// SPDX-License-Identifier: GPL-2.0-only
//! What a bound NIC's driver parts share: the [`Device`] probe returns, the [`Shared`]
//! state the IRQ handler, the work items and the process-context paths hold, the
//! constants of probe and remove, and the self-tests' view of it ([`TestNic`]).

use super::control::{device_request, wait_firmware, DOORBELL, NIC_DOORBELL};
use super::params;
use crate::blk::{PageBackend, PageIo};
use crate::gms_backend::{self, DiskCore};
use crate::net;
use crate::nicmem::BarMem;
use crate::selftest::TestNic;
use crate::sys::blk::Lent;
use crate::sys::irq::ThreadedIrq;
use crate::sys::lock::IrqSpinLock;
use crate::sys::pci::{self, BusMaster, Enabled, IoMem, PciDev, Regions};
use crate::sys::work::{Jobs, Worked};
use crate::tpz::iface::layout::{host_req, RECV_RING_ENTRIES};
use core::sync::atomic::{AtomicBool, AtomicU32, AtomicU64, Ordering};
use kernel::prelude::*;
use kernel::sync::{Arc, CondVar};

const VENDOR_ID: u16 = 0x1af4;
const DEVICE_ID: u16 = 0x1110;
/// The PCI ids this driver binds: the ivshmem-doorbell device the virtual NIC serves.
pub(crate) static IDS: pci::IdTable<2> = pci::IdTable::new([pci::id(VENDOR_ID, DEVICE_ID), pci::id_terminator()]);

/// BAR0: ivshmem registers (IntrMask, IntrStatus, IVPosition, Doorbell).
pub(super) const REGS_BAR: u32 = 0;
pub(super) const REGS_BYTES: usize = 16;
/// BAR2: NIC memory.
pub(super) const NIC_BAR: u32 = 2;

/// One receive frame per receive slot, and the MTU: a payload always fits one frame.
pub(super) const FRAME_BYTES: usize = net::FRAME_BYTES;
pub(super) const TX_FRAMES: usize = 8;
pub(super) const RX_FRAMES: usize = RECV_RING_ENTRIES as usize;
/// Frames beyond the receive slots and the GMS budget: replacements for detached receive
/// frames, solicited reply frames, pages being put.
pub(super) const SPARE_FRAMES: usize = 96;

pub(super) const SENDS_TIMEOUT_MS: u32 = 1_000;
/// The GMS ticker's longest sleep (it wakes earlier for the cores' deadlines) and the
/// heartbeat period (ms).
pub(super) const TICK_MS: u32 = 100;
pub(super) const HEARTBEAT_MS: u64 = 1_000;
// `gms_fail_ms=` allows no less than two heartbeat periods.
const _: () = assert!(params::FAIL_MS_MIN == 2 * HEARTBEAT_MS);
const _: () = assert!(RX_FRAMES + SPARE_FRAMES + params::MAX_BUDGET_PAGES <= crate::net::pool::LENT_BASE as usize);

/// Devices bound (for the load message).
pub(crate) static BOUND: AtomicU32 = AtomicU32::new(0);

/// Everything held for one bound NIC. Fields drop in order, after [`Drop::drop`] has
/// quiesced the NIC.
pub(crate) struct Device {
    /// `/dev/gms0` on the GMS backend: goes first (its requests complete through the IRQ).
    pub(super) disk: Option<crate::blk::GmsDisk>,
    pub(super) irq: Option<ThreadedIrq<Dev>>,
    pub(super) shared: Arc<Dev>,
    pub(super) _master: BusMaster,
    pub(super) _regions: Regions,
    pub(super) _enabled: Enabled,
    pub(super) pdev: PciDev,
}

/// What the IRQ handler, the work item and the process-context paths share.
#[pin_data]
pub(crate) struct Shared {
    /// Everything the receive path touches, under a spinlock taken with interrupts off
    /// (the receive path runs in the hard interrupt): NetRPC continuations run with it
    /// held, so they cannot sleep. The disk is the runtime's
    /// client. The short work item ([`Dev`]) runs NetRPC's deferred continuations, the
    /// long one the GMS ticker (timeouts, heartbeats, failure detection).
    #[pin]
    pub(crate) core: IrqSpinLock<DiskCore>,
    /// Notified when the receive path (or the ticker) took input: process-context waiters
    /// for call outcomes and GMS completions sleep on it with the core lock.
    #[pin]
    pub(crate) completed: CondVar,
    /// The peers admitted as members once in this load (bit per node id, all ≤
    /// `MAX_NODE` = 63): a later join is told and counted as a return. Bookkeeping for
    /// the log only; who is a member is liveness's (`KHost::liveness`).
    pub(super) admitted: AtomicU64,
    /// A member silent longer than this is declared failed, and a peer unheard this long
    /// after the load is not a member (ms; `gms_fail_ms=`).
    pub(super) fail_ms: u64,
    pub(super) regs: IoMem,
    /// A second mapping of NIC memory for the control block (device requests and the
    /// firmware's state word wait with `msleep`, which the spinlock forbids).
    pub(super) ctl: BarMem,
    pub(super) node: u16,
    /// Set by remove: the work items do nothing more.
    pub(super) closing: AtomicBool,
}

/// The shared state with its two work items (`sys::work`): what the IRQ handler and the
/// work items hold an `Arc` of.
pub(crate) type Dev = Worked<Shared>;

impl Shared {
    /// Ask the device to start the firmware on the endpoint just initialised; wait for
    /// its ready word and for it to have applied our configuration.
    pub(super) fn start(&self) -> Result {
        device_request(&self.ctl, &self.regs, host_req::START)?;
        wait_firmware(&self.ctl, false)?;
        if !self.core.lock().node.host.ep.config_applied() {
            pr_err!("the firmware is ready but reports another configuration\n");
            return Err(EIO);
        }
        Ok(())
    }

    pub(crate) fn is_closing(&self) -> bool {
        self.closing.load(Ordering::Acquire)
    }

    pub(crate) fn ring_nic(&self) {
        self.regs.write32(DOORBELL, NIC_DOORBELL);
    }

    /// Complete the disk pages that finished under the core lock, and drop the request
    /// pages the NIC is done with (unmapped; either may end a block request, so any
    /// context but not under the core lock, which is not held). Lend slots freed so
    /// let the disk's backlog go on.
    pub(crate) fn complete_disk(&self) {
        let mut freed = false;
        loop {
            let (more, lends) = self.complete_some();
            freed |= lends > 0;
            if more {
                continue;
            }
            if !freed || self.is_closing() {
                return;
            }
            freed = false;
            let sent = {
                let mut core = self.core.lock();
                let c = &mut *core;
                gms_backend::issue(c, crate::net::now_ns()) && c.flush()
            };
            if sent {
                self.ring_nic();
            }
        }
    }

    /// One batch of [`Self::complete_disk`]: whether there may be more, and how many
    /// lends were dropped.
    #[inline(never)]
    fn complete_some(&self) -> (bool, usize) {
        const BATCH: usize = 8;
        let mut pages: [Option<(PageIo, Result)>; BATCH] = [const { None }; BATCH];
        let mut lends: [Option<Lent>; BATCH] = [const { None }; BATCH];
        let (n, m) = {
            let mut core = self.core.lock();
            let m = core.node.host.take_back(&mut lends);
            (gms_backend::take_finished(&mut core, &mut pages), m)
        };
        drop(lends);
        for (io, r) in pages.iter_mut().filter_map(Option::take) {
            io.complete(r);
        }
        (n == BATCH || m == BATCH, m)
    }

    /// A disk page from blk-mq (atomic context): handed to the disk under the lock, then
    /// what it issued is sent and, after a request's `last` page, what finished completed.
    fn disk_io(&self, page: u64, io: PageIo, write: bool, last: bool) {
        let sent = {
            let mut core = self.core.lock();
            let c = &mut *core;
            gms_backend::submit(c, page, io, write, self.is_closing(), last) && c.flush()
        };
        if sent {
            self.ring_nic();
        }
        if last {
            self.complete_disk();
        }
    }
}

impl Jobs for Shared {
    fn run_short(this: Arc<Dev>) {
        Shared::run_deferred(&this);
    }
    fn run_long(this: Arc<Dev>) {
        Shared::run_ticker(&this);
    }
}

/// The backend `/dev/gms0` calls (the GMS disk of this NIC).
pub(super) struct GmsBackend(pub(super) Arc<Dev>);

impl PageBackend for GmsBackend {
    fn read(&self, page: u64, io: PageIo, last: bool) {
        self.0.disk_io(page, io, false, last);
    }
    fn write(&self, page: u64, io: PageIo, last: bool) {
        self.0.disk_io(page, io, true, last);
    }
}

impl TestNic for Arc<Dev> {
    type Client = Option<KBox<gms_backend::DiskState>>;
    fn core(&self) -> &IrqSpinLock<DiskCore> {
        &self.core
    }
    fn completed(&self) -> &CondVar {
        &self.completed
    }
    fn ring_nic(&self) {
        Shared::ring_nic(self);
    }
    fn queue_deferred(&self) {
        Shared::queue_deferred(self.clone());
    }
    fn node(&self) -> u16 {
        self.node
    }
}
