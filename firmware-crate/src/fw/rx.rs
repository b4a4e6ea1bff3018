// SPDX-License-Identifier: GPL-2.0-only
//! Receive side: link in → receive staging → host bus (cut-through) → receive ring.
//!
//! A buffer is always posted to link in while staging has room (otherwise the link is
//! back-pressured until the host bus drains staging). As soon as a packet's header has
//! arrived its destination is decided — IPT frame (token validated and claimed before
//! any DMA), the receive slot's attached frame, control-only, or drop — and payload
//! pulses to the host start while the rest is still arriving. A packet for this node that
//! finds the receive ring full waits in staging, and no further buffer is posted (the
//! link is back-pressured) until the host takes a message and frees its slot: a busy host
//! slows its senders down rather than losing what they sent (counted,
//! `Counter::RxRingWait`). A packet is delivered to the receive ring only after its link
//! trailer checked; a bad packet releases its IPT claim and its reserved slot instead.

use super::pulse::pulse_len;
use super::staging::{align8, Staging};
use super::{Config, Firmware, HostXfer, RX_QUEUE};
use crate::hal::Engines;
use crate::iface::answer::{self, Descriptor};
use crate::iface::entry::{rx_flags, state, Ring, Segment, Slot};
use crate::iface::ipt::{self, Claim, IptEntry, PayloadToken};
use crate::iface::layout::{
    ctrl, notify, Counter, Policy, CTRL_MSG_BYTES, MAX_SEGMENTS, RECV_STAGING_BYTES, RECV_STAGING_OFF,
};
use crate::iface::mem::NicMemory;
use crate::iface::wire::{
    ctrl_wire_bytes, Header, FLAG_ANSWER, FLAG_ANSWERED, HEADER_BYTES, HEADER_WORDS, TRAILER_BYTES,
};
use heapless::Deque;

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Dest {
    /// Header not yet arrived, or (`RxPkt::waiting`) the receive ring was full.
    Undecided,
    /// Malformed, misrouted, or no receive slot: consume from the link and discard.
    Drop,
    /// Deliver the control message only (no payload, or the payload was refused).
    CtrlOnly,
    /// Payload into the frame attached to the reserved receive slot.
    Frame,
    /// Payload into the IPT frame claimed for the packet's token.
    Ipt(Claim),
    /// An answerable request (no payload, no receive slot yet): answered from the answer
    /// table once it has checked, else delivered to the host ([`Firmware::answer`]).
    Answer,
}

#[derive(Clone, Copy, Debug)]
struct RxPkt {
    id: u32,
    off: u32,
    arrived: u32,
    complete: bool,
    /// The link trailer checked (once `complete`).
    crc_ok: bool,
    /// The header arrived and the packet is for this node, but the receive ring was full:
    /// it waits for a slot, undecided, and nothing newer is received meanwhile.
    waiting: bool,
    /// Trailer bad (or packet aborted): discard once no DMA runs.
    dropping: bool,
    hdr: Header,
    dest: Dest,
    /// Reserved receive-ring position (running counter).
    slot: Option<u32>,
    flags: u32,
    /// What the header made of the packet (drop reason, refused token, no frame): counted
    /// once the trailer checked. A damaged packet counts only as a CRC drop.
    verdict: Option<Counter>,
    issued: u32,
    delivered: u32,
    sinking: bool,
    dma_failed: bool,
    seg: u32,
    seg_off: u32,
}

impl RxPkt {
    fn wants_dma(&self) -> bool {
        matches!(self.dest, Dest::Frame | Dest::Ipt(_))
            && !self.dropping
            && !self.dma_failed
            && self.issued < self.hdr.payload_len
    }
    /// Link in has put bytes of it in staging (or it ended): the receive side is busy.
    fn active(&self) -> bool {
        self.complete || self.arrived != 0
    }
    fn finished(&self) -> bool {
        self.complete
            && self.dest != Dest::Undecided
            && !self.sinking
            && (self.dropping
                || self.dma_failed
                || matches!(self.dest, Dest::Drop | Dest::CtrlOnly | Dest::Answer)
                || self.delivered == self.hdr.payload_len)
    }
}

