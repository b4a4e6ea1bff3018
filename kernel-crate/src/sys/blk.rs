// SPDX-License-Identifier: GPL-2.0-only
//! blk-mq disks: a tag set, a gendisk and requests served in parts that may complete
//! asynchronously, from any context.
//!
//! 6.12's `kernel::block::mq` cannot do this: its `Request` has no sector, length or data
//! pages, ends only with success, and its `Operations` have no timeout. So this is a shell
//! of its own over the C API (bindings, plus `blk_shim.c` for a macro and the static
//! inlines: `blk_mq_alloc_disk`, `req_op`, `rq_for_each_segment`).
//!
//! A [`Driver`] looks at each request ([`Driver::accept`] returns how many parts to serve
//! it in, or an error), then gets one [`Part`] token per part ([`Driver::serve`]). A part
//! copies data in or out of the request ([`Part::copy_to_rq`], [`Part::copy_from_rq`]) and
//! is completed once ([`Part::complete`]; dropping it fails it); [`Part::split`] gives a
//! part a second token, for a backend that serves it in pieces at once. The request ends
//! when its last token completes: `BLK_STS_IOERR` if any part failed, else success. If
//! parts are still out when blk-mq's timer fires, the request ends with
//! `BLK_STS_TIMEOUT`, and the parts still out become stale: their copies fail
//! (`ETIMEDOUT`) and their completions do nothing. So a request never waits on a backend
//! beyond the timeout, and a late completion never touches a request that has moved on —
//! with one exception: a page lent to the device for DMA ([`Part::lend`], [`lend`]) keeps
//! its request from ending, timer or not, until the lend is given back.
//!
//! Soundness rests on one word per request (in its PDU, [`RqState`]): a generation bumped
//! each time the request starts, the parts pending, the copies in progress and two flags
//! (error, ended); every change is a compare-and-swap. A copy (or a lend) runs only while
//! the word counts it and says "this generation, not ended"; whoever sets "ended" ends the
//! request, and the timeout path sets it only while nothing is counted (else it re-arms
//! the timer: a copy is one `memcpy` of at most a page, a lend ends within its owner's
//! deadline). PDUs live as long as the tag set, and [`Disk`]
//! frees the tag set only once every part token is gone (it waits, then leaks rather than
//! free memory a token could still reach).
//!
//! C headers: [`include/linux/blk-mq.h`](srctree/include/linux/blk-mq.h),
//! [`include/linux/blkdev.h`](srctree/include/linux/blkdev.h).

use core::ffi::{c_int, c_uint, c_void, CStr};
use core::mem::MaybeUninit;
use core::ptr::NonNull;
use core::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use kernel::{bindings, error::from_err_ptr, prelude::*, types::Opaque};

// Only pointers to these C structs cross the boundary, so their bindgen layouts (some
// with zero-sized members) do not matter to the ABI.
mod lend;
pub(crate) use lend::{Dir, Lent};

#[allow(improper_ctypes)]
extern "C" {
    fn trapeze_blk_alloc_disk(
        set: *mut bindings::blk_mq_tag_set,
        lim: *mut bindings::queue_limits,
        queuedata: *mut c_void,
    ) -> *mut bindings::gendisk;
    fn trapeze_blk_rq_op(rq: *mut bindings::request) -> c_uint;
    fn trapeze_blk_rq_copy(rq: *mut bindings::request, off: usize, buf: *mut c_void, len: usize, to_rq: bool) -> usize;
}

// `blk_status_t` values (macros in blk_types.h that bindgen does not export; blk_shim.c
// checks them with static_assert).
const STS_OK: bindings::blk_status_t = 0;
const STS_NOTSUPP: bindings::blk_status_t = 1;
const STS_TIMEOUT: bindings::blk_status_t = 2;
const STS_NOSPC: bindings::blk_status_t = 3;
const STS_IOERR: bindings::blk_status_t = 10;

