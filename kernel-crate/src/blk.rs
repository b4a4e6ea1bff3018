// SPDX-License-Identifier: GPL-2.0-only
//! The GMS block device `/dev/gms0`: a blk-mq disk of 4096-byte blocks whose requests are
//! split into 4 KiB pages, each served by a pluggable [`PageBackend`] (a RAM backend here,
//! [`ram::RamBackend`]; the GMS backend does getpage/putpage over NetRPC).
//!
//! # The backend contract
//!
//! * [`PageBackend::read`] / [`PageBackend::write`] are called from blk-mq's `queue_rq`:
//!   atomic context, **must not sleep**. They get the disk page number and a [`PageIo`]
//!   for it, and own that `PageIo` from then on.
//! * A read delivers the page with [`PageIo::fill`] (any chunks, any order; a page never
//!   written may be [`PageIo::fill_zero`]ed); a write takes the page's bytes with
//!   [`PageIo::copy_out`]. Then the backend calls [`PageIo::complete`] exactly once, with
//!   `Ok` or an error. This may happen inside `read`/`write`, or later **from any context**:
//!   process, softirq or hard interrupt (the GMS backend completes in a NetRPC
//!   continuation run by the receive interrupt). Copies are `kmap_local` + `memcpy`, fine
//!   in every context.
//! * The request's data pages belong to the block layer; the backend reaches them only
//!   through its `PageIo`, and only until the request ends: it copies (`copy_out`, `fill`:
//!   the RAM store), or lends the page to a device for DMA ([`PageIo::lend`]: the GMS
//!   backend, whose NIC sends a write straight from the page and lands a read in it). A
//!   lent page keeps its request from ending, even past the timeout, until the lend is
//!   dropped.
//! * A request ends when all its pages completed: with `BLK_STS_IOERR` if any page failed
//!   (a `PageIo` dropped without `complete` counts as failed), else success.
//! * Nothing hangs: if pages are still out when blk-mq's timer fires (`gms_disk_timeout_ms`,
//!   default 30 s), the request ends with `BLK_STS_TIMEOUT`; the `PageIo`s still out go
//!   stale: `fill`/`copy_out` return `ETIMEDOUT` and `complete` does nothing. A backend
//!   with its own deadline just completes with an error earlier.
//! * Teardown ([`GmsDisk`]'s drop, process context): `del_gendisk` (new I/O fails; waits
//!   until every request in flight completed, failed or timed out), then the disk drops
//!   its backend reference, which should drop every `PageIo` the backend still holds;
//!   the tag set is freed once no `PageIo` is left (after 10 s it is leaked instead, with
//!   an error logged). A backend shared elsewhere must drop its `PageIo`s when asked to
//!   stop (e.g. when its NIC goes away), never keep them past the module's unload.
//!
//! `/dev/gms0` is one whole disk: no partition scan when it is added (which would read it
//! before a GMS backend's members can answer). An open `/dev/gms0` pins the module
//! (`owner = THIS_MODULE`), so `rmmod` refuses with `EBUSY`/`EAGAIN` while a process has
//! it open, and unloads cleanly once it is closed.
//!
//! Parameters (`insmod trapeze.ko gms_disk_mb=16 …`, their table below): `gms_disk_mb`
//! (0 = no disk), `gms_disk_timeout_ms`, the RAM backend's fault injection
//! `gms_ram_fail_page` / `gms_ram_stall_page`, and the read-only `gms_disk_stats`.
//!
//! Imports go down only: `sys` (the blk-mq shell, parameters) and `stats`; the backends
//! ([`ram`], `gms_backend`) use this module, never the other way round.

pub(crate) mod ram;

use crate::stats::{counters, SliceWriter};
use crate::sys::blk::{Config, Dir, Disk, Driver, Lent, Op, Part, RqInfo};
use crate::sys::param::{int_entry, modinfo, param_table, show_entry, IntParam, Show};
use crate::sys::pci::PciDev;
use core::fmt::Write;
use kernel::{prelude::*, sync::Arc};

/// `gms_disk_mb=`: size of `/dev/gms0` on the RAM backend in MiB; 0 (default): no disk.
pub(crate) static DISK_MB: IntParam = IntParam::new(0);
/// `gms_disk_timeout_ms=`: a request still pending after this fails (`BLK_STS_TIMEOUT`).
static TIMEOUT_MS: IntParam = IntParam::new(30_000);
/// `gms_ram_fail_page=`: the RAM backend fails every I/O of this page (-1: none).
pub(crate) static RAM_FAIL_PAGE: IntParam = IntParam::new(-1);
/// `gms_ram_stall_page=`: the RAM backend never completes I/O of this page (-1: none).
pub(crate) static RAM_STALL_PAGE: IntParam = IntParam::new(-1);

