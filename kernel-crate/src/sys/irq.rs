// SPDX-License-Identifier: GPL-2.0-only
//! Interrupts: MSI-X vectors of a PCI function and a threaded handler on one of them.
//!
//! The handler first runs in the hard interrupt ([`ThreadedHandler::handle_hard`]:
//! interrupts off, must not sleep), which does what is short and may leave the rest to
//! the IRQ's kernel thread ([`ThreadedHandler::handle_irq`]).
//!
//! The handler is an [`Arc`] of a type implementing [`ThreadedHandler`]; the IRQ core
//! holds one reference (as `dev_id`) from `request_threaded_irq` until `free_irq` has
//! returned, which waits for a running handler, so the handler never outlives its data.
//!
//! C header: [`include/linux/interrupt.h`](srctree/include/linux/interrupt.h).

use super::pci::PciDev;
use core::{ffi::c_void, marker::PhantomData};
use kernel::{bindings, prelude::*, sync::Arc, sync::ArcBorrow, types::ForeignOwnable};

/// MSI-X vectors allocated to a function (`pci_free_irq_vectors` on drop).
pub(crate) struct IrqVectors {
    dev: PciDev,
    count: u32,
}

impl IrqVectors {
    /// Allocate between `min` and `max` MSI-X vectors (`pci_alloc_irq_vectors`).
    pub(crate) fn msix(dev: &PciDev, min: u32, max: u32) -> Result<Self> {
        // SAFETY: the device is live (we hold a reference) and enabled by the caller;
        // the PCI core checks the counts.
        let n = unsafe { bindings::pci_alloc_irq_vectors(dev.as_raw(), min, max, bindings::PCI_IRQ_MSIX) };
        if n < 0 {
            return Err(Error::from_errno(n));
        }
        Ok(Self { dev: dev.clone(), count: n as u32 })
    }

    /// Vectors allocated.
    pub(crate) fn count(&self) -> u32 {
        self.count
    }
}

impl Drop for IrqVectors {
    fn drop(&mut self) {
        // SAFETY: the vectors were allocated by `msix`; every IRQ requested on them is
        // freed first (`ThreadedIrq` owns the vectors and frees its IRQ before they drop).
        unsafe { bindings::pci_free_irq_vectors(self.dev.as_raw()) };
    }
}

/// What a handler did (an MSI-X vector is never shared, so there is no "not mine").
pub(crate) enum IrqReturn {
    /// Handled.
    Handled,
}

/// What the hard-interrupt half did.
pub(crate) enum HardReturn {
    /// All done: the thread does not run.
    Handled,
    /// The rest is the thread's ([`ThreadedHandler::handle_irq`]).
    WakeThread,
}

/// A handler in two halves: the hard interrupt, then (if it asks) the IRQ's kernel thread.
pub(crate) trait ThreadedHandler: Send + Sync + 'static {
    /// Called in the hard interrupt (interrupts off, atomic: no sleeping, no mutex), with
    /// the handler's `Arc` borrowed. The default leaves everything to the thread.
    fn handle_hard(_this: ArcBorrow<'_, Self>) -> HardReturn {
        HardReturn::WakeThread
    }
    /// Called in the IRQ's kernel thread (process context: it may take mutexes) after
    /// [`Self::handle_hard`] asked for it; several interrupts may be merged into one call.
    fn handle_irq(this: ArcBorrow<'_, Self>) -> IrqReturn;
}

/// A threaded handler registered on one vector (`free_irq` on drop, then the vectors go).
///
/// # Invariants
///
/// `irq` is registered with `dev_id == cookie`, and `cookie` is an `Arc<T>` turned into a
/// foreign pointer, owned by this value until `Drop`.
pub(crate) struct ThreadedIrq<T: ThreadedHandler> {
    irq: u32,
    cookie: *const c_void,
    // Dropped after `free_irq` in `Drop::drop`.
    _vectors: IrqVectors,
    _t: PhantomData<Arc<T>>,
}

// SAFETY: `free_irq` may be called from any process context; the cookie is an `Arc<T>` and
// `T: Send + Sync`.
unsafe impl<T: ThreadedHandler> Send for ThreadedIrq<T> {}
// SAFETY: no method touches the cookie through `&self`.
unsafe impl<T: ThreadedHandler> Sync for ThreadedIrq<T> {}

