// SPDX-License-Identifier: GPL-2.0-only
//! The NIC driver proper, in safe Rust: probe brings up the NIC's endpoint on BAR2, the
//! threaded MSI-X handler drains the receive ring (answering pings, checking pongs), and
//! remove quiesces the NIC before anything it could DMA into is freed.
//!
//! Probe order, each step bounded in time:
//! 1. enable the function, request its regions, map BAR0 (registers) and BAR2 (NIC
//!    memory, at least `NIC_MEM_BYTES`), bus mastering, 64-bit DMA mask;
//! 2. read the firmware's ready word (`Ready`, or `Halted` if a previous driver left it);
//! 3. ask the device to `HALT` (`ctrl::HOST_REQ`), so no packet is delivered while the
//!    rings are rebuilt;
//! 4. allocate receive and transmit frames (coherent DMA; the bus address is the
//!    guest-physical address the NIC's DMA space uses) and `Endpoint::init` the rings;
//! 5. ask for `START`: the firmware boots on the fresh rings and our configuration;
//! 6. MSI-X vector 0 (the NIC's host interrupt) with a threaded handler, then drain once
//!    (interrupts raised before the handler existed are lost);
//! 7. with `ping_peer=`, ping that node and check the pong.
//!
//! Remove (drop of [`Device`]): free the IRQ, let posted sends finish, `HALT` the NIC,
//! detach the frames from the rings, print the counters; then the frames, mappings,
//! regions and the device go. If the NIC does not confirm the halt, the frames are leaked
//! rather than freed under a NIC that may still write them.

#![forbid(unsafe_code)]

mod control;
mod member;
mod ping;
mod receive;
mod remove;
mod rpctest;
mod stack;

use crate::net::{self, KHost, NetRpc, Node};
use crate::nicmem::BarMem;
use crate::sys::dma::DmaBuf;
use crate::sys::irq::{IrqVectors, ThreadedIrq};
use crate::sys::pci::{self, BusMaster, Enabled, IoMem, PciDev, Regions};
use crate::sys::{self, param};
use crate::tpz::endpoint::{Endpoint, EndpointConfig};
use crate::tpz::gms::epochs::Lru;
use crate::tpz::iface::layout::{ctrl, ctrl_word, host_req, notify, Policy, NIC_MEM_BYTES, RECV_RING_ENTRIES};
use crate::tpz::iface::mem::NicMemory;
use control::{choose_node, device_request, wait_firmware};
use core::sync::atomic::{AtomicBool, AtomicI64, AtomicU32, AtomicU64, Ordering};
use kernel::sync::{Arc, CondVar, SpinLock};
use kernel::workqueue::{self, Work};
use kernel::{c_str, new_condvar, new_spinlock, new_work, prelude::*};
use stack::new_core;

const VENDOR_ID: u16 = 0x1af4;
const DEVICE_ID: u16 = 0x1110;
/// The PCI ids this driver binds: the ivshmem-doorbell device the virtual NIC serves.
pub(crate) static IDS: pci::IdTable<2> = pci::IdTable::new([pci::id(VENDOR_ID, DEVICE_ID), pci::id_terminator()]);

/// BAR0: ivshmem registers (IntrMask, IntrStatus, IVPosition, Doorbell).
const REGS_BAR: u32 = 0;
const REGS_BYTES: usize = 16;
const DOORBELL: usize = 0x0C;
/// Doorbell values `(peer 0 << 16) | vector`: vector 0 wakes the NIC processor, vector 1
/// asks the device to carry out `ctrl::HOST_REQ` (vnic `ivshmem::REQUEST_VECTOR`).
const NIC_DOORBELL: u32 = 0;
const REQUEST_DOORBELL: u32 = 1;
/// BAR2: NIC memory.
const NIC_BAR: u32 = 2;

/// One receive frame per receive slot, and the MTU: a payload always fits one frame.
const FRAME_BYTES: usize = net::FRAME_BYTES;
const TX_FRAMES: usize = 8;
const RX_FRAMES: usize = RECV_RING_ENTRIES as usize;
/// Frames beyond the receive slots and the GMS budget: replacements for detached receive
/// frames, solicited reply frames, pages being put.
const SPARE_FRAMES: usize = 96;