/// What a request asks for.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Op {
    Read,
    Write,
    /// Any other `REQ_OP_*` (flush, discard, …), by number.
    Other(u32),
}

/// A request as the driver sees it when it arrives.
#[derive(Clone, Copy, Debug)]
pub(crate) struct RqInfo {
    pub(crate) op: Op,
    /// First 512-byte sector.
    pub(crate) sector: u64,
    /// Data bytes.
    pub(crate) bytes: u32,
}

/// The device logic above this shell.
pub(crate) trait Driver: Send + Sync + 'static {
    /// A request arrived (blk-mq's `queue_rq`: atomic context, must not sleep). Return the
    /// number of parts to serve it in (0 ends it at once with success), or an error to
    /// fail it unstarted (`ENOTSUPP` → `BLK_STS_NOTSUPP`, anything else → `IOERR`).
    fn accept(&self, rq: &RqInfo) -> Result<u32>;
    /// Serve part `part.index()` of `rq` (same context as `accept`; parts 0, 1, … in
    /// order, right after `accept`; `last`: the request's last). The part may be
    /// completed now or later, from any context.
    fn serve(&self, rq: &RqInfo, part: Part, last: bool);
    /// blk-mq's timer fired with `pending` parts still out; the request is being failed
    /// with `BLK_STS_TIMEOUT` (process context).
    fn timed_out(&self, rq: &RqInfo, pending: u32);
}

// The request word: pending parts | copies in progress | out of space | error | ended |
// generation.
const PENDING: u64 = 0xffff;
const USER: u64 = 1 << 16;
const USERS: u64 = 0x1fff << 16;
const NOSPC: u64 = 1 << 29;
const ERROR: u64 = 1 << 30;
const ENDED: u64 = 1 << 31;
const GEN_SHIFT: u32 = 32;

/// Most parts one request may be served in.
pub(crate) const MAX_PARTS: u32 = PENDING as u32;

/// `ETIMEDOUT`: the error of a copy through a stale part.
fn stale() -> Error {
    Error::from_errno(-(bindings::ETIMEDOUT as c_int))
}

/// A request's private data (its PDU, `cmd_size` bytes after `struct request`).
#[repr(transparent)]
struct RqState(AtomicU64);

const fn gen_of(word: u64) -> u32 {
    (word >> GEN_SHIFT) as u32
}

/// The state word of `rq`.
///
/// # Safety
///
/// `rq` is a request of a tag set made by [`Disk::new`] that is still allocated (its PDU
/// was initialised by `init_request`).
unsafe fn state<'a>(rq: *mut bindings::request) -> &'a AtomicU64 {
    // SAFETY: by the caller's guarantee the request and its PDU (`cmd_size` =
    // `size_of::<RqState>()` bytes, set up by `init_request`) are allocated; blk-mq never
    // frees a PDU before the tag set, which `Disk` frees only once no reference is left.
    unsafe { &(*bindings::blk_mq_rq_to_pdu(rq).cast::<RqState>()).0 }
}

/// One part of a started request: the right to copy its data and, once, to complete it.
///
/// Dropping a part that was not completed fails it (the request ends with an I/O error).
/// A part whose request already ended (timeout) is stale: copies fail, completion is a
/// no-op. Every part must be dropped before its [`Disk`] is (the disk waits for them).
pub(crate) struct Part {
    rq: NonNull<bindings::request>,
    gen: u32,
    index: u32,
    /// [`Shared::parts`] of the disk, which counts this token.
    parts: NonNull<AtomicUsize>,
    done: bool,
}

// SAFETY: a part may be completed from any context and thread: it only does atomic
// read-modify-writes on the request word and the disk's part counter, calls
// `trapeze_blk_rq_copy` (kmap_local + memcpy) while the word counts the copy, and
// `blk_mq_end_request`, which any context may call.
unsafe impl Send for Part {}

impl Part {
    /// Which part of its request this is (0-based).
    pub(crate) fn index(&self) -> u32 {
        self.index
    }

