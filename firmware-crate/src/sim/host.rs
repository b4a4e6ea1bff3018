// SPDX-License-Identifier: GPL-2.0-only
//! The modelled host of one NIC: the other end of the rings and the IPT.
//!
//! It is deliberately small — post send entries, keep a frame attached to every receive
//! slot, arm and cancel IPT entries, poll the receive ring — and charges fixed software
//! costs for sending and receiving. The full host API is the `trapeze-host` crate's job;
//! this one exists so the firmware can be measured and tested end to end in model time.

use super::mem::SharedMem;
use super::{Params, Rng};
use crate::iface::answer::send_flags;
use crate::iface::entry::{rx_flags, state, Ring, Segment, Slot, TxStatus};
use crate::iface::ipt::{CancelState, IptEntry, PayloadToken};
use crate::iface::layout::{IPT_ENTRIES, MAX_SEGMENTS, RECV_RING_ENTRIES, SEND_RING_ENTRIES};
use std::collections::VecDeque;
use std::vec::Vec;

/// Host memory starts at this DMA (bus) address; anything outside it is refused.
pub const HOST_DMA_BASE: u64 = 0x1_0000_0000;

/// A message to send.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct OutMsg {
    pub peer: u16,
    pub ctrl: Vec<u8>,
    pub payload: Vec<u8>,
    /// Tag the payload with this token (solicited); `NONE` for unsolicited.
    pub token: PayloadToken,
    /// Split the payload over frames of this many bytes (scatter/gather); 0 = one frame.
    pub frame_bytes: u32,
    /// Send from these raw DMA segments instead of copying `payload` into host frames
    /// (e.g. addresses outside host memory, to test refusal). `payload` gives the length.
    pub raw_segments: Option<Vec<Segment>>,
    /// An answerable request (`answer::send_flags::ANSWERABLE`): `ctrl` ends with a
    /// `answer::Descriptor`.
    pub answerable: bool,
}

/// A message the host read from the receive ring.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Delivered {
    /// Model time at which host software had read the message.
    pub at_ps: u64,
    pub src: u16,
    pub ctrl: Vec<u8>,
    pub payload: Vec<u8>,
    pub flags: u32,
    pub token: PayloadToken,
}

/// A completed send.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct SentRecord {
    pub id: u64,
    pub posted_ps: u64,
    pub done_ps: u64,
    pub status: Option<TxStatus>,
}

struct Pending {
    id: u64,
    ready_ps: u64,
    posted_ps: u64,
    msg: OutMsg,
}

struct InFlight {
    id: u64,
    posted_ps: u64,
    frames: Vec<(u64, u32)>,
}

/// First-fit allocator of host-memory ranges (model only).
struct FrameAlloc {
    free: Vec<(u64, u64)>,
}

impl FrameAlloc {
    fn new(len: u64) -> Self {
        FrameAlloc { free: std::vec![(0, len)] }
    }
    fn alloc(&mut self, len: u64) -> Option<u64> {
        let len = (len.max(1) + 63) & !63;
        let i = self.free.iter().position(|&(_, l)| l >= len)?;
        let (off, l) = self.free[i];
        if l == len {
            self.free.remove(i);
        } else {
            self.free[i] = (off + len, l - len);
        }
        Some(off)
    }
    fn free(&mut self, off: u64, len: u64) {
        let len = (len.max(1) + 63) & !63;
        self.free.push((off, len));
        self.free.sort_unstable();
        let mut merged: Vec<(u64, u64)> = Vec::with_capacity(self.free.len());
        for &(o, l) in &self.free {
            match merged.last_mut() {
                Some(last) if last.0 + last.1 == o => last.1 += l,
                _ => merged.push((o, l)),
            }
        }
        self.free = merged;
    }
}

/// One node's host.
pub struct Host {
    id: u16,
    nic: SharedMem,
    memory: Vec<u8>,
    alloc: FrameAlloc,
    params: Params,
    rng: Rng,
    next_id: u64,
    pending: VecDeque<Pending>,
    send_next: u32,
    in_flight: Vec<Option<InFlight>>,
    recv_next: u32,
    /// IPT entries this host armed: frame (offset, len) per index.
    ipt_frames: Vec<Option<(u64, u32)>>,
    /// Host software reads the receive ring (off: messages stay in the ring).
    reading: bool,
    /// Messages read from the receive ring, in order.
    pub delivered: Vec<Delivered>,
    /// Completed sends, in completion order.
    pub sent: Vec<SentRecord>,
}

