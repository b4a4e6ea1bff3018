// SPDX-License-Identifier: GPL-2.0-only
//! The host side of a NIC endpoint: send ring, receive ring, IPT, configuration.
//!
//! Call order, as in the papers' Trapeze API:
//! * sending — [`Endpoint::post_send`] fills the next send slot (control message, payload
//!   frames as DMA segments, optional payload token) and hands it to the NIC with a
//!   cookie; the frames stay owned by the NIC until [`Endpoint::reap_sends`] returns that
//!   cookie (the completion handler), which a caller runs on reuse or on an explicit
//!   check (`tpz_check_xmit_complete`).
//! * receiving — [`Endpoint::poll_recv`] returns the next message (`tpz_get_rcvmsg`); its
//!   payload is in the slot's attached frame or, with [`RecvMsg::via_ipt`], in the IPT
//!   frame of its token. [`Endpoint::release_recv`] gives the slot back, optionally with
//!   a fresh frame attached (`tpz_detach_rcvmsg` + `tpz_attach_rcvmsg` +
//!   `tpz_release_rcvmsg`).
//! * solicited payloads — [`Endpoint::arm`] maps frames into a free IPT entry and returns
//!   the token to send to a peer; after the tagged message arrives (or to give up),
//!   [`Endpoint::disarm`] returns the entry to the free pool.
//! * answers (one-sided reads) — [`Endpoint::export`] lets the NIC send a range of host
//!   memory by itself to a peer whose request names the entry and its key
//!   ([`Endpoint::post_answerable`]); [`Endpoint::begin_change`] comes before the range
//!   changes, [`Endpoint::retract`] before it is freed. The peer receives the answer as
//!   a message with [`RecvMsg::answer`].
//!
//! The endpoint is single-threaded (`&mut self`); a runtime that needs concurrency wraps
//! it in its own lock. Nothing allocates.

use super::iface::answer;
use super::iface::entry::{rx_flags, state, Ring, Segment, Slot, TxStatus};
use super::iface::ipt::{CancelState, IptEntry, PayloadToken};
use super::iface::layout::{
    ctrl, ctrl_word, Counter, FwState, ANSWER_ENTRIES, CTRL_MSG_BYTES, ENDPOINT_MAGIC, IPT_ENTRIES, LAYOUT_VERSION,
    MAX_SEGMENTS, RECV_RING_ENTRIES, SEND_RING_ENTRIES,
};
use super::iface::mem::NicMemory;
use super::keys::KeyGen;
use core::sync::atomic::Ordering;

/// Configuration written into the control block (defined once, in `iface`).
pub use super::iface::layout::EndpointConfig;

/// A message to send. The payload is `payload_len` bytes gathered from `segments`.
#[derive(Clone, Copy, Debug)]
pub struct SendMsg<'a> {
    pub peer: u16,
    pub ctrl: &'a [u8],
    pub payload_len: u32,
    pub segments: &'a [Segment],
    /// Tag the payload for the receiver's IPT entry (`NONE`: unsolicited).
    pub token: PayloadToken,
}

/// Why a send could not be posted. Nothing was handed to the NIC.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum SendError {
    /// The next send slot is still owned by the NIC or not yet reaped.
    RingFull,
    CtrlTooLong,
    TooManySegments,
    /// The segments hold fewer bytes than `payload_len`.
    SegmentsTooShort,
    /// An answerable request whose control message is not whole words ending with a
    /// descriptor.
    NoDescriptor,
}

/// A received message (the control message copied out of the slot).
#[derive(Clone, Copy, Debug)]
pub struct RecvMsg {
    /// Receive-ring position (pass to [`Endpoint::release_recv`]).
    pub slot: u32,
    pub src: u16,
    pub ctrl_len: u32,
    pub ctrl: [u8; CTRL_MSG_BYTES as usize],
    pub payload_len: u32,
    pub token: PayloadToken,
    pub flags: u32,
}