    fn word(&self) -> &AtomicU64 {
        // SAFETY: the tag set outlives every part (type docs; `Disk::drop` waits for the
        // part counter to reach zero before freeing it).
        unsafe { state(self.rq.as_ptr()) }
    }

    fn live(&self, word: u64) -> bool {
        gen_of(word) == self.gen && word & ENDED == 0
    }

    /// Count a user of the request's data (a copy, a lend) in its word, if this part's
    /// generation has not ended (`ETIMEDOUT` if it has). The user ends with
    /// `word().fetch_sub(USER, Release)`.
    fn begin_use(&self) -> Result {
        let w = self.word();
        let mut cur = w.load(Ordering::Relaxed);
        loop {
            if !self.live(cur) {
                return Err(stale());
            }
            match w.compare_exchange_weak(cur, cur + USER, Ordering::Acquire, Ordering::Relaxed) {
                Ok(_) => return Ok(()),
                Err(now) => cur = now,
            }
        }
    }

    /// Copy `len` bytes between `buf` and the request's data at `off` while the request
    /// word counts the copy.
    fn copy(&self, off: usize, buf: *mut c_void, len: usize, to_rq: bool) -> Result {
        self.begin_use()?;
        let w = self.word();
        // SAFETY: the word says this generation has not ended and counts this copy, so the
        // request is started and stays ours (nobody ends it while copies are counted);
        // `buf` is valid for `len` bytes (the callers pass a slice).
        let n = unsafe { trapeze_blk_rq_copy(self.rq.as_ptr(), off, buf, len, to_rq) };
        // Release: the copy happens before whoever ends the request sees the count drop.
        w.fetch_sub(USER, Ordering::Release);
        if n == len {
            Ok(())
        } else {
            Err(EINVAL)
        }
    }

    /// Copy `data` into the request's data at byte offset `off` (a read's result).
    /// `ETIMEDOUT` if the request already ended, `EINVAL` if the range passes its end.
    pub(crate) fn copy_to_rq(&self, off: usize, data: &[u8]) -> Result {
        self.copy(off, data.as_ptr().cast_mut().cast(), data.len(), true)
    }

    /// Copy the request's data at byte offset `off` into `out` (a write's data).
    pub(crate) fn copy_from_rq(&self, off: usize, out: &mut [u8]) -> Result {
        self.copy(off, out.as_mut_ptr().cast(), out.len(), false)
    }

    /// Another token for the same part: the request now waits for both (each completes
    /// once; either failing fails the request). A backend that serves one part in several
    /// pieces at once (a write put to several replicas) gives each piece its own token.
    /// `ETIMEDOUT` if the request already ended, `EBUSY` if it has [`MAX_PARTS`] pending.
    pub(crate) fn split(&self) -> Result<Part> {
        let w = self.word();
        let mut cur = w.load(Ordering::Relaxed);
        loop {
            if !self.live(cur) {
                return Err(stale());
            }
            if cur & PENDING == PENDING {
                return Err(EBUSY);
            }
            // Relaxed suffices: the new token only adds to a count this one already holds
            // up (pending is at least 1 while `self` is out), so the request cannot end
            // between the load and the swap.
            match w.compare_exchange_weak(cur, cur + 1, Ordering::Relaxed, Ordering::Relaxed) {
                Ok(_) => break,
                Err(now) => cur = now,
            }
        }
        // SAFETY: as in `finish`: the counter lives as long as any token; `self` is one.
        unsafe { self.parts.as_ref() }.fetch_add(1, Ordering::Relaxed);
        Ok(Part { rq: self.rq, gen: self.gen, index: self.index, parts: self.parts, done: false })
    }

    /// Complete this part: success, or an error that fails the whole request
    /// (`BLK_STS_NOSPC` if any part failed with `ENOSPC`, else `BLK_STS_IOERR`).
    pub(crate) fn complete(mut self, result: Result) {
        let fail = match result {
            Ok(()) => 0,
            Err(e) if e == ENOSPC => ERROR | NOSPC,
            Err(_) => ERROR,
        };
        self.finish(fail);
    }

