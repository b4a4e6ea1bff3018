// SPDX-License-Identifier: GPL-2.0-only
//! The disk's backlog: the pages waiting for a GMS operation slot or a frame, a ring in
//! arrival order, with what the issuing side takes from it — the next page, or the reads
//! a `GETPAGES` can carry with it ([`DiskState::take_group`], [`super::group`]).

use super::DiskState;
use crate::blk::PageIo;
use crate::net::pool::GROUP_FRAMES;

/// A page in the backlog.
pub(super) struct Waiting {
    pub(super) page: u64,
    pub(super) io: PageIo,
    pub(super) write: bool,
    /// Recorded as pending by read-ahead.
    pub(super) ra: bool,
    /// Tries of this replica so far.
    pub(super) tries: u8,
    /// A write's replica: when its first put failed (ns; 0: none failed yet).
    pub(super) since: u64,
    /// The replica to write (a write queues one entry per replica) or to read (a read goes on to the
    /// next when one misses).
    pub(super) replica: u8,
    /// A read to send to the page's directory, not straight to the replica's holder (whose
    /// copy was missing).
    pub(super) via_dir: bool,
    /// A read looking for a page an earlier load wrote ([`super::recover`]): 0: not looking; 1:
    /// no member asked yet; `n + 2`: member `n` was the last asked (members are asked in
    /// order of id, so one that fails meanwhile shifts none). And whether a member's copy
    /// has landed in the page.
    pub(super) probe: u32,
    pub(super) found: bool,
    /// A read asked for alone, never in a `GETPAGES` group (its group's answer was no hit).
    pub(super) solo: bool,
}

impl Waiting {
    pub(super) fn new(page: u64, io: PageIo, write: bool, ra: bool) -> Self {
        Waiting {
            page,
            io,
            write,
            ra,
            tries: 0,
            since: 0,
            replica: 0,
            via_dir: false,
            probe: 0,
            found: false,
            solo: false,
        }
    }
}

impl DiskState {
    /// Queue a page (its request's page, or its next replica, or a retry); the page is
    /// handed back if the backlog is full.
    pub(super) fn push(&mut self, w: Waiting) -> core::result::Result<(), PageIo> {
        if self.queued == self.backlog.len() {
            return Err(w.io);
        }
        let i = (self.head + self.queued) % self.backlog.len();
        self.backlog[i] = Some(w);
        self.queued += 1;
        Ok(())
    }

    /// Queue `w` or fail its page.
    pub(super) fn push_or_fail(&mut self, w: Waiting) {
        if let Err(io) = self.push(w) {
            self.fail(io);
        }
    }

    /// Move the reads among the backlog's next `look` that `pick` gives a bit of a
    /// `GETPAGES` mask (page `first + bit`; distinct bits, 1 to 63, at most
    /// `GROUP_FRAMES - 1` reads) into [`Self::forming`], each at its rank in the mask; the
    /// others keep their order at the front. The mask, with bit 0 (the caller's read).
    pub(super) fn take_group(&mut self, first: u64, look: usize, pick: impl Fn(&Self, &Waiting) -> Option<u64>) -> u64 {
        let len = self.backlog.len();
        let window = look.min(self.queued).min(32);
        let mut mask = 1u64;
        let mut bits = [0u8; 32];
        for (j, b) in bits.iter_mut().enumerate().take(window) {
            if mask.count_ones() as usize == GROUP_FRAMES {
                break;
            }
            let Some(x) = self.backlog[(self.head + j) % len].as_ref() else { continue };
            if let Some(bit) = pick(self, x).filter(|&b| (1..64).contains(&b) && mask >> b & 1 == 0) {
                mask |= 1 << bit;
                *b = bit as u8;
            }
        }
        for (j, &bit) in bits.iter().enumerate().take(window) {
            if bit == 0 {
                continue;
            }
            let rank = (mask & ((1u64 << bit) - 1)).count_ones() as usize;
            if let Some(x) = self.backlog[(self.head + j) % len].take() {
                debug_assert_eq!(x.page, first + u64::from(bit));
                self.forming.0[rank] = Some((x.page, x.io));
            }
        }
        // Close the gaps: the reads left move to the window's back, in order.
        let mut to = window;
        for j in (0..window).rev() {
            if let Some(x) = self.backlog[(self.head + j) % len].take() {
                to -= 1;
                self.backlog[(self.head + to) % len] = Some(x);
            }
        }
        self.head = (self.head + to) % len;
        self.queued -= to;
        mask
    }

    /// Put `w`, just popped, back at the backlog's front.
    pub(super) fn unpop(&mut self, w: Waiting) {
        let len = self.backlog.len();
        if self.queued < len {
            self.head = (self.head + len - 1) % len;
            self.backlog[self.head] = Some(w);
            self.queued += 1;
        } else {
            self.fail(w.io);
        }
    }

    pub(super) fn pop(&mut self) -> Option<Waiting> {
        if self.queued == 0 {
            return None;
        }
        let x = self.backlog[self.head].take();
        self.head = (self.head + 1) % self.backlog.len();
        self.queued -= 1;
        x
    }
}