impl RecvMsg {
    /// No message: a buffer for [`Endpoint::poll_recv_into`].
    pub const EMPTY: RecvMsg = RecvMsg {
        slot: 0,
        src: 0,
        ctrl_len: 0,
        ctrl: [0; CTRL_MSG_BYTES as usize],
        payload_len: 0,
        token: PayloadToken(0),
        flags: 0,
    };
    #[inline]
    pub fn ctrl(&self) -> &[u8] {
        &self.ctrl[..(self.ctrl_len as usize).min(self.ctrl.len())]
    }
    /// The payload went into the IPT frame armed for [`RecvMsg::token`].
    #[inline]
    pub fn via_ipt(&self) -> bool {
        self.flags & rx_flags::IPT != 0
    }
    /// A NIC's answer from its answer table (`iface::answer`), not a message its host sent:
    /// the IPT token its payload arrived under (what NetRPC's `handle_received` takes).
    #[inline]
    pub fn answer(&self) -> Option<u64> {
        (self.flags & rx_flags::ANSWER != 0).then_some(self.token.0)
    }
    /// The payload was refused (forged/stale token, no frame, DMA refused).
    #[inline]
    pub fn payload_refused(&self) -> bool {
        self.flags & (rx_flags::BAD_TOKEN | rx_flags::NO_FRAME | rx_flags::DMA_REFUSED) != 0
    }
}

/// Why an IPT entry could not be armed.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ArmError {
    /// Every IPT entry is in use.
    TableFull,
    /// No segments, or more than [`MAX_SEGMENTS`].
    BadSegments,
}

const WORDS: usize = (IPT_ENTRIES as usize).div_ceil(32);

/// The host's handle on one NIC endpoint. `C` is the send-completion cookie.
pub struct Endpoint<M: NicMemory, C: Copy> {
    mem: M,
    keys: KeyGen,
    send_next: u32,
    send_seq: u32,
    /// Cookie of each send slot handed to the NIC and not yet reaped.
    send_cookie: [Option<C>; SEND_RING_ENTRIES as usize],
    /// How many of `send_cookie` are `Some` (reaping stops once it has seen them all).
    sends_posted: u32,
    /// While any send is posted: the slot of the oldest one. No slot from `send_next` up
    /// to it (ring order) has a cookie, so reaping starts its oldest-first scan there.
    send_oldest: u32,
    recv_next: u32,
    /// Bytes of the frame this host attached to each receive slot: an unsolicited
    /// payload reported longer is refused (the NIC's own copy of the segments is not
    /// trusted for that).
    recv_cap: [u32; RECV_RING_ENTRIES as usize],
    /// IPT entries in use by this host (armed, or delivered and not yet disarmed).
    ipt_used: [u32; WORDS],
    /// Bytes of the frame armed in each IPT entry, likewise for solicited payloads.
    ipt_cap: [u32; IPT_ENTRIES as usize],
}

/// Bytes `segs` hold (saturating).
fn frame_bytes(segs: &[Segment]) -> u32 {
    segs.iter().fold(0u32, |n, s| n.saturating_add(s.len))
}

impl<M: NicMemory, C: Copy> Endpoint<M, C> {
    /// Take over a freshly reset endpoint: clear both rings, attach to every receive
    /// slot the frame `recv_frame(slot)` gives for unsolicited payloads (or none), write
    /// `cfg`, and publish the endpoint magic. Call before any traffic can arrive.
    pub fn init(
        mem: M,
        cfg: &EndpointConfig,
        key_seed: [u64; 2],
        mut recv_frame: impl FnMut(u32) -> Option<Segment>,
    ) -> Self {
        for ring in [Ring::Send, Ring::Recv] {
            for i in 0..ring.entries() {
                let s = Slot::new(&mem, ring, i);
                s.set_nseg(0);
                s.set_state_release(0);
            }
        }
        // Nothing exported: a table an earlier host left is emptied.
        for i in 0..ANSWER_ENTRIES {
            let _ = answer::retract(&mem, i);
        }
        let mut recv_cap = [0; RECV_RING_ENTRIES as usize];
        for i in 0..RECV_RING_ENTRIES {
            if let Some(seg) = recv_frame(i) {
                let s = Slot::new(&mem, Ring::Recv, i);
                s.set_segment(0, seg);
                s.set_nseg(1);
                recv_cap[i as usize] = seg.len;
            }
        }
        let ep = Endpoint {
            mem,
            keys: KeyGen::new(key_seed),
            send_next: 0,
            send_seq: 0,
            send_cookie: [None; SEND_RING_ENTRIES as usize],
            sends_posted: 0,
            send_oldest: 0,
            recv_next: 0,
            recv_cap,
            ipt_used: [0; WORDS],
            ipt_cap: [0; IPT_ENTRIES as usize],
        };
        ep.configure(cfg);
        ep.mem.store_relaxed(ctrl_word(ctrl::LAYOUT_VERSION), LAYOUT_VERSION);
        ep.mem.store(ctrl_word(ctrl::MAGIC), ENDPOINT_MAGIC, Ordering::Release);
        ep
    }

