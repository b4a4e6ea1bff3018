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
mod ping;
mod rpctest;

use crate::net::{self, KHost, NetRpc, Node};
use crate::nicmem::BarMem;
use crate::proto::{Kind, Msg};
use crate::stats::{SliceWriter, STATS};
use crate::sys::dma::DmaBuf;
use crate::sys::irq::{IrqReturn, IrqVectors, ThreadedHandler, ThreadedIrq};
use crate::sys::pci::{self, BusMaster, Enabled, IoMem, PciDev, Regions};
use crate::sys::{self, param};
use crate::tpz::endpoint::{Endpoint, EndpointConfig, RecvMsg, SendMsg};
use crate::tpz::gms::heartbeat;
use crate::tpz::gms::prelude::{GmsConfig, GmsNode, Host};
use crate::tpz::iface::entry::Segment;
use crate::tpz::iface::ipt::PayloadToken;
use crate::tpz::iface::layout::{
    ctrl, ctrl_word, host_req, notify, Counter, FwState, Policy, NIC_MEM_BYTES, RECV_RING_ENTRIES,
};
use crate::tpz::iface::mem::NicMemory;
use crate::tpz::netrpc::prelude::Mode;
use crate::tpz::netrpc::rpc::{Config as RpcConfig, Rpc};
use control::{choose_node, detach_frames, device_request, wait_firmware};
use core::fmt::Write;
use core::sync::atomic::{AtomicBool, AtomicI64, AtomicU32, AtomicU64, Ordering};
use kernel::sync::{Arc, ArcBorrow, CondVar, SpinLock};
use kernel::workqueue::{self, Work, WorkItem};
use kernel::{c_str, new_condvar, new_spinlock, new_work, prelude::*};

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
        let ep = Endpoint::init(nic, &cfg, seed, |i| {
            pool.get(i as usize).map(|f| Segment { addr: f.dma_addr(), len: f.len() as u32 })
        });
        let core = new_core(node, budget, KHost::new(ep, pool, RX_FRAMES, tx)?)?;
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

impl Drop for Device {
    fn drop(&mut self) {
        let name = self.pdev.name();
        let s = &self.shared;
        s.closing.store(true, Ordering::Release);
        if let Some(disk) = self.disk.take() {
            // New disk I/O fails from now on; fail what is queued or in flight, then
            // del_gendisk finds no request left.
            if let Some(d) = s.core.lock().node.host.disk.as_ref() {
                let k = &d.counters;
                pr_info!(
                    "{}: /dev/gms0 on GMS: {} reads of unwritten pages (zeros), {} reads over the network, {} from the read-ahead cache ({} prefetches), {} writes stored, {} errors\n",
                    name, k.reads_zero, k.reads_ok, k.reads_cache, k.prefetches, k.writes_ok, k.errors
                );
            }
            let failed = s.core.lock().node.host.disk.as_mut().map_or(0, |d| d.fail_all());
            s.complete_disk();
            if failed > 0 {
                pr_info!("{}: failed {} /dev/gms0 pages still queued or in flight\n", name, failed);
            }
            drop(disk);
        }
        // No handler runs after this returns, so nothing queues the work item again.
        drop(self.irq.take());
        sys::work::flush(&s.deferred_work);
        sys::work::flush(&s.tick_work);
        {
            let core = s.core.lock();
            let (calls, ops) = (core.rpc.calls_in_use(), core.node.ops_in_use());
            if calls + ops > 0 {
                pr_info!(
                    "{}: unloading with {} NetRPC calls and {} GMS operations in flight: they fail\n",
                    name,
                    calls,
                    ops
                );
            }
        }
        let unsent = s.finish_sends();
        if unsent > 0 {
            pr_warn!("{}: {} sends still in flight after {} ms\n", name, unsent, SENDS_TIMEOUT_MS);
        }
        let halted = device_request(&s.ctl, &s.regs, host_req::HALT).is_ok()
            && FwState::from_u32(s.ctl.load(ctrl_word(ctrl::FW_STATE), Ordering::Acquire)) == Some(FwState::Halted);
        s.fail_in_flight(name);
        s.log_counters();
        let mut core = s.core.lock();
        let host = &mut core.node.host;
        if let Some(mem) = host.ep.mem() {
            detach_frames(mem);
        }
        if halted {
            pr_info!(
                "{}: node {} removed: NIC halted, frames freed ({} held by GMS or in use)\n",
                name,
                s.node,
                host.frames_out()
            );
        } else {
            // Leaking is safe; freeing memory the NIC may still write is not.
            let pool = core::mem::replace(&mut host.pool, KVVec::new());
            let tx = core::mem::take(&mut host.tx);
            pr_err!("{}: the NIC did not confirm HALT: leaking {} DMA frames\n", name, pool.len() + tx.len());
            core::mem::forget(pool);
            core::mem::forget(tx);
        }
        BOUND.fetch_sub(1, Ordering::Relaxed);
    }
}

