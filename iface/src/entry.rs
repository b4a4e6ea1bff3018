// SPDX-License-Identifier: GPL-2.0-only
//! Ring entries: the 256-byte slots of the send and receive rings.
//!
//! ```text
//! +0x00 state        ownership + status (see below)
//! +0x04 ctrl_len     bytes of the control message (≤ 128)
//! +0x08 payload_len  payload bytes to send / received
//! +0x0C peer         send: destination node; receive: source node
//! +0x10 token lo/hi  send: payload token to tag the payload with (0 = unsolicited)
//!                    receive: the token the payload arrived with
//! +0x18 nseg         scatter/gather segments in use (≤ 8)
//! +0x1C flags        receive: [`rx_flags`]; send: [`super::answer::send_flags`]
//! +0x20 seg[8]       {addr_lo, addr_hi, len} × 8: host frames (send: payload source;
//!                    receive: the attached frame for unsolicited payloads)
//! +0x80 ctrl[128]    the control message
//! ```
//!
//! Ownership (`state` word, single writer at a time):
//! * send ring: the host owns a slot while `READY` is clear. It fills the fields, then
//!   stores `READY | seq` with `Release`. The firmware takes the slot with an `Acquire`
//!   load, transmits it, and hands it back with `DONE | status | seq` (`Release`): the
//!   host frames are no longer needed, so the host runs the completion handler when it
//!   sees `DONE` (on reuse of the slot or on an explicit check) and clears `DONE`.
//! * receive ring: the firmware owns a slot while `READY` is clear. It fills the fields
//!   and stores `READY | seq` (`Release`). The host reads it after an `Acquire` load,
//!   optionally attaches a fresh frame (segments) and stores 0 to give it back.
//!   A `READY` slot at the firmware's producer position means the ring is full.

use super::layout::{
    CTRL_MSG_BYTES, MAX_SEGMENTS, RECV_RING_ENTRIES, RECV_RING_OFF, RING_ENTRY_BYTES, SEND_RING_ENTRIES, SEND_RING_OFF,
};
use super::mem::NicMemory;
use core::sync::atomic::Ordering;

pub const STATE: u32 = 0x00;
pub const CTRL_LEN: u32 = 0x04;
pub const PAYLOAD_LEN: u32 = 0x08;
pub const PEER: u32 = 0x0C;
pub const TOKEN: u32 = 0x10;
pub const NSEG: u32 = 0x18;
pub const FLAGS: u32 = 0x1C;
pub const SEGS: u32 = 0x20;
pub const SEG_BYTES: u32 = 12;
pub const CTRL: u32 = 0x80;

/// `state` bits.
pub mod state {
    /// The slot holds work for the other side (send: to transmit; receive: a message).
    pub const READY: u32 = 1 << 0;
    /// Send ring: transmitted (or failed, see the status byte); frames may be reused.
    pub const DONE: u32 = 1 << 1;
    /// Status byte (send completions), see [`super::TxStatus`].
    pub const STATUS_SHIFT: u32 = 8;
    pub const STATUS_MASK: u32 = 0xFF << STATUS_SHIFT;
    /// Owner-chosen sequence number, echoed back, to tell uses of a slot apart.
    pub const SEQ_SHIFT: u32 = 16;
}

/// Outcome of a send, in the status byte of a completed send slot.
#[repr(u8)]
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum TxStatus {
    Sent = 0,
    /// Lengths or segments invalid; nothing was sent.
    Malformed = 1,
    /// The host bus refused a DMA from a payload frame; the packet was aborted.
    DmaRefused = 2,
}

impl TxStatus {
    pub fn from_u8(v: u8) -> Option<Self> {
        match v {
            0 => Some(Self::Sent),
            1 => Some(Self::Malformed),
            2 => Some(Self::DmaRefused),
            _ => None,
        }
    }
}

/// Receive-slot flags.
pub mod rx_flags {
    /// The payload token failed validation (forged, stale, cancelled, duplicate or
    /// too small a frame); the payload was dropped and `payload_len` is 0.
    pub const BAD_TOKEN: u32 = 1 << 0;
    /// An unsolicited payload found no (or too small a) frame on the slot; dropped.
    pub const NO_FRAME: u32 = 1 << 1;
    /// The payload went into the IPT frame named by `token` (not the slot's frame).
    pub const IPT: u32 = 1 << 2;
    /// The host bus refused the DMA into the destination frame; payload lost.
    pub const DMA_REFUSED: u32 = 1 << 3;
    /// The message is a NIC's answer from its answer table (`answer`), not its host's.
    pub const ANSWER: u32 = 1 << 4;
}

/// One scatter/gather segment: a contiguous range of host memory (a DMA address).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Segment {
    pub addr: u64,
    pub len: u32,
}