    pub fn mem(&self) -> &M {
        &self.mem
    }

    /// Write configuration words and ask the firmware to reload them.
    pub fn configure(&self, cfg: &EndpointConfig) {
        cfg.store(&self.mem);
        let seq = self.mem.load_relaxed(ctrl_word(ctrl::CONFIG_SEQ)).wrapping_add(1);
        self.mem.store(ctrl_word(ctrl::CONFIG_SEQ), seq, Ordering::Release);
    }

    /// Has the firmware applied the latest configuration?
    pub fn config_applied(&self) -> bool {
        self.mem.load(ctrl_word(ctrl::FW_CONFIG_SEQ), Ordering::Acquire)
            == self.mem.load_relaxed(ctrl_word(ctrl::CONFIG_SEQ))
    }

    pub fn fw_state(&self) -> Option<FwState> {
        FwState::from_u32(self.mem.load(ctrl_word(ctrl::FW_STATE), Ordering::Acquire))
    }
    pub fn fw_version(&self) -> u32 {
        self.mem.load_relaxed(ctrl_word(ctrl::FW_VERSION))
    }
    pub fn counter(&self, c: Counter) -> u64 {
        self.mem.load_u64(c.offset())
    }
    /// Bumped by the firmware for every received message: wait for it to change.
    pub fn rx_seq(&self) -> u32 {
        self.mem.load(ctrl_word(ctrl::FW_RX_SEQ), Ordering::Acquire)
    }

    // ---- sending ---------------------------------------------------------------

    /// Hand a message to the NIC. `cookie` is returned by [`Self::reap_sends`] once the
    /// NIC no longer needs the payload frames.
    pub fn post_send(&mut self, msg: &SendMsg<'_>, cookie: C) -> Result<(), SendError> {
        self.post(msg, cookie, 0)
    }

    /// [`Self::post_send`] a request the peer's NIC may answer by itself: `msg.ctrl` (whole
    /// words) ends with an [`answer::Descriptor`] naming the peer's entry, its key and the
    /// token of the IPT frame armed for the answer's payload. Whatever that NIC cannot
    /// answer reaches its host as an ordinary message.
    pub fn post_answerable(&mut self, msg: &SendMsg<'_>, cookie: C) -> Result<(), SendError> {
        if answer::Descriptor::from_ctrl(msg.ctrl).is_none() || !msg.ctrl.len().is_multiple_of(4) {
            return Err(SendError::NoDescriptor);
        }
        self.post(msg, cookie, answer::send_flags::ANSWERABLE)
    }

    fn post(&mut self, msg: &SendMsg<'_>, cookie: C, flags: u32) -> Result<(), SendError> {
        if msg.ctrl.len() > CTRL_MSG_BYTES as usize {
            return Err(SendError::CtrlTooLong);
        }
        if msg.segments.len() > MAX_SEGMENTS as usize {
            return Err(SendError::TooManySegments);
        }
        let cap: u64 = msg.segments.iter().map(|s| s.len as u64).sum();
        if cap < msg.payload_len as u64 {
            return Err(SendError::SegmentsTooShort);
        }
        let i = self.send_next;
        let slot = Slot::new(&self.mem, Ring::Send, i);
        if slot.state_acquire() != 0 || self.send_cookie[i as usize].is_some() {
            return Err(SendError::RingFull);
        }
        slot.set_peer(msg.peer as u32);
        slot.set_ctrl_len(msg.ctrl.len() as u32);
        slot.write_ctrl(msg.ctrl);
        slot.set_payload_len(msg.payload_len);
        slot.set_token(msg.token.0);
        slot.set_flags(flags);
        slot.set_nseg(msg.segments.len() as u32);
        for (k, s) in msg.segments.iter().enumerate() {
            slot.set_segment(k as u32, *s);
        }
        self.send_seq = self.send_seq.wrapping_add(1);
        self.send_cookie[i as usize] = Some(cookie);
        if self.sends_posted == 0 {
            self.send_oldest = i;
        }
        self.sends_posted += 1;
        slot.set_state_release(state::READY | (self.send_seq & 0xFFFF) << state::SEQ_SHIFT);
        self.send_next = (i + 1) % SEND_RING_ENTRIES;
        Ok(())
    }

