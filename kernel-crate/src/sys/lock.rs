// SPDX-License-Identifier: GPL-2.0-only
//! A spinlock taken with interrupts off ([`IrqSpinLock`]): `spin_lock_irqsave` /
//! `spin_unlock_irqrestore`, as a backend of the kernel crate's `Lock`, so its guards and
//! `CondVar` work as with `SpinLock`.
//!
//! 6.12's `kernel::sync` has only the plain spinlock, which a hard interrupt handler must
//! not share with process context (the handler would spin on a lock its own CPU holds).
//! The driver's core lock is taken in the NIC's hard interrupt handler, so every holder
//! takes it with interrupts off. Both calls are macros in C: `lock_shim.c` wraps them.
//!
//! C header: [`include/linux/spinlock.h`](srctree/include/linux/spinlock.h).

use kernel::{bindings, ffi::c_ulong, sync::lock::Backend};

extern "C" {
    fn trapeze_spin_lock_irqsave(lock: *mut bindings::spinlock_t) -> c_ulong;
    fn trapeze_spin_unlock_irqrestore(lock: *mut bindings::spinlock_t, flags: c_ulong);
}

/// The interrupt-disabling spinlock backend; the guard keeps the saved interrupt flags.
pub(crate) struct IrqSaveBackend;

/// A spinlock whose holders run with local interrupts off (see the module doc). Made
/// with `IrqSpinLock::new(value, name, kernel::static_lock_class!())`.
pub(crate) type IrqSpinLock<T> = kernel::sync::lock::Lock<T, IrqSaveBackend>;

// SAFETY: `lock` and `unlock` are `spin_lock_irqsave` and `spin_unlock_irqrestore` on the
// same `spinlock_t`, initialised by `init` (`__spin_lock_init`) before any use: mutual
// exclusion as the kernel's own spinlock gives it, and the flags `lock` saved go back
// with the matching `unlock`.
unsafe impl Backend for IrqSaveBackend {
    type State = bindings::spinlock_t;
    type GuardState = c_ulong;

    unsafe fn init(ptr: *mut Self::State, name: *const kernel::ffi::c_char, key: *mut bindings::lock_class_key) {
        // SAFETY: the caller passes a valid, pinned `spinlock_t` to initialise and a
        // static name and class key, as `__spin_lock_init` requires.
        unsafe { bindings::__spin_lock_init(ptr, name, key) }
    }

    unsafe fn lock(ptr: *mut Self::State) -> Self::GuardState {
        // SAFETY: the caller passes an initialised lock (the `Backend` contract).
        unsafe { trapeze_spin_lock_irqsave(ptr) }
    }

    unsafe fn unlock(ptr: *mut Self::State, flags: &Self::GuardState) {
        // SAFETY: the caller holds the lock, taken by `lock` which returned `flags`.
        unsafe { trapeze_spin_unlock_irqrestore(ptr, *flags) }
    }
}