param_table!(PARAMS: 5 = [
    int_entry(c"gms_disk_mb", &DISK_MB, &crate::THIS_MODULE),
    int_entry(c"gms_disk_timeout_ms", &TIMEOUT_MS, &crate::THIS_MODULE),
    int_entry(c"gms_ram_fail_page", &RAM_FAIL_PAGE, &crate::THIS_MODULE),
    int_entry(c"gms_ram_stall_page", &RAM_STALL_PAGE, &crate::THIS_MODULE),
    show_entry::<Stats>(c"gms_disk_stats", &crate::THIS_MODULE),
]);

modinfo!(T_DISK_MB, "parmtype=gms_disk_mb:int\0");
modinfo!(P_DISK_MB, "parm=gms_disk_mb:size of /dev/gms0 in MiB, RAM backend (default 0: no disk; /dev/gmsram0 beside a gms_disk_pages disk)\0");
modinfo!(T_TIMEOUT, "parmtype=gms_disk_timeout_ms:int\0");
modinfo!(P_TIMEOUT, "parm=gms_disk_timeout_ms:requests pending longer fail (default 30000)\0");
modinfo!(T_FAIL, "parmtype=gms_ram_fail_page:int\0");
modinfo!(P_FAIL, "parm=gms_ram_fail_page:RAM backend fails I/O of this page (test; default -1)\0");
modinfo!(T_STALL, "parmtype=gms_ram_stall_page:int\0");
modinfo!(P_STALL, "parm=gms_ram_stall_page:RAM backend never completes this page (test; default -1)\0");
modinfo!(P_STATS, "parm=gms_disk_stats:block device counters (read-only, text)\0");

/// Bytes of a disk block and of a backend page.
pub(crate) const PAGE_BYTES: usize = 4096;
const SECTORS_PER_PAGE: u64 = (PAGE_BYTES / 512) as u64;
/// Largest request: 64 pages.
const MAX_REQUEST_BYTES: u32 = 256 * 1024;
/// Requests in flight at once.
const QUEUE_DEPTH: u32 = 64;
/// Largest disk `gms_disk_mb` may ask for (the RAM backend holds it in this node).
pub(crate) const MAX_DISK_MB: u64 = 1024;
/// Largest disk on GMS (`gms_disk_pages`): 64 GiB, held by the cluster's budgets; this
/// node keeps ~10 bytes of version and holder per page and replica.
pub(crate) const MAX_GMS_DISK_MB: u64 = 64 * 1024;

/// One 4 KiB page of a request, handed to a [`PageBackend`] (see the module docs for the
/// contract). Dropping it without [`PageIo::complete`] fails the page.
pub(crate) struct PageIo {
    part: Part,
    write: bool,
}

impl PageIo {
    fn range(off: usize, len: usize) -> Result<usize> {
        match off.checked_add(len) {
            Some(end) if end <= PAGE_BYTES => Ok(off),
            _ => Err(EINVAL),
        }
    }

    fn base(&self) -> usize {
        self.part.index() as usize * PAGE_BYTES
    }

    /// A read's data: copy `data` to byte `off` of this page of the request. `EINVAL` if
    /// the range passes the page's end, `ETIMEDOUT` if the request already ended.
    pub(crate) fn fill(&self, off: usize, data: &[u8]) -> Result {
        let off = Self::range(off, data.len())?;
        self.part.copy_to_rq(self.base() + off, data)
    }

    /// A read of a page never written (the GMS backend; the RAM backend's store is zeroed).
    pub(crate) fn fill_zero(&self) -> Result {
        const ZEROS: [u8; 512] = [0; 512];
        for off in (0..PAGE_BYTES).step_by(ZEROS.len()) {
            self.fill(off, &ZEROS)?;
        }
        Ok(())
    }

    /// A write's data: copy byte `off..off + out.len()` of this page of the request into
    /// `out`. Errors as for [`PageIo::fill`].
    pub(crate) fn copy_out(&self, off: usize, out: &mut [u8]) -> Result {
        let off = Self::range(off, out.len())?;
        self.part.copy_from_rq(self.base() + off, out)
    }

    /// Lend this page to `dev` for DMA: the device sends a write's data straight from it
    /// (or receives a read's data straight into it) until the [`Lent`] is dropped. Errors
    /// as for [`PageIo::split`], and `EINVAL` if the page is not one whole page of memory.
    pub(crate) fn lend(&self, dev: &PciDev) -> Result<Lent> {
        let dir = if self.write { Dir::ToDevice } else { Dir::FromDevice };
        self.part.lend(self.base(), PAGE_BYTES, dev, dir)
    }

    /// Finish this page: `Ok`, or an error that fails the whole request with an I/O error.
    pub(crate) fn complete(self, result: Result) {
        let c = match (&result, self.write) {
            (Err(_), _) => &STATS.page_errors,
            (Ok(()), false) => &STATS.pages_read,
            (Ok(()), true) => &STATS.pages_written,
        };
        c.inc();
        self.part.complete(result);
    }
}