impl Host {
    pub(super) fn new(id: u16, nic: SharedMem, mem_bytes: usize, mtu: u32, params: Params, seed: u64) -> Self {
        let mut h = Host {
            id,
            nic,
            memory: std::vec![0; mem_bytes],
            alloc: FrameAlloc::new(mem_bytes as u64),
            params,
            rng: Rng::new(seed.wrapping_add(0x1234)),
            next_id: 0,
            pending: VecDeque::new(),
            send_next: 0,
            in_flight: (0..SEND_RING_ENTRIES).map(|_| None).collect(),
            recv_next: 0,
            ipt_frames: std::vec![None; IPT_ENTRIES as usize],
            reading: true,
            delivered: Vec::new(),
            sent: Vec::new(),
        };
        // Attach an MTU-sized frame to every receive slot for unsolicited payloads.
        for i in 0..RECV_RING_ENTRIES {
            if let Some(off) = h.alloc.alloc(mtu as u64) {
                let slot = Slot::new(&h.nic, Ring::Recv, i);
                slot.set_segment(0, Segment { addr: HOST_DMA_BASE + off, len: mtu });
                slot.set_nseg(1);
            }
        }
        h
    }

    pub fn id(&self) -> u16 {
        self.id
    }
    pub(super) fn memory_mut(&mut self) -> &mut [u8] {
        &mut self.memory
    }
    /// Host memory at DMA address `addr` (for inspecting frames).
    pub fn read(&self, addr: u64, len: usize) -> Option<&[u8]> {
        let off = addr.checked_sub(HOST_DMA_BASE)? as usize;
        self.memory.get(off..off.checked_add(len)?)
    }
    /// A fresh frame holding `bytes` (what a host exports in its answer table, say):
    /// its DMA address.
    pub fn store(&mut self, bytes: &[u8]) -> Option<u64> {
        let off = self.alloc.alloc(bytes.len() as u64)?;
        self.memory[off as usize..off as usize + bytes.len()].copy_from_slice(bytes);
        Some(HOST_DMA_BASE + off)
    }
    /// Overwrite host memory at DMA address `addr` with `bytes` (host software reusing a
    /// frame it exported, say). `false`, and nothing written, outside host memory.
    pub fn write(&mut self, addr: u64, bytes: &[u8]) -> bool {
        let Some(off) = addr.checked_sub(HOST_DMA_BASE).and_then(|o| usize::try_from(o).ok()) else { return false };
        match off.checked_add(bytes.len()).and_then(|end| self.memory.get_mut(off..end)) {
            Some(m) => {
                m.copy_from_slice(bytes);
                true
            }
            None => false,
        }
    }
    /// Stop (`false`) or resume reading the receive ring. While stopped, delivered
    /// messages stay `READY` in the ring, so the ring fills up.
    pub fn set_reading(&mut self, on: bool) {
        self.reading = on;
    }
    pub(super) fn is_quiet(&self) -> bool {
        // A message waiting in the receive ring is work for a host that reads it.
        let unread =
            self.reading && Slot::new(&self.nic, Ring::Recv, self.recv_next).state_acquire() & state::READY != 0;
        self.pending.is_empty() && self.in_flight.iter().all(|f| f.is_none()) && !unread
    }

    /// Queue `msg`; host software makes it visible to the NIC `host_send_ps` after `now`.
    /// Returns the id its [`SentRecord`] will carry.
    pub fn post(&mut self, now: u64, msg: OutMsg) -> u64 {
        let id = self.next_id;
        self.next_id += 1;
        self.pending.push_back(Pending { id, ready_ps: now + self.params.host_send_ps, posted_ps: now, msg });
        id
    }

    /// Arm an IPT entry with a fresh frame of `len` bytes (split into `frames` segments).
    /// Returns the token and the frame's DMA address.
    pub fn arm(&mut self, len: u32, frames: u32) -> Option<(PayloadToken, u64)> {
        let index = self.ipt_frames.iter().position(|f| f.is_none())?;
        let off = self.alloc.alloc(len as u64)?;
        let frames = frames.clamp(1, MAX_SEGMENTS);
        let per = len.div_ceil(frames).max(1);
        let mut segs = Vec::new();
        let mut at = 0;
        while at < len {
            let l = per.min(len - at);
            segs.push(Segment { addr: HOST_DMA_BASE + off + at as u64, len: l });
            at += l;
        }
        let key = self.rng.next_u64() | 1;
        let entry = IptEntry::new(&self.nic, index as u16)?;
        let token = entry.host_arm(key, &segs)?;
        self.ipt_frames[index] = Some((off, len));
        Some((token, HOST_DMA_BASE + off))
    }

    /// Cancel an armed entry; its frame is freed unless the firmware is mid-delivery.
    pub fn cancel(&mut self, token: PayloadToken) -> Option<CancelState> {
        let entry = IptEntry::new(&self.nic, token.index())?;
        let st = entry.host_cancel();
        if st != CancelState::InFlight {
            self.release_ipt(token.index());
        }
        Some(st)
    }

    fn release_ipt(&mut self, index: u16) {
        if let Some((off, len)) = self.ipt_frames.get_mut(index as usize).and_then(|f| f.take()) {
            self.alloc.free(off, len as u64);
        }
    }

