// SPDX-License-Identifier: GPL-2.0-only
//! A port: one NIC endpoint with its payload frames, as NetRPC and GMS use it.
//!
//! * **Receive slots.** Every receive slot has a frame attached. An unsolicited payload
//!   (a putpage, a delegated request) arrives in it; [`Port::receive`] detaches that frame,
//!   hands it up as `InPayload::Buffer` and attaches a free one in its place (none free:
//!   the payload is refused and counted) — the papers' cost of an unsolicited payload.
//! * **IPT.** A solicited reply lands zero-copy in a frame armed in the IPT
//!   ([`Port::solicit`]); the token travels in the request. Disarming waits while the NIC
//!   is writing into the frame, bounded by [`DISARM_SPINS`]: a frame whose entry stays
//!   busy is leaked and counted, never reused under the NIC.
//! * **Limbo.** A frame a protocol stops using may still be attached to posted sends:
//!   [`Port::retire`] parks it until every send posted before the next [`Port::tag_limbo`]
//!   has completed ([`Port::reap`]).
//! * **Posting.** [`Port::post`] hands a NetRPC transmit to the send ring; while the ring
//!   is full it lets the place make room (run an inline NIC, ring a doorbell) and reaps,
//!   a bounded number of times, then drops the transmit and counts it (NetRPC's timeouts
//!   and GMS's retries take over).
//! * **Answers.** [`Port::export`] lets the NIC send a frame by itself to a peer whose
//!   request names its answer-table entry (one-sided reads); [`Port::retract`] ends that
//!   before the frame is let go.
//! * The endpoint itself lives on the place's heap ([`Storage::Boxed`]): it is a few KiB,
//!   and a kernel stack must not carry it through set-up.

use super::endpoint::{ArmError, Endpoint, RecvMsg, SendError, SendMsg};
use super::frames::FrameMem;
use super::iface::answer::Export;
use super::iface::entry::{Segment, TxStatus};
use super::iface::ipt::{CancelState, PayloadToken};
use super::iface::layout::{ctrl, ctrl_word, ANSWER_ENTRIES, IPT_ENTRIES, MAX_SEGMENTS, RECV_RING_ENTRIES};
use super::iface::mem::NicMemory;
use super::netrpc::prelude::{InPayload, ReplyTo, Transmit};
use super::storage::{Fifo, Stack, Storage};
use core::sync::atomic::Ordering;

/// The send cookie of the transmits a port posts for NetRPC (a place numbers its own
/// sends below it).
pub const RPC_COOKIE: usize = usize::MAX;

/// Attempts to disarm an IPT entry the NIC is writing into (one packet's DMA) before the
/// frame is given up as leaked.
pub const DISARM_SPINS: u32 = 1_000_000;

/// A limbo entry not yet tagged with the sends it waits for.
const UNTAGGED: u64 = u64::MAX;

/// What a port counted.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct PortStats {
    /// Unsolicited payloads refused because no frame was free to replace the slot's.
    pub starved: u64,
    /// Payloads the NIC refused (no frame attached, too long for it).
    pub refused: u64,
    /// Sends the NIC completed with an error.
    pub tx_errors: u64,
    /// Transmits dropped because the send ring stayed full.
    pub tx_dropped: u64,
    /// Frames leaked: their IPT entry stayed busy, or the limbo was full.
    pub leaked: u64,
}

/// An answer-table entry a port exports a frame in, and the key a peer's request must
/// name ([`Port::export`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Exported {
    pub index: u32,
    pub key: u64,
}

/// Why a port could not be set up.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum SetupError {
    /// Fewer frames than the receive slots plus the spares asked for.
    TooFewFrames { have: usize, need: usize },
    /// The place's storage could not hold the tables.
    NoMemory,
}

/// One endpoint and its frames. `M`: how NIC memory is reached; `A`: the frames; `S`:
/// where the tables live.
pub struct Port<M: NicMemory, A: FrameMem, S: Storage> {
    /// On the heap: an endpoint is a few KiB, and a port is moved while it is set up.
    pub ep: S::Boxed<Endpoint<M, usize>>,
    frames: A,
    free: Stack<A::Frame, S>,
    /// Frames armed in the IPT, with their tokens.
    armed: Stack<(A::Frame, PayloadToken), S>,
    /// Frames waiting for sends: (frame, send serial to wait for, or [`UNTAGGED`]).
    limbo: Fifo<(A::Frame, u64), S>,
    /// The frame attached to each receive slot.
    slot_frame: S::Buf<A::Frame>,
    /// Answer-table entries free for [`Self::export`], and whether each is in use.
    answers_free: Stack<u32, S>,
    answer_used: S::Buf<bool>,
    posted: u64,
    reaped: u64,
    /// The firmware's send-completion sequence when the ring was last reaped.
    tx_seq_seen: u32,
    pub stats: PortStats,
}

