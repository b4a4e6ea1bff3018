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

use crate::nicmem::BarMem;
use crate::proto::{Kind, Msg};
use crate::stats::{SliceWriter, STATS};
use crate::sys::dma::DmaBuf;
use crate::sys::irq::{IrqReturn, IrqVectors, ThreadedHandler, ThreadedIrq};
use crate::sys::pci::{self, BusMaster, Enabled, IoMem, PciDev, Regions};
use crate::sys::{self, param};
use crate::tpz::endpoint::{Endpoint, EndpointConfig, RecvMsg, SendMsg};
use crate::tpz::iface::entry::{Segment, TxStatus};
use crate::tpz::iface::ipt::PayloadToken;
use crate::tpz::iface::layout::{ctrl, ctrl_word, host_req, notify, Counter, FwState, Policy, NIC_MEM_BYTES, RECV_RING_ENTRIES};
use crate::tpz::iface::mem::NicMemory;
use control::{choose_node, detach_frames, device_request, wait_firmware};
use core::fmt::Write;
use core::sync::atomic::{AtomicI64, AtomicU32, Ordering};
use kernel::{c_str, new_mutex, prelude::*, sync::Arc, sync::Mutex};

const VENDOR_ID: u16 = 0x1af4;
const DEVICE_ID: u16 = 0x1110;
/// The PCI ids this driver binds: the ivshmem-doorbell device the virtual NIC serves.
pub(crate) static IDS: pci::IdTable<2> =
    pci::IdTable::new([pci::id(VENDOR_ID, DEVICE_ID), pci::id_terminator()]);

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
const FRAME_BYTES: usize = 8192;
const TX_FRAMES: usize = 8;
const RX_FRAMES: usize = RECV_RING_ENTRIES as usize;

const POLL_MS: u32 = 10;
const READY_TIMEOUT_MS: u32 = 5_000;
/// A `START` waits for the firmware's ready word (the vNIC allows it 5 s).
const REQUEST_TIMEOUT_MS: u32 = 10_000;
const SENDS_TIMEOUT_MS: u32 = 1_000;
const PING_TRIES: u32 = 20;
const PING_WAIT_MS: u32 = 1_000;

/// The PCI driver.
pub(crate) struct TrapezeDriver;

impl pci::Driver for TrapezeDriver {
    type Data = Device;
    fn probe(dev: &PciDev) -> Result<KBox<Device>> {
        Device::probe(dev)
    }
}

/// Devices bound (for the load message).
pub(crate) static BOUND: AtomicU32 = AtomicU32::new(0);

/// Everything held for one bound NIC. Fields drop in order, after [`Drop::drop`] has
/// quiesced the NIC.
pub(crate) struct Device {
    irq: Option<ThreadedIrq<Shared>>,
    shared: Arc<Shared>,
    _master: BusMaster,
    _regions: Regions,
    _enabled: Enabled,
    pdev: PciDev,
}

/// What the IRQ handler and the process-context paths share.
#[pin_data]
pub(crate) struct Shared {
    #[pin]
    core: Mutex<Core>,
    regs: IoMem,
    node: u16,
    /// Highest ping seq sent and not yet answered (0: none waited for).
    ping_want: AtomicU32,
    /// 0 pending, 1 verified, 2 wrong.
    ping_result: AtomicU32,
    ping_sent_ns: AtomicI64,
}

/// The endpoint and the frames it hands to the NIC (under the mutex).
struct Core {
    ep: Endpoint<BarMem, usize>,
    /// `rx[i]` is attached to receive slot `i` for good.
    rx: KVec<DmaBuf>,
    tx: KVec<DmaBuf>,
    /// Transmit frames owned by the NIC (bit `i`: `tx[i]` posted, not yet reaped).
    tx_busy: u32,
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

        device_request(&nic, &regs, host_req::HALT)?;
        let rx = alloc_frames(pdev, RX_FRAMES)?;
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
            rx.get(i as usize).map(|f| Segment { addr: f.dma_addr(), len: f.len() as u32 })
        });
        let core = Core { ep, rx, tx, tx_busy: 0 };
        let shared = Arc::pin_init(
            pin_init!(Shared {
                core <- new_mutex!(core, "trapeze::core"),
                regs,
                node,
                ping_want: AtomicU32::new(0),
                ping_result: AtomicU32::new(0),
                ping_sent_ns: AtomicI64::new(0),
            }),
            GFP_KERNEL,
        )?;
        // From here on, dropping `dev` halts the NIC before the frames go.
        let mut dev = KBox::new(
            Device { irq: None, shared, _master: master, _regions: regions, _enabled: enabled, pdev: pdev.clone() },
            GFP_KERNEL,
        )?;
        dev.shared.start()?;
        let vectors = IrqVectors::msix(pdev, 1, 2)?;
        let nvec = vectors.count();
        let irq = ThreadedIrq::request(vectors, 0, c_str!("trapeze"), dev.shared.clone())?;
        let irq_no = irq.irq();
        dev.irq = Some(irq);
        let early = dev.shared.poll();
        BOUND.fetch_add(1, Ordering::Relaxed);
        pr_info!(
            "{}: node {} up: endpoint live, {} receive frames + {} transmit frames of {} KiB, MSI-X {} vectors, IRQ {}{}\n",
            pdev.name(),
            node,
            RX_FRAMES,
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
        Ok(dev)
    }
}