const POLL_MS: u32 = 10;
const READY_TIMEOUT_MS: u32 = 5_000;
/// A `START` waits for the firmware's ready word (the vNIC allows it 5 s).
const REQUEST_TIMEOUT_MS: u32 = 10_000;
const SENDS_TIMEOUT_MS: u32 = 1_000;
const PING_TRIES: u32 = 20;
/// The GMS ticker's period and the heartbeat period (ms).
const TICK_MS: u32 = 100;
const HEARTBEAT_MS: u64 = 1_000;
/// Bounds of `gms_fail_ms=` (how long a member that was heard from may stay silent before
/// it is declared failed; default 3000): at least two heartbeat periods, at most a minute
/// (readers of a dead member's pages wait that long before they fail).
pub(crate) const FAIL_MS_MIN: u64 = 2 * HEARTBEAT_MS;
pub(crate) const FAIL_MS_MAX: u64 = 60_000;
/// Node ids whose liveness is tracked (0..64).
const HEARD_NODES: usize = 64;
const PING_WAIT_MS: u32 = 1_000;

/// The PCI driver.
pub(crate) struct TrapezeDriver;

impl pci::Driver for TrapezeDriver {
    type Data = Device;
    fn probe(dev: &PciDev) -> Result<KBox<Device>> {
        Device::probe(dev)
    }
}

/// `gms_fail_ms=`, checked: out of `FAIL_MS_MIN ..= FAIL_MS_MAX` refuses the load.
pub(crate) fn gms_fail_ms() -> Result<u64> {
    let v = param::GMS_FAIL_MS.get();
    match u64::try_from(v) {
        Ok(ms @ FAIL_MS_MIN..=FAIL_MS_MAX) => Ok(ms),
        _ => {
            pr_err!("gms_fail_ms={} is out of range ({}..={} ms)\n", v, FAIL_MS_MIN, FAIL_MS_MAX);
            Err(EINVAL)
        }
    }
}

/// Devices bound (for the load message).
pub(crate) static BOUND: AtomicU32 = AtomicU32::new(0);

/// Everything held for one bound NIC. Fields drop in order, after [`Drop::drop`] has
/// quiesced the NIC.
pub(crate) struct Device {
    /// `/dev/gms0` on the GMS backend: goes first (its requests complete through the IRQ).
    disk: Option<crate::blk::GmsDisk>,
    irq: Option<ThreadedIrq<Shared>>,
    shared: Arc<Shared>,
    _master: BusMaster,
    _regions: Regions,
    _enabled: Enabled,
    pdev: PciDev,
}

/// What the IRQ handler, the work item and the process-context paths share.
#[pin_data]
pub(crate) struct Shared {
    /// Everything the receive path touches, under a spinlock: NetRPC continuations run
    /// with it held (in the IRQ thread), so they cannot sleep.
    #[pin]
    pub(crate) core: SpinLock<Core>,
    /// Runs NetRPC's deferred continuations (the system workqueue).
    #[pin]
    pub(crate) deferred_work: Work<Shared>,
    /// Notified when the receive path (or the ticker) took input: process-context waiters
    /// for call outcomes and GMS completions sleep on it with the core lock.
    #[pin]
    pub(crate) completed: CondVar,
    /// The GMS ticker (`system_long`): timeouts, heartbeats, failure detection.
    #[pin]
    pub(crate) tick_work: Work<Shared, 1>,
    /// When each node was last heard from (ns; 0: never), by node id (< `HEARD_NODES`).
    heard: [AtomicU64; HEARD_NODES],
    /// Members declared failed (bit per node id < 64).
    failed: AtomicU64,
    /// A member heard from and silent longer than this is declared failed (ms; `gms_fail_ms=`).
    fail_ms: u64,
    regs: IoMem,
    /// A second mapping of NIC memory for the control block (device requests and the
    /// firmware's state word wait with `msleep`, which the spinlock forbids).
    ctl: BarMem,
    node: u16,
    /// Set by remove: the work item does nothing more.
    closing: AtomicBool,
    /// Highest ping seq sent and not yet answered (0: none waited for).
    ping_want: AtomicU32,
    /// 0 pending, 1 verified, 2 wrong.
    ping_result: AtomicU32,
    ping_sent_ns: AtomicI64,
}

