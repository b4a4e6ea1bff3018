// SPDX-License-Identifier: GPL-2.0-only
//! Where a runtime keeps the tables it sizes at set-up: the sans-IO cores above NetRPC
//! (GMS's page-frame directory and directory, the runtime's frame stacks) are generic over
//! a [`Storage`], so one source holds them in a boxed slice in user space and in a `KVVec`
//! in the kernel. The cores never call [`Storage::buf`] once running: tables are made
//! while a node or port is set up, and after that nothing allocates.

use core::ops::DerefMut;

/// Where a runtime's tables live.
pub trait Storage {
    /// A slice of `T` that the place owns (a boxed slice, a `KVVec`).
    type Buf<T: Copy>: DerefMut<Target = [T]>;
    /// One `T` on the place's heap (a `Box`, a `KBox`): what is large stays off a
    /// kernel stack once it is made.
    type Boxed<T>: DerefMut<Target = T>;
    /// `n` copies of `fill`, or `None` if there is no memory for them.
    fn buf<T: Copy>(n: usize, fill: T) -> Option<Self::Buf<T>>;
    /// `v` moved to the heap, or `None` if there is no memory for it.
    fn boxed<T>(v: T) -> Option<Self::Boxed<T>>;
}

/// Storage from the global allocator (user space): a failed allocation is `None`, not an
/// abort.
#[cfg(all(feature = "alloc", not(MODULE)))]
pub struct Heap;

#[cfg(all(feature = "alloc", not(MODULE)))]
impl Storage for Heap {
    type Buf<T: Copy> = alloc::boxed::Box<[T]>;
    type Boxed<T> = alloc::boxed::Box<T>;
    fn buf<T: Copy>(n: usize, fill: T) -> Option<Self::Buf<T>> {
        let mut v = alloc::vec::Vec::new();
        v.try_reserve_exact(n).ok()?;
        v.resize(n, fill);
        Some(v.into_boxed_slice())
    }
    fn boxed<T>(v: T) -> Option<Self::Boxed<T>> {
        Some(alloc::boxed::Box::new(v))
    }
}