impl ThreadedHandler for Shared {
    fn handle_irq(this: ArcBorrow<'_, Self>) -> IrqReturn {
        STATS.irqs.inc();
        if this.poll() == 0 {
            STATS.irqs_empty.inc();
        }
        if this.core.lock().rpc.has_deferred() {
            this.queue_deferred(this.into());
        }
        IrqReturn::Handled
    }
}

impl WorkItem for Shared {
    type Pointer = Arc<Shared>;
    /// NetRPC's deferred continuations, in process context (a kworker), with the core
    /// spinlock held like on the receive path.
    fn run(this: Arc<Shared>) {
        if this.closing.load(Ordering::Acquire) {
            return;
        }
        STATS.deferred_work.inc();
        let sent = {
            let mut core = this.core.lock();
            let c = &mut *core;
            c.node.host.in_work = true;
            c.rpc.run_deferred(&mut c.node);
            c.node.host.in_work = false;
            c.node.drive(now_ns(), &mut c.rpc);
            c.flush()
        };
        if sent {
            this.ring_nic();
        }
        this.complete_disk();
    }
}

impl WorkItem<1> for Shared {
    type Pointer = Arc<Shared>;
    /// The GMS ticker: every `TICK_MS` until remove, NetRPC and GMS timeouts and
    /// background work (they run on the receive path too, but a silent member sends
    /// nothing), heartbeats to the members, and failure detection.
    fn run(this: Arc<Shared>) {
        let mut last_beat = 0u64;
        // This run's incarnation in the GMS heartbeats (never 0).
        let incarnation = sys::random_u64() | 1;
        while !this.closing.load(Ordering::Acquire) {
            sys::msleep(TICK_MS);
            let now = now_ns();
            let beat = now.saturating_sub(last_beat) >= HEARTBEAT_MS * 1_000_000;
            if beat {
                last_beat = now;
            }
            this.tick(now, beat.then_some(incarnation));
        }
    }
}

/// The NetRPC and GMS clock: monotonic ns.
pub(crate) fn now_ns() -> u64 {
    kernel::time::Ktime::ktime_get().to_ns().max(0) as u64
}

/// NetRPC's timeouts in the kernel (ns): a blocking call 1 s, a nonblocking one 2 s.
const RPC_CONFIG: RpcConfig = RpcConfig { call_timeout: 1_000_000_000, nonblocking_timeout: Some(2_000_000_000) };
/// GMS's timeouts in the kernel (ns; TCG guests answer in ~0.1–1 ms, p99 up to ~10 ms).
const GMS_CONFIG: GmsConfig = GmsConfig {
    op_timeout: 500_000_000,
    task_timeout: 200_000_000,
    retry_delay: 50_000_000,
    max_attempts: 0,
    tombstone_ttl: 10_000_000_000,
    budget: 0,
    scrub_interval: 1_000_000_000,
};
/// Ready-made values in the module image, copied to the heap at probe ([`sys::boxed`]).
static RPC_TEMPLATE: sys::boxed::Template<NetRpc> = sys::boxed::Template::new(Rpc::new(0, RPC_CONFIG));
static NODE_TEMPLATE: sys::boxed::Template<Node> =
    sys::boxed::Template::new(GmsNode::new(0, GMS_CONFIG, KHost::empty()));