impl Segment {
    /// Whether the range runs past the top of the address space: the bus would go on at
    /// address 0, outside what the host gave. Such a segment is malformed wherever a host
    /// hands one to the NIC (send entries, receive slots, IPT entries).
    pub const fn wraps(&self) -> bool {
        self.addr.checked_add(self.len as u64).is_none()
    }
}

/// Which ring a slot belongs to.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Ring {
    Send,
    Recv,
}

impl Ring {
    pub const fn entries(self) -> u32 {
        match self {
            Ring::Send => SEND_RING_ENTRIES,
            Ring::Recv => RECV_RING_ENTRIES,
        }
    }
    pub const fn base(self) -> u32 {
        match self {
            Ring::Send => SEND_RING_OFF,
            Ring::Recv => RECV_RING_OFF,
        }
    }
}

/// A typed view of one ring slot in NIC memory. Indices wrap modulo the ring size, so
/// every field offset is inside the ring whatever index is given.
pub struct Slot<'m, M: NicMemory + ?Sized> {
    mem: &'m M,
    base: u32,
}

impl<'m, M: NicMemory + ?Sized> Slot<'m, M> {
    pub fn new(mem: &'m M, ring: Ring, index: u32) -> Self {
        let i = index & (ring.entries() - 1);
        Self { mem, base: ring.base() + i * RING_ENTRY_BYTES }
    }

    pub fn offset(&self) -> u32 {
        self.base
    }
    pub fn state_acquire(&self) -> u32 {
        self.mem.load(self.base + STATE, Ordering::Acquire)
    }
    pub fn set_state_release(&self, v: u32) {
        self.mem.store(self.base + STATE, v, Ordering::Release)
    }
    pub fn ctrl_len(&self) -> u32 {
        self.mem.load_relaxed(self.base + CTRL_LEN)
    }
    pub fn set_ctrl_len(&self, v: u32) {
        self.mem.store_relaxed(self.base + CTRL_LEN, v)
    }
    pub fn payload_len(&self) -> u32 {
        self.mem.load_relaxed(self.base + PAYLOAD_LEN)
    }
    pub fn set_payload_len(&self, v: u32) {
        self.mem.store_relaxed(self.base + PAYLOAD_LEN, v)
    }
    pub fn peer(&self) -> u32 {
        self.mem.load_relaxed(self.base + PEER)
    }
    pub fn set_peer(&self, v: u32) {
        self.mem.store_relaxed(self.base + PEER, v)
    }
    pub fn token(&self) -> u64 {
        self.mem.load_u64(self.base + TOKEN)
    }
    pub fn set_token(&self, v: u64) {
        self.mem.store_u64(self.base + TOKEN, v)
    }
    pub fn nseg(&self) -> u32 {
        self.mem.load_relaxed(self.base + NSEG)
    }
    pub fn set_nseg(&self, v: u32) {
        self.mem.store_relaxed(self.base + NSEG, v)
    }
    pub fn flags(&self) -> u32 {
        self.mem.load_relaxed(self.base + FLAGS)
    }
    pub fn set_flags(&self, v: u32) {
        self.mem.store_relaxed(self.base + FLAGS, v)
    }
    /// Segment `i` (`i` < [`MAX_SEGMENTS`], wrapped otherwise).
    pub fn segment(&self, i: u32) -> Segment {
        read_segment(self.mem, self.base + SEGS + (i % MAX_SEGMENTS) * SEG_BYTES)
    }
    pub fn set_segment(&self, i: u32, s: Segment) {
        write_segment(self.mem, self.base + SEGS + (i % MAX_SEGMENTS) * SEG_BYTES, s)
    }
    /// Offset of the control message in NIC memory.
    pub fn ctrl_offset(&self) -> u32 {
        self.base + CTRL
    }
    pub fn write_ctrl(&self, msg: &[u8]) {
        let n = msg.len().min(CTRL_MSG_BYTES as usize);
        self.mem.write_bytes(self.base + CTRL, &msg[..n])
    }
    pub fn read_ctrl(&self, out: &mut [u8]) {
        let n = out.len().min(CTRL_MSG_BYTES as usize);
        self.mem.read_bytes(self.base + CTRL, &mut out[..n])
    }
}

pub(super) fn read_segment<M: NicMemory + ?Sized>(mem: &M, off: u32) -> Segment {
    let lo = mem.load_relaxed(off) as u64;
    let hi = mem.load_relaxed(off + 4) as u64;
    Segment { addr: lo | hi << 32, len: mem.load_relaxed(off + 8) }
}

pub(super) fn write_segment<M: NicMemory + ?Sized>(mem: &M, off: u32, s: Segment) {
    mem.store_relaxed(off, s.addr as u32);
    mem.store_relaxed(off + 4, (s.addr >> 32) as u32);
    mem.store_relaxed(off + 8, s.len);
}

const _: () = {
    assert!(SEGS + MAX_SEGMENTS * SEG_BYTES <= CTRL);
    assert!(CTRL + CTRL_MSG_BYTES == RING_ENTRY_BYTES);
};