    /// Count this part out, with `fail` (0, or [`ERROR`] and maybe [`NOSPC`]).
    fn finish(&mut self, fail: u64) {
        self.done = true;
        let w = self.word();
        let mut cur = w.load(Ordering::Relaxed);
        let last = loop {
            if !self.live(cur) {
                break None;
            }
            let mut new = (cur - 1) | fail;
            if new & PENDING == 0 {
                new |= ENDED;
            }
            // AcqRel: the last completion acquires every other part's copies (their
            // releases and completions precede it in this word's modification order).
            match w.compare_exchange_weak(cur, new, Ordering::AcqRel, Ordering::Relaxed) {
                Ok(_) => break Some(new),
                Err(now) => cur = now,
            }
        };
        if let Some(new) = last.filter(|n| n & PENDING == 0) {
            let sts = match new & (ERROR | NOSPC) {
                0 => STS_OK,
                e if e & NOSPC != 0 => STS_NOSPC,
                _ => STS_IOERR,
            };
            // SAFETY: this completion set ENDED for the live generation, so the request is
            // started, not ended, and no copy is in progress (every other part of it has
            // completed); it goes back to blk-mq exactly once, here.
            unsafe { bindings::blk_mq_end_request(self.rq.as_ptr(), sts) };
        }
        // SAFETY: the counter lives in the disk's `Shared`, which is freed only once it
        // reads zero; this token is counted until this decrement, its last access.
        unsafe { self.parts.as_ref() }.fetch_sub(1, Ordering::Release);
    }
}

impl Drop for Part {
    fn drop(&mut self) {
        if !self.done {
            self.finish(ERROR);
        }
    }
}

/// What the C side reaches through `queuedata`.
struct Shared<T> {
    set: Opaque<bindings::blk_mq_tag_set>,
    driver: NonNull<T>,
    /// Part tokens alive.
    parts: AtomicUsize,
}

/// How to make a [`Disk`].
pub(crate) struct Config<'a> {
    pub(crate) name: &'a CStr,
    pub(crate) capacity_bytes: u64,
    /// Logical = physical block size (a power of two, 512 ..= 4096).
    pub(crate) block_bytes: u32,
    /// Largest request (a multiple of the block size).
    pub(crate) max_request_bytes: u32,
    pub(crate) queue_depth: u32,
    pub(crate) timeout_ms: u32,
}

/// A live blk-mq disk (`/dev/<name>`) served by a `T`.
///
/// # Invariants
///
/// `shared` came from `KBox::into_raw` and holds a tag set allocated with
/// `blk_mq_alloc_tag_set`; `gendisk` was added with `device_add_disk` on it; `driver` is
/// what `shared.driver` points to.
pub(crate) struct Disk<T: Driver> {
    shared: NonNull<Shared<T>>,
    gendisk: NonNull<bindings::gendisk>,
    driver: Option<KBox<T>>,
}

// SAFETY: the disk is torn down from process context (module exit) on any thread; `T` is
// `Send + Sync`.
unsafe impl<T: Driver> Send for Disk<T> {}
// SAFETY: `&Disk` gives only `&T`.
unsafe impl<T: Driver> Sync for Disk<T> {}

struct Ops<T>(core::marker::PhantomData<T>);

impl<T: Driver> Ops<T> {
    const OPS: bindings::blk_mq_ops = bindings::blk_mq_ops {
        queue_rq: Some(queue_rq::<T>),
        timeout: Some(timeout::<T>),
        init_request: Some(init_request),
        // SAFETY: every other field is an `Option` of a function pointer or a raw pointer,
        // for which all-zero bytes are `None`/null ("not implemented").
        ..unsafe { MaybeUninit::zeroed().assume_init() }
    };
}