    /// One tick of host software: reap send completions, post ready sends, read the
    /// receive ring.
    pub(super) fn tick(&mut self, now: u64) {
        self.reap_sends(now);
        while let Some(p) = self.pending.front() {
            if p.ready_ps > now || !self.post_now(now) {
                break;
            }
        }
        if self.reading {
            self.poll_recv(now);
        }
    }

    fn reap_sends(&mut self, now: u64) {
        for i in 0..SEND_RING_ENTRIES {
            let slot = Slot::new(&self.nic, Ring::Send, i);
            let st = slot.state_acquire();
            if st & state::DONE == 0 {
                continue;
            }
            if let Some(f) = self.in_flight[i as usize].take() {
                for (off, len) in f.frames {
                    self.alloc.free(off, len as u64);
                }
                let status = TxStatus::from_u8(((st & state::STATUS_MASK) >> state::STATUS_SHIFT) as u8);
                self.sent.push(SentRecord { id: f.id, posted_ps: f.posted_ps, done_ps: now, status });
            }
            slot.set_state_release(0);
        }
    }

    /// Write the front pending message into the next send slot, if it is free.
    fn post_now(&mut self, _now: u64) -> bool {
        let i = self.send_next;
        let slot = Slot::new(&self.nic, Ring::Send, i);
        if slot.state_acquire() != 0 || self.in_flight[i as usize].is_some() {
            return false;
        }
        let Some(p) = self.pending.front() else { return false };
        let len = p.msg.payload.len() as u32;
        let mut frames = Vec::new();
        let segs: Vec<Segment> = match &p.msg.raw_segments {
            Some(s) => s.clone(),
            None if len == 0 => Vec::new(),
            None => {
                let per = if p.msg.frame_bytes == 0 { len } else { p.msg.frame_bytes };
                let mut segs = Vec::new();
                for (k, chunk) in p.msg.payload.chunks(per as usize).enumerate() {
                    let Some(off) = self.alloc.alloc(chunk.len() as u64) else {
                        for (o, l) in frames {
                            self.alloc.free(o, l as u64);
                        }
                        return false;
                    };
                    self.memory[off as usize..off as usize + chunk.len()].copy_from_slice(chunk);
                    frames.push((off, chunk.len() as u32));
                    segs.push(Segment { addr: HOST_DMA_BASE + off, len: chunk.len() as u32 });
                    let _ = k;
                }
                segs
            }
        };
        let Some(p) = self.pending.pop_front() else { return false };
        slot.set_peer(p.msg.peer as u32);
        slot.set_ctrl_len(p.msg.ctrl.len() as u32);
        slot.write_ctrl(&p.msg.ctrl);
        slot.set_payload_len(len);
        slot.set_token(p.msg.token.0);
        slot.set_flags(if p.msg.answerable { send_flags::ANSWERABLE } else { 0 });
        slot.set_nseg(segs.len() as u32);
        for (k, s) in segs.iter().enumerate().take(MAX_SEGMENTS as usize) {
            slot.set_segment(k as u32, *s);
        }
        self.in_flight[i as usize] = Some(InFlight { id: p.id, posted_ps: p.posted_ps, frames });
        slot.set_state_release(state::READY | ((p.id as u32) & 0xFFFF) << state::SEQ_SHIFT);
        self.send_next = (i + 1) % SEND_RING_ENTRIES;
        true
    }

    fn poll_recv(&mut self, now: u64) {
        let nic = self.nic.clone();
        loop {
            let slot = Slot::new(&nic, Ring::Recv, self.recv_next);
            if slot.state_acquire() & state::READY == 0 {
                return;
            }
            let flags = slot.flags();
            let len = slot.payload_len() as usize;
            let token = PayloadToken(slot.token());
            let mut ctrl = std::vec![0u8; slot.ctrl_len().min(128) as usize];
            slot.read_ctrl(&mut ctrl);
            let payload = if flags & rx_flags::IPT != 0 {
                let frame = self.ipt_frames.get(token.index() as usize).copied().flatten();
                let data = frame
                    .and_then(|(off, _)| self.read(HOST_DMA_BASE + off, len))
                    .map(|d| d.to_vec())
                    .unwrap_or_default();
                // Delivered (or failed): the entry is consumed, the frame is ours again.
                self.release_ipt(token.index());
                data
            } else {
                let seg = slot.segment(0);
                self.read(seg.addr, len).map(|d| d.to_vec()).unwrap_or_default()
            };
            self.delivered.push(Delivered {
                at_ps: now + self.params.host_recv_ps,
                src: slot.peer() as u16,
                ctrl,
                payload,
                flags,
                token,
            });
            // Give the slot back with its frame still attached.
            slot.set_state_release(0);
            self.recv_next = self.recv_next.wrapping_add(1);
        }
    }
}