/// NetRPC and the GMS node on the heap, never on the 16 KiB kernel stack.
fn new_core(node: u16, budget: usize, host: KHost) -> Result<Core> {
    let mut rpc = RPC_TEMPLATE.copy()?;
    rpc.set_node(node, RPC_CONFIG);
    let mut gms = NODE_TEMPLATE.copy_kv()?;
    gms.set_identity(node, GmsConfig { budget, ..GMS_CONFIG });
    gms.host = host;
    Ok(Core { rpc, node: gms })
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

    fn queue_deferred(&self, this: Arc<Shared>) {
        if !self.closing.load(Ordering::Acquire) {
            // Already queued: that run will see this continuation too.
            let _ = workqueue::system().enqueue::<Arc<Shared>, 0>(this);
        }
    }

    /// Take every message the NIC has delivered (ping/pong here, everything else to
    /// NetRPC, whose continuations run now), then timeouts and GMS's background work, and
    /// send what NetRPC queued; returns how many messages.
    fn poll(&self) -> usize {
        let mut core = self.core.lock();
        let c = &mut *core;
        let now = now_ns();
        c.node.host.reap();
        let mut n = 0;
        let mut sent = false;
        while let Some(m) = c.node.host.ep.poll_recv() {
            n += 1;
            STATS.rx_msgs.inc();
            if Msg::parse(m.ctrl()).is_some() {
                sent |= self.handle_msg(c, &m);
                c.node.host.ep.release_recv(None);
            } else {
                STATS.rpc_in.inc();
                if let Some(h) = self.heard.get(usize::from(m.src)) {
                    h.store(now.max(1), Ordering::Relaxed);
                }
                let payload = c.node.host.receive(&m);
                c.rpc.handle_message(now, &mut c.node, m.src, m.ctrl(), payload);
                c.node.drive(now, &mut c.rpc);
            }
        }
        c.rpc.handle_timeouts(now, &mut c.node);
        c.node.drive(now, &mut c.rpc);
        Self::issue_disk(c, now);
        Self::issue_prefetches(c, now);
        sent |= c.flush();
        drop(core);
        if sent {
            self.ring_nic();
        }
        if n > 0 {
            self.completed.notify_all();
        }
        self.complete_disk();
        n
    }

    /// `/dev/gms0` with `pages` pages on the GMS backend, putting to the other members.
    fn gms_disk(&self, this: &Arc<Shared>, pages: u64) -> Result<crate::blk::GmsDisk> {
        let mut targets = [0u16; net::MEMBERS];
        let n = {
            let mut core = self.core.lock();
            let mut n = 0;
            for &m in core.node.members().ids().iter().filter(|&&m| m != self.node) {
                targets[n] = m;
                n += 1;
            }
            if n == 0 {
                pr_err!("gms_disk_pages= needs gms_nodes= with another member\n");
                return Err(EINVAL);
            }
            drop(core);
            let depth = u32::try_from(param::GMS_DISK_READAHEAD.get()).unwrap_or(0);
            let state = crate::gms_backend::DiskState::new(pages, &targets[..n], depth)?;
            core = self.core.lock();
            core.node.host.disk = Some(state);
            n
        };
        let backend: Arc<dyn crate::blk::PageBackend> =
            Arc::new(crate::gms_backend::GmsBackend { shared: this.clone() }, GFP_KERNEL)?;
        let disk = crate::blk::GmsDisk::new(pages, backend);
        if disk.is_err() {
            self.core.lock().node.host.disk = None;
        }
        pr_info!("/dev/gms0: {} pages on GMS, written through to {} other member(s)\n", pages, n);
        disk
    }

    /// Fail every NetRPC call and GMS operation still in flight (remove, NIC halted): their
    /// deadlines are moved to now, so continuations and GMS completions run with an error
    /// (a waiter would be woken); what they queue is not sent.
    fn fail_in_flight(&self, name: &CStr) {
        let mut core = self.core.lock();
        let c = &mut *core;
        let before = (c.rpc.calls_in_use(), c.node.ops_in_use());
        for _ in 0..3 {
            c.rpc.run_deferred(&mut c.node);
            c.rpc.handle_timeouts(u64::MAX, &mut c.node);
            c.node.drive(u64::MAX, &mut c.rpc);
            while c.rpc.poll_transmit().is_some() {}
            while c.rpc.poll_event().is_some() {}
        }
        // GMS's background work may have issued calls in the last round: fail those too.
        c.rpc.handle_timeouts(u64::MAX, &mut c.node);
        c.rpc.run_deferred(&mut c.node);
        while c.rpc.poll_transmit().is_some() {}
        while c.rpc.poll_event().is_some() {}
        let after = (c.rpc.calls_in_use(), c.node.ops_in_use());
        if before != (0, 0) {
            pr_info!(
                "{}: {} NetRPC calls and {} GMS operations were in flight at unload: failed ({} calls, {} operations left)\n",
                name,
                before.0,
                before.1,
                after.0,
                after.1
            );
        }
    }

    /// Leave `n` nonblocking echo calls in flight to a node that does not answer.
    fn leave_in_flight(&self, n: usize) {
        const SILENT_NODE: u16 = 0x3ff;
        let sent = {
            let mut core = self.core.lock();
            let c = &mut *core;
            let mut issued = 0;
            for i in 0..n {
                let Some(reply_to) = c.node.host.solicit() else { break };
                let body = net::Echo::body(i as u32, 0);
                match c.rpc.call::<net::Echo>(now_ns(), &mut c.node, SILENT_NODE, &body, reply_to, Mode::NonBlocking) {
                    Ok(id) => {
                        let _ = c.rpc.push_continuation(id, net::inflight_continuation, 0);
                        issued += 1;
                    }
                    Err(_) => {
                        if let Some(f) = reply_to.caller_frame() {
                            c.node.host.release(*f);
                        }
                        break;
                    }
                }
            }
            // And getpages: those whose directory node is a silent member stay in flight.
            let mut gets = 0;
            for i in 0..n {
                let Some(reply_to) = c.node.host.solicit() else { break };
                let page = crate::tpz::gms::prelude::PageId::new(0xdead, i as u64);
                if c.node.getpage(now_ns(), &mut c.rpc, page, reply_to, Mode::NonBlocking).is_err() {
                    if let Some(f) = reply_to.caller_frame() {
                        c.node.host.release(*f);
                    }
                    break;
                }
                gets += 1;
            }
            pr_info!("left {} echo calls to silent node {} and {} getpages in flight\n", issued, SILENT_NODE, gets);
            c.flush()
        };
        if sent {
            self.ring_nic();
        }
    }

    /// One tick of the GMS ticker (see `WorkItem<1>`).
    /// `beat`: send the members a heartbeat with this incarnation.
    fn tick(&self, now: u64, beat: Option<u64>) {
        let sent = {
            let mut core = self.core.lock();
            let c = &mut *core;
            c.rpc.handle_timeouts(now, &mut c.node);
            c.node.drive(now, &mut c.rpc);
            let mut members = [0u16; net::MEMBERS];
            let n = c.node.members().ids().len().min(net::MEMBERS);
            members[..n].copy_from_slice(&c.node.members().ids()[..n]);
            for &m in members[..n].iter().filter(|&&m| m != self.node) {
                let heard = self.heard.get(usize::from(m)).map_or(0, |h| h.load(Ordering::Relaxed));
                // Only a member that was heard from can fail: the others may not be up yet.
                if heard != 0 && now.saturating_sub(heard) > self.fail_ms * 1_000_000 {
                    let bit = 1u64 << (m % 64);
                    if self.failed.fetch_or(bit, Ordering::Relaxed) & bit == 0 {
                        STATS.gms_node_failed.inc();
                        pr_warn!("gms: node {} silent for more than {} ms: declared failed\n", m, self.fail_ms);
                        c.node.node_failed(now, &mut c.rpc, m);
                        // The survivors' view number, as every node (gmsd too) computes it.
                        let mut left = [0u16; net::MEMBERS];
                        let k = c.node.members().len().min(net::MEMBERS);
                        left[..k].copy_from_slice(&c.node.members().ids()[..k]);
                        let _ = c.node.set_members(now, &mut c.rpc, heartbeat::view_of(&left[..k]), &left[..k]);
                        if let Some(d) = c.node.host.disk.as_mut() {
                            d.drop_target(m);
                        }
                    }
                } else if let Some(incarnation) = beat {
                    // The GMS heartbeat (one-way; the same message a host `gmsd` sends and
                    // expects): any message from a member refreshes `heard`.
                    let hb = heartbeat::Heartbeat {
                        node: self.node,
                        incarnation,
                        held: c.node.held_count() as u32,
                        budget: c.node.budget() as u32,
                    };
                    let _ = c.rpc.send_oneway(m, heartbeat::OP_HEARTBEAT, &hb.to_bytes(), None);
                }
            }
            Self::issue_disk(c, now);
            Self::issue_prefetches(c, now);
            c.flush()
        };
        if sent {
            self.ring_nic();
        }
        self.completed.notify_all();
        self.complete_disk();
    }

    /// Join the GMS members of `gms_nodes=` (if given); how many members.
    fn join_gms(&self) -> usize {
        let Some(list) = param::GMS_NODES.get() else {
            return 0;
        };
        let mut ids = [0u16; net::MEMBERS];
        let Some(n) = net::parse_members(list, &mut ids) else {
            pr_err!("gms_nodes={:?}: expected up to {} node ids separated by commas\n", list, net::MEMBERS);
            return 0;
        };
        if !ids[..n].contains(&self.node) {
            pr_err!("gms_nodes={:?} does not list this node ({}): no GMS node\n", list, self.node);
            return 0;
        }
        let sent = {
            let mut core = self.core.lock();
            let c = &mut *core;
            // The view number every node computes from the member set (gmsd too).
            if let Err(e) = c.node.set_members(now_ns(), &mut c.rpc, heartbeat::view_of(&ids[..n]), &ids[..n]) {
                pr_err!("gms: set_members: {:?}\n", e);
                return 0;
            }
            c.flush()
        };
        if sent {
            self.ring_nic();
        }
        pr_info!(
            "gms: node {} joined members {:?} with a budget of {} pages\n",
            self.node,
            &ids[..n],
            self.core.lock().node.budget()
        );
        n
    }

    /// Handle one ping or pong; whether a reply was posted.
    fn handle_msg(&self, core: &mut Core, m: &RecvMsg) -> bool {
        if m.payload_refused() {
            STATS.rx_refused.inc();
        }
        let host = &core.node.host;
        let frame = usize::from(host.slot_frame[m.slot as usize % RX_FRAMES]);
        let payload_ok = !m.payload_refused() && !m.via_ipt() && m.payload_len as usize <= FRAME_BYTES;
        match Msg::parse(m.ctrl()) {
            Some(msg) if msg.kind == Kind::Ping => self.answer_ping(core, m, &msg, frame, payload_ok),
            Some(msg) => {
                self.check_pong(core, m, &msg, frame, payload_ok);
                false
            }
            None => {
                STATS.rx_unknown.inc();
                pr_info!(
                    "message from node {}: {} control bytes, {} payload bytes (not ours)\n",
                    m.src,
                    m.ctrl_len,
                    m.payload_len
                );
                false
            }
        }
    }

    /// Reap completed sends until none is in flight or the time is up; returns how many
    /// are still in flight.
    fn finish_sends(&self) -> usize {
        let mut waited = 0;
        loop {
            let mut core = self.core.lock();
            core.node.host.reap();
            let left = core.node.host.ep.sends_in_flight();
            drop(core);
            if left == 0 || waited >= SENDS_TIMEOUT_MS {
                return left;
            }
            self.ring_nic();
            sys::msleep(POLL_MS);
            waited += POLL_MS;
        }
    }

    fn log_counters(&self) {
        let mut buf = [0u8; 768];
        let mut w = SliceWriter::new(&mut buf);
        {
            let core = self.core.lock();
            for c in Counter::ALL {
                let v = core.node.host.ep.counter(c);
                if v != 0 {
                    let _ = write!(w, " {}={}", c.name(), v);
                }
            }
        }
        pr_info!("node {} firmware counters:{}\n", self.node, w.as_str());
        let mut buf = [0u8; 768];
        let mut w = SliceWriter::new(&mut buf);
        STATS.each(|name, v| {
            if v != 0 {
                let _ = write!(w, " {}={}", name, v);
            }
        });
        pr_info!("node {} driver counters:{}\n", self.node, w.as_str());
        let core = self.core.lock();
        let (r, g) = (core.rpc.stats(), core.node.stats());
        pr_info!(
            "node {} netrpc: calls={} served={} replies={} timeouts={} deferred={}; gms: puts={} stored={} gets={} hits_2way={} hits_3way={} misses={} pages_stored={} refused={} held={}\n",
            self.node, r.calls, r.requests_served, r.replies, r.timeouts, r.deferred, g.puts, g.puts_stored, g.gets,
            g.hits_2way, g.hits_3way, g.misses, g.pages_stored, g.puts_refused, core.node.held_count()
        );
    }
}