impl<T: ThreadedHandler> ThreadedIrq<T> {
    /// Request vector `index` of `vectors` with `handler`'s two halves
    /// (`request_threaded_irq` with `IRQF_ONESHOT`: the vector stays masked while the
    /// thread runs).
    /// On failure the vectors are freed.
    pub(crate) fn request(vectors: IrqVectors, index: u32, name: &'static CStr, handler: Arc<T>) -> Result<Self> {
        if index >= vectors.count {
            return Err(EINVAL);
        }
        // SAFETY: the device is live and `index` is one of its allocated vectors.
        let irq = unsafe { bindings::pci_irq_vector(vectors.dev.as_raw(), index) };
        if irq < 0 {
            return Err(Error::from_errno(irq));
        }
        let cookie = handler.into_foreign();
        // SAFETY: `hard_fn::<T>` and `thread_fn::<T>` match `irq_handler_t` and only borrow
        // the cookie;
        // `name` is static (the IRQ core keeps the pointer); the cookie stays valid until
        // `free_irq` (in `Drop`, or below on failure).
        let ret = unsafe {
            bindings::request_threaded_irq(
                irq as u32,
                Some(hard_fn::<T>),
                Some(thread_fn::<T>),
                bindings::IRQF_ONESHOT as _,
                name.as_char_ptr(),
                cookie.cast_mut(),
            )
        };
        if ret != 0 {
            // SAFETY: the registration failed, so the IRQ core holds no copy of the cookie,
            // which came from `into_foreign` above and is taken back once.
            drop(unsafe { Arc::<T>::from_foreign(cookie) });
            return Err(Error::from_errno(ret));
        }
        // INVARIANT: registered with this cookie, which we own.
        Ok(Self { irq: irq as u32, cookie, _vectors: vectors, _t: PhantomData })
    }

    /// The Linux IRQ number.
    pub(crate) fn irq(&self) -> u32 {
        self.irq
    }
}

impl<T: ThreadedHandler> Drop for ThreadedIrq<T> {
    fn drop(&mut self) {
        // SAFETY: `irq` is registered with `cookie` (type invariant). `free_irq` returns
        // after any running handler has finished, and none starts afterwards.
        unsafe { bindings::free_irq(self.irq, self.cookie.cast_mut()) };
        // SAFETY: the IRQ core no longer holds the cookie; it came from `into_foreign` and
        // is taken back exactly once.
        drop(unsafe { Arc::<T>::from_foreign(self.cookie) });
    }
}

/// The C primary handler: borrow the handler and run its hard half.
///
/// # Safety
///
/// Called by the IRQ core only, with the `dev_id` registered by [`ThreadedIrq::request`].
unsafe extern "C" fn hard_fn<T: ThreadedHandler>(
    _irq: kernel::ffi::c_int,
    dev_id: *mut c_void,
) -> bindings::irqreturn_t {
    // SAFETY: as in `thread_fn`: the cookie outlives every call (`free_irq` waits).
    let handler = unsafe { Arc::<T>::borrow(dev_id) };
    match T::handle_hard(handler) {
        HardReturn::Handled => bindings::irqreturn_IRQ_HANDLED,
        HardReturn::WakeThread => bindings::irqreturn_IRQ_WAKE_THREAD,
    }
}

/// The C thread function: borrow the handler and run it.
///
/// # Safety
///
/// Called by the IRQ core only, with the `dev_id` registered by [`ThreadedIrq::request`].
unsafe extern "C" fn thread_fn<T: ThreadedHandler>(
    _irq: kernel::ffi::c_int,
    dev_id: *mut c_void,
) -> bindings::irqreturn_t {
    // SAFETY: `dev_id` is the cookie `ThreadedIrq::request` registered, an `Arc<T>` that
    // stays alive until `free_irq` has returned, which waits for this function.
    let handler = unsafe { Arc::<T>::borrow(dev_id) };
    match T::handle_irq(handler) {
        IrqReturn::Handled => bindings::irqreturn_IRQ_HANDLED,
    }
}
