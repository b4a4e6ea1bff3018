// SPDX-License-Identifier: GPL-2.0-only
//! The RAM backend of `/dev/gms0` (or `/dev/gmsram0` beside a GMS disk): every page in one vmalloc'd store allocated at load
//! (`gms_disk_mb` is its budget), so the block device can be tested on its own. It
//! completes every page inside `read`/`write`, except two fault injections for tests:
//! `gms_ram_fail_page=P` fails every read and write of disk page P, `gms_ram_stall_page=S`
//! never completes page S (it keeps the `PageIo` until the backend is dropped), so the
//! request ends only through blk-mq's timeout.

use super::{GmsDisk, PageBackend, PageIo, DISK_MB, MAX_DISK_MB, PAGE_BYTES, RAM_FAIL_PAGE, RAM_STALL_PAGE};
use core::pin::Pin;
use kernel::{
    alloc::{KBox, KVec, VVec},
    new_spinlock,
    prelude::*,
    sync::{Arc, SpinLock},
};

/// `gms_disk_mb` > 0: `/dev/gms0` of that size on a [`RamBackend`] (with the fault
/// injection parameters); 0: none. `beside_gms` (`gms_disk_pages` > 0 too): `/dev/gms0`
/// is the GMS disk and this one is `/dev/gmsram0`: the same block driver over local RAM, the floor
/// a benchmark measures beside it (`cargo xtask bench vm`'s `ram` row). The two disks
/// share `gms_disk_stats`.
pub(crate) fn disk_from_params(beside_gms: bool) -> Result<Option<GmsDisk>> {
    let mb = DISK_MB.get();
    if mb == 0 {
        return Ok(None);
    }
    if mb < 0 || mb as u64 > MAX_DISK_MB {
        pr_err!("gms_disk_mb={mb}: must be 0 ..= {MAX_DISK_MB}\n");
        return Err(EINVAL);
    }
    let pages = mb as u64 * 256;
    let page_param = |v: i32| u64::try_from(v).ok();
    let backend = RamBackend::new(pages, page_param(RAM_FAIL_PAGE.get()), page_param(RAM_STALL_PAGE.get()))?;
    let backend: Arc<dyn PageBackend> = Arc::new(backend, GFP_KERNEL)?;
    let name = if beside_gms { c"gmsram0" } else { c"gms0" };
    GmsDisk::new(name, pages, backend).map(Some)
}

/// Disk pages in RAM.
pub(crate) struct RamBackend {
    store: Pin<KBox<SpinLock<VVec<u8>>>>,
    fail_page: Option<u64>,
    stall_page: Option<u64>,
    /// `PageIo`s of the stalled page, never completed (they go stale at the timeout).
    stalled: Pin<KBox<SpinLock<KVec<PageIo>>>>,
}

impl RamBackend {
    /// `pages` zeroed pages (process context: allocates with `GFP_KERNEL`).
    pub(crate) fn new(pages: u64, fail_page: Option<u64>, stall_page: Option<u64>) -> Result<Self> {
        let bytes = usize::try_from(pages).ok().and_then(|p| p.checked_mul(PAGE_BYTES)).ok_or(EINVAL)?;
        let mut v = VVec::new();
        v.extend_with(bytes, 0u8, GFP_KERNEL)?;
        if let Some(p) = fail_page {
            pr_info!("gms0: RAM backend fails every I/O of page {p}\n");
        }
        if let Some(p) = stall_page {
            pr_info!("gms0: RAM backend never completes I/O of page {p}\n");
        }
        Ok(Self {
            store: KBox::pin_init(new_spinlock!(v, "gms_ram_store"), GFP_KERNEL)?,
            fail_page,
            stall_page,
            stalled: KBox::pin_init(new_spinlock!(KVec::new(), "gms_ram_stalled"), GFP_KERNEL)?,
        })
    }

    /// A fault to inject for `page`, if any: `Some(io)` back if the caller should serve it.
    fn inject(&self, page: u64, io: PageIo) -> Option<PageIo> {
        if self.fail_page == Some(page) {
            io.complete(Err(EIO));
            None
        } else if self.stall_page == Some(page) {
            // If the push cannot allocate, `io` is dropped: the page fails at once.
            let _ = self.stalled.lock().push(io, GFP_ATOMIC);
            None
        } else {
            Some(io)
        }
    }

    fn range(page: u64) -> Option<core::ops::Range<usize>> {
        let start = usize::try_from(page).ok()?.checked_mul(PAGE_BYTES)?;
        Some(start..start.checked_add(PAGE_BYTES)?)
    }
}

impl PageBackend for RamBackend {
    fn read(&self, page: u64, io: PageIo, _last: bool) {
        let Some(io) = self.inject(page, io) else { return };
        let r = {
            let store = self.store.lock();
            match Self::range(page).and_then(|r| store.get(r)) {
                Some(data) => io.fill(0, data),
                None => Err(EINVAL),
            }
        };
        io.complete(r);
    }

    fn write(&self, page: u64, io: PageIo, _last: bool) {
        let Some(io) = self.inject(page, io) else { return };
        let r = {
            let mut store = self.store.lock();
            match Self::range(page).and_then(|r| store.get_mut(r)) {
                Some(data) => io.copy_out(0, data),
                None => Err(EINVAL),
            }
        };
        io.complete(r);
    }
}