/// Occupancy of the receive side, for tests and benchmarks.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct RxQueueStats {
    pub packets: usize,
    pub receiving: bool,
}

pub(super) struct RxSide {
    q: Deque<RxPkt, RX_QUEUE>,
    staging: Staging,
    next_id: u32,
    /// Next receive-ring position to reserve (running counter).
    reserve: u32,
    /// The newest packet in `q` is posted to link in and not complete.
    receiving: bool,
    /// Packets in `q` that are [`active`](RxPkt::active), kept as they change (only the
    /// newest one's bytes and end are updated, the oldest is removed): the inline
    /// driver asks [`is_quiet`](Self::is_quiet) several times per message.
    active: u32,
}

impl RxSide {
    pub(super) const fn new() -> Self {
        Self {
            q: Deque::new(),
            staging: Staging::new(RECV_STAGING_BYTES),
            next_id: 0,
            reserve: 0,
            receiving: false,
            active: 0,
        }
    }

    pub(super) fn is_quiet(&self) -> bool {
        debug_assert_eq!(self.active as usize, self.q.iter().filter(|p| p.active()).count());
        self.active == 0
    }

    /// Whether every packet link in has put bytes of waits for a receive slot: only the
    /// host reading its ring (a doorbell) lets the receive side go on.
    pub(super) fn waits_for_host(&self) -> bool {
        self.q.iter().filter(|p| p.active()).all(|p| p.waiting && p.complete)
    }

    /// Whether a buffer is posted to link in.
    pub(super) fn is_receiving(&self) -> bool {
        self.receiving
    }

    pub(super) fn stats(&self) -> RxQueueStats {
        RxQueueStats { packets: self.q.len(), receiving: self.receiving }
    }

    fn get_mut(&mut self, id: u32) -> Option<&mut RxPkt> {
        self.q.iter_mut().find(|p| p.id == id)
    }

    fn dest_segment<M: NicMemory>(mem: &M, p: &RxPkt, i: u32) -> Segment {
        match p.dest {
            Dest::Ipt(c) if i < c.nseg => c.segs[i as usize],
            Dest::Frame => match p.slot {
                Some(s) if i < MAX_SEGMENTS => Slot::new(mem, Ring::Recv, s).segment(i),
                _ => Segment::default(),
            },
            _ => Segment::default(),
        }
    }

    /// The next payload pulse to host memory, for the oldest packet that still has
    /// payload to deliver (packets are delivered in arrival order).
    pub(super) fn next_sink<M: NicMemory>(&self, mem: &M, cfg: &Config) -> Option<HostXfer> {
        let p = self.q.iter().find(|p| p.wants_dma() || p.dest == Dest::Undecided)?;
        if !p.wants_dma() || p.sinking {
            return None;
        }
        if cfg.policy == Policy::StoreAndForward && !p.complete {
            return None;
        }
        let prefix = p.hdr.prefix_bytes();
        let arrived = p.arrived.saturating_sub(prefix).min(p.hdr.payload_len);
        let buffered = arrived.saturating_sub(p.issued);
        let remaining = p.hdr.payload_len - p.issued;
        let mut len = pulse_len(cfg.policy, cfg.recv_pulse, buffered, remaining)?;
        let (mut seg_i, mut seg_off) = (p.seg, p.seg_off);
        let seg = loop {
            if seg_i >= MAX_SEGMENTS {
                return None;
            }
            let s = Self::dest_segment(mem, p, seg_i);
            if s.len > seg_off {
                break s;
            }
            seg_i += 1;
            seg_off = 0;
        };
        // A pulse never crosses a frame boundary.
        len = len.min(seg.len - seg_off);
        Some(HostXfer {
            id: p.id,
            host_addr: seg.addr.wrapping_add(seg_off as u64),
            nic_off: p.off + prefix + p.issued,
            len,
            seg: seg_i,
            seg_off: seg_off + len,
        })
    }

