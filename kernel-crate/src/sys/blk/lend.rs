// SPDX-License-Identifier: GPL-2.0-only
//! A page of a request lent to a device for DMA ([`Lent`]): the Trapeze way of moving a
//! block page, where the NIC writes a read's payload straight into the block layer's
//! page and sends a write's straight from it, with no frame in between.
//!
//! A lend is a part token of its own ([`Part::split`]) and counts in the request word as
//! a user, like a copy in progress. So while the device may reach the page:
//! * the request cannot end by completion (the lend's token is pending), and
//! * blk-mq's timer does not end it either: the timeout handler sees a user and re-arms
//!   the timer instead (the owner of the lend takes it back from the device within its own
//!   deadline: an IPT entry disarmed, a send reaped).
//!
//! Dropping the lend unmaps the page and then completes its token (with success: the
//! request's outcome is its other parts'), which may end the request: drop it where
//! ending a request is allowed (not under a lock that submitting I/O takes).

use super::super::pci::PciDev;
use super::{Part, USER};
use core::sync::atomic::Ordering;
use kernel::{bindings, prelude::*};

#[allow(improper_ctypes)]
extern "C" {
    fn trapeze_blk_rq_dma_map(
        rq: *mut bindings::request,
        off: usize,
        len: usize,
        dev: *mut bindings::device,
        to_device: bool,
    ) -> bindings::dma_addr_t;
    fn trapeze_dma_unmap(dev: *mut bindings::device, addr: bindings::dma_addr_t, len: usize, to_device: bool);
}

/// `DMA_MAPPING_ERROR` (`~(dma_addr_t)0`, a macro).
const MAPPING_ERROR: bindings::dma_addr_t = !0;

/// Which way the device moves the lent bytes.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Dir {
    /// The device reads them (a write's data, sent).
    ToDevice,
    /// The device writes them (a read's data, received).
    FromDevice,
}

/// Bytes of a started request mapped for a device's DMA.
///
/// # Invariants
///
/// `addr` maps `len` bytes of `token`'s request for `dev` in direction `dir`, and the
/// request word counts one user for this lend, until `Drop`.
pub(crate) struct Lent {
    token: Option<Part>,
    dev: PciDev,
    addr: bindings::dma_addr_t,
    len: usize,
    dir: Dir,
}

impl Lent {
    /// The bus address the device uses.
    pub(crate) fn dma_addr(&self) -> u64 {
        self.addr
    }
}

impl Part {
    /// Lend `len` bytes of the request's data at byte offset `off` to `dev` (they must lie
    /// in one page: `EINVAL` otherwise, or if the mapping fails). `ETIMEDOUT` if the
    /// request already ended, `EBUSY` if it has as many parts pending as it can count.
    pub(crate) fn lend(&self, off: usize, len: usize, dev: &PciDev, dir: Dir) -> Result<Lent> {
        let token = self.split()?;
        token.begin_use()?;
        let w = token.word();
        let to_device = dir == Dir::ToDevice;
        // SAFETY: the word counts this lend as a user of a live generation and `token` is
        // pending, so the request is started and stays ours; `dev` is a live device (we
        // hold a reference).
        let addr = unsafe { trapeze_blk_rq_dma_map(token.rq.as_ptr(), off, len, dev.device_raw(), to_device) };
        if addr == MAPPING_ERROR {
            w.fetch_sub(USER, Ordering::Release);
            token.complete(Ok(()));
            return Err(EINVAL);
        }
        // INVARIANT: mapped above, counted as a user above.
        Ok(Lent { token: Some(token), dev: dev.clone(), addr, len, dir })
    }
}

impl Drop for Lent {
    fn drop(&mut self) {
        // SAFETY: mapped by `Part::lend` for this device, length and direction (invariant),
        // unmapped once, here.
        unsafe {
            trapeze_dma_unmap(self.dev.device_raw(), self.addr, self.len, self.dir == Dir::ToDevice);
        }
        if let Some(token) = self.token.take() {
            // Release: the device's accesses, which the owner saw end, happen before
            // whoever ends the request sees the user go.
            token.word().fetch_sub(USER, Ordering::Release);
            token.complete(Ok(()));
        }
    }
}
