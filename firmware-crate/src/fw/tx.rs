// SPDX-License-Identifier: GPL-2.0-only
//! Send side: send ring → send staging (host-bus reads) → link out, cut-through.

use super::pulse::pulse_len;
use super::staging::Staging;
use super::{Firmware, HostXfer, TX_QUEUE};
use crate::hal::Engines;
use crate::iface::answer::{self, send_flags, Found};
use crate::iface::entry::{state, Ring, Slot, TxStatus};
use crate::iface::layout::{
    ctrl, notify, Counter, CTRL_MSG_BYTES, MAX_SEGMENTS, SEND_RING_ENTRIES, SEND_STAGING_BYTES, SEND_STAGING_OFF,
};
use crate::iface::mem::NicMemory;
use crate::iface::regs::tx_flags;
use crate::iface::wire::{ctrl_wire_bytes, Header, FLAG_ANSWER, FLAG_ANSWERED, FLAG_TOKEN, HEADER_BYTES};
use heapless::Deque;

/// A packet accepted from the send ring.
#[derive(Clone, Copy, Debug)]
struct TxPkt {
    id: u32,
    slot: u32,
    slot_seq: u32,
    /// Absolute NIC-memory offset of the packet in send staging.
    off: u32,
    prefix: u32,
    payload: u32,
    /// Payload bytes covered by host reads issued / completed.
    issued: u32,
    read: u32,
    /// Progress of the running read, if it is ours.
    reading: u32,
    seg: u32,
    seg_off: u32,
    /// Bytes handed to the link (completed pulses), and the pulse in progress.
    sent: u32,
    sending: u32,
    failed: Option<TxStatus>,
    /// An answer from the answer table (no send slot): its entry as found.
    answer: Option<Found>,
}

impl TxPkt {
    fn total(&self) -> u32 {
        self.prefix + self.payload
    }
    /// Bytes in staging, ready for the link.
    fn staged(&self) -> u32 {
        self.prefix + self.read + self.reading
    }
}

pub(super) struct TxSide {
    q: Deque<TxPkt, TX_QUEUE>,
    next_slot: u32,
    next_id: u32,
    wire_seq: u32,
    staging: Staging,
    link_busy: bool,
}

impl TxSide {
    pub(super) const fn new() -> Self {
        Self {
            q: Deque::new(),
            next_slot: 0,
            next_id: 0,
            wire_seq: 0,
            staging: Staging::new(SEND_STAGING_BYTES),
            link_busy: false,
        }
    }

    pub(super) fn is_empty(&self) -> bool {
        self.q.is_empty()
    }

    /// A pulse was handed to link out and not yet seen finished.
    pub(super) fn link_busy(&self) -> bool {
        self.link_busy
    }

    /// Whether the host has handed over the next send-ring entry (one acquire load).
    pub(super) fn send_waiting<M: NicMemory>(&self, mem: &M) -> bool {
        Slot::new(mem, Ring::Send, self.next_slot).state_acquire() & state::READY != 0
    }

    fn get_mut(&mut self, id: u32) -> Option<&mut TxPkt> {
        self.q.iter_mut().find(|p| p.id == id)
    }

    /// The next payload read: the rest of the current segment of the oldest packet that
    /// still has payload to read. Reads are as large as possible (the source side).
    pub(super) fn next_source<M: NicMemory>(&self, mem: &M) -> Option<HostXfer> {
        let p = self.q.iter().find(|p| p.failed.is_none() && p.issued < p.payload)?;
        if let Some(f) = p.answer {
            // One contiguous range.
            return Some(HostXfer {
                id: p.id,
                host_addr: f.addr.wrapping_add(u64::from(p.issued)),
                nic_off: p.off + p.prefix + p.issued,
                len: p.payload - p.issued,
                seg: 0,
                seg_off: p.payload,
            });
        }
        let slot = Slot::new(mem, Ring::Send, p.slot);
        let mut seg_i = p.seg;
        let mut seg_off = p.seg_off;
        // Skip empty segments (validated at accept: the segments hold the payload).
        let seg = loop {
            if seg_i >= MAX_SEGMENTS {
                return None;
            }
            let s = slot.segment(seg_i);
            if s.len > seg_off {
                break s;
            }
            seg_i += 1;
            seg_off = 0;
        };
        let len = (seg.len - seg_off).min(p.payload - p.issued);
        Some(HostXfer {
            id: p.id,
            host_addr: seg.addr.wrapping_add(seg_off as u64),
            nic_off: p.off + p.prefix + p.issued,
            len,
            seg: seg_i,
            seg_off: seg_off + len,
        })
    }

