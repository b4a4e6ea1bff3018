// SPDX-License-Identifier: GPL-2.0-only
//! Where the benchmark's threads run: pinning, spinning before yielding, named threads.

use super::*;

/// Idle passes a polling thread spins before it yields its core (a `sched_yield` costs
/// ~0.3 µs here, longer than a pass; yielding now and then keeps a busy machine fair).
pub(crate) const SPIN_PASSES: u32 = 256;

/// Where the two ends of a round trip run: `Unpinned` (where the scheduler puts them),
/// `SameCore` (both on CPU 0: a blocking socket round trip then never moves data across
/// cores and its wakeups are cheap) or `CrossCore` (client on CPU 0, server on CPU 1).
/// Comparisons are only fair between matching placements, so the summary pairs them.
#[derive(Clone, Copy, PartialEq, Debug)]
pub(crate) enum Placement {
    Unpinned,
    SameCore,
    CrossCore,
}

impl Placement {
    /// Pin the calling thread as this placement's `server` or client end.
    pub(crate) fn pin(self, server: bool) -> anyhow::Result<()> {
        let cpu = match self {
            Placement::Unpinned => return Ok(()),
            Placement::SameCore => 0,
            Placement::CrossCore => usize::from(server),
        };
        let mut set = rustix::thread::CpuSet::new();
        set.set(cpu);
        rustix::thread::sched_setaffinity(None, &set).with_context(|| format!("pinning a thread to CPU {cpu}"))
    }

    /// Undo [`Self::pin`] for the calling thread: back to the CPUs the process started
    /// with. (Not "as many CPUs as available_parallelism says": that reads the calling
    /// thread's current mask, which after a pin is one CPU, so the thread stayed pinned
    /// and every thread it spawned later inherited the pin.)
    pub(crate) fn unpin() -> anyhow::Result<()> {
        rustix::thread::sched_setaffinity(None, start_cpus()).context("unpinning")
    }
}

/// The CPUs the process may run on, as it started (read at the first call, which `run`
/// makes before any pin).
pub(crate) fn start_cpus() -> &'static rustix::thread::CpuSet {
    static CPUS: std::sync::OnceLock<rustix::thread::CpuSet> = std::sync::OnceLock::new();
    CPUS.get_or_init(|| {
        rustix::thread::sched_getaffinity(None).unwrap_or_else(|_| {
            let mut all = rustix::thread::CpuSet::new();
            for cpu in 0..rustix::thread::CpuSet::MAX_CPU {
                all.set(cpu);
            }
            all
        })
    })
}

/// A thread with a name (profiles tell the sides apart by it).
pub(crate) fn spawn_named<T: Send + 'static>(
    name: &str,
    f: impl FnOnce() -> T + Send + 'static,
) -> std::thread::JoinHandle<T> {
    std::thread::Builder::new().name(name.into()).spawn(f).expect("spawning a bench thread")
}