/// Where the disk's pages live.
pub(crate) trait PageBackend: Send + Sync {
    /// Read disk page `page` into `io` ([`PageIo::fill`]) and complete it, now or later.
    /// `last`: the request's last page (the others came just before it): a backend that
    /// gathers a request's pages may start on them now.
    fn read(&self, page: u64, io: PageIo, last: bool);
    /// Store `io`'s data ([`PageIo::copy_out`]) as disk page `page` and complete it.
    fn write(&self, page: u64, io: PageIo, last: bool);
}

counters! {
    Stats in STATS: "The disk's counters (module-wide: one disk), in `gms_disk_stats`.";
    requests: "read and write requests accepted",
    rejected: "requests refused (not whole pages inside the disk, or neither a read nor a write)",
    pages_read: "pages read",
    pages_written: "pages written",
    page_errors: "pages that failed",
    timeouts: "requests that timed out (`gms_disk_timeout_ms`)",
}

impl Show for Stats {
    fn show(out: &mut [u8]) -> usize {
        let mut w = SliceWriter::new(out);
        STATS.each(|name, v| {
            let _ = writeln!(w, "{name}: {v}");
        });
        w.as_str().len()
    }
}

/// Splits requests into pages for a backend.
struct BlkDriver {
    backend: Arc<dyn PageBackend>,
    pages: u64,
}

impl Driver for BlkDriver {
    fn accept(&self, rq: &RqInfo) -> Result<u32> {
        let r = match rq.op {
            Op::Read | Op::Write => self.pages_of(rq),
            Op::Other(_) => Err(ENOTSUPP),
        };
        let c = if r.is_ok() { &STATS.requests } else { &STATS.rejected };
        c.inc();
        r
    }

    fn serve(&self, rq: &RqInfo, part: Part, last: bool) {
        let page = rq.sector / SECTORS_PER_PAGE + u64::from(part.index());
        let write = rq.op == Op::Write;
        let io = PageIo { part, write };
        if write {
            self.backend.write(page, io, last);
        } else {
            self.backend.read(page, io, last);
        }
    }

    fn timed_out(&self, rq: &RqInfo, pending: u32) {
        STATS.timeouts.inc();
        pr_warn!(
            "gms0: {:?} of {} bytes at sector {} timed out with {pending} page(s) pending\n",
            rq.op,
            rq.bytes,
            rq.sector
        );
    }
}

impl BlkDriver {
    /// Pages of a read or write, if it is whole pages inside the disk.
    fn pages_of(&self, rq: &RqInfo) -> Result<u32> {
        let bytes = rq.bytes as usize;
        if rq.sector % SECTORS_PER_PAGE != 0 || bytes % PAGE_BYTES != 0 {
            return Err(EINVAL);
        }
        let n = (bytes / PAGE_BYTES) as u64;
        match (rq.sector / SECTORS_PER_PAGE).checked_add(n) {
            Some(end) if end <= self.pages => Ok(n as u32),
            _ => Err(EINVAL),
        }
    }
}

/// `/dev/gms0` and its backend; dropping it tears the disk down (module docs).
pub(crate) struct GmsDisk {
    /// `Some` until dropped.
    disk: Option<Disk<BlkDriver>>,
    pages: u64,
    /// `gms0` (or `gmsram0`, a RAM disk beside a GMS one), for the log.
    name: &'static str,
}

impl GmsDisk {
    /// Add `/dev/NAME` (`gms0`) with `pages` 4 KiB pages served by `backend` (process
    /// context).
    pub(crate) fn new(disk_name: &'static core::ffi::CStr, pages: u64, backend: Arc<dyn PageBackend>) -> Result<Self> {
        let name = disk_name.to_str().unwrap_or("gms");
        if pages == 0 || pages > MAX_GMS_DISK_MB.max(MAX_DISK_MB) * 1024 * 1024 / PAGE_BYTES as u64 {
            return Err(EINVAL);
        }
        let timeout_ms = match TIMEOUT_MS.get() {
            t @ 100..=600_000 => t as u32,
            t => {
                pr_err!("gms_disk_timeout_ms={t}: must be 100 ..= 600000\n");
                return Err(EINVAL);
            }
        };
        let cfg = Config {
            name: disk_name,
            capacity_bytes: pages * PAGE_BYTES as u64,
            block_bytes: PAGE_BYTES as u32,
            max_request_bytes: MAX_REQUEST_BYTES,
            queue_depth: QUEUE_DEPTH,
            timeout_ms,
        };
        let disk = Disk::new(&cfg, BlkDriver { backend, pages })?;
        pr_info!("{name}: {} MiB disk ({pages} pages of 4 KiB), timeout {timeout_ms} ms\n", pages / 256);
        Ok(Self { disk: Some(disk), pages, name })
    }
}

impl Drop for GmsDisk {
    fn drop(&mut self) {
        pr_info!("{}: removing the disk ({} pages)\n", self.name, self.pages);
        // del_gendisk (waits for requests in flight), backend, tag set.
        drop(self.disk.take());
        pr_info!("{}: removed (no request left in flight)\n", self.name);
        STATS.each(|counter, v| pr_info!("{}: {counter}: {v}\n", self.name));
    }
}