    pub(super) fn source_started(&mut self, x: &HostXfer) {
        if let Some(p) = self.get_mut(x.id) {
            p.issued += x.len;
            p.seg = x.seg;
            p.seg_off = x.seg_off;
            p.reading = 0;
        }
    }

    /// Credit read progress (`done` of the running read) to its packet.
    pub(super) fn source_progress(&mut self, id: u32, done: u32, finished: bool, failed: bool) {
        let Some(p) = self.get_mut(id) else { return };
        if failed {
            p.failed = Some(TxStatus::DmaRefused);
            p.reading = 0;
            return;
        }
        if finished {
            p.read += done;
            p.reading = 0;
        } else {
            p.reading = done;
        }
    }
}

impl<M: NicMemory> Firmware<M> {
    /// Take ready send-ring entries into staging while there is room.
    pub(super) fn accept_sends(&mut self) -> bool {
        let mut progress = false;
        while !self.tx.q.is_full() {
            let slot_i = self.tx.next_slot;
            let slot = Slot::new(&self.mem, Ring::Send, slot_i);
            let st = slot.state_acquire();
            if st & state::READY == 0 {
                break;
            }
            let seq = st >> state::SEQ_SHIFT;
            let ctrl_len = slot.ctrl_len();
            let payload = slot.payload_len();
            let nseg = slot.nseg();
            // A segment whose range wraps past the top of the address space would have the
            // bus read from address 0 on: malformed, like too few segment bytes.
            let (seg_bytes, wraps) = (0..nseg.min(MAX_SEGMENTS))
                .map(|i| slot.segment(i))
                .fold((0u64, false), |(n, w), s| (n + s.len as u64, w || s.wraps()));
            let valid = ctrl_len <= CTRL_MSG_BYTES
                && payload <= self.cfg.mtu
                && nseg <= MAX_SEGMENTS
                && seg_bytes >= payload as u64
                && !wraps;
            if !valid {
                crate::log::warn!(
                    "tx: malformed send entry {=u32} (ctrl {=u32}, payload {=u32}, {=u32} segments)",
                    slot_i,
                    ctrl_len,
                    payload,
                    nseg
                );
                slot.set_state_release(
                    state::DONE | (TxStatus::Malformed as u32) << state::STATUS_SHIFT | seq << state::SEQ_SHIFT,
                );
                self.bump(Counter::TxMalformed, 1);
                self.bump_seq(ctrl::FW_TX_SEQ);
                self.tx.next_slot = (slot_i + 1) % SEND_RING_ENTRIES;
                progress = true;
                continue;
            }
            let token = slot.token();
            let flags = if token != 0 { FLAG_TOKEN } else { 0 }
                | if slot.flags() & send_flags::ANSWERABLE != 0 { FLAG_ANSWER } else { 0 };
            let dst = slot.peer() as u16;
            if !self.stage(flags, dst, token, slot.ctrl_offset(), ctrl_len, payload, (slot_i, seq), None) {
                break;
            }
            self.tx.next_slot = (slot_i + 1) % SEND_RING_ENTRIES;
            progress = true;
        }
        progress
    }

    /// Queue the answer to `dst`'s request from entry `f`, tagged with `dst`'s payload
    /// `token`: the entry's reply bytes, then the payload it exports. `false`: no room
    /// in the send queue or staging yet.
    pub(super) fn queue_answer(&mut self, dst: u16, token: u64, f: Found) -> bool {
        let flags = FLAG_TOKEN | FLAG_ANSWERED;
        !self.tx.q.is_full() && self.stage(flags, dst, token, f.reply_offset(), f.reply_len, f.len, (0, 0), Some(f))
    }

    /// Stage a packet for link out (the queue has room): its header, and its control
    /// message copied from NIC offset `ctrl_from`; its payload is read from the host later
    /// (the send slot's segments, or the answer's range). `slot`: its send slot and that
    /// slot's sequence. `false`: no room in staging yet.
    #[allow(clippy::too_many_arguments)]
    fn stage(
        &mut self,
        flags: u8,
        dst: u16,
        token: u64,
        ctrl_from: u32,
        ctrl_len: u32,
        payload: u32,
        slot: (u32, u32),
        answer: Option<Found>,
    ) -> bool {
        let prefix = HEADER_BYTES + ctrl_wire_bytes(ctrl_len);
        let Some(rel) = self.tx.staging.alloc(prefix + payload) else { return false };
        let off = SEND_STAGING_OFF + rel;
        let src = self.cfg.node_id;
        let seq = self.tx.wire_seq;
        let hdr = Header { flags, src, dst, ctrl_len: ctrl_len as u16, payload_len: payload, token, seq };
        self.tx.wire_seq = seq.wrapping_add(1);
        for (i, w) in hdr.to_words().iter().enumerate() {
            self.mem.store_relaxed(off + 4 * i as u32, *w);
        }
        self.mem.copy_words(ctrl_from, off + HEADER_BYTES, ctrl_wire_bytes(ctrl_len) / 4);
        let id = self.tx.next_id;
        self.tx.next_id = id.wrapping_add(1);
        let pkt = TxPkt {
            id,
            slot: slot.0,
            slot_seq: slot.1,
            off,
            prefix,
            payload,
            issued: 0,
            read: 0,
            reading: 0,
            seg: 0,
            seg_off: 0,
            sent: 0,
            sending: 0,
            failed: None,
            answer,
        };
        // Cannot fail: the callers checked there is room.
        let _ = self.tx.q.push_back(pkt);
        true
    }