impl<M: NicMemory, A: FrameMem, S: Storage> Port<M, A, S> {
    /// The segment to attach to receive slot `slot` when the endpoint is initialised:
    /// slot `i` starts with frame number `i`.
    pub fn slot_segment(frames: &A, slot: u32) -> Option<Segment> {
        let f = frames.nth(slot as usize);
        Some(Segment { addr: frames.dma(f)?, len: A::FRAME_BYTES })
    }

    /// A port over `ep`, whose receive slots were given [`Self::slot_segment`]s, with
    /// `frames` of which at least `spare` stay beyond the receive slots.
    pub fn new(ep: Endpoint<M, usize>, frames: A, spare: usize) -> Result<Self, SetupError> {
        Self::with_boxed(S::boxed(ep).ok_or(SetupError::NoMemory)?, frames, spare)
    }

    /// [`Self::new`] over an endpoint already on the heap (where a stack is small, the
    /// endpoint is moved once, into its box, and never again).
    pub fn with_boxed(ep: S::Boxed<Endpoint<M, usize>>, frames: A, spare: usize) -> Result<Self, SetupError> {
        let (n, rx) = (frames.count(), RECV_RING_ENTRIES as usize);
        if n < rx + spare {
            return Err(SetupError::TooFewFrames { have: n, need: rx + spare });
        }
        let first = frames.nth(0);
        let mut free = Stack::new(n, first).ok_or(SetupError::NoMemory)?;
        for i in (rx..n).rev() {
            free.push(frames.nth(i));
        }
        let mut slot_frame = S::buf(rx, first).ok_or(SetupError::NoMemory)?;
        for (i, s) in slot_frame.iter_mut().enumerate() {
            *s = frames.nth(i);
        }
        let mut answers_free = Stack::new(ANSWER_ENTRIES as usize, 0).ok_or(SetupError::NoMemory)?;
        for i in (0..ANSWER_ENTRIES).rev() {
            answers_free.push(i);
        }
        Ok(Port {
            answers_free,
            answer_used: S::buf(ANSWER_ENTRIES as usize, false).ok_or(SetupError::NoMemory)?,
            ep,
            armed: Stack::new(IPT_ENTRIES as usize, (first, PayloadToken::NONE)).ok_or(SetupError::NoMemory)?,
            limbo: Fifo::new(n, (first, 0)).ok_or(SetupError::NoMemory)?,
            frames,
            free,
            slot_frame,
            posted: 0,
            reaped: 0,
            tx_seq_seen: 0,
            stats: PortStats::default(),
        })
    }

    /// The frames themselves (to read, write or address them).
    pub fn frames(&self) -> &A {
        &self.frames
    }
    /// The frames, to lend or take back memory from outside the pool.
    pub fn frames_mut(&mut self) -> &mut A {
        &mut self.frames
    }
    pub fn alloc(&mut self) -> Option<A::Frame> {
        self.free.pop()
    }
    /// Give `f` back to the pool at once (it is attached to nothing: see [`Self::retire`]);
    /// a lent frame goes back to its lender ([`FrameMem::give_back`]).
    pub fn free(&mut self, f: A::Frame) {
        if !self.frames.give_back(f) {
            return;
        }
        debug_assert!(!self.free.as_slice().contains(&f), "frame {f:?} freed twice");
        if !self.free.push(f) {
            self.stats.leaked += 1;
        }
    }
    /// Frames in the pool.
    pub fn available(&self) -> usize {
        self.free.len()
    }
    /// Frames attached to receive slots.
    pub fn in_slots(&self) -> usize {
        self.slot_frame.len()
    }
    /// Frames armed in the IPT.
    pub fn armed(&self) -> usize {
        self.armed.len()
    }
    /// Frames waiting in limbo.
    pub fn in_limbo(&self) -> usize {
        self.limbo.len()
    }
    /// The frame attached to receive slot `slot`.
    pub fn slot_frame(&self, slot: u32) -> A::Frame {
        self.slot_frame[(slot % RECV_RING_ENTRIES) as usize]
    }
    pub fn write(&self, f: A::Frame, data: &[u8]) -> bool {
        data.len() <= A::FRAME_BYTES as usize && self.frames.write(f, data)
    }
    pub fn read(&self, f: A::Frame, out: &mut [u8]) -> bool {
        out.len() <= A::FRAME_BYTES as usize && self.frames.read(f, out)
    }
    pub fn copy(&self, from: A::Frame, to: A::Frame, len: u32) -> bool {
        len <= A::FRAME_BYTES && self.frames.copy(from, to, len)
    }