impl Core {
    /// Hand NetRPC's queued transmits to the NIC; whether any was posted. Frames dropped
    /// before this wait for these sends.
    pub(crate) fn flush(&mut self) -> bool {
        let mut sent = false;
        while let Some(t) = self.rpc.poll_transmit() {
            sent |= self.node.host.post(&t);
        }
        self.node.host.tag_limbo();
        self.node.host.reap();
        // Blocking calls are polled with `take_outcome`: the events only say which.
        while self.rpc.poll_event().is_some() {}
        sent
    }

    fn take_tx_frame(&mut self) -> Option<usize> {
        let h = &mut self.node.host;
        let t = (0..h.tx.len().min(32)).find(|&t| h.tx_busy & (1 << t) == 0)?;
        h.tx_busy |= 1 << t;
        Some(t)
    }

    /// Post `ctrl` + `len` bytes of `tx[t]` to `peer`; on failure `tx[t]` is free again.
    fn send(&mut self, peer: u16, ctrl: &[u8], len: usize, t: usize) -> Result {
        let h = &mut self.node.host;
        let seg = [Segment { addr: h.tx[t].dma_addr(), len: len as u32 }];
        let msg = SendMsg {
            peer,
            ctrl,
            payload_len: len as u32,
            segments: if len > 0 { &seg } else { &[] },
            token: PayloadToken::NONE,
        };
        match h.ep.post_send(&msg, t) {
            Ok(()) => {
                h.posted += 1;
                STATS.tx_msgs.inc();
                Ok(())
            }
            Err(e) => {
                h.tx_busy &= !(1 << t);
                STATS.tx_ring_full.inc();
                pr_warn!("send to node {} not posted: {:?}\n", peer, e);
                Err(EBUSY)
            }
        }
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
