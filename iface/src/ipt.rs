// SPDX-License-Identifier: GPL-2.0-only
//! The Incoming Payload Table (IPT) and payload tokens.
//!
//! A host maps a waiting frame into an IPT entry and hands the resulting
//! [`PayloadToken`] (entry index + 48-bit protection key) to a peer. A packet tagged with
//! the token has its payload DMA'd straight into that frame, once: the firmware validates
//! the key *before* any DMA into host memory and cancels the entry after delivery, so
//! stale, duplicate and forged tokens are harmless. A forged token succeeds with
//! probability 2⁻⁴⁸ per try; keys are chosen by the host from a seeded generator.
//!
//! Entry layout (128 bytes):
//! ```text
//! +0x00 arm_seq    host: odd = armed (generation s), even = not armed
//! +0x04 key_lo     host: key bits 0..32
//! +0x08 key_hi     host: key bits 32..48
//! +0x0C nseg       host: segments (≤ 8)
//! +0x10 claim_seq  fw:   = s while the firmware delivers into generation s
//! +0x14 done_seq   fw:   = s once generation s was delivered (consumed, one shot)
//! +0x18 done_len   fw:   payload bytes delivered
//! +0x20 seg[8]     host: {addr_lo, addr_hi, len}
//! ```
//! Arming and cancelling race with delivery without locks: the firmware stores
//! `claim_seq = s` and then re-reads `arm_seq`; the host stores the new `arm_seq` and then
//! reads `claim_seq` (both `SeqCst`, a store→load fence on each side). At least one side
//! sees the other: either the firmware sees the cancel and backs off before any DMA, or
//! the host sees the claim and waits ([`CancelState::InFlight`]) until the firmware
//! finishes or backs off. So once cancel reports anything but `InFlight`, no DMA will
//! touch the frame.

use super::entry::{read_segment, write_segment, Segment, SEG_BYTES};
use super::layout::{IPT_ENTRIES, IPT_ENTRY_BYTES, IPT_OFF, MAX_SEGMENTS};
use super::mem::NicMemory;
use core::sync::atomic::{fence, Ordering};

pub const ARM_SEQ: u32 = 0x00;
pub const KEY_LO: u32 = 0x04;
pub const KEY_HI: u32 = 0x08;
pub const NSEG: u32 = 0x0C;
pub const CLAIM_SEQ: u32 = 0x10;
pub const DONE_SEQ: u32 = 0x14;
pub const DONE_LEN: u32 = 0x18;
pub const SEGS: u32 = 0x20;

pub const KEY_BITS: u32 = 48;
pub const KEY_MASK: u64 = (1 << KEY_BITS) - 1;

/// A payload token: IPT index in bits 0..16, protection key in bits 16..64.
/// The all-zero token means "no token" (an unsolicited payload); a valid key is non-zero.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub struct PayloadToken(pub u64);

impl PayloadToken {
    pub const NONE: PayloadToken = PayloadToken(0);

    /// `key` is truncated to 48 bits and must be non-zero for a usable token.
    pub const fn new(index: u16, key: u64) -> Self {
        PayloadToken((key & KEY_MASK) << 16 | index as u64)
    }
    pub const fn index(self) -> u16 {
        self.0 as u16
    }
    pub const fn key(self) -> u64 {
        self.0 >> 16
    }
    pub const fn is_none(self) -> bool {
        self.0 == 0
    }
}

/// Why a token was refused. Whatever the reason, nothing was written to host memory.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum TokenError {
    /// Index outside the table, or key zero.
    Forged,
    /// Entry not armed (never armed, or cancelled).
    NotArmed,
    /// Key does not match the armed key (forged, or stale: the entry was re-armed under
    /// another key since the token was issued).
    WrongKey,
    /// This generation was already delivered (a replay or duplicate).
    Consumed,
    /// A delivery into this generation is in progress (a duplicate in flight).
    InFlight,
    /// Payload larger than the mapped frame(s), or a segment that wraps the address space.
    TooSmall,
}

/// State of an entry after the host cancels it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum CancelState {
    /// It was not armed (already cancelled, or never armed).
    Idle,
    /// Disarmed before anything arrived: the frame is free, nothing will be written.
    Cancelled,
    /// The payload had already been delivered into the frame.
    Delivered,
    /// The firmware is delivering into the frame right now: poll
    /// [`IptEntry::host_cancel_poll`] until it reports something else.
    InFlight,
}

/// A successful claim: the firmware may DMA `len` bytes into `segs`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Claim {
    pub index: u16,
    pub seq: u32,
    pub nseg: u32,
    pub segs: [Segment; MAX_SEGMENTS as usize],
}

