// SPDX-License-Identifier: GPL-2.0-only
//! The kernel's frames ([`Pool`]): coherent DMA buffers of [`FRAME_BYTES`], a frame is an
//! index; and block request pages lent to the NIC, which the port uses as frames too.
//!
//! A lent page ([`Lent`], `sys::blk`) is frame `LENT_BASE + i` while it sits in lend slot
//! `i`: the port arms an IPT entry on it (a read's reply lands in the request's own page)
//! or posts a send from it (a write's data leaves from it), exactly as with a pool frame,
//! but it is never on the free list, holds one page (a frame is one), and the pool's
//! copies refuse it (no byte of a request page is copied here). When the port is done
//! with it ([`FrameMem::give_back`]: disarmed, or its send reaped) the lend waits in its
//! slot, given back, until the driver drops it outside the core lock
//! ([`Pool::take_back`]): dropping a lend may end its block request.
//!
//! A **group** (frame `GROUP_BASE + g`) names up to [`GROUP_FRAMES`] frames in order, as
//! the pieces of one payload (`FrameMem::segments`): lent pages armed together for a
//! `GETPAGES` reply, or held pool frames gathered into one (`Host::gather`). It names them
//! for that one arming or send: giving it back (disarmed, or its transmit sent) gives back
//! the lent pages it names and never frees a pool frame.

use super::{Frame, KStorage, FRAME_BYTES, OPS};
use crate::blk::PAGE_BYTES;
use crate::sys::blk::Lent;
use crate::sys::dma::DmaBuf;
use crate::sys::pci::PciDev;
use crate::tpz::iface::entry::Segment;
use crate::tpz::iface::layout::MAX_SEGMENTS;
use crate::tpz::runtime::frames::{Groups, Segments};
use crate::tpz::runtime::FrameMem;
use kernel::prelude::*;

/// Frames one group names at most: the NIC's scatter/gather pieces.
pub(crate) const GROUP_FRAMES: usize = MAX_SEGMENTS as usize;
/// Request pages lent at once: a group's for each GMS operation, and as many writes
/// again whose operation ended while their send waits to be reaped.
pub(crate) const LEND_SLOTS: usize = (GROUP_FRAMES + 1) * OPS;
/// The first lent frame, above every pool frame.
pub(crate) const LENT_BASE: Frame = Frame::MAX - LEND_SLOTS as Frame + 1;
/// Groups at once: one per GMS operation, and as many replies gathered in one receive
/// batch before they are posted.
const GROUPS: usize = 2 * OPS + 8;
/// The first group, below the lent frames.
const GROUP_BASE: Frame = LENT_BASE - GROUPS as Frame;
// A lent page is a whole frame: the port arms an IPT entry on, and sends, `FRAME_BYTES`
// of it, which must not pass the page's end.
const _: () = assert!(PAGE_BYTES == FRAME_BYTES);

/// A lend slot.
enum Lend {
    Free,
    /// Lent to the port.
    Out(Lent),
    /// The port is done with it: dropped by [`Pool::take_back`].
    Back(Lent),
}

/// The frames of the kernel's port (see the module doc).
pub(crate) struct Pool {
    bufs: KVVec<DmaBuf>,
    /// The NIC's PCI device, which lent pages are mapped for.
    dev: PciDev,
    lends: KVec<Lend>,
    /// Slots in [`Lend::Back`].
    back: usize,
    /// Slots in [`Lend::Free`].
    free_lends: usize,
    /// The live groups: group `g` is frame `GROUP_BASE + g`.
    groups: Groups<Frame, KStorage>,
}

impl Pool {
    /// `bufs` as frames `0..bufs.len()` (at most [`LENT_BASE`]) of `dev`'s port.
    pub(crate) fn new(bufs: KVVec<DmaBuf>, dev: &PciDev) -> Result<Pool> {
        if bufs.len() > GROUP_BASE as usize {
            return Err(EINVAL);
        }
        let mut lends = KVec::with_capacity(LEND_SLOTS, GFP_KERNEL)?;
        for _ in 0..LEND_SLOTS {
            lends.push(Lend::Free, GFP_KERNEL)?;
        }
        let groups = Groups::new(GROUPS, 0).ok_or(ENOMEM)?;
        Ok(Pool { bufs, dev: dev.clone(), lends, back: 0, free_lends: LEND_SLOTS, groups })
    }

    /// Frame `f`'s buffer (`None` for a lent page).
    pub(crate) fn buf(&self, f: Frame) -> Option<&DmaBuf> {
        self.bufs.get(f as usize)
    }

    /// The device pages are lent to.
    pub(crate) fn dev(&self) -> &PciDev {
        &self.dev
    }

    fn slot(f: Frame) -> Option<usize> {
        f.checked_sub(LENT_BASE).map(|i| i as usize)
    }

    fn group_index(f: Frame) -> Option<usize> {
        f.checked_sub(GROUP_BASE).map(|g| g as usize).filter(|&g| g < GROUPS)
    }

    /// Whether `f` is a lent page, or a group of them.
    pub(crate) fn is_lent(f: Frame) -> bool {
        f >= GROUP_BASE
    }