    pub(super) fn sink_started(&mut self, x: &HostXfer) {
        if let Some(p) = self.get_mut(x.id) {
            p.issued += x.len;
            p.seg = x.seg;
            p.seg_off = x.seg_off;
            p.sinking = true;
        }
    }

    pub(super) fn sink_done(&mut self, id: u32, len: u32, failed: bool) {
        if let Some(p) = self.get_mut(id) {
            p.sinking = false;
            if failed {
                p.dma_failed = true;
                p.flags |= rx_flags::DMA_REFUSED;
            } else {
                p.delivered += len;
            }
        }
    }
}

impl<M: NicMemory> Firmware<M> {
    /// Link in: follow the packet arriving in the posted buffer, decide its destination
    /// as soon as its header is in, note its end, and keep a buffer posted.
    pub(super) fn poll_link_rx<E: Engines>(&mut self, eng: &mut E) -> bool {
        let mut progress = false;
        if self.rx.receiving {
            let st = eng.link_rx_status();
            let Some(id) = self.rx.q.back().map(|p| p.id) else { return false };
            if let Some(p) = self.rx.q.back_mut() {
                if st.bytes != p.arrived {
                    let was = p.active();
                    p.arrived = st.bytes;
                    self.rx.active = self.rx.active + p.active() as u32 - was as u32;
                    progress = true;
                }
            }
            let needs_header = matches!(self.rx.q.back(), Some(p) if p.dest == Dest::Undecided);
            if needs_header && (st.bytes >= HEADER_BYTES || st.complete) {
                self.classify(id, st.bytes);
                progress = true;
            }
            if st.complete {
                self.rx.receiving = false;
                self.packet_ended(st.bytes, st.crc_ok);
                // Posted for a whole MTU: what it did not fill is free for the next one.
                if let Some(p) = self.rx.q.back() {
                    self.rx.staging.shrink_newest(p.off - RECV_STAGING_OFF, st.bytes);
                }
                progress = true;
            }
        }
        // A packet waiting for a receive slot: decide it once the host has freed one.
        if let Some(p) = self.rx.q.back().copied().filter(|p| p.waiting) {
            if self.slot_free() {
                self.classify(p.id, p.arrived);
                if p.complete {
                    self.judge();
                }
                progress = true;
            } else {
                return progress;
            }
        }
        if !self.rx.receiving && !self.rx.q.is_full() {
            let cap = align8(HEADER_BYTES + CTRL_MSG_BYTES + self.cfg.mtu + TRAILER_BYTES);
            if let Some(rel) = self.rx.staging.alloc(cap) {
                let off = RECV_STAGING_OFF + rel;
                eng.link_rx_post(off, cap);
                let id = self.rx.next_id;
                self.rx.next_id = id.wrapping_add(1);
                let pkt = RxPkt {
                    id,
                    off,
                    arrived: 0,
                    complete: false,
                    crc_ok: false,
                    waiting: false,
                    dropping: false,
                    hdr: Header::default(),
                    dest: Dest::Undecided,
                    slot: None,
                    flags: 0,
                    verdict: None,
                    issued: 0,
                    delivered: 0,
                    sinking: false,
                    dma_failed: false,
                    seg: 0,
                    seg_off: 0,
                };
                // Cannot fail: checked `is_full` above.
                let _ = self.rx.q.push_back(pkt);
                self.rx.receiving = true;
                progress = true;
            }
        }
        progress
    }