    /// Run `done(cookie, status)` for every send the NIC has finished with, oldest
    /// first; returns how many.
    pub fn reap_sends(&mut self, mut done: impl FnMut(C, TxStatus)) -> usize {
        let mut n = 0;
        // Posted slots left to look at: the scan ends at the last one (a poll with
        // nothing in flight costs nothing).
        let mut left = self.sends_posted;
        // Slots before the oldest posted one (from `send_next`) hold no cookie: skip them.
        let mut k = (self.send_oldest + SEND_RING_ENTRIES - self.send_next) % SEND_RING_ENTRIES;
        // The oldest posted send still not done after this scan.
        let mut oldest = None;
        while left > 0 && k < SEND_RING_ENTRIES {
            // Oldest first: start at the slot after the newest posted one.
            let i = (self.send_next + k) % SEND_RING_ENTRIES;
            k += 1;
            // Only a posted slot (one with a cookie) can be DONE: skip the others without
            // a load from NIC memory.
            if self.send_cookie[i as usize].is_none() {
                continue;
            }
            left -= 1;
            let slot = Slot::new(&self.mem, Ring::Send, i);
            let st = slot.state_acquire();
            if st & state::DONE == 0 {
                oldest.get_or_insert(i);
                continue;
            }
            let status = TxStatus::from_u8(((st & state::STATUS_MASK) >> state::STATUS_SHIFT) as u8)
                .unwrap_or(TxStatus::Malformed);
            slot.set_state_release(0);
            if let Some(c) = self.send_cookie[i as usize].take() {
                self.sends_posted -= 1;
                done(c, status);
                n += 1;
            }
        }
        if let Some(i) = oldest {
            self.send_oldest = i;
        }
        n
    }

    /// Sends handed to the NIC and not yet reaped.
    pub fn sends_in_flight(&self) -> usize {
        self.sends_posted as usize
    }

    // ---- receiving -------------------------------------------------------------

    /// The frame currently attached to receive slot `slot` (where an unsolicited payload
    /// of a message in that slot lies).
    pub fn recv_frame(&self, slot: u32, i: u32) -> Segment {
        Slot::new(&self.mem, Ring::Recv, slot).segment(i)
    }

    /// Whether the next receive slot holds a message ([`Self::poll_recv`] would return
    /// it), without taking it.
    #[inline]
    pub fn recv_ready(&self) -> bool {
        Slot::new(&self.mem, Ring::Recv, self.recv_next).state_acquire() & state::READY != 0
    }

    /// The next received message, if any. The slot stays the host's until
    /// [`Self::release_recv`]; messages come in order.
    pub fn poll_recv(&mut self) -> Option<RecvMsg> {
        let mut m = RecvMsg::EMPTY;
        self.poll_recv_into(&mut m).then_some(m)
    }

    /// [`Self::poll_recv`] into `m`, which a caller keeps from message to message: the
    /// control message is copied once, straight into place (no message is zeroed or
    /// moved per call). `false` (and `m` untouched) if nothing arrived. Bytes of
    /// `m.ctrl` past `m.ctrl_len` are left as they were.
    #[inline]
    pub fn poll_recv_into(&mut self, m: &mut RecvMsg) -> bool {
        if !self.recv_ready() {
            return false;
        }
        let pos = self.recv_next;
        let slot = Slot::new(&self.mem, Ring::Recv, pos);
        m.slot = pos;
        m.src = slot.peer() as u16;
        m.ctrl_len = slot.ctrl_len().min(CTRL_MSG_BYTES);
        m.payload_len = slot.payload_len();
        m.token = PayloadToken(slot.token());
        m.flags = slot.flags();
        slot.read_ctrl(&mut m.ctrl[..m.ctrl_len as usize]);
        // A payload longer than the frame this host gave for it (a faulty or hostile NIC)
        // is refused here, so no caller reads past a frame: as the firmware reports a
        // payload it could not place, with no bytes.
        let cap = if m.flags & rx_flags::IPT != 0 {
            let i = m.token.index() as usize;
            let armed = self.ipt_used.get(i / 32).is_some_and(|w| w & (1 << (i % 32)) != 0);
            if armed {
                self.ipt_cap[i]
            } else {
                0
            }
        } else {
            self.recv_cap[(pos % RECV_RING_ENTRIES) as usize]
        };
        if m.payload_len > cap {
            m.payload_len = 0;
            m.flags = if m.flags & rx_flags::IPT != 0 {
                m.flags & !rx_flags::IPT | rx_flags::BAD_TOKEN
            } else {
                m.flags | rx_flags::NO_FRAME
            };
        }
        true
    }

