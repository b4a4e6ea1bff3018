// SPDX-License-Identifier: GPL-2.0-only
//! The answer table: host memory a NIC may send without its host (one-sided reads).
//!
//! A host **exports** a range of its memory in an entry of the table (in NIC memory): the
//! range, a 64-bit key, and up to [`REPLY_MAX`] bytes of control message to answer with.
//! A peer that knows the entry's index and key sends an **answerable** request (a send
//! entry with [`send_flags::ANSWERABLE`]; on the wire [`super::wire::FLAG_ANSWER`]) whose
//! control message (whole words) ends with a [`Descriptor`]: index, key and the peer's
//! own payload token. The NIC that receives it answers by itself when the entry is stable and the key
//! matches: a packet tagged with the peer's token, the entry's reply bytes as its control
//! message and the exported range as its payload ([`super::wire::FLAG_ANSWERED`]; the
//! peer's NIC marks the message [`super::entry::rx_flags::ANSWER`]). No interrupt, no
//! host CPU. Anything else — an empty or changing entry, another key, a request with a
//! payload — is delivered to the host as an ordinary message, which serves it as it
//! would have without the table: the table only ever makes a request faster.
//!
//! Entry layout (64 bytes, written by the host, read by the firmware):
//! ```text
//! +0x00 seq        even: stable; odd: the host is changing the entry or the bytes it names
//! +0x04 len        payload bytes (0: empty)
//! +0x08 key        u64 the request must name (a capability: the host draws it from a secret)
//! +0x10 addr       u64 host address of the payload (one contiguous range)
//! +0x18 reply_len  bytes of `reply` (≤ REPLY_MAX)
//! +0x1C reply      the answer's control message
//! ```
//! **Changes** follow a sequence lock, so neither side ever waits for the other. The host
//! makes `seq` odd before it changes the entry *or the exported bytes* ([`begin`]), then
//! writes, then makes it even again ([`publish`], [`retract`]). The firmware answers only
//! from an even `seq`, reads the payload into NIC memory, and loads `seq` again before the
//! packet's last bytes leave: if it moved, the packet is aborted on the link (the peer's
//! NIC drops it and the peer's call times out and is tried again), so a torn payload never
//! arrives. What leaves is the bytes read before that load (engines that would take them
//! from host memory later copy them first), never bytes the host wrote after a retract.

use super::layout::{ANSWER_ENTRIES, ANSWER_ENTRY_BYTES, ANSWER_OFF, CTRL_MSG_BYTES};
use super::mem::NicMemory;
use core::sync::atomic::{fence, Ordering};

pub const SEQ: u32 = 0x00;
pub const LEN: u32 = 0x04;
pub const KEY: u32 = 0x08;
pub const ADDR: u32 = 0x10;
pub const REPLY_LEN: u32 = 0x18;
pub const REPLY: u32 = 0x1C;
/// Largest reply control message an entry holds.
pub const REPLY_MAX: u32 = ANSWER_ENTRY_BYTES - REPLY;

/// Send-entry flags (`entry::FLAGS` of a send slot).
pub mod send_flags {
    /// The control message ends with a [`super::Descriptor`]: the receiving NIC may answer.
    pub const ANSWERABLE: u32 = 1 << 0;
}

/// The last [`Descriptor::BYTES`] of an answerable request's control message.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Descriptor {
    /// The entry of the serving host's table.
    pub index: u32,
    /// What the entry must hold.
    pub key: u64,
    /// The requester's payload token: the answer's payload goes into that IPT frame.
    pub token: u64,
}

impl Descriptor {
    /// `index u32 | reserved u32 | key u64 | token u64`, little-endian.
    pub const BYTES: usize = 24;

    pub fn to_bytes(&self) -> [u8; Self::BYTES] {
        let mut b = [0u8; Self::BYTES];
        b[0..4].copy_from_slice(&self.index.to_le_bytes());
        b[8..16].copy_from_slice(&self.key.to_le_bytes());
        b[16..24].copy_from_slice(&self.token.to_le_bytes());
        b
    }

    /// The descriptor a control message ends with (`None`: too short to hold one).
    pub fn from_ctrl(ctrl: &[u8]) -> Option<Self> {
        let tail = ctrl.len().checked_sub(Self::BYTES).map(|at| &ctrl[at..])?;
        let u64_at = |i: usize| {
            let mut w = [0u8; 8];
            w.copy_from_slice(&tail[i..i + 8]);
            u64::from_le_bytes(w)
        };
        let mut w = [0u8; 4];
        w.copy_from_slice(&tail[0..4]);
        Some(Descriptor { index: u32::from_le_bytes(w), key: u64_at(8), token: u64_at(16) })
    }