/// `init_request`: the request word starts "ended", generation 0.
///
/// # Safety
///
/// Called by blk-mq with a request whose PDU has `cmd_size` bytes.
unsafe extern "C" fn init_request(
    _set: *mut bindings::blk_mq_tag_set,
    rq: *mut bindings::request,
    _hctx_idx: c_uint,
    _numa_node: c_uint,
) -> c_int {
    // SAFETY: the PDU has room for an `RqState` (cmd_size) and nothing else uses it yet.
    unsafe { bindings::blk_mq_rq_to_pdu(rq).cast::<RqState>().write(RqState(AtomicU64::new(ENDED))) };
    0
}

/// # Safety
///
/// `rq` is a request blk-mq handed to this driver (`queue_rq` or `timeout`).
unsafe fn info(rq: *mut bindings::request) -> RqInfo {
    // SAFETY: `rq` is valid (caller); `req_op` only reads `cmd_flags`.
    let op = match unsafe { trapeze_blk_rq_op(rq) } {
        bindings::req_op_REQ_OP_READ => Op::Read,
        bindings::req_op_REQ_OP_WRITE => Op::Write,
        other => Op::Other(other),
    };
    // SAFETY: `rq` is valid (caller); these fields are set before the driver sees it.
    let (sector, bytes) = unsafe { ((*rq).__sector, (*rq).__data_len) };
    RqInfo { op, sector, bytes }
}

/// `queue_rq`.
///
/// # Safety
///
/// Called by blk-mq with a live hardware context of a queue made by [`Disk::new`] (whose
/// `queuedata` is a `Shared<T>`) and a request it hands over.
unsafe extern "C" fn queue_rq<T: Driver>(
    hctx: *mut bindings::blk_mq_hw_ctx,
    bd: *const bindings::blk_mq_queue_data,
) -> bindings::blk_status_t {
    // SAFETY: valid pointers from blk-mq (caller); `queuedata` is our `Shared<T>`, alive
    // while the queue can run (`Disk::drop` frees it after `del_gendisk`).
    let (rq, shared) = unsafe { ((*bd).rq, &*(*(*hctx).queue).queuedata.cast::<Shared<T>>()) };
    // SAFETY: the driver box outlives the queue (`Disk::drop` drops it after
    // `del_gendisk`).
    let driver = unsafe { shared.driver.as_ref() };
    // SAFETY: `rq` was handed to us.
    let info = unsafe { info(rq) };
    let Some(rq_ptr) = NonNull::new(rq) else { return STS_IOERR };
    let parts = match driver.accept(&info) {
        Ok(n) if n <= MAX_PARTS => n,
        Err(e) if e == ENOTSUPP => return STS_NOTSUPP,
        _ => return STS_IOERR,
    };
    // SAFETY: `rq` belongs to our tag set.
    let w = unsafe { state(rq) };
    // Stale parts of the previous generation see ENDED or another generation and leave
    // the word alone, so a plain store is enough.
    let gen = gen_of(w.load(Ordering::Relaxed)).wrapping_add(1);
    let ended = if parts == 0 { ENDED } else { 0 };
    w.store(((gen as u64) << GEN_SHIFT) | u64::from(parts) | ended, Ordering::Release);
    // SAFETY: blk-mq handed us `rq`; drivers call this before working on a request.
    unsafe { bindings::blk_mq_start_request(rq) };
    if parts == 0 {
        // SAFETY: started above and not handed to anyone: it goes back once, here.
        unsafe { bindings::blk_mq_end_request(rq, STS_OK) };
        return STS_OK;
    }
    for index in 0..parts {
        shared.parts.fetch_add(1, Ordering::Relaxed);
        let part = Part { rq: rq_ptr, gen, index, parts: NonNull::from(&shared.parts), done: false };
        driver.serve(&info, part, index + 1 == parts);
    }
    STS_OK
}