    /// Arm an IPT entry on the whole of `f` (every piece of a group): a solicited payload
    /// for its token lands there (a longer one is refused by the NIC).
    pub fn arm(&mut self, f: A::Frame) -> Result<PayloadToken, ArmError> {
        let mut segs = [Segment { addr: 0, len: 0 }; MAX_SEGMENTS as usize];
        let n = self.frames.segments(f, &mut segs).ok_or(ArmError::BadSegments)?;
        let token = self.ep.arm(segs.get(..n).ok_or(ArmError::BadSegments)?)?;
        if self.armed.push((f, token)) {
            Ok(token)
        } else {
            // More armed frames than IPT entries cannot be; refuse rather than forget one.
            self.ep.disarm(token);
            Err(ArmError::TableFull)
        }
    }

    /// A fresh frame armed for a solicited reply, or `None` (no frame, no IPT entry).
    pub fn solicit(&mut self) -> Option<ReplyTo<A::Frame>> {
        let f = self.alloc()?;
        match self.arm(f) {
            Ok(token) => Some(ReplyTo::Solicited { token: token.0, frame: f }),
            Err(_) => {
                self.free(f);
                None
            }
        }
    }

    /// Disarm `f`'s IPT entry if it has one; the frame stays allocated. `false`: the NIC
    /// kept writing into it for [`DISARM_SPINS`] attempts, and the frame must not be reused.
    pub fn unarm(&mut self, f: A::Frame) -> bool {
        let Some((_, token)) = self.armed.remove_where(|a| a.0 == f) else { return true };
        for _ in 0..DISARM_SPINS {
            if self.ep.disarm(token) != CancelState::InFlight {
                return true;
            }
            core::hint::spin_loop();
        }
        self.stats.leaked += 1;
        false
    }

    /// A protocol is done with `f`: disarm it and free it (unless it already waits in
    /// limbo for a send that carries it).
    pub fn release(&mut self, f: A::Frame) {
        if self.limbo.any(|l| l.0 == f) {
            return;
        }
        if self.unarm(f) {
            self.free(f);
        }
    }

    /// Free `f` once the sends posted up to the next [`Self::tag_limbo`] have completed.
    pub fn retire(&mut self, f: A::Frame) {
        if !self.limbo.push_back((f, UNTAGGED)) {
            // Cannot happen (the limbo holds every frame); leaking beats a double use.
            self.stats.leaked += 1;
        }
    }

    /// Frames retired so far wait for every send posted up to now.
    pub fn tag_limbo(&mut self) {
        let posted = self.posted;
        self.limbo.update_back_while(|l| {
            let untagged = l.1 == UNTAGGED;
            if untagged {
                l.1 = posted;
            }
            untagged
        });
    }

    /// Reap completed sends (each cookie and status to `done`) and free the frames in
    /// limbo whose sends are done. Whether any send completed.
    pub fn reap(&mut self, mut done: impl FnMut(usize, TxStatus)) -> bool {
        let seq = self.ep.mem().load(ctrl_word(ctrl::FW_TX_SEQ), Ordering::Acquire);
        // Unchanged: no send completed since the last scan of the ring (but frames retired
        // since then may wait for sends that had completed already).
        let mut n = 0;
        if seq != self.tx_seq_seen {
            // Completions published before `seq` are visible now; later ones move it again.
            self.tx_seq_seen = seq;
            let errors = &mut self.stats.tx_errors;
            n = self.ep.reap_sends(|c, st| {
                if st != TxStatus::Sent {
                    *errors += 1;
                }
                done(c, st)
            });
            self.reaped += n as u64;
        }
        while let Some(&(f, serial)) = self.limbo.front() {
            if serial > self.reaped {
                break;
            }
            self.limbo.pop_front();
            self.free(f);
        }
        n > 0
    }

    /// Take the message the endpoint just returned off its receive slot for NetRPC (see
    /// the module doc); the slot goes back to the NIC.
    pub fn receive(&mut self, m: &RecvMsg) -> InPayload<A::Frame> {
        let slot = (m.slot % RECV_RING_ENTRIES) as usize;
        let payload = if m.via_ipt() {
            InPayload::Ipt { token: m.token.0, len: m.payload_len }
        } else if m.payload_refused() || m.payload_len > A::FRAME_BYTES {
            self.stats.refused += 1;
            InPayload::Refused
        } else if m.payload_len > 0 {
            match self.free.pop() {
                Some(fresh) => InPayload::Buffer {
                    frame: core::mem::replace(&mut self.slot_frame[slot], fresh),
                    len: m.payload_len,
                },
                None => {
                    self.stats.starved += 1;
                    InPayload::Refused
                }
            }
        } else {
            InPayload::None
        };
        let f = self.slot_frame[slot];
        match self.frames.dma(f) {
            Some(addr) => self.ep.release_recv(Some(&[Segment { addr, len: A::FRAME_BYTES }])),
            None => self.ep.release_recv(None),
        }
        payload
    }