    /// Link out: finish the running pulse, complete sent packets, start the next pulse.
    pub(super) fn poll_link_tx<E: Engines>(&mut self, eng: &mut E) -> bool {
        let mut progress = false;
        if self.tx.link_busy {
            if eng.link_tx_status().busy {
                return false;
            }
            self.tx.link_busy = false;
            if let Some(p) = self.tx.q.front_mut() {
                p.sent += p.sending;
                p.sending = 0;
            }
            progress = true;
        }
        // Complete the front packet while it is sent or failed.
        while let Some(p) = self.tx.q.front().copied() {
            if let Some(status) = p.failed {
                // The failing read was the host bus's only transfer, so nothing more
                // will land in its staging.
                if p.sent > 0 {
                    // Part of it is on the wire: make the receiver drop it.
                    eng.link_tx_start(p.off, 0, tx_flags::ABORT | tx_flags::LAST);
                    self.tx.link_busy = true;
                }
                self.complete_send(eng, status);
                progress = true;
                if self.tx.link_busy {
                    return progress;
                }
                continue;
            }
            if p.sent < p.total() {
                break;
            }
            self.bump(Counter::TxPackets, 1);
            self.bump(Counter::TxBytes, p.payload as u64);
            if p.answer.is_some() {
                self.bump(Counter::TxAnswers, 1);
            }
            self.complete_send(eng, TxStatus::Sent);
            progress = true;
        }
        // Start the next pulse of the front packet.
        let (policy, thresh) = (self.cfg.policy, self.cfg.send_pulse);
        let Some(p) = self.tx.q.front_mut() else { return progress };
        let buffered = p.staged() - p.sent;
        let remaining = p.total() - p.sent;
        if let Some(len) = pulse_len(policy, thresh, buffered, remaining) {
            let mut flags = 0;
            if p.sent == 0 {
                flags |= tx_flags::FIRST;
            }
            if p.sent + len == p.total() {
                if let Some(f) = p.answer {
                    // The check vouches for the payload: the engines make what leaves
                    // match it (the host never sees an answer leave and may reuse its
                    // frame as soon as it retracted the entry).
                    eng.vouch_answer(p.off + p.prefix, p.payload, &f);
                    // An answer whose entry changed while its payload was read may carry
                    // torn bytes: the receiver drops it instead.
                    if !answer::still(&self.mem, &f) {
                        crate::log::warn!("tx: answer from entry {=u32} aborted: the entry changed", f.index);
                        p.failed = Some(TxStatus::DmaRefused);
                        self.bump(Counter::TxAnswersAborted, 1);
                        return true;
                    }
                }
                flags |= tx_flags::LAST;
            }
            eng.link_tx_start(p.off + p.sent, len, flags);
            p.sending = len;
            self.tx.link_busy = true;
            self.bump(Counter::LinkTxTransfers, 1);
            progress = true;
        }
        progress
    }

    fn complete_send<E: Engines>(&mut self, eng: &mut E, status: TxStatus) {
        let Some(p) = self.tx.q.pop_front() else { return };
        let next = self.tx.q.front().map(|n| n.off - SEND_STAGING_OFF);
        self.tx.staging.free_oldest(next);
        eng.tx_staging_released(p.off, p.total());
        if p.answer.is_some() {
            // The NIC's own packet: no send slot, nothing for the host to hear.
            return;
        }
        let slot = Slot::new(&self.mem, Ring::Send, p.slot);
        slot.set_state_release(state::DONE | (status as u32) << state::STATUS_SHIFT | p.slot_seq << state::SEQ_SHIFT);
        self.bump_seq(ctrl::FW_TX_SEQ);
        self.notify_host(eng, notify::IRQ_ON_SEND_DONE);
    }
}