/// `timeout`: end the request with `BLK_STS_TIMEOUT` unless its parts just did, or wait
/// longer while a copy or a lend is counted (the device may still reach its pages).
///
/// # Safety
///
/// Called by blk-mq (process context) for a started request of a [`Disk`], holding a
/// reference that keeps it allocated.
unsafe extern "C" fn timeout<T: Driver>(rq: *mut bindings::request) -> bindings::blk_eh_timer_return {
    // SAFETY: `rq` belongs to our tag set (caller).
    let w = unsafe { state(rq) };
    let mut cur = w.load(Ordering::Relaxed);
    loop {
        if cur & ENDED != 0 {
            // The last part is ending it (or did).
            return bindings::blk_eh_timer_return_BLK_EH_DONE;
        }
        if cur & USERS != 0 {
            return bindings::blk_eh_timer_return_BLK_EH_RESET_TIMER;
        }
        match w.compare_exchange_weak(cur, cur | ENDED | ERROR, Ordering::AcqRel, Ordering::Relaxed) {
            Ok(_) => break,
            Err(now) => cur = now,
        }
    }
    // SAFETY: `rq`'s queue is live while blk-mq runs its timeout handler, and its
    // `queuedata` is our `Shared<T>`.
    let shared = unsafe { &*(*(*rq).q).queuedata.cast::<Shared<T>>() };
    // SAFETY: as in `queue_rq`: the driver outlives the queue.
    let driver = unsafe { shared.driver.as_ref() };
    // SAFETY: `rq` is a request of ours (caller).
    driver.timed_out(&unsafe { info(rq) }, (cur & PENDING) as u32);
    // SAFETY: we set ENDED for the live generation while no copy or lend was counted (and
    // none can start now): the request goes back to blk-mq once, here.
    unsafe { bindings::blk_mq_end_request(rq, STS_TIMEOUT) };
    bindings::blk_eh_timer_return_BLK_EH_DONE
}

