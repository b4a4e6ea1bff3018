// SPDX-License-Identifier: GPL-2.0-only
//! The driver's thin `unsafe` shell over the kernel's C API, for what 6.12 has no Rust
//! abstraction of: PCI drivers and resources ([`pci`]), MSI-X vectors and two-half IRQs
//! ([`irq`]), coherent DMA buffers ([`dma`]), module parameters ([`param`]), the blk-mq
//! disk and its pages lent for DMA ([`blk`]), work items ([`work`]), an interrupt-safe
//! spinlock ([`lock`]), heap copies of `const` values ([`boxed`]), and two plain calls
//! (`msleep`, `get_random_bytes`, the wall clock).
//!
//! The only module where `unsafe` code is allowed (the crate root denies it elsewhere).
//! A leaf: it uses `kernel` and its own files, never the driver above it — what it serves
//! is generic (a handler `T`, a backend `T`, a parameter table the owner fills). Each type
//! here owns exactly one C resource and gives it back in `Drop`, so the safe body cannot
//! leak or double-free one; every `unsafe` block states why it is sound.
//!
//! C headers: [`include/linux/pci.h`](srctree/include/linux/pci.h),
//! [`include/linux/interrupt.h`](srctree/include/linux/interrupt.h),
//! [`include/linux/dma-mapping.h`](srctree/include/linux/dma-mapping.h),
//! [`include/linux/moduleparam.h`](srctree/include/linux/moduleparam.h).

pub(crate) mod blk;
pub(crate) mod boxed;
pub(crate) mod dma;
pub(crate) mod irq;
pub(crate) mod lock;
pub(crate) mod param;
pub(crate) mod pci;
pub(crate) mod work;

use kernel::bindings;

/// Sleep for at least `ms` milliseconds (process context only).
pub(crate) fn msleep(ms: u32) {
    // SAFETY: `msleep` has no preconditions beyond process context, which every caller in
    // this driver is in (probe, remove, module init); it touches no memory of ours.
    unsafe { bindings::msleep(ms) }
}

/// 64 random bits from the kernel's CRNG.
pub(crate) fn random_u64() -> u64 {
    let mut v = 0u64;
    // SAFETY: `get_random_bytes` writes exactly `len` bytes at `buf`, which points to the
    // 8 bytes of `v`.
    unsafe { bindings::get_random_bytes((&raw mut v).cast(), core::mem::size_of::<u64>()) };
    v
}

/// The wall clock (`CLOCK_REALTIME`) in ns since 1970: it rises from one load of the
/// module to the next unless the clock is set back.
pub(crate) fn real_ns() -> u64 {
    let mut ts = bindings::timespec64 { tv_sec: 0, tv_nsec: 0 };
    // SAFETY: `ktime_get_real_ts64` only writes the `timespec64` it is given, which is
    // `ts`, valid and exclusively ours for the call.
    unsafe { bindings::ktime_get_real_ts64(&raw mut ts) };
    (ts.tv_sec.max(0) as u64).saturating_mul(1_000_000_000).saturating_add(ts.tv_nsec.max(0) as u64)
}

/// `ETIMEDOUT` (not among the kernel crate's named codes in 6.12).
pub(crate) fn etimedout() -> kernel::error::Error {
    kernel::error::Error::from_errno(-(bindings::ETIMEDOUT as i32))
}
