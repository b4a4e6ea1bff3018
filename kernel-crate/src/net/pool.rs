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

use super::{Frame, FRAME_BYTES, OPS};
use crate::blk::PAGE_BYTES;
use crate::sys::blk::Lent;
use crate::sys::dma::DmaBuf;
use crate::sys::pci::PciDev;
use crate::tpz::runtime::FrameMem;
use kernel::prelude::*;

/// Request pages lent at once: one per GMS operation, and as many more writes whose
/// operation ended while their send waits to be reaped.
pub(crate) const LEND_SLOTS: usize = 2 * OPS;
/// The first lent frame, above every pool frame.
pub(crate) const LENT_BASE: Frame = Frame::MAX - LEND_SLOTS as Frame + 1;
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
}

impl Pool {
    /// `bufs` as frames `0..bufs.len()` (at most [`LENT_BASE`]) of `dev`'s port.
    pub(crate) fn new(bufs: KVVec<DmaBuf>, dev: &PciDev) -> Result<Pool> {
        if bufs.len() > LENT_BASE as usize {
            return Err(EINVAL);
        }
        let mut lends = KVec::with_capacity(LEND_SLOTS, GFP_KERNEL)?;
        for _ in 0..LEND_SLOTS {
            lends.push(Lend::Free, GFP_KERNEL)?;
        }
        Ok(Pool { bufs, dev: dev.clone(), lends, back: 0 })
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

    /// Whether `f` is a lent page.
    pub(crate) fn is_lent(f: Frame) -> bool {
        f >= LENT_BASE
    }

    /// Whether a lend slot is free.
    pub(crate) fn can_lend(&self) -> bool {
        self.lends.iter().any(|l| matches!(l, Lend::Free))
    }

    /// `lent` as a frame, or `None` (no free slot: the lend is dropped, and with it the
    /// page's extra token, which the caller's own still holds up).
    pub(crate) fn lend(&mut self, lent: Lent) -> Option<Frame> {
        let i = self.lends.iter().position(|l| matches!(l, Lend::Free))?;
        self.lends[i] = Lend::Out(lent);
        Some(LENT_BASE + i as Frame)
    }

    /// Frames still lent to the port.
    pub(crate) fn lent(&self) -> impl Iterator<Item = Frame> + '_ {
        self.lends.iter().enumerate().filter(|(_, l)| matches!(l, Lend::Out(_))).map(|(i, _)| LENT_BASE + i as Frame)
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
        n
    }
}

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
    fn give_back(&mut self, f: Frame) -> bool {
        let Some(i) = Self::slot(f) else { return true };
        if let Some(l) = self.lends.get_mut(i) {
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