/// A typed view of one IPT entry.
pub struct IptEntry<'m, M: NicMemory + ?Sized> {
    mem: &'m M,
    base: u32,
    index: u16,
}

impl<'m, M: NicMemory + ?Sized> IptEntry<'m, M> {
    /// `None` if `index` is outside the table.
    pub fn new(mem: &'m M, index: u16) -> Option<Self> {
        if (index as u32) < IPT_ENTRIES {
            Some(Self { mem, base: IPT_OFF + index as u32 * IPT_ENTRY_BYTES, index })
        } else {
            None
        }
    }

    fn word(&self, off: u32) -> u32 {
        self.mem.load_relaxed(self.base + off)
    }
    fn key(&self) -> u64 {
        self.word(KEY_LO) as u64 | ((self.word(KEY_HI) as u64 & 0xFFFF) << 32)
    }
    pub fn arm_seq(&self) -> u32 {
        self.mem.load(self.base + ARM_SEQ, Ordering::Acquire)
    }
    pub fn done_seq(&self) -> u32 {
        self.mem.load(self.base + DONE_SEQ, Ordering::Acquire)
    }
    pub fn done_len(&self) -> u32 {
        self.word(DONE_LEN)
    }
    pub fn is_armed(&self) -> bool {
        let s = self.arm_seq();
        s & 1 == 1 && self.done_seq() != s
    }

    // ---- host side -------------------------------------------------------------

    /// Arm the entry for `segs` under `key` (48 bits, non-zero) and return the token.
    /// The entry must be free: not armed (or armed and already delivered), and no
    /// delivery still running into it ([`CancelState::InFlight`]). Returns `None` if the
    /// key is zero, the segment list is empty or too long, or the entry is not free.
    pub fn host_arm(&self, key: u64, segs: &[Segment]) -> Option<PayloadToken> {
        let key = key & KEY_MASK;
        let s = self.arm_seq();
        // Free: never armed / cancelled (even), or armed and already consumed — and in
        // either case no delivery still running into the previous generation (a cancel
        // that answered InFlight and was not yet polled to completion).
        let done = self.done_seq();
        let prev = if s & 1 == 0 { s.wrapping_sub(1) } else { s };
        let delivering = self.mem.load(self.base + CLAIM_SEQ, Ordering::SeqCst) == prev && done != prev;
        let free = (s & 1 == 0 || done == s) && !delivering;
        if key == 0 || segs.is_empty() || segs.len() > MAX_SEGMENTS as usize || !free {
            return None;
        }
        let next = if s & 1 == 0 { s.wrapping_add(1) } else { s.wrapping_add(2) };
        for (i, seg) in segs.iter().enumerate() {
            write_segment(self.mem, self.base + SEGS + i as u32 * SEG_BYTES, *seg);
        }
        self.mem.store_relaxed(self.base + NSEG, segs.len() as u32);
        self.mem.store_relaxed(self.base + KEY_LO, key as u32);
        self.mem.store_relaxed(self.base + KEY_HI, (key >> 32) as u32);
        self.mem.store(self.base + ARM_SEQ, next, Ordering::Release);
        Some(PayloadToken::new(self.index, key))
    }

    /// Disarm the entry. See [`CancelState`] for what the answer lets the caller do.
    pub fn host_cancel(&self) -> CancelState {
        let s = self.arm_seq();
        if s & 1 == 0 {
            // Already disarmed, but a delivery into the cancelled generation may still be
            // running (an earlier cancel answered InFlight): the frame is not free yet.
            return match self.cancel_outcome(s.wrapping_sub(1)) {
                CancelState::InFlight => CancelState::InFlight,
                _ => CancelState::Idle,
            };
        }
        self.mem.store(self.base + ARM_SEQ, s.wrapping_add(1), Ordering::SeqCst);
        fence(Ordering::SeqCst);
        self.cancel_outcome(s)
    }

    /// After an `InFlight` cancel: has the firmware finished with the frame?
    pub fn host_cancel_poll(&self) -> CancelState {
        let s = self.arm_seq().wrapping_sub(1);
        self.cancel_outcome(s)
    }

    fn cancel_outcome(&self, s: u32) -> CancelState {
        let claim = self.mem.load(self.base + CLAIM_SEQ, Ordering::SeqCst);
        let done = self.done_seq();
        if done == s {
            CancelState::Delivered
        } else if claim == s {
            CancelState::InFlight
        } else {
            CancelState::Cancelled
        }
    }

    // ---- firmware side ---------------------------------------------------------

