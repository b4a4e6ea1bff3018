// SPDX-License-Identifier: GPL-2.0-only
//! The firmware proper: a resource-centred main loop over the three DMA engines.
//!
//! Each [`Firmware::poll`] asks, as the Trapeze MCP did, "which engine is idle and what
//! can it move now?": it takes new send-ring entries into send staging, feeds the host
//! bus (payload reads for sends, payload writes for receives, alternating), feeds link
//! out from send staging, watches link in, validates tokens as soon as a header has
//! arrived, and delivers completed packets to the receive ring. Sinks are fed by the
//! pulse rule in [`pulse`], reading the sources' progress counters, so one packet is
//! pipelined through sender bus, link and receiver bus without being fragmented.
//!
//! All state is fixed-size ([`TX_QUEUE`], [`RX_QUEUE`] packets); nothing is allocated.

pub mod pulse;
mod rx;
pub mod staging;
mod tx;

use crate::hal::{Engines, HostDir};
use crate::iface::layout::{ctrl, ctrl_word, notify, Counter, FwState};
use crate::iface::mem::NicMemory;
use core::sync::atomic::{fence, Ordering};

pub use rx::RxQueueStats;

/// Packets in flight on the send side (accepted from the ring, not yet sent).
pub const TX_QUEUE: usize = 16;
/// Packets in flight on the receive side (posted or draining to the host).
pub const RX_QUEUE: usize = 16;

/// Version published in `ctrl::FW_VERSION`: major << 16 | minor << 8 (0.1).
#[allow(clippy::identity_op)] // a zero major field, spelled out
pub const FW_VERSION: u32 = (0 << 16) | (1 << 8);

/// Run-time configuration, read from the control block (defined in `iface`).
pub use crate::iface::layout::{EndpointConfig as Config, DEFAULT_MTU, DEFAULT_PULSE};

/// What the host-bus engine is doing.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Bus {
    Idle,
    /// Reading a send payload from host memory into packet `id`'s staging.
    TxSource {
        id: u32,
        len: u32,
    },
    /// Writing received payload of packet `id` into host memory.
    RxSink {
        id: u32,
        len: u32,
    },
}

/// The NIC control program. Generic over how NIC memory is reached (`M`); the engines
/// are passed to [`Firmware::poll`].
pub struct Firmware<M: NicMemory> {
    mem: M,
    cfg: Config,
    config_seq: u32,
    counters: [u64; Counter::COUNT],
    bus: Bus,
    bus_prefer_rx: bool,
    heartbeat: u32,
    tx: tx::TxSide,
    rx: rx::RxSide,
}

impl<M: NicMemory> Firmware<M> {
    /// Boot: publish version and zeroed counters, load config, announce `Ready`.
    pub fn new(mem: M, build_id: u32) -> Self {
        mem.store(ctrl_word(ctrl::FW_STATE), FwState::Booting as u32, Ordering::Release);
        let config_seq = mem.load(ctrl_word(ctrl::CONFIG_SEQ), Ordering::Acquire);
        let cfg = Config::load(&mem);
        let fw = Firmware {
            cfg,
            config_seq,
            counters: [0; Counter::COUNT],
            bus: Bus::Idle,
            bus_prefer_rx: true,
            heartbeat: 0,
            tx: tx::TxSide::new(),
            rx: rx::RxSide::new(),
            mem,
        };
        for c in Counter::ALL {
            fw.mem.store_u64(c.offset(), 0);
        }
        for (rel, v) in [
            (ctrl::FW_VERSION, FW_VERSION),
            (ctrl::FW_BUILD_ID, build_id),
            (ctrl::FW_HEARTBEAT, 0),
            (ctrl::FW_CONFIG_SEQ, config_seq),
            (ctrl::FW_RX_SEQ, 0),
            (ctrl::FW_TX_SEQ, 0),
            (ctrl::FW_FAULT, 0),
        ] {
            fw.mem.store_relaxed(ctrl_word(rel), v);
        }
        fw.mem.store(ctrl_word(ctrl::FW_STATE), FwState::Ready as u32, Ordering::Release);
        fw
    }

