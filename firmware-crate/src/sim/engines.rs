// SPDX-License-Identifier: GPL-2.0-only
//! The modelled DMA engines of one NIC, and the crossbar that connects link engines.

use super::mem::SharedMem;
use super::{Faults, Params, Rng, US};
use crate::hal::{EngineStatus, Engines, HostDir, RxStatus};
use crate::iface::layout::MAX_MTU_BYTES;
use crate::iface::layout::NIC_MEM_BYTES;
use crate::iface::regs::tx_flags;
use crate::iface::wire::{crc32_update, Header, HEADER_BYTES};
use std::collections::VecDeque;
use std::vec::Vec;

/// The sender index an injected packet holds a link in with (no modelled node has it).
const OUTSIDE: usize = usize::MAX;

/// A packet from outside the modelled nodes (a broken or hostile peer): any bytes, fed
/// into one node's link in, `chunk` bytes per tick, ended with a good or bad trailer.
struct Injected {
    dst: usize,
    bytes: Vec<u8>,
    chunk: usize,
    trailer_ok: bool,
    pos: usize,
    crc: u32,
}

/// What a logged transfer was.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum TransferKind {
    /// Host memory → NIC (send payload).
    HostRead,
    /// NIC → host memory (received payload).
    HostWrite,
    LinkTx,
}

/// One transfer started by the firmware, as the engine saw it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct TransferLog {
    pub kind: TransferKind,
    pub start_ps: u64,
    pub nic_off: u32,
    pub len: u32,
    /// Link: [`tx_flags`]; host: 0.
    pub flags: u32,
    /// Host: DMA address.
    pub host_addr: u64,
}

struct HostXfer {
    dir: HostDir,
    host_addr: u64,
    nic_off: u32,
    len: u32,
    start: u64,
    done: u32,
    credit_ps: u64,
}

struct TxXfer {
    off: u32,
    len: u32,
    flags: u32,
    start: u64,
    sent: u32,
    credit_ps: u64,
    setup_ps: u64,
}

#[derive(Default)]
struct RxEngine {
    posted: Option<(u32, u32)>,
    bytes: u32,
    complete: bool,
    crc_ok: bool,
    overflow: bool,
    crc: u32,
    from: Option<usize>,
}

/// One NIC's engines; implements [`Engines`] for its firmware.
pub struct NicEngines {
    params: Params,
    now: u64,
    hdma: Option<HostXfer>,
    hdma_last: EngineStatus,
    tx: Option<TxXfer>,
    tx_last_done: u32,
    rx: RxEngine,
    irqs: u64,
    log: Vec<TransferLog>,
}

impl NicEngines {
    pub(super) fn new(params: Params) -> Self {
        NicEngines {
            params,
            now: 0,
            hdma: None,
            hdma_last: EngineStatus::default(),
            tx: None,
            tx_last_done: 0,
            rx: RxEngine::default(),
            irqs: 0,
            log: Vec::new(),
        }
    }

    pub(super) fn set_now(&mut self, now: u64) {
        self.now = now;
    }
    pub(super) fn log(&self) -> &[TransferLog] {
        &self.log
    }
    pub(super) fn is_idle(&self) -> bool {
        self.hdma.is_none() && self.tx.is_none() && self.rx.from.is_none()
    }

    /// Advance the host-bus engine by one tick, moving the bytes its bandwidth allows.
    pub(super) fn tick_host_dma(&mut self, now: u64, nic: &SharedMem, host: &mut [u8]) {
        let Some(x) = self.hdma.as_mut() else { return };
        let setup = match x.dir {
            HostDir::ToNic => self.params.host_read_setup_ps,
            HostDir::ToHost => self.params.host_write_setup_ps,
        };
        if now < x.start + setup {
            return;
        }
        if x.done == 0 && x.credit_ps == 0 {
            // First byte: the bus checks the whole range against host memory.
            let host_ok = x.host_addr >= super::HOST_DMA_BASE
                && (x.host_addr - super::HOST_DMA_BASE) + x.len as u64 <= host.len() as u64;
            let nic_ok = x.nic_off as u64 + x.len as u64 <= NIC_MEM_BYTES as u64;
            if !host_ok || !nic_ok {
                self.hdma_last = EngineStatus { busy: false, done: 0, error: true };
                self.hdma = None;
                return;
            }
        }
        x.credit_ps += self.params.tick_ps;
        let mb_s = match x.dir {
            HostDir::ToNic => self.params.host_read_mb_s,
            HostDir::ToHost => self.params.host_write_mb_s,
        };
        let target = ((x.credit_ps * mb_s / US) as u32).min(x.len);
        if target > x.done {
            let h = (x.host_addr - super::HOST_DMA_BASE) as usize;
            let (a, b) = (x.done as usize, target as usize);
            match x.dir {
                HostDir::ToNic => nic.write_at(x.nic_off + x.done, &host[h + a..h + b]),
                HostDir::ToHost => nic.read_at(x.nic_off + x.done, &mut host[h + a..h + b]),
            }
            x.done = target;
        }
        if x.done == x.len {
            self.hdma_last = EngineStatus { busy: false, done: x.len, error: false };
            self.hdma = None;
        }
    }
}