    /// The header of the newest packet has arrived: validate it and pick where its
    /// payload goes. Tokens are validated and claimed here, before any DMA.
    fn classify(&mut self, id: u32, arrived: u32) {
        let Some(p) = self.rx.q.back().copied() else { return };
        debug_assert_eq!(p.id, id);
        let mut words = [0u32; HEADER_WORDS];
        for (i, w) in words.iter_mut().enumerate() {
            *w = self.mem.load_relaxed(p.off + 4 * i as u32);
        }
        let parsed = if arrived >= HEADER_BYTES { Header::from_words(&words, self.cfg.mtu).ok() } else { None };
        let (dest, hdr, slot, flags, verdict) = match parsed {
            // Nothing to DMA: it needs a receive slot only if its host is to serve it.
            Some(h) if h.dst == self.cfg.node_id && h.flags & FLAG_ANSWER != 0 && h.payload_len == 0 => {
                (Dest::Answer, h, None, 0, None)
            }
            Some(h) if h.dst == self.cfg.node_id && !self.slot_free() => {
                if let Some(p) = self.rx.q.back_mut().filter(|p| !p.waiting) {
                    p.waiting = true;
                    self.bump(Counter::RxRingWait, 1);
                }
                return;
            }
            Some(h) if h.dst == self.cfg.node_id => self.choose_dest(h),
            _ => (Dest::Drop, Header::default(), None, 0, Some(Counter::RxDropMalformed)),
        };
        if let Some(p) = self.rx.q.back_mut() {
            p.waiting = false;
            p.dest = dest;
            p.hdr = hdr;
            p.slot = slot;
            p.flags = flags;
            p.verdict = verdict;
        }
    }

    /// Whether the next receive slot is free (the host took the message it last held).
    fn slot_free(&self) -> bool {
        Slot::new(&self.mem, Ring::Recv, self.rx.reserve).state_acquire() & state::READY == 0
    }

    /// Destination, header, reserved slot (the next one, free: [`Self::slot_free`]), flags
    /// and the counter for the verdict.
    fn choose_dest(&mut self, h: Header) -> (Dest, Header, Option<u32>, u32, Option<Counter>) {
        let pos = self.rx.reserve;
        let slot = Slot::new(&self.mem, Ring::Recv, pos);
        self.rx.reserve = pos.wrapping_add(1);
        if h.payload_len == 0 {
            return (Dest::CtrlOnly, h, Some(pos), 0, None);
        }
        if h.token != 0 {
            return match ipt::fw_claim(&self.mem, PayloadToken(h.token), h.payload_len) {
                Ok(c) => (Dest::Ipt(c), h, Some(pos), rx_flags::IPT, None),
                Err(_) => (Dest::CtrlOnly, h, Some(pos), rx_flags::BAD_TOKEN, Some(Counter::RxBadToken)),
            };
        }
        let nseg = slot.nseg();
        // Room in the slot's frame, none if a segment is malformed (wraps the address space).
        let segs = || (0..nseg).map(|i| slot.segment(i));
        let cap: u64 =
            if nseg <= MAX_SEGMENTS && !segs().any(|s| s.wraps()) { segs().map(|s| s.len as u64).sum() } else { 0 };
        if cap >= h.payload_len as u64 {
            (Dest::Frame, h, Some(pos), 0, None)
        } else {
            (Dest::CtrlOnly, h, Some(pos), rx_flags::NO_FRAME, Some(Counter::RxNoFrame))
        }
    }

    /// The newest packet ended on the link with `len` bytes (trailer excluded): judged now,
    /// or once it has a receive slot.
    fn packet_ended(&mut self, len: u32, crc_ok: bool) {
        let Some(p) = self.rx.q.back_mut() else { return };
        self.rx.active += !p.active() as u32;
        p.complete = true;
        p.arrived = len;
        p.crc_ok = crc_ok;
        if !p.waiting {
            self.judge();
        }
    }

    /// Judge the newest packet, complete and decided, by its trailer and length.
    fn judge(&mut self) {
        let Some(p) = self.rx.q.back_mut() else { return };
        let (len, crc_ok) = (p.arrived, p.crc_ok);
        let verdict = p.verdict.take();
        let good = crc_ok && p.dest != Dest::Undecided && len == p.hdr.packet_bytes();
        // A packet dropped at its header is still judged by its trailer: a header that
        // looks malformed (or a token that looks bad) may just be damaged in transit.
        if good || (crc_ok && p.dest == Dest::Drop) {
            if let Some(c) = verdict {
                crate::log::warn!("rx: {=str} (src {=u16}, token {=u64:x})", c.name(), p.hdr.src, p.hdr.token);
                self.bump(c, 1);
            }
            return;
        }
        crate::log::warn!("rx: {=u32}-byte packet dropped: link CRC bad", len);
        p.dropping = true;
        // It is the newest reservation: give the slot back for the next packet.
        if p.slot.take().is_some() {
            self.rx.reserve = self.rx.reserve.wrapping_sub(1);
        }
        self.bump(Counter::RxDropCrc, 1);
    }