    pub fn config(&self) -> &Config {
        &self.cfg
    }
    pub fn mem(&self) -> &M {
        &self.mem
    }
    pub fn counter(&self, c: Counter) -> u64 {
        self.counters[c as usize]
    }
    /// True when no packet is in flight in either direction.
    pub fn is_quiet(&self) -> bool {
        self.bus == Bus::Idle && self.tx.is_empty() && self.rx.is_quiet()
    }
    pub fn rx_stats(&self) -> RxQueueStats {
        self.rx.stats()
    }

    /// One pass of the main loop. Returns whether anything changed.
    pub fn poll<E: Engines>(&mut self, eng: &mut E) -> bool {
        self.heartbeat = self.heartbeat.wrapping_add(1);
        self.mem.store_relaxed(ctrl_word(ctrl::FW_HEARTBEAT), self.heartbeat);
        let mut progress = self.reload_config();
        progress |= self.accept_sends();
        progress |= self.poll_host_bus(eng);
        let at_once = eng.completes_at_once();
        progress |= self.poll_link_tx(eng);
        if at_once && self.tx.link_busy() {
            // A pulse that finished at once completes its packet now. (With no pulse
            // started, a second call would find what the first left: nothing to do.)
            self.poll_link_tx(eng);
        }
        progress |= self.poll_link_rx(eng);
        progress |= self.deliver_received(eng);
        if self.start_host_bus(eng) {
            progress = true;
            if at_once {
                // Credit the finished transfer and move on what it unblocked (a send's
                // pulse, a received packet's delivery) in this pass, not the next.
                self.poll_host_bus(eng);
                self.poll_link_tx(eng);
                if self.tx.link_busy() {
                    self.poll_link_tx(eng);
                }
                self.deliver_received(eng);
            }
        }
        progress
    }

    /// Whether a [`poll`](Self::poll) now could do anything: a packet in flight, a new
    /// send-ring entry, a configuration change, no buffer posted to link in, or link in
    /// reporting something may be waiting ([`Engines::link_rx_pending`]). A few loads;
    /// a caller driving the firmware inline skips the pass when this is `false` (a pass
    /// that finds nothing costs several times more). Conservative: `true` whenever unsure.
    pub fn has_work<E: Engines>(&self, eng: &mut E) -> bool {
        !self.is_quiet()
            || !self.rx.is_receiving()
            || self.tx.send_waiting(&self.mem)
            || self.mem.load(ctrl_word(ctrl::CONFIG_SEQ), Ordering::Acquire) != self.config_seq
            || eng.link_rx_pending()
    }

    /// The main loop: poll forever, idling when nothing happens.
    pub fn run<E: Engines>(&mut self, eng: &mut E) -> ! {
        loop {
            if !self.poll(eng) {
                eng.idle(self.engines_busy());
            }
        }
    }

    /// Whether progress may come without an event ([`Engines::idle`]): a host-bus
    /// transfer, a packet to send, or a packet arriving. A received packet that waits for
    /// a receive slot (the ring was full) waits on the host's doorbell, not on an engine.
    pub fn engines_busy(&self) -> bool {
        self.bus != Bus::Idle || !self.tx.is_empty() || !(self.rx.is_quiet() || self.rx.waits_for_host())
    }

    fn reload_config(&mut self) -> bool {
        let seq = self.mem.load(ctrl_word(ctrl::CONFIG_SEQ), Ordering::Acquire);
        if seq == self.config_seq {
            return false;
        }
        self.config_seq = seq;
        self.cfg = Config::load(&self.mem);
        crate::log::info!(
            "config {=u32}: node {=u16}, policy {=u32}, pulses {=u32}/{=u32}, mtu {=u32}",
            seq,
            self.cfg.node_id,
            self.cfg.policy as u32,
            self.cfg.send_pulse,
            self.cfg.recv_pulse,
            self.cfg.mtu
        );
        self.mem.store(ctrl_word(ctrl::FW_CONFIG_SEQ), seq, Ordering::Release);
        true
    }