    /// Validate `token` for a payload of `len` bytes and claim the entry. Nothing is
    /// written to host memory unless this returns `Ok`.
    pub fn fw_claim(&self, token: PayloadToken, len: u32) -> Result<Claim, TokenError> {
        let s = self.arm_seq();
        if s & 1 == 0 {
            return Err(TokenError::NotArmed);
        }
        if token.key() != self.key() {
            return Err(TokenError::WrongKey);
        }
        if self.done_seq() == s {
            return Err(TokenError::Consumed);
        }
        if self.mem.load(self.base + CLAIM_SEQ, Ordering::Acquire) == s {
            return Err(TokenError::InFlight);
        }
        let nseg = self.word(NSEG);
        if nseg == 0 || nseg > MAX_SEGMENTS {
            return Err(TokenError::TooSmall);
        }
        let mut segs = [Segment::default(); MAX_SEGMENTS as usize];
        let mut cap: u64 = 0;
        for (i, seg) in segs.iter_mut().enumerate().take(nseg as usize) {
            *seg = read_segment(self.mem, self.base + SEGS + i as u32 * SEG_BYTES);
            cap += seg.len as u64;
            if seg.wraps() {
                return Err(TokenError::TooSmall);
            }
        }
        if len as u64 > cap {
            return Err(TokenError::TooSmall);
        }
        self.mem.store(self.base + CLAIM_SEQ, s, Ordering::SeqCst);
        fence(Ordering::SeqCst);
        if self.mem.load(self.base + ARM_SEQ, Ordering::SeqCst) != s {
            // Cancelled between our check and our claim: back off before any DMA.
            self.mem.store(self.base + CLAIM_SEQ, 0, Ordering::Release);
            return Err(TokenError::NotArmed);
        }
        Ok(Claim { index: self.index, seq: s, nseg, segs })
    }

    /// The payload of `claim` was delivered: consume the entry (one shot).
    pub fn fw_complete(&self, claim: &Claim, len: u32) {
        self.mem.store_relaxed(self.base + DONE_LEN, len);
        self.mem.store(self.base + DONE_SEQ, claim.seq, Ordering::Release);
    }

    /// The packet carrying `claim` was lost (bad CRC): release the claim and leave the
    /// entry armed, so a retransmission with the same token can still be delivered.
    pub fn fw_release(&self, claim: &Claim) {
        // Only the firmware writes CLAIM_SEQ, so check-then-store is not a race.
        if self.mem.load(self.base + CLAIM_SEQ, Ordering::Acquire) == claim.seq {
            self.mem.store(self.base + CLAIM_SEQ, 0, Ordering::Release);
        }
    }
}

/// Validate a token against the IPT of `mem` and claim its entry.
/// Whether any entry is armed and not yet delivered: the host awaits a solicited payload
/// (a reply). A NIC may keep polling its link meanwhile instead of sleeping.
pub fn any_armed<M: NicMemory + ?Sized>(mem: &M) -> bool {
    (0..IPT_ENTRIES as u16).filter_map(|i| IptEntry::new(mem, i)).any(|e| e.is_armed())
}

pub fn fw_claim<M: NicMemory + ?Sized>(mem: &M, token: PayloadToken, len: u32) -> Result<Claim, TokenError> {
    if token.key() == 0 {
        return Err(TokenError::Forged);
    }
    match IptEntry::new(mem, token.index()) {
        Some(e) => e.fw_claim(token, len),
        None => Err(TokenError::Forged),
    }
}

const _: () = assert!(SEGS + MAX_SEGMENTS * SEG_BYTES <= IPT_ENTRY_BYTES);

#[cfg(test)]
mod tests {
    extern crate std;
    use super::super::mem::AtomicWords;
    use super::*;
    use core::sync::atomic::AtomicU32;

    /// A host awaits a payload exactly while some entry is armed and not delivered.
    #[test]
    fn any_armed_follows_arming_delivery_and_cancel() {
        let words: std::vec::Vec<AtomicU32> =
            (0..(IPT_OFF + IPT_ENTRIES * IPT_ENTRY_BYTES) / 4).map(|_| AtomicU32::new(0)).collect();
        let mem = AtomicWords::with_base(&words, 0);
        assert!(!any_armed(&mem));
        let seg = [Segment { addr: 0x1000, len: 4096 }];
        let e = IptEntry::new(&mem, 127).unwrap();
        let token = e.host_arm(0xABCD, &seg).unwrap();
        assert!(any_armed(&mem));
        let claim = fw_claim(&mem, token, 4096).unwrap();
        e.fw_complete(&claim, 4096);
        assert!(!any_armed(&mem), "a delivered entry awaits nothing");
        let e = IptEntry::new(&mem, 3).unwrap();
        e.host_arm(0x1234, &seg).unwrap();
        assert!(any_armed(&mem));
        assert_eq!(e.host_cancel(), CancelState::Cancelled);
        assert!(!any_armed(&mem), "a cancelled entry awaits nothing");
    }
}