    /// Give the slot of the message last returned by [`Self::poll_recv`] back to the NIC,
    /// first attaching `new_frame` if given (the old frame then belongs to the caller).
    pub fn release_recv(&mut self, new_frame: Option<&[Segment]>) {
        let pos = self.recv_next;
        let slot = Slot::new(&self.mem, Ring::Recv, pos);
        if let Some(segs) = new_frame {
            let n = segs.len().min(MAX_SEGMENTS as usize);
            for (k, seg) in segs[..n].iter().enumerate() {
                slot.set_segment(k as u32, *seg);
            }
            slot.set_nseg(n as u32);
            self.recv_cap[(pos % RECV_RING_ENTRIES) as usize] = frame_bytes(&segs[..n]);
        }
        slot.set_state_release(0);
        self.recv_next = pos.wrapping_add(1);
    }

    // ---- IPT -------------------------------------------------------------------

    /// Map `segs` into a free IPT entry and return the token to give a sender.
    pub fn arm(&mut self, segs: &[Segment]) -> Result<PayloadToken, ArmError> {
        if segs.is_empty() || segs.len() > MAX_SEGMENTS as usize {
            return Err(ArmError::BadSegments);
        }
        let index = (0..IPT_ENTRIES as usize).find(|&i| self.ipt_used[i / 32] & (1 << (i % 32)) == 0);
        let index = index.ok_or(ArmError::TableFull)?;
        let entry = IptEntry::new(&self.mem, index as u16).ok_or(ArmError::TableFull)?;
        let key = self.keys.next_key();
        // An entry free in our bitmap is never armed-and-undelivered, so this succeeds.
        let token = entry.host_arm(key, segs).ok_or(ArmError::TableFull)?;
        self.ipt_used[index / 32] |= 1 << (index % 32);
        self.ipt_cap[index] = frame_bytes(segs);
        Ok(token)
    }

    /// Stop accepting payloads for `token` and free its entry. Returns what happened;
    /// on [`CancelState::InFlight`] the frame is still being written: call again later.
    pub fn disarm(&mut self, token: PayloadToken) -> CancelState {
        let index = token.index() as usize;
        let Some(entry) = IptEntry::new(&self.mem, token.index()) else { return CancelState::Idle };
        if self.ipt_used.get(index / 32).is_none_or(|w| w & (1 << (index % 32)) == 0) {
            return CancelState::Idle;
        }
        let st = entry.host_cancel();
        if st != CancelState::InFlight {
            self.ipt_used[index / 32] &= !(1 << (index % 32));
        }
        st
    }

    /// IPT entries in use.
    pub fn ipt_in_use(&self) -> u32 {
        self.ipt_used.iter().map(|w| w.count_ones()).sum()
    }

    // ---- answer table ----------------------------------------------------------

    /// Let the NIC send `e` (`len` bytes of host memory at `addr`, with control message
    /// `reply`) by itself to a peer whose answerable request names entry `index` and
    /// `e.key` ([`answer::publish`]). Which entries a host uses is its own business (the
    /// runtime's port keeps them); keys come from [`Self::answer_key`].
    pub fn export(&self, index: u32, e: &answer::Export<'_>) -> Result<(), answer::ExportError> {
        answer::publish(&self.mem, index, e)
    }

    /// A fresh key for an export (secret, from the endpoint's key generator).
    pub fn answer_key(&mut self) -> u64 {
        self.keys.next_key()
    }

    /// The range entry `index` exports is about to change: the NIC answers nothing from it
    /// until [`Self::export`] again (an answer it is sending is aborted on the link).
    pub fn begin_change(&self, index: u32) -> Result<(), answer::ExportError> {
        answer::begin(&self.mem, index).map(|_| ())
    }

    /// Export nothing from entry `index` any more (before its range is freed).
    pub fn retract(&self, index: u32) -> Result<(), answer::ExportError> {
        answer::retract(&self.mem, index)
    }
}

#[cfg(test)]
mod tests {
    extern crate std;
    use super::*;
    use core::sync::atomic::AtomicU32;
    use std::vec::Vec;
    use trapeze_firmware::iface::layout::NIC_MEM_BYTES;
    use trapeze_firmware::iface::mem::AtomicWords;