    /// Whether `n` lend slots are free.
    pub(crate) fn can_lend(&self, n: usize) -> bool {
        self.free_lends >= n
    }

    /// `lent` as a frame, or `None` (no free slot: the lend is dropped, and with it the
    /// page's extra token, which the caller's own still holds up).
    pub(crate) fn lend(&mut self, lent: Lent) -> Option<Frame> {
        let i = self.lends.iter().position(|l| matches!(l, Lend::Free))?;
        self.lends[i] = Lend::Out(lent);
        self.free_lends -= 1;
        Some(LENT_BASE + i as Frame)
    }

    /// A group naming `frames` in order (1 to [`GROUP_FRAMES`] lent pages or pool frames),
    /// or `None` (no group free, or a frame that is neither).
    pub(crate) fn group(&mut self, frames: &[Frame]) -> Option<Frame> {
        let known = |f: &Frame| {
            self.buf(*f).is_some() || matches!(Self::slot(*f).and_then(|i| self.lends.get(i)), Some(Lend::Out(_)))
        };
        if !frames.iter().all(known) {
            return None;
        }
        Some(GROUP_BASE + self.groups.start(frames, FRAME_BYTES as u32)? as Frame)
    }

    /// The frames group `f` names (none if `f` is no live group).
    fn members(&self, f: Frame) -> &[Frame] {
        Self::group_index(f).and_then(|g| self.groups.get(g)).map_or(&[], |g| g.frames())
    }

    /// Lent pages and live groups: what the port may still have armed or be sending.
    pub(crate) fn lent(&self, i: usize) -> Option<Frame> {
        if i < self.groups.capacity() {
            return self.groups.get(i).map(|_| GROUP_BASE + i as Frame);
        }
        let i = i - GROUPS;
        matches!(self.lends.get(i)?, Lend::Out(_)).then_some(LENT_BASE + i as Frame)
    }

    /// Move the lends given back into `out` (to drop outside the core lock); how many.
    pub(crate) fn take_back(&mut self, out: &mut [Option<Lent>]) -> usize {
        let mut n = 0;
        if self.back == 0 {
            return 0;
        }
        for l in self.lends.iter_mut() {
            if n == out.len() {
                break;
            }
            if matches!(l, Lend::Back(_)) {
                if let Lend::Back(lent) = core::mem::replace(l, Lend::Free) {
                    out[n] = Some(lent);
                    n += 1;
                }
            }
        }
        self.back -= n;
        self.free_lends += n;
        n
    }
}

/// How many frames [`Pool::lent`] may name.
pub(crate) const LENT_NAMES: usize = GROUPS + LEND_SLOTS;

impl FrameMem for Pool {
    type Frame = Frame;
    const FRAME_BYTES: u32 = FRAME_BYTES as u32;
    fn count(&self) -> usize {
        self.bufs.len()
    }
    fn nth(&self, i: usize) -> Frame {
        i as Frame
    }
    fn dma(&self, f: Frame) -> Option<u64> {
        match Self::slot(f) {
            Some(i) => match self.lends.get(i) {
                Some(Lend::Out(l)) => Some(l.dma_addr()),
                _ => None,
            },
            None => self.buf(f).map(DmaBuf::dma_addr),
        }
    }
    fn segments(&self, f: Frame, out: &mut Segments) -> Option<usize> {
        let members = self.members(f);
        if members.is_empty() {
            out[0] = Segment { addr: self.dma(f)?, len: FRAME_BYTES as u32 };
            return Some(1);
        }
        for (o, &m) in out.iter_mut().zip(members) {
            *o = Segment { addr: self.dma(m)?, len: FRAME_BYTES as u32 };
        }
        Some(members.len())
    }
    fn sent(&mut self, f: Frame) {
        // A gathered reply (posted or dropped): its pool frames stay held, the group ends.
        if Self::group_index(f).is_some() {
            self.give_back(f);
        }
    }
    fn give_back(&mut self, f: Frame) -> bool {
        if let Some(g) = Self::group_index(f) {
            for &m in self.groups.end(g).as_ref().map_or(&[][..], |g| g.frames()) {
                if Self::slot(m).is_some() {
                    self.give_back(m);
                }
            }
            return false;
        }
        let Some(i) = Self::slot(f) else { return true };
        // Only a lend still out goes back (one given back already waits as it is).
        if let Some(l) = self.lends.get_mut(i).filter(|l| matches!(l, Lend::Out(_))) {
            if let Lend::Out(lent) = core::mem::replace(l, Lend::Free) {
                *l = Lend::Back(lent);
                self.back += 1;
            }
        }
        false
    }
    fn copy(&self, from: Frame, to: Frame, len: u32) -> bool {
        match (self.buf(from), self.buf(to)) {
            (Some(a), Some(b)) => b.copy_from(0, a, 0, len as usize).is_ok(),
            _ => false,
        }
    }
    fn write(&self, f: Frame, data: &[u8]) -> bool {
        self.buf(f).is_some_and(|b| b.write(0, data).is_ok())
    }
    fn read(&self, f: Frame, out: &mut [u8]) -> bool {
        self.buf(f).is_some_and(|b| b.read(0, out).is_ok())
    }
}