    /// Post a message the place built itself (a ping, a raw send) with `cookie` (below
    /// [`RPC_COOKIE`]). It counts as a send frames in limbo may wait for.
    pub fn post_raw(&mut self, msg: &SendMsg<'_>, cookie: usize) -> Result<(), SendError> {
        self.ep.post_send(msg, cookie)?;
        self.posted += 1;
        Ok(())
    }

    /// Post a NetRPC transmit. While the send ring is full: reap, then `make_room` (run an
    /// inline NIC, ring a doorbell, yield) and reap, at most `tries` times; then the transmit is
    /// dropped and counted. `false`: not posted. Either way its payload frame has left the
    /// port ([`FrameMem::sent`]).
    pub fn post(&mut self, t: &Transmit<A::Frame>, tries: u32, make_room: impl FnMut(&mut Endpoint<M, usize>)) -> bool {
        let posted = self.post_rpc(t, tries, make_room);
        if let Some((f, _)) = t.payload {
            self.frames.sent(f);
        }
        posted
    }

    /// Let the NIC answer requests for `frame`'s first `len` bytes (one contiguous piece)
    /// with `reply` by itself ([`Endpoint::export`]); `again` updates that export in place.
    /// `None`: the frame is in pieces, or the answer table is full.
    pub fn export(&mut self, again: Option<Exported>, frame: A::Frame, len: u32, reply: &[u8]) -> Option<Exported> {
        let mut segs = [Segment::default(); MAX_SEGMENTS as usize];
        let n = self.frames.segments(frame, &mut segs)?;
        let seg = *segs[..n].first().filter(|s| n == 1 && s.len >= len)?;
        let at = match again {
            Some(a) if self.answer_used.get(a.index as usize) == Some(&true) => a,
            Some(_) => return None,
            None => Exported { index: self.answers_free.pop()?, key: self.ep.answer_key() },
        };
        self.answer_used[at.index as usize] = true;
        let e = Export { key: at.key, addr: seg.addr, len, reply };
        if self.ep.export(at.index, &e).is_err() {
            self.retract(at.index);
            return None;
        }
        Some(at)
    }

    /// End an export ([`Self::export`]) before its frame is let go; its entry is free again.
    pub fn retract(&mut self, index: u32) {
        if let Some(used @ true) = self.answer_used.get_mut(index as usize) {
            let _ = self.ep.retract(index);
            *used = false;
            self.answers_free.push(index);
        }
    }

    /// Answer-table entries in use.
    pub fn exports(&self) -> usize {
        ANSWER_ENTRIES as usize - self.answers_free.len()
    }

    fn post_rpc(
        &mut self,
        t: &Transmit<A::Frame>,
        tries: u32,
        mut make_room: impl FnMut(&mut Endpoint<M, usize>),
    ) -> bool {
        // The payload's pieces (a group's several), cut to its length.
        let mut segs = [Segment { addr: 0, len: 0 }; MAX_SEGMENTS as usize];
        let mut n = 0;
        if let Some((f, len)) = t.payload {
            let Some(pieces) = self.frames.segments(f, &mut segs) else { return false };
            let mut left = len;
            for s in segs.iter_mut().take(pieces) {
                if left == 0 {
                    break;
                }
                s.len = s.len.min(left);
                left -= s.len;
                n += 1;
            }
            if left > 0 {
                return false;
            }
        }
        let segs = &segs[..n];
        let msg = SendMsg {
            peer: t.dst,
            ctrl: t.ctrl(),
            payload_len: t.payload.map_or(0, |p| p.1),
            segments: segs,
            token: PayloadToken(t.tag),
        };
        for _ in 0..tries.max(1) {
            let posted = if t.answerable {
                self.ep.post_answerable(&msg, RPC_COOKIE)
            } else {
                self.ep.post_send(&msg, RPC_COOKIE)
            };
            match posted.map(|()| self.posted += 1) {
                Ok(()) => return true,
                Err(SendError::RingFull) => {
                    make_room(&mut *self.ep);
                    self.reap(|_, _| {});
                }
                Err(_) => return false,
            }
        }
        self.stats.tx_dropped += 1;
        false
    }
}
