// SPDX-License-Identifier: GPL-2.0-only
//! Coherent DMA buffers: memory the CPU and the device both access, with the bus address
//! the device uses.
//!
//! The device may write a buffer at any time, so the CPU never forms a Rust reference to
//! its bytes: it copies in and out with volatile accesses ([`DmaBuf::read`],
//! [`DmaBuf::write`], [`DmaBuf::copy_from`]). Which side may touch which bytes when is the
//! ring protocol's business (`iface::entry`); a protocol error yields wrong bytes, never
//! an access outside the buffer.
//!
//! C header: [`include/linux/dma-mapping.h`](srctree/include/linux/dma-mapping.h).

use super::pci::PciDev;
use core::ptr::NonNull;
use kernel::{bindings, prelude::*};

/// A `dma_alloc_attrs` buffer (`dma_free_attrs` on drop).
///
/// # Invariants
///
/// `cpu` points to `len` bytes of coherent memory allocated for `dev` with bus address
/// `handle`, valid until `Drop`.
pub(crate) struct DmaBuf {
    dev: PciDev,
    cpu: NonNull<u8>,
    handle: bindings::dma_addr_t,
    len: usize,
}

// SAFETY: the buffer is not tied to a thread; it is freed from process context (remove or
// a failed probe), as `dma_free_attrs` requires.
unsafe impl Send for DmaBuf {}
// SAFETY: `&self` methods only copy bytes with volatile accesses; concurrent copies race
// like the device's own writes do, which the ring protocol orders.
unsafe impl Sync for DmaBuf {}

impl DmaBuf {
    /// `len` zeroed bytes of coherent memory for `dev` (`GFP_KERNEL`: may sleep).
    pub(crate) fn alloc_coherent(dev: &PciDev, len: usize) -> Result<Self> {
        if len == 0 {
            return Err(EINVAL);
        }
        let mut handle: bindings::dma_addr_t = 0;
        // SAFETY: the device is live (we hold a reference); `handle` is a valid out-pointer.
        let p = unsafe {
            bindings::dma_alloc_attrs(
                dev.device_raw(),
                len,
                &mut handle,
                bindings::GFP_KERNEL | bindings::__GFP_ZERO,
                0,
            )
        };
        let cpu = NonNull::new(p.cast::<u8>()).ok_or(ENOMEM)?;
        // INVARIANT: allocated above with these values.
        Ok(Self { dev: dev.clone(), cpu, handle, len })
    }

    /// The bus address the device uses (for the virtual NIC: the guest-physical address).
    pub(crate) fn dma_addr(&self) -> u64 {
        self.handle
    }

    fn check(&self, off: usize, n: usize) -> Result {
        match off.checked_add(n) {
            Some(end) if end <= self.len => Ok(()),
            _ => Err(EINVAL),
        }
    }

    /// Copy `out.len()` bytes from offset `off` into `out`; `EINVAL` if out of range.
    pub(crate) fn read(&self, off: usize, out: &mut [u8]) -> Result {
        self.check(off, out.len())?;
        for (i, b) in out.iter_mut().enumerate() {
            // SAFETY: `off + i < len` (checked above), inside the live buffer (invariant).
            *b = unsafe { self.cpu.as_ptr().add(off + i).read_volatile() };
        }
        Ok(())
    }

    /// Copy `data` to offset `off`; `EINVAL` (nothing written) if out of range.
    pub(crate) fn write(&self, off: usize, data: &[u8]) -> Result {
        self.check(off, data.len())?;
        for (i, b) in data.iter().enumerate() {
            // SAFETY: `off + i < len` (checked above), inside the live buffer (invariant).
            unsafe { self.cpu.as_ptr().add(off + i).write_volatile(*b) };
        }
        Ok(())
    }

    /// Copy `n` bytes from `src` at `src_off` to `self` at `off`; `EINVAL` (nothing
    /// copied) if either range is out of bounds. The buffers may be the same one.
    pub(crate) fn copy_from(&self, off: usize, src: &DmaBuf, src_off: usize, n: usize) -> Result {
        self.check(off, n)?;
        src.check(src_off, n)?;
        let mut chunk = [0u8; 256];
        let mut done = 0;
        while done < n {
            let k = (n - done).min(chunk.len());
            src.read(src_off + done, &mut chunk[..k])?;
            self.write(off + done, &chunk[..k])?;
            done += k;
        }
        Ok(())
    }
}

impl Drop for DmaBuf {
    fn drop(&mut self) {
        // SAFETY: allocated by `alloc_coherent` for `dev` with these values (invariant);
        // freed once, from process context.
        unsafe { bindings::dma_free_attrs(self.dev.device_raw(), self.len, self.cpu.as_ptr().cast(), self.handle, 0) };
    }
}