impl<T: Driver> Disk<T> {
    /// Make the tag set and the disk, and add it (`/dev/<name>` appears). Process context.
    pub(crate) fn new(cfg: &Config<'_>, driver: T) -> Result<Self> {
        let b = cfg.block_bytes;
        if !b.is_power_of_two()
            || !(512..=4096).contains(&b)
            || cfg.capacity_bytes % u64::from(b) != 0
            || cfg.max_request_bytes < b
            || cfg.max_request_bytes % b != 0
            || cfg.queue_depth == 0
            || cfg.name.to_bytes().len() >= 32
        {
            return Err(EINVAL);
        }
        let driver = KBox::new(driver, GFP_KERNEL)?;
        // SAFETY: `blk_mq_tag_set` holds integers, pointers and a mutex/list that
        // `blk_mq_alloc_tag_set` initialises; all-zero is its documented starting state.
        let mut set: bindings::blk_mq_tag_set = unsafe { MaybeUninit::zeroed().assume_init() };
        set.ops = &Ops::<T>::OPS;
        set.nr_hw_queues = 1;
        set.nr_maps = 1;
        set.queue_depth = cfg.queue_depth;
        set.cmd_size = core::mem::size_of::<RqState>() as c_uint;
        set.numa_node = bindings::NUMA_NO_NODE;
        set.timeout = kernel::time::msecs_to_jiffies(cfg.timeout_ms) as c_uint;
        set.flags = bindings::BLK_MQ_F_SHOULD_MERGE;
        let shared = KBox::new(
            Shared { set: Opaque::new(set), driver: NonNull::from(&*driver), parts: AtomicUsize::new(0) },
            GFP_KERNEL,
        )?;
        let shared = NonNull::new(KBox::into_raw(shared)).ok_or(ENOMEM)?;
        // SAFETY: `shared` is a live box we own.
        let set = unsafe { shared.as_ref() }.set.get();
        // SAFETY: `set` is filled in and stays at this address until freed.
        if let Err(e) = kernel::error::to_result(unsafe { bindings::blk_mq_alloc_tag_set(set) }) {
            // SAFETY: from `into_raw` above; the C side never saw it.
            drop(unsafe { KBox::from_raw(shared.as_ptr()) });
            return Err(e);
        }
        let free_set = || {
            // SAFETY: allocated above, no disk uses it any more; then the box goes.
            unsafe { bindings::blk_mq_free_tag_set(set) };
            // SAFETY: from `into_raw` above, not used after this.
            drop(unsafe { KBox::from_raw(shared.as_ptr()) });
        };
        // SAFETY: `queue_limits` is integers only; zero means "default" for every field.
        let mut lim: bindings::queue_limits = unsafe { MaybeUninit::zeroed().assume_init() };
        lim.logical_block_size = b;
        lim.physical_block_size = b;
        lim.max_hw_sectors = cfg.max_request_bytes / 512;
        // Buffers aligned to the block: each block of a request lies in one page, so it
        // can be lent to the device whole (`O_DIRECT` from a misaligned buffer: EINVAL).
        lim.dma_alignment = b - 1;
        // SAFETY: `set` is an allocated tag set, `lim` a valid limits struct; `queuedata`
        // is our `Shared<T>`, which outlives the disk.
        let gd = match from_err_ptr(unsafe { trapeze_blk_alloc_disk(set, &mut lim, shared.as_ptr().cast()) }) {
            Ok(gd) => gd,
            Err(e) => {
                free_set();
                return Err(e);
            }
        };
        let Some(gendisk) = NonNull::new(gd) else {
            // Not reached: `from_err_ptr` passes only real pointers; fail safely anyway.
            free_set();
            return Err(ENOMEM);
        };
        // SAFETY: `from_err_ptr` passed it, so it is a valid gendisk we own, not yet added.
        let name = unsafe { &mut (*gd).disk_name };
        let bytes = cfg.name.to_bytes_with_nul();
        for (dst, &src) in name.iter_mut().zip(bytes) {
            *dst = src as _;
        }
        // SAFETY: as above; `set_capacity` takes the disk's own lock.
        unsafe { bindings::set_capacity(gd, cfg.capacity_bytes / 512) };
        // SAFETY: a valid, not yet added gendisk; no parent device, no attribute groups.
        let added = kernel::error::to_result(unsafe {
            bindings::device_add_disk(core::ptr::null_mut(), gd, core::ptr::null_mut())
        });
        if let Err(e) = added {
            // SAFETY: never added, so `put_disk` alone releases it (and its queue).
            unsafe { bindings::put_disk(gd) };
            free_set();
            return Err(e);
        }
        // INVARIANT: made above as the type requires.
        Ok(Self { shared, gendisk, driver: Some(driver) })
    }
}

impl<T: Driver> Drop for Disk<T> {
    /// `del_gendisk` (new I/O fails; waits for requests in flight: they complete, fail or
    /// time out), drop the driver (which drops the parts it still holds), wait for every
    /// part token to go, then free the tag set. Process context.
    fn drop(&mut self) {
        let gd = self.gendisk.as_ptr();
        // SAFETY: added in `new` (invariant); `del_gendisk` once, then the last reference
        // goes with `put_disk`. `del_gendisk` exits the queue, so the tag set is unused
        // afterwards even if the block device is still open.
        unsafe {
            bindings::del_gendisk(gd);
            bindings::put_disk(gd);
        }
        drop(self.driver.take());
        // SAFETY: `shared` is live until freed below.
        let parts = &unsafe { self.shared.as_ref() }.parts;
        let mut waited_ms = 0;
        while parts.load(Ordering::Acquire) != 0 && waited_ms < 10_000 {
            super::msleep(10);
            waited_ms += 10;
        }
        let left = parts.load(Ordering::Acquire);
        if left != 0 {
            pr_err!("blk: {left} request part(s) still held after 10 s: leaking the tag set\n");
            return;
        }
        // SAFETY: no queue uses the tag set (del_gendisk) and no part can reach it (the
        // counter is zero and nothing creates parts any more); freed once.
        unsafe {
            bindings::blk_mq_free_tag_set(self.shared.as_ref().set.get());
            drop(KBox::from_raw(self.shared.as_ptr()));
        }
    }
}
