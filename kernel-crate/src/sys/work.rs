// SPDX-License-Identifier: GPL-2.0-only
//! Work items: 6.12's `kernel::workqueue` queues an `Arc<T>` whose `T` embeds a `Work`,
//! but `impl_has_work!` expands to an `unsafe impl` (so it lives here) and there is no
//! way to wait for a queued item; [`flush`] adds `flush_work`.
//!
//! C header: [`include/linux/workqueue.h`](srctree/include/linux/workqueue.h).

use kernel::{bindings, workqueue::Work};

kernel::impl_has_work! {
    impl HasWork<crate::driver::Shared> for crate::driver::Shared { self.deferred_work }
    impl HasWork<crate::driver::Shared, 1> for crate::driver::Shared { self.tick_work }
}

/// Wait until `work` is neither queued nor running (`flush_work`; process context).
pub(crate) fn flush<T: ?Sized, const ID: u64>(work: &Work<T, ID>) {
    // SAFETY: `work` is a live, initialised `Work` (a reference), so `raw_get` yields its
    // `work_struct`; `flush_work` only waits on it.
    unsafe { bindings::flush_work(Work::raw_get(work)) };
}
