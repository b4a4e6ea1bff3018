// SPDX-License-Identifier: GPL-2.0-only
//! Large values on the heap without a trip through the stack. NetRPC's `Rpc` and the GMS
//! node are tens of KiB (the kernel stack is 16 KiB), and Rust does not promise that
//! `KBox::new(T::new())` builds the value in place — at `opt-level=s` it did not (the
//! frame of the function doing it was 148 KiB). Their constructors are `const fn`s, so a
//! `static` holds a ready-made value in the module image, and [`Template::copy`] copies
//! it straight into a fresh allocation (one `memcpy`, no stack temporary); the caller then
//! sets the fields that depend on run time (`Rpc::set_node`, `GmsNode::set_identity`).
//! `cargo xtask module` checks that no stack frame in the module exceeds its limit.
//!
//! [`Template::copy`] allocates with `kmalloc` (physically contiguous; NetRPC's `Rpc`);
//! [`Template::copy_kv`] with `kvmalloc`, which falls back to `vmalloc` — for the GMS node,
//! whose tables for thousands of pages (hundreds of KiB) are too big for a reliable
//! `kmalloc`.

use core::mem::MaybeUninit;
use kernel::alloc::{Allocator, Box};
use kernel::prelude::*;

/// A value made by constant evaluation, kept in the module image only to be copied
/// ([`Template::copy`]): no reference to it is ever handed out.
pub(crate) struct Template<T>(T);

// SAFETY: the only access is `copy`, which reads the bytes of a value nothing ever writes
// (no `&T` escapes, so not even interior mutability can change it); concurrent reads of
// immutable bytes are fine whatever `T` is.
unsafe impl<T> Sync for Template<T> {}

impl<T> Template<T> {
    pub(crate) const fn new(v: T) -> Self {
        Self(v)
    }

    /// A heap copy of the value (`kmalloc`).
    pub(crate) fn copy(&'static self) -> Result<KBox<T>> {
        self.copy_in()
    }

    /// A heap copy of the value (`kvmalloc`: `vmalloc` if `kmalloc` cannot).
    pub(crate) fn copy_kv(&'static self) -> Result<KVBox<T>> {
        self.copy_in()
    }

    /// A copy of the value in memory from allocator `A`.
    fn copy_in<A: Allocator>(&'static self) -> Result<Box<T, A>> {
        let mut b: Box<MaybeUninit<T>, A> = Box::new_uninit(GFP_KERNEL)?;
        // SAFETY: `b` is a fresh allocation of one `T`, `self.0` a valid `T`; they do not
        // overlap. The copy is a valid `T` (the same bytes) and no resource gets two
        // owners: a `static` initialised by constant evaluation owns no heap memory (const
        // evaluation cannot allocate) and its destructor never runs, so the copy is the
        // only value that is ever dropped.
        unsafe {
            core::ptr::copy_nonoverlapping(core::ptr::from_ref(&self.0), b.as_mut_ptr(), 1);
            Ok(b.assume_init())
        }
    }
}