    /// Sends finish in any order: each is reaped exactly once, with its own status, and
    /// the count in flight follows (the scan stops at the last posted slot).
    #[test]
    fn reaping_finds_sends_finished_out_of_order() {
        let words: Vec<AtomicU32> = (0..NIC_MEM_BYTES / 4).map(|_| AtomicU32::new(0)).collect();
        let mem = AtomicWords::new(&words);
        let cfg = EndpointConfig { node_id: 1, ..EndpointConfig::default() };
        let mut ep: Endpoint<_, u32> = Endpoint::init(mem, &cfg, [1, 2], |_| None);
        let ctrl = [7u8; 16];
        let msg = SendMsg { peer: 2, ctrl: &ctrl, payload_len: 0, segments: &[], token: PayloadToken::NONE };
        // Wrap the ring once first, so the posted slots straddle its end.
        for k in 0..SEND_RING_ENTRIES - 2 {
            ep.post_send(&msg, 1000 + k).unwrap();
            let slot = Slot::new(&mem, Ring::Send, k);
            slot.set_state_release(state::DONE);
        }
        let mut seen = Vec::new();
        assert_eq!(ep.reap_sends(|c, _| seen.push(c)), (SEND_RING_ENTRIES - 2) as usize);
        assert_eq!(ep.sends_in_flight(), 0);
        assert_eq!(ep.reap_sends(|_, _| panic!("nothing is in flight")), 0);
        let first = SEND_RING_ENTRIES - 2;
        for c in 0..4u32 {
            ep.post_send(&msg, c).unwrap();
        }
        assert_eq!(ep.sends_in_flight(), 4);
        // The third and the first finish (the third refused), the others not yet.
        let slot = |k: u32| Slot::new(&mem, Ring::Send, (first + k) % SEND_RING_ENTRIES);
        slot(2).set_state_release(state::DONE | (TxStatus::DmaRefused as u32) << state::STATUS_SHIFT);
        slot(0).set_state_release(state::DONE);
        let mut got = Vec::new();
        assert_eq!(ep.reap_sends(|c, st| got.push((c, st))), 2);
        assert_eq!(got, [(0, TxStatus::Sent), (2, TxStatus::DmaRefused)]);
        assert_eq!(ep.sends_in_flight(), 2);
        slot(3).set_state_release(state::DONE);
        slot(1).set_state_release(state::DONE);
        got.clear();
        assert_eq!(ep.reap_sends(|c, st| got.push((c, st))), 2);
        assert_eq!(got, [(1, TxStatus::Sent), (3, TxStatus::Sent)]);
        assert_eq!(ep.sends_in_flight(), 0);
    }

    /// An answerable send must end with a descriptor, in whole words: otherwise it is
    /// refused before the NIC sees it. One that does is posted with the flag the NIC reads.
    #[test]
    fn an_answerable_send_needs_its_descriptor() {
        let words: Vec<AtomicU32> = (0..NIC_MEM_BYTES / 4).map(|_| AtomicU32::new(0)).collect();
        let mem = AtomicWords::new(&words);
        let mut ep: Endpoint<_, u32> = Endpoint::init(mem, &EndpointConfig::default(), [1, 2], |_| None);
        fn send(ctrl: &[u8]) -> SendMsg<'_> {
            SendMsg { peer: 2, ctrl, payload_len: 0, segments: &[], token: PayloadToken::NONE }
        }
        let d = answer::Descriptor { index: 1, key: 2, token: 3 }.to_bytes();
        assert_eq!(ep.post_answerable(&send(&d[..20]), 0), Err(SendError::NoDescriptor), "too short");
        let mut odd = [0u8; 30];
        odd[6..].copy_from_slice(&d);
        assert_eq!(ep.post_answerable(&send(&odd), 0), Err(SendError::NoDescriptor), "not whole words");
        assert_eq!(ep.sends_in_flight(), 0);
        let mut ctrl = [0u8; 32];
        ctrl[8..].copy_from_slice(&d);
        ep.post_answerable(&send(&ctrl), 1).unwrap();
        assert_eq!(Slot::new(&mem, Ring::Send, 0).flags(), answer::send_flags::ANSWERABLE);
        ep.post_send(&send(&ctrl), 2).unwrap();
        assert_eq!(Slot::new(&mem, Ring::Send, 1).flags(), 0, "a plain send is not answerable");
    }
}