    /// Deliver (or discard) finished packets at the front of the queue, in order.
    pub(super) fn deliver_received<E: Engines>(&mut self, eng: &mut E) -> bool {
        let mut progress = false;
        while let Some(p) = self.rx.q.front().copied() {
            if !p.finished() {
                break;
            }
            let discard = p.dropping || p.dest == Dest::Drop;
            match (discard, p.dest) {
                (true, Dest::Ipt(c)) => release_claim(&self.mem, &c),
                (true, _) => {}
                (false, Dest::Answer) => {
                    if !self.answer(eng, &p) {
                        // No room to answer or to deliver yet: the queue waits.
                        break;
                    }
                }
                (false, _) => self.deliver(eng, &p),
            }
            self.rx.q.pop_front();
            self.rx.active -= p.active() as u32;
            let next = self.rx.q.front().map(|n| n.off - RECV_STAGING_OFF);
            self.rx.staging.free_oldest(next);
            progress = true;
        }
        progress
    }

    /// An answerable request that checked: answered by the NIC when its descriptor names
    /// a stable entry holding its key, else delivered to the host in the next receive
    /// slot. `false`: neither can happen yet (the send side or the receive ring is full).
    fn answer<E: Engines>(&mut self, eng: &mut E, p: &RxPkt) -> bool {
        let ctrl_len = u32::from(p.hdr.ctrl_len);
        let found = Descriptor::load(&self.mem, p.off + HEADER_BYTES, ctrl_len)
            .filter(|d| d.token != 0)
            .and_then(|d| Some((d, answer::lookup(&self.mem, &d, self.cfg.mtu)?)));
        if let Some((d, f)) = found {
            return self.queue_answer(p.hdr.src, d.token, f);
        }
        if !self.slot_free() {
            return false;
        }
        let pos = self.rx.reserve;
        self.rx.reserve = pos.wrapping_add(1);
        self.bump(Counter::RxAnswerToHost, 1);
        self.deliver(eng, &RxPkt { slot: Some(pos), dest: Dest::CtrlOnly, ..*p });
        true
    }

    fn deliver<E: Engines>(&mut self, eng: &mut E, p: &RxPkt) {
        let Some(pos) = p.slot else { return };
        let slot = Slot::new(&self.mem, Ring::Recv, pos);
        let with_payload = matches!(p.dest, Dest::Frame | Dest::Ipt(_)) && !p.dma_failed;
        let len = if with_payload { p.hdr.payload_len } else { 0 };
        slot.set_ctrl_len(p.hdr.ctrl_len as u32);
        slot.set_payload_len(len);
        slot.set_peer(p.hdr.src as u32);
        slot.set_token(p.hdr.token);
        let answered = if p.hdr.flags & FLAG_ANSWERED != 0 { rx_flags::ANSWER } else { 0 };
        slot.set_flags(p.flags | answered);
        self.mem.copy_words(p.off + HEADER_BYTES, slot.ctrl_offset(), ctrl_wire_bytes(p.hdr.ctrl_len as u32) / 4);
        if let Dest::Ipt(c) = p.dest {
            if let Some(e) = IptEntry::new(&self.mem, c.index) {
                e.fw_complete(&c, len);
            }
        }
        slot.set_state_release(state::READY | (pos & 0xFFFF) << state::SEQ_SHIFT);
        if with_payload && matches!(p.dest, Dest::Ipt(_)) {
            self.bump(Counter::RxIptDelivered, 1);
        }
        self.bump(Counter::RxPackets, 1);
        self.bump(Counter::RxBytes, len as u64);
        self.bump_seq(ctrl::FW_RX_SEQ);
        self.notify_host(eng, notify::IRQ_ON_RECV);
    }
}

fn release_claim<M: NicMemory>(mem: &M, c: &Claim) {
    if let Some(e) = IptEntry::new(mem, c.index) {
        e.fw_release(c);
    }
}
