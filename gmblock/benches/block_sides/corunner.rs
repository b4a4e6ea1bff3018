// SPDX-License-Identifier: GPL-2.0-only
//! The co-location experiment (`corunner_slowdown`): how much a memory-bound job on the
//! other core slows while a server path serves a sequential read beside it. The gmblock
//! paper ran bzip2 beside its server: 70 % slower beside the path via RAM, almost untouched
//! beside the direct one, which keeps the blocks out of the server's memory.
//!
//! The job is a STREAM-style copy between two buffers well past the caches ([`BUF_BYTES`]
//! each), on CPU 1. The side — server, client and every process they start — runs on
//! CPU 0 (the bench pins its thread before it starts them; children inherit the mask), so
//! the two share the memory bus and the last-level cache, not a core. A side's figure is
//! the job's copy rate while the side ran; the job alone (the bench's thread asleep) is
//! measured in the same round, and a slowdown is the rate alone over the rate beside,
//! minus one.

use anyhow::{ensure, Context};
use rustix::thread::CpuSet;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

/// Each of the job's two buffers.
const BUF_BYTES: usize = 64 << 20;
/// The job counts its progress per chunk copied.
const CHUNK: usize = 1 << 20;
/// How long the job runs alone for its reference rate.
pub const ALONE: Duration = Duration::from_secs(1);

/// What runs beside the job.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Neighbour {
    /// Nothing: the bench's thread sleeps for [`ALONE`].
    Alone,
    /// gmblockd's direct path.
    Direct,
    /// gmblockd's path via RAM.
    ViaRam,
    /// Debian's nbd-server read with nbdcopy.
    NbdServer,
}

impl Neighbour {
    pub const ALL: [Neighbour; 4] = [Neighbour::Alone, Neighbour::Direct, Neighbour::ViaRam, Neighbour::NbdServer];

    pub fn name(self) -> &'static str {
        match self {
            Neighbour::Alone => "corunner-alone",
            Neighbour::Direct => "corunner-direct",
            Neighbour::ViaRam => "corunner-via-ram",
            Neighbour::NbdServer => "corunner-nbd-server",
        }
    }
}

/// The job, running on CPU 1 until stopped.
struct Job {
    stop: Arc<AtomicBool>,
    copied: Arc<AtomicU64>,
    thread: JoinHandle<anyhow::Result<()>>,
}

impl Job {
    /// Start the job and return once its buffers are in memory and it copies.
    fn start() -> anyhow::Result<Job> {
        let stop = Arc::new(AtomicBool::new(false));
        let copied = Arc::new(AtomicU64::new(0));
        let (s, c) = (stop.clone(), copied.clone());
        let thread = std::thread::Builder::new().name("corunner".into()).spawn(move || {
            pin(1)?;
            let src: Vec<u8> = (0..BUF_BYTES).map(|i| i as u8).collect();
            let mut dst = vec![0u8; BUF_BYTES];
            let mut at = 0;
            while !s.load(Ordering::Relaxed) {
                dst[at..at + CHUNK].copy_from_slice(&src[at..at + CHUNK]);
                at = (at + CHUNK) % BUF_BYTES;
                c.fetch_add(CHUNK as u64, Ordering::Relaxed);
            }
            // The copies are the job's output: keep them from being optimised away.
            std::hint::black_box(&dst);
            Ok(())
        })?;
        let t = Instant::now();
        while copied.load(Ordering::Relaxed) < 2 * BUF_BYTES as u64 {
            ensure!(!thread.is_finished(), "the co-runner stopped before it ran");
            ensure!(t.elapsed() < Duration::from_secs(30), "the co-runner made no progress in 30 s");
            std::thread::sleep(Duration::from_millis(5));
        }
        Ok(Job { stop, copied, thread })
    }

    fn stop(self) -> anyhow::Result<()> {
        self.stop.store(true, Ordering::Relaxed);
        self.thread.join().map_err(|_| anyhow::anyhow!("the co-runner panicked"))?
    }
}

/// Pin the calling thread to `cpu`.
fn pin(cpu: usize) -> anyhow::Result<()> {
    let mut set = CpuSet::new();
    set.set(cpu);
    rustix::thread::sched_setaffinity(None, &set).with_context(|| format!("pinning a thread to CPU {cpu}"))
}

/// Run `side` on CPU 0 with the job on CPU 1: what `side` returned and the job's copy
/// rate (GB/s) while it ran. The calling thread's CPUs are as before afterwards.
pub fn beside<T>(side: impl FnOnce() -> anyhow::Result<T>) -> anyhow::Result<(T, f64)> {
    let before = rustix::thread::sched_getaffinity(None).context("reading this thread's CPUs")?;
    ensure!(
        before.is_set(0) && before.is_set(1),
        "the co-runner experiment needs CPUs 0 and 1 (--no-corunner leaves it out)"
    );
    let job = Job::start()?;
    pin(0)?;
    let (c0, t0) = (job.copied.load(Ordering::Relaxed), Instant::now());
    let out = side();
    let (c1, secs) = (job.copied.load(Ordering::Relaxed), t0.elapsed().as_secs_f64());
    let unpinned = rustix::thread::sched_setaffinity(None, &before).context("unpinning");
    job.stop()?;
    unpinned?;
    Ok((out?, (c1 - c0) as f64 / 1e9 / secs))
}