impl Engines for NicEngines {
    fn host_dma_start(&mut self, dir: HostDir, host_addr: u64, nic_off: u32, len: u32) {
        debug_assert!(self.hdma.is_none(), "host DMA started while busy");
        self.log.push(TransferLog {
            kind: if dir == HostDir::ToNic { TransferKind::HostRead } else { TransferKind::HostWrite },
            start_ps: self.now,
            nic_off,
            len,
            flags: 0,
            host_addr,
        });
        self.hdma = Some(HostXfer { dir, host_addr, nic_off, len, start: self.now, done: 0, credit_ps: 0 });
        self.hdma_last = EngineStatus { busy: true, done: 0, error: false };
    }

    fn host_dma_status(&mut self) -> EngineStatus {
        match &self.hdma {
            Some(x) => EngineStatus { busy: true, done: x.done, error: false },
            None => self.hdma_last,
        }
    }

    fn link_tx_start(&mut self, nic_off: u32, len: u32, flags: u32) {
        debug_assert!(self.tx.is_none(), "link tx started while busy");
        self.log.push(TransferLog {
            kind: TransferKind::LinkTx,
            start_ps: self.now,
            nic_off,
            len,
            flags,
            host_addr: 0,
        });
        let mut setup_ps = self.params.link_setup_ps;
        if flags & tx_flags::FIRST != 0 {
            setup_ps += self.params.link_latency_ps;
        }
        self.tx = Some(TxXfer { off: nic_off, len, flags, start: self.now, sent: 0, credit_ps: 0, setup_ps });
        self.tx_last_done = 0;
    }

    fn link_tx_status(&mut self) -> EngineStatus {
        match &self.tx {
            Some(x) => EngineStatus { busy: true, done: x.sent, error: false },
            None => EngineStatus { busy: false, done: self.tx_last_done, error: false },
        }
    }

    fn link_rx_post(&mut self, nic_off: u32, cap: u32) {
        self.rx = RxEngine { posted: Some((nic_off, cap)), crc: 0xFFFF_FFFF, ..RxEngine::default() };
    }

    fn link_rx_status(&mut self) -> RxStatus {
        RxStatus {
            posted: self.rx.posted.is_some() && !self.rx.complete,
            bytes: self.rx.bytes,
            complete: self.rx.complete,
            crc_ok: self.rx.crc_ok,
        }
    }

    fn raise_host_irq(&mut self) {
        self.irqs += 1;
    }
}

/// Per-sender state of a packet crossing the switch.
#[derive(Clone, Copy)]
struct Route {
    /// Receiving node, or `None` for a packet the switch discards.
    dst: Option<usize>,
    crc: u32,
    /// Packet byte to flip one bit of (fault injection).
    corrupt_at: Option<(u32, u8)>,
    pos: u32,
}

/// Counters kept by the switch.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct LinkStats {
    pub packets: u64,
    pub dropped: u64,
    pub corrupted: u64,
    /// Packets to a node that does not exist.
    pub misrouted: u64,
    /// Sender-ticks spent waiting for a receiver (back-pressure).
    pub stalled_ticks: u64,
}

/// The crossbar: routes each sender's link-out bytes into its receiver's link-in.
pub(super) struct Wire {
    routes: Vec<Option<Route>>,
    faults: Faults,
    rng: Rng,
    stats: LinkStats,
    injected: VecDeque<Injected>,
}

impl Wire {
    pub(super) fn new(n: usize, faults: Faults) -> Self {
        Wire {
            routes: std::vec![None; n],
            faults,
            rng: Rng::new(faults.seed),
            stats: LinkStats::default(),
            injected: VecDeque::new(),
        }
    }

    /// Queue `bytes` for node `dst`'s link in, after the packets injected before it.
    pub(super) fn inject(&mut self, dst: usize, bytes: &[u8], chunk: u32, trailer_ok: bool) {
        let chunk = (chunk as usize).max(1);
        self.injected.push_back(Injected { dst, bytes: bytes.to_vec(), chunk, trailer_ok, pos: 0, crc: 0xFFFF_FFFF });
    }

    pub(super) fn stats(&self) -> LinkStats {
        self.stats
    }

    pub(super) fn is_quiet(&self) -> bool {
        self.routes.iter().all(|r| r.is_none()) && self.injected.is_empty()
    }

    pub(super) fn tick(&mut self, now: u64, nodes: &mut [(&mut NicEngines, &SharedMem)]) {
        for s in 0..nodes.len() {
            self.tick_sender(now, s, nodes);
        }
        self.tick_injected(nodes);
    }

