// SPDX-License-Identifier: GPL-2.0-only
//! Work items: 6.12's `kernel::workqueue` queues an `Arc<T>` whose `T` embeds a `Work`,
//! but `impl_has_work!` expands to an `unsafe impl` and there is no way to wait for a
//! queued item. [`Worked`] is a value with two work items of its own (the `unsafe impl`s
//! are here, once, for any `T`): the owner says what each runs ([`Jobs`]), queues them
//! ([`Worked::queue_short`], [`Worked::queue_long`]) and waits for them ([`Worked::flush`]).
//!
//! C header: [`include/linux/workqueue.h`](srctree/include/linux/workqueue.h).

use core::ops::Deref;
use kernel::prelude::*;
use kernel::sync::Arc;
use kernel::workqueue::{self, Work, WorkItem};
use kernel::{bindings, new_work};

/// What the two work items of a [`Worked<Self>`] run (process context, a kworker).
pub(crate) trait Jobs: Send + Sync + Sized + 'static {
    /// The short item (queued on the system workqueue).
    fn run_short(this: Arc<Worked<Self>>);
    /// The long item (queued on `system_long`: it may run for the owner's lifetime).
    fn run_long(this: Arc<Worked<Self>>);
}

/// `T` with two work items; derefs to `T`.
#[pin_data]
pub(crate) struct Worked<T> {
    #[pin]
    data: T,
    #[pin]
    short: Work<Worked<T>, 0>,
    #[pin]
    long: Work<Worked<T>, 1>,
}

kernel::impl_has_work! {
    impl{T} HasWork<Worked<T>, 0> for Worked<T> { self.short }
    impl{T} HasWork<Worked<T>, 1> for Worked<T> { self.long }
}

impl<T: Jobs> WorkItem<0> for Worked<T> {
    type Pointer = Arc<Worked<T>>;
    fn run(this: Arc<Worked<T>>) {
        T::run_short(this);
    }
}

impl<T: Jobs> WorkItem<1> for Worked<T> {
    type Pointer = Arc<Worked<T>>;
    fn run(this: Arc<Worked<T>>) {
        T::run_long(this);
    }
}

impl<T> Deref for Worked<T> {
    type Target = T;
    fn deref(&self) -> &T {
        &self.data
    }
}

impl<T: Jobs> Worked<T> {
    /// `data` with its two work items, for `Arc::pin_init`.
    pub(crate) fn new(data: impl PinInit<T>) -> impl PinInit<Self> {
        pin_init!(Self {
            data <- data,
            short <- new_work!("trapeze::short"),
            long <- new_work!("trapeze::long"),
        })
    }

    /// Queue the short item; `false` if it was queued already (that run will do).
    pub(crate) fn queue_short(this: Arc<Self>) -> bool {
        workqueue::system().enqueue::<Arc<Self>, 0>(this).is_ok()
    }

    /// Queue the long item; `false` if it was queued already.
    pub(crate) fn queue_long(this: Arc<Self>) -> bool {
        workqueue::system_long().enqueue::<Arc<Self>, 1>(this).is_ok()
    }

    /// Wait until neither item is queued or running (`flush_work`; process context).
    pub(crate) fn flush(&self) {
        flush(&self.short);
        flush(&self.long);
    }
}

/// Wait until `work` is neither queued nor running (`flush_work`; process context).
fn flush<T: ?Sized, const ID: u64>(work: &Work<T, ID>) {
    // SAFETY: `work` is a live, initialised `Work` (a reference), so `raw_get` yields its
    // `work_struct`; `flush_work` only waits on it.
    unsafe { bindings::flush_work(Work::raw_get(work)) };
}