impl Drop for Device {
    fn drop(&mut self) {
        let name = self.pdev.name();
        // No handler runs after this returns.
        drop(self.irq.take());
        let s = &self.shared;
        let unsent = s.finish_sends();
        if unsent > 0 {
            pr_warn!("{}: {} sends still in flight after {} ms\n", name, unsent, SENDS_TIMEOUT_MS);
        }
        let halted = {
            let core = s.core.lock();
            device_request(core.ep.mem(), &s.regs, host_req::HALT).is_ok()
                && core.ep.fw_state() == Some(FwState::Halted)
        };
        s.log_counters();
        let mut core = s.core.lock();
        detach_frames(core.ep.mem());
        if halted {
            pr_info!("{}: node {} removed: NIC halted, frames freed\n", name, s.node);
        } else {
            // Leaking is safe; freeing memory the NIC may still write is not.
            let rx = core::mem::take(&mut core.rx);
            let tx = core::mem::take(&mut core.tx);
            pr_err!("{}: the NIC did not confirm HALT: leaking {} DMA frames\n", name, rx.len() + tx.len());
            core::mem::forget(rx);
            core::mem::forget(tx);
        }
        BOUND.fetch_sub(1, Ordering::Relaxed);
    }
}

impl ThreadedHandler for Shared {
    fn handle_irq(&self) -> IrqReturn {
        STATS.irqs.inc();
        if self.poll() == 0 {
            STATS.irqs_empty.inc();
        }
        IrqReturn::Handled
    }
}

impl Shared {
    /// Ask the device to start the firmware on the endpoint just initialised; wait for
    /// its ready word and for it to have applied our configuration.
    fn start(&self) -> Result {
        let core = self.core.lock();
        device_request(core.ep.mem(), &self.regs, host_req::START)?;
        wait_firmware(core.ep.mem(), false)?;
        if !core.ep.config_applied() {
            pr_err!("the firmware is ready but reports another configuration\n");
            return Err(EIO);
        }
        Ok(())
    }

    fn ring_nic(&self) {
        self.regs.write32(DOORBELL, NIC_DOORBELL);
    }

    /// Take every message the NIC has delivered; returns how many.
    fn poll(&self) -> usize {
        let mut core = self.core.lock();
        core.reap();
        let mut n = 0;
        let mut sent = false;
        while let Some(m) = core.ep.poll_recv() {
            n += 1;
            STATS.rx_msgs.inc();
            sent |= self.handle_msg(&mut core, &m);
            core.ep.release_recv(None);
        }
        drop(core);
        if sent {
            self.ring_nic();
        }
        n
    }

    /// Handle one message; whether a reply was posted.
    fn handle_msg(&self, core: &mut Core, m: &RecvMsg) -> bool {
        if m.payload_refused() {
            STATS.rx_refused.inc();
        }
        let frame = m.slot as usize % RX_FRAMES;
        let payload_ok = !m.payload_refused() && !m.via_ipt() && m.payload_len as usize <= FRAME_BYTES;
        match Msg::parse(m.ctrl()) {
            Some(msg) if msg.kind == Kind::Ping => self.answer_ping(core, m, &msg, frame, payload_ok),
            Some(msg) => {
                self.check_pong(core, m, &msg, frame, payload_ok);
                false
            }
            None => {
                STATS.rx_unknown.inc();
                pr_info!("message from node {}: {} control bytes, {} payload bytes (not ours)\n", m.src, m.ctrl_len, m.payload_len);
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
            core.reap();
            let left = core.ep.sends_in_flight();
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
                let v = core.ep.counter(c);
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
    }
}

impl Core {
    /// Free the transmit frames of completed sends.
    fn reap(&mut self) {
        let Core { ep, tx_busy, .. } = self;
        ep.reap_sends(|t, status| {
            *tx_busy &= !(1u32 << t);
            if status != TxStatus::Sent {
                STATS.tx_errors.inc();
            }
        });
    }

    fn take_tx_frame(&mut self) -> Option<usize> {
        let t = (0..self.tx.len().min(32)).find(|&t| self.tx_busy & (1 << t) == 0)?;
        self.tx_busy |= 1 << t;
        Some(t)
    }

    /// Post `ctrl` + `len` bytes of `tx[t]` to `peer`; on failure `tx[t]` is free again.
    fn send(&mut self, peer: u16, ctrl: &[u8], len: usize, t: usize) -> Result {
        let seg = [Segment { addr: self.tx[t].dma_addr(), len: len as u32 }];
        let msg = SendMsg {
            peer,
            ctrl,
            payload_len: len as u32,
            segments: if len > 0 { &seg } else { &[] },
            token: PayloadToken::NONE,
        };
        match self.ep.post_send(&msg, t) {
            Ok(()) => {
                STATS.tx_msgs.inc();
                Ok(())
            }
            Err(e) => {
                self.tx_busy &= !(1 << t);
                STATS.tx_ring_full.inc();
                pr_warn!("send to node {} not posted: {:?}\n", peer, e);
                Err(EBUSY)
            }
        }
    }
}

fn alloc_frames(pdev: &PciDev, n: usize) -> Result<KVec<DmaBuf>> {
    let mut v = KVec::with_capacity(n, GFP_KERNEL)?;
    for _ in 0..n {
        v.push(DmaBuf::alloc_coherent(pdev, FRAME_BYTES)?, GFP_KERNEL)?;
    }
    Ok(v)
}