    /// Read the descriptor from the control message at NIC offset `ctrl_off` (a word),
    /// `ctrl_len` bytes long (the firmware's view of a received request). Only a message
    /// of whole words holds one: the descriptor is read as words.
    pub fn load<M: NicMemory + ?Sized>(mem: &M, ctrl_off: u32, ctrl_len: u32) -> Option<Self> {
        if ctrl_len < Self::BYTES as u32 || ctrl_len > CTRL_MSG_BYTES || !ctrl_len.is_multiple_of(4) {
            return None;
        }
        let mut b = [0u8; Self::BYTES];
        mem.read_bytes(ctrl_off + ctrl_len - Self::BYTES as u32, &mut b);
        Self::from_ctrl(&b)
    }
}

/// NIC offset of entry `index`, if there is one.
pub const fn entry_offset(index: u32) -> Option<u32> {
    if index < ANSWER_ENTRIES {
        Some(ANSWER_OFF + index * ANSWER_ENTRY_BYTES)
    } else {
        None
    }
}

/// What an entry exports, as the host publishes it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Export<'a> {
    pub key: u64,
    pub addr: u64,
    pub len: u32,
    pub reply: &'a [u8],
}

/// Why an entry cannot be published.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ExportError {
    /// No such entry.
    Index,
    /// `reply` is longer than [`REPLY_MAX`], or the range is empty or wraps.
    Malformed,
}

/// Host: the entry (and the bytes it exports) is about to change; the firmware answers
/// nothing from it until [`publish`] or [`retract`]. Returns the odd sequence number.
pub fn begin<M: NicMemory + ?Sized>(mem: &M, index: u32) -> Result<u32, ExportError> {
    let off = entry_offset(index).ok_or(ExportError::Index)?;
    let seq = mem.load_relaxed(off + SEQ) | 1;
    mem.store(off + SEQ, seq, Ordering::Relaxed);
    // The odd sequence is visible before any write to the entry or its bytes.
    fence(Ordering::SeqCst);
    Ok(seq)
}

/// Host: export `e` in entry `index` (it may have exported something else: that is
/// retracted first).
pub fn publish<M: NicMemory + ?Sized>(mem: &M, index: u32, e: &Export<'_>) -> Result<(), ExportError> {
    let off = entry_offset(index).ok_or(ExportError::Index)?;
    if e.reply.len() > REPLY_MAX as usize || e.len == 0 || e.addr.checked_add(u64::from(e.len)).is_none() {
        return Err(ExportError::Malformed);
    }
    let seq = begin(mem, index)?;
    mem.store_relaxed(off + LEN, e.len);
    mem.store_u64(off + KEY, e.key);
    mem.store_u64(off + ADDR, e.addr);
    mem.store_relaxed(off + REPLY_LEN, e.reply.len() as u32);
    // Whole words: the tail of the last one is zero.
    let mut words = [0u8; REPLY_MAX as usize];
    words[..e.reply.len()].copy_from_slice(e.reply);
    mem.write_bytes(off + REPLY, &words[..(e.reply.len() + 3) & !3]);
    mem.store(off + SEQ, seq.wrapping_add(1), Ordering::Release);
    Ok(())
}

/// Host: export nothing from entry `index` any more.
pub fn retract<M: NicMemory + ?Sized>(mem: &M, index: u32) -> Result<(), ExportError> {
    let off = entry_offset(index).ok_or(ExportError::Index)?;
    let seq = begin(mem, index)?;
    mem.store_relaxed(off + LEN, 0);
    mem.store(off + SEQ, seq.wrapping_add(1), Ordering::Release);
    Ok(())
}

/// An entry as the firmware found it stable.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Found {
    pub index: u32,
    /// The (even) sequence number it was read at: [`still`] compares against it.
    pub seq: u32,
    pub addr: u64,
    pub len: u32,
    pub reply_len: u32,
}

impl Found {
    /// NIC offset of the reply bytes.
    pub const fn reply_offset(&self) -> u32 {
        ANSWER_OFF + self.index * ANSWER_ENTRY_BYTES + REPLY
    }
}

/// Firmware: the entry `d` names, if it is stable, exports something no longer than
/// `mtu` and holds `d.key`.
pub fn lookup<M: NicMemory + ?Sized>(mem: &M, d: &Descriptor, mtu: u32) -> Option<Found> {
    let off = entry_offset(d.index)?;
    let seq = mem.load(off + SEQ, Ordering::Acquire);
    if seq & 1 != 0 {
        return None;
    }
    let len = mem.load_relaxed(off + LEN);
    let key = mem.load_u64(off + KEY);
    let addr = mem.load_u64(off + ADDR);
    let reply_len = mem.load_relaxed(off + REPLY_LEN);
    // The fields read belong to `seq` only if it has not moved meanwhile.
    fence(Ordering::Acquire);
    if mem.load_relaxed(off + SEQ) != seq {
        return None;
    }
    let sane = len != 0 && len <= mtu && reply_len <= REPLY_MAX && addr.checked_add(u64::from(len)).is_some();
    (sane && key == d.key).then_some(Found { index: d.index, seq, addr, len, reply_len })
}