    /// Move the next chunk of the oldest injected packet, as a sender would (it waits
    /// for a posted buffer that no other sender holds).
    fn tick_injected(&mut self, nodes: &mut [(&mut NicEngines, &SharedMem)]) {
        let Some(p) = self.injected.front_mut() else { return };
        let Some((eng, mem)) = nodes.get_mut(p.dst) else {
            self.injected.pop_front();
            return;
        };
        let rx = &eng.rx;
        if rx.posted.is_none() || rx.complete || rx.from.is_some_and(|f| f != OUTSIDE) {
            return;
        }
        eng.rx.from = Some(OUTSIDE);
        let end = p.bytes.len().min(p.pos + p.chunk);
        let chunk = &p.bytes[p.pos..end];
        p.crc = crc32_update(p.crc, chunk);
        deliver(eng, mem, chunk);
        p.pos = end;
        if p.pos == p.bytes.len() {
            let trailer = if p.trailer_ok { p.crc } else { !p.crc };
            end_packet(eng, trailer);
            self.injected.pop_front();
        }
    }

    fn tick_sender(&mut self, now: u64, s: usize, nodes: &mut [(&mut NicEngines, &SharedMem)]) {
        let (params, smem) = (nodes[s].0.params, nodes[s].1.clone());
        let Some(x) = nodes[s].0.tx.as_ref() else { return };
        if now < x.start + x.setup_ps {
            return;
        }
        let (off, len, flags, sent) = (x.off, x.len, x.flags, x.sent);
        if flags & tx_flags::FIRST != 0 && sent == 0 && self.routes[s].is_none() {
            self.routes[s] = Some(self.open_route(s, off, &smem, nodes.len()));
        }
        let Some(mut route) = self.routes[s] else {
            // A continuation pulse with no packet open (cannot happen with a correct
            // firmware): finish it without effect.
            nodes[s].0.tx = None;
            return;
        };
        // Wormhole: the receiver's link-in must hold a buffer for this packet.
        if let Some(d) = route.dst {
            let rx = &nodes[d].0.rx;
            let ok = rx.posted.is_some() && !rx.complete && rx.from.is_none_or(|f| f == s);
            if !ok {
                self.stats.stalled_ticks += 1;
                return;
            }
            nodes[d].0.rx.from = Some(s);
        }
        let x = nodes[s].0.tx.as_mut().expect("checked above");
        x.credit_ps += params.tick_ps;
        let target = ((x.credit_ps * params.link_mb_s / US) as u32).min(len);
        if target > sent {
            let mut buf = std::vec![0u8; (target - sent) as usize];
            smem.read_at(off + sent, &mut buf);
            route.crc = crc32_update(route.crc, &buf);
            if let Some((at, bit)) = route.corrupt_at {
                if at >= route.pos && at < route.pos + buf.len() as u32 {
                    buf[(at - route.pos) as usize] ^= 1 << bit;
                }
            }
            route.pos += buf.len() as u32;
            x.sent = target;
            if let Some(d) = route.dst {
                deliver(nodes[d].0, nodes[d].1, &buf);
            }
        }
        let x = nodes[s].0.tx.as_ref().expect("checked above");
        if x.sent == len {
            nodes[s].0.tx_last_done = len;
            nodes[s].0.tx = None;
            if flags & tx_flags::LAST != 0 {
                let trailer = if flags & tx_flags::ABORT != 0 { !route.crc } else { route.crc };
                if let Some(d) = route.dst {
                    end_packet(nodes[d].0, trailer);
                }
                self.routes[s] = None;
                return;
            }
        }
        self.routes[s] = Some(route);
    }

    fn open_route(&mut self, s: usize, off: u32, mem: &SharedMem, n: usize) -> Route {
        let mut hb = [0u8; HEADER_BYTES as usize];
        mem.read_at(off, &mut hb);
        let hdr = Header::parse(&hb, MAX_MTU_BYTES).ok();
        let dst = hdr.map(|h| h.dst as usize).filter(|&d| d < n && d != s);
        self.stats.packets += 1;
        let mut route = Route { dst, crc: 0xFFFF_FFFF, corrupt_at: None, pos: 0 };
        if dst.is_none() {
            self.stats.misrouted += 1;
        } else if self.rng.chance(self.faults.drop_ppm) {
            self.stats.dropped += 1;
            route.dst = None;
        } else if self.rng.chance(self.faults.corrupt_ppm) {
            let plen = hdr.map_or(HEADER_BYTES, |h| h.packet_bytes());
            let at = (self.rng.next_u64() % plen as u64) as u32;
            route.corrupt_at = Some((at, (self.rng.next_u64() % 8) as u8));
            self.stats.corrupted += 1;
        }
        route
    }
}

fn deliver(rx_eng: &mut NicEngines, mem: &SharedMem, bytes: &[u8]) {
    let rx = &mut rx_eng.rx;
    let Some((off, cap)) = rx.posted else { return };
    rx.crc = crc32_update(rx.crc, bytes);
    let room = cap.saturating_sub(rx.bytes) as usize;
    let n = room.min(bytes.len());
    mem.write_at(off + rx.bytes, &bytes[..n]);
    rx.bytes += n as u32;
    if n < bytes.len() {
        rx.overflow = true;
    }
}

fn end_packet(rx_eng: &mut NicEngines, trailer: u32) {
    let rx = &mut rx_eng.rx;
    rx.complete = true;
    rx.crc_ok = !rx.overflow && (rx.crc ^ 0xFFFF_FFFF) == (trailer ^ 0xFFFF_FFFF);
    rx.from = None;
}