/// NetRPC and the GMS node, whose host owns the endpoint and every frame (under the
/// spinlock).
pub(crate) struct Core {
    pub(crate) rpc: KBox<NetRpc>,
    /// ~0.8 MiB with `net::HELD` = 8192: `kvmalloc`.
    pub(crate) node: KVBox<Node>,
    /// This node's part in the global LRU, which places `/dev/gms0`'s puts.
    pub(crate) lru: KBox<Lru>,
    /// The held pages' ages while a summary for the global LRU is made.
    pub(crate) ages: KVVec<u32>,
}

impl Device {
    fn probe(pdev: &PciDev) -> Result<KBox<Self>> {
        let (vendor, device) = pdev.ids();
        let bar_len = pdev.mem_bar_len(NIC_BAR);
        pr_info!("{}: NIC {:04x}:{:04x}, BAR2 {} KiB\n", pdev.name(), vendor, device, bar_len / 1024);
        let enabled = pdev.enable()?;
        let regions = pdev.request_regions(c_str!("trapeze"))?;
        if bar_len < u64::from(NIC_MEM_BYTES) {
            pr_err!("{}: BAR2 is {} bytes; NIC memory needs {}\n", pdev.name(), bar_len, NIC_MEM_BYTES);
            return Err(ENODEV);
        }
        let nic = BarMem::new(pdev.iomap(NIC_BAR, NIC_MEM_BYTES as usize)?, NIC_MEM_BYTES).ok_or(ENODEV)?;
        let ctl = BarMem::new(pdev.iomap(NIC_BAR, NIC_MEM_BYTES as usize)?, NIC_MEM_BYTES).ok_or(ENODEV)?;
        let regs = pdev.iomap(REGS_BAR, REGS_BYTES)?;
        let master = pdev.set_master();
        pdev.set_dma_mask(64)?;

        let state = wait_firmware(&nic, true)?;
        let v = nic.load_relaxed(ctrl_word(ctrl::FW_VERSION));
        pr_info!(
            "{}: firmware {}.{}.{} build {:08x}: {:?}, heartbeat {}\n",
            pdev.name(),
            v >> 16,
            (v >> 8) & 0xFF,
            v & 0xFF,
            nic.load_relaxed(ctrl_word(ctrl::FW_BUILD_ID)),
            state,
            nic.load_relaxed(ctrl_word(ctrl::FW_HEARTBEAT)),
        );
        let node = choose_node(&nic)?;
        let fail_ms = gms_fail_ms()?;

        device_request(&nic, &regs, host_req::HALT)?;
        let budget = usize::try_from(param::GMS_BUDGET_PAGES.get()).unwrap_or(0).min(net::HELD);
        let pool = alloc_frames(pdev, RX_FRAMES + SPARE_FRAMES + budget)?;
        let tx = alloc_frames(pdev, TX_FRAMES)?;
        let cfg = EndpointConfig {
            node_id: node,
            policy: Policy::Eager,
            send_pulse: 512,
            recv_pulse: 512,
            mtu: FRAME_BYTES as u32,
            notify: notify::IRQ_ON_RECV,
        };
        let seed = [sys::random_u64(), sys::random_u64()];
        let pool = net::Pool(pool);
        let ep = Endpoint::init(nic, &cfg, seed, |i| net::KPort::slot_segment(&pool, i));
        let core = new_core(node, budget, KHost::new(ep, pool.0, tx)?)?;
        let shared = Arc::pin_init(
            pin_init!(Shared {
                core <- new_spinlock!(core, "trapeze::core"),
                deferred_work <- new_work!("trapeze::deferred"),
                tick_work <- new_work!("trapeze::tick"),
                completed <- new_condvar!("trapeze::completed"),
                heard: [const { AtomicU64::new(0) }; HEARD_NODES],
                failed: AtomicU64::new(0),
                fail_ms,
                regs,
                ctl,
                node,
                closing: AtomicBool::new(false),
                ping_want: AtomicU32::new(0),
                ping_result: AtomicU32::new(0),
                ping_sent_ns: AtomicI64::new(0),
            }),
            GFP_KERNEL,
        )?;
        // From here on, dropping `dev` halts the NIC before the frames go.
        let mut dev = KBox::new(
            Device {
                disk: None,
                irq: None,
                shared,
                _master: master,
                _regions: regions,
                _enabled: enabled,
                pdev: pdev.clone(),
            },
            GFP_KERNEL,
        )?;
        dev.shared.start()?;
        let vectors = IrqVectors::msix(pdev, 1, 2)?;
        let nvec = vectors.count();
        let irq = ThreadedIrq::request(vectors, 0, c_str!("trapeze"), dev.shared.clone())?;
        let irq_no = irq.irq();
        dev.irq = Some(irq);
        let early = dev.shared.poll();
        let members = dev.shared.join_gms();
        if members > 1 {
            // The ticker runs until remove (`closing`), on the queue for long work items.
            let _ = workqueue::system_long().enqueue::<Arc<Shared>, 1>(dev.shared.clone());
        }
        BOUND.fetch_add(1, Ordering::Relaxed);
        pr_info!(
            "{}: node {} up: endpoint live, {} NetRPC/GMS frames + {} transmit frames of {} KiB, MSI-X {} vectors, IRQ {}{}\n",
            pdev.name(),
            node,
            RX_FRAMES + SPARE_FRAMES + budget,
            TX_FRAMES,
            FRAME_BYTES / 1024,
            nvec,
            irq_no,
            if early > 0 { " (drained messages that arrived before the IRQ)" } else { "" },
        );

        if let Ok(peer) = u16::try_from(param::PING_PEER.get()) {
            let bytes = param::PING_BYTES.get();
            match usize::try_from(bytes).ok().filter(|&b| (1..=FRAME_BYTES).contains(&b)) {
                Some(b) => {
                    if let Err(e) = dev.shared.ping(peer, b) {
                        pr_err!("ping to node {} FAILED ({:?})\n", peer, e);
                    }
                }
                None => pr_err!("ping_bytes={} is outside 1..={}: no ping\n", bytes, FRAME_BYTES),
            }
        }
        if let Ok(peer) = u16::try_from(param::ECHO_PEER.get()) {
            match dev.shared.echo_test(&dev.shared, peer) {
                Ok(()) => pr_info!("netrpc echo with node {}: PASSED\n", peer),
                Err(e) => pr_err!("netrpc echo with node {} FAILED ({:?})\n", peer, e),
            }
        }
        if let Ok(pages @ 1..) = u64::try_from(param::GMS_DISK_PAGES.get()) {
            match dev.shared.gms_disk(&dev.shared, pages) {
                Ok(disk) => dev.disk = Some(disk),
                Err(e) => pr_err!("/dev/gms0 on GMS: not created ({:?})\n", e),
            }
        }
        let inflight = param::UNLOAD_INFLIGHT.get();
        if inflight > 0 {
            dev.shared.leave_in_flight(inflight as usize);
        }
        let pages = param::GMS_TEST_PAGES.get();
        if pages > 0 {
            if members < 2 {
                pr_err!("gms_test_pages={} needs gms_nodes= with another member\n", pages);
            } else {
                match dev.shared.gms_test(pages as usize) {
                    Ok(()) => pr_info!("gms test: PASSED\n"),
                    Err(e) => pr_err!("gms test FAILED ({:?})\n", e),
                }
            }
        }
        Ok(dev)
    }
}

/// The NetRPC and GMS clock: monotonic ns.
pub(crate) fn now_ns() -> u64 {
    kernel::time::Ktime::ktime_get().to_ns().max(0) as u64
}

impl Shared {
    /// Ask the device to start the firmware on the endpoint just initialised; wait for
    /// its ready word and for it to have applied our configuration.
    fn start(&self) -> Result {
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
}

/// `n` coherent DMA frames (one `dma_alloc_attrs` of 8 KiB each: order-1 pages, no large
/// contiguous block); the vector itself from allocator `A` (`KVVec` for the pool of
/// thousands of frames).
fn alloc_frames<A: kernel::alloc::Allocator>(pdev: &PciDev, n: usize) -> Result<kernel::alloc::Vec<DmaBuf, A>> {
    let mut v = kernel::alloc::Vec::with_capacity(n, GFP_KERNEL)?;
    for _ in 0..n {
        v.push(DmaBuf::alloc_coherent(pdev, FRAME_BYTES)?, GFP_KERNEL)?;
    }
    Ok(v)
}