    fn bump(&mut self, c: Counter, n: u64) {
        let v = self.counters[c as usize].wrapping_add(n);
        self.counters[c as usize] = v;
        self.mem.store_u64(c.offset(), v);
    }

    fn bump_seq(&mut self, rel: u32) {
        let off = ctrl_word(rel);
        let v = self.mem.load_relaxed(off).wrapping_add(1);
        self.mem.store(off, v, Ordering::Release);
    }

    fn notify_host<E: Engines>(&mut self, eng: &mut E, bit: u32) {
        if self.cfg.notify & bit == 0 {
            return;
        }
        // A host polling its receive ring takes this message without an interrupt
        // (`ctrl::IRQ_HOLD`; the fence orders the slot's publication before the load).
        if bit == notify::IRQ_ON_RECV {
            fence(Ordering::SeqCst);
            if self.mem.load(ctrl_word(ctrl::IRQ_HOLD), Ordering::SeqCst) != 0 {
                return;
            }
        }
        eng.raise_host_irq();
        self.bump(Counter::Interrupts, 1);
    }

    /// Track the running host-bus transfer; on completion credit it to its packet.
    fn poll_host_bus<E: Engines>(&mut self, eng: &mut E) -> bool {
        if self.bus == Bus::Idle {
            return false;
        }
        let st = eng.host_dma_status();
        match self.bus {
            Bus::TxSource { id, len } => {
                let done = if st.busy { st.done.min(len) } else { len };
                let finished = !st.busy;
                let failed = finished && st.error;
                self.tx.source_progress(id, done, finished, failed);
                if failed {
                    crate::log::warn!("tx: host bus refused a payload read ({=u32} bytes)", len);
                    self.bump(Counter::DmaRefused, 1);
                }
            }
            Bus::RxSink { id, len } => {
                if st.busy {
                    return false;
                }
                if st.error {
                    crate::log::warn!("rx: host bus refused a payload write ({=u32} bytes)", len);
                    self.bump(Counter::DmaRefused, 1);
                }
                self.rx.sink_done(id, len, st.error);
            }
            Bus::Idle => {}
        }
        if st.busy {
            // Progress on a source counts as progress (a sink may now pulse).
            return matches!(self.bus, Bus::TxSource { .. }) && st.done > 0;
        }
        self.bus = Bus::Idle;
        true
    }

    /// If the host bus is idle, give it the next transfer: a receive pulse or a send
    /// payload read, alternating when both are ready.
    fn start_host_bus<E: Engines>(&mut self, eng: &mut E) -> bool {
        if self.bus != Bus::Idle {
            return false;
        }
        let rx = self.rx.next_sink(&self.mem, &self.cfg);
        let tx = self.tx.next_source(&self.mem);
        let pick_rx = match (rx.is_some(), tx.is_some()) {
            (true, true) => self.bus_prefer_rx,
            (r, _) => r,
        };
        let (job, dir, addr, nic_off, len) = if pick_rx {
            let Some(p) = rx else { return false };
            self.rx.sink_started(&p);
            (Bus::RxSink { id: p.id, len: p.len }, HostDir::ToHost, p.host_addr, p.nic_off, p.len)
        } else {
            let Some(p) = tx else { return false };
            self.tx.source_started(&p);
            (Bus::TxSource { id: p.id, len: p.len }, HostDir::ToNic, p.host_addr, p.nic_off, p.len)
        };
        self.bus_prefer_rx = !pick_rx;
        eng.host_dma_start(dir, addr, nic_off, len);
        self.bus = job;
        self.bump(Counter::HostDmaTransfers, 1);
        true
    }
}

/// A host-bus transfer chosen by one side.
#[derive(Clone, Copy, Debug)]
struct HostXfer {
    id: u32,
    host_addr: u64,
    nic_off: u32,
    len: u32,
    /// Scatter/gather position after this transfer: segment index and offset in it.
    seg: u32,
    seg_off: u32,
}