/// Firmware: whether the entry (and so the bytes read from it) is unchanged since `f`.
pub fn still<M: NicMemory + ?Sized>(mem: &M, f: &Found) -> bool {
    fence(Ordering::Acquire);
    entry_offset(f.index).is_some_and(|off| mem.load(off + SEQ, Ordering::Acquire) == f.seq)
}

#[cfg(test)]
mod tests {
    extern crate std;
    use super::*;
    use crate::layout::NIC_MEM_BYTES;
    use crate::mem::AtomicWords;
    use core::sync::atomic::AtomicU32;
    use std::vec::Vec;

    fn mem() -> Vec<AtomicU32> {
        (0..NIC_MEM_BYTES / 4).map(|_| AtomicU32::new(0)).collect()
    }

    #[test]
    fn a_published_entry_is_found_by_its_key_only() {
        let words = mem();
        let m = AtomicWords::new(&words);
        let e = Export { key: 0xfeed, addr: 0x1000, len: 4096, reply: b"hello, world" };
        publish(&m, 7, &e).unwrap();
        let d = Descriptor { index: 7, key: 0xfeed, token: 9 };
        let f = lookup(&m, &d, 8192).unwrap();
        assert_eq!((f.addr, f.len, f.reply_len), (0x1000, 4096, 12));
        let mut reply = [0u8; 12];
        m.read_bytes(f.reply_offset(), &mut reply);
        assert_eq!(&reply, b"hello, world");
        assert!(still(&m, &f));
        assert_eq!(lookup(&m, &Descriptor { key: 0xfeee, ..d }, 8192), None, "another key");
        assert_eq!(lookup(&m, &d, 2048), None, "longer than the MTU");
        assert_eq!(lookup(&m, &Descriptor { index: ANSWER_ENTRIES, ..d }, 8192), None, "no such entry");
    }

    #[test]
    fn a_change_begun_hides_the_entry_and_moves_its_sequence() {
        let words = mem();
        let m = AtomicWords::new(&words);
        publish(&m, 0, &Export { key: 1, addr: 0x2000, len: 64, reply: &[] }).unwrap();
        let d = Descriptor { index: 0, key: 1, token: 1 };
        let f = lookup(&m, &d, 8192).unwrap();
        begin(&m, 0).unwrap();
        assert_eq!(lookup(&m, &d, 8192), None, "changing");
        assert!(!still(&m, &f), "an answer read before the change is aborted");
        publish(&m, 0, &Export { key: 1, addr: 0x3000, len: 64, reply: &[] }).unwrap();
        let g = lookup(&m, &d, 8192).unwrap();
        assert_eq!(g.addr, 0x3000);
        assert!(!still(&m, &f) && still(&m, &g));
        retract(&m, 0).unwrap();
        assert_eq!(lookup(&m, &d, 8192), None, "retracted");
    }

    #[test]
    fn bad_exports_are_refused() {
        let words = mem();
        let m = AtomicWords::new(&words);
        let long = [0u8; REPLY_MAX as usize + 1];
        let e = Export { key: 1, addr: 0, len: 8, reply: &long };
        assert_eq!(publish(&m, 0, &e), Err(ExportError::Malformed));
        assert_eq!(publish(&m, 0, &Export { len: 0, reply: &[], ..e }), Err(ExportError::Malformed));
        assert_eq!(publish(&m, 0, &Export { addr: u64::MAX, reply: &[], ..e }), Err(ExportError::Malformed));
        assert_eq!(publish(&m, ANSWER_ENTRIES, &Export { reply: &[], ..e }), Err(ExportError::Index));
        assert_eq!(retract(&m, ANSWER_ENTRIES), Err(ExportError::Index));
    }

    #[test]
    fn a_descriptor_is_the_tail_of_its_control_message() {
        let d = Descriptor { index: 3, key: u64::MAX - 1, token: 0x1234_5678_9abc };
        let mut ctrl = [0xAAu8; 40];
        ctrl[16..].copy_from_slice(&d.to_bytes());
        assert_eq!(Descriptor::from_ctrl(&ctrl), Some(d));
        assert_eq!(Descriptor::from_ctrl(&ctrl[..23]), None);
        let words = mem();
        let m = AtomicWords::new(&words);
        m.write_bytes(0x100, &ctrl);
        assert_eq!(Descriptor::load(&m, 0x100, 40), Some(d));
        assert_eq!(Descriptor::load(&m, 0x100, 20), None);
        assert_eq!(Descriptor::load(&m, 0x100, 38), None, "not whole words");
        assert_eq!(Descriptor::load(&m, 0x100, CTRL_MSG_BYTES + 4), None);
    }
}
