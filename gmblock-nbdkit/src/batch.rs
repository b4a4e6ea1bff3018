// SPDX-License-Identifier: GPL-2.0-only
//! Reads in flight together. nbdkit calls the plugin from many threads (clients keep many
//! requests in flight, on several connections), but the backend is one station behind one
//! lock. A thread that wants to read queues its request and tries the lock. The thread
//! that holds it streams the queue into the backend
//! ([`gmblock::client::Client::read_stream`]): requests join the window while others are
//! in flight, and each is handed back to its thread, which is woken, as soon as its own
//! chunks are in. A thread that finds the lock taken sleeps until its outcome comes or it
//! is asked to take the lock over: whoever lets the lock go ([`Batch::kick`]) wakes the
//! thread of the oldest queued request, so a request queued just as the holder stopped
//! taking requests is read by the next holder; a sleeper also tries again after
//! [`RECHECK`], in case a wake-up crossed its sleep. A holder takes at most [`TURN`]
//! requests, then lets the lock go, so writes are not starved by a stream of reads.
//!
//! Only whole-block reads of at most 1 MiB go through the queue ([`fits`]); the rest go
//! through [`crate::span`] alone. Writes, flushes and trims take the lock alone, so a
//! read-modify-write of a partial block still has the backend to itself.

use gmblock::proto::{BLOCK_BYTES, MAX_REQUEST_BYTES};
use std::collections::VecDeque;
use std::sync::{Arc, Condvar, Mutex, TryLockError};
use std::time::Duration;

/// How long a thread sleeps for its read's outcome, unwoken, before it tries the lock
/// again (a wake-up that came before it slept is not lost for longer).
pub const RECHECK: Duration = Duration::from_millis(2);
/// Requests a lock holder takes from the queue before it lets the lock go.
pub const TURN: usize = 256;

/// Where a read's outcome goes: its bytes, or its error; the reading thread is woken.
#[derive(Default)]
struct Slot {
    out: Mutex<Option<anyhow::Result<Vec<u8>>>>,
    ready: Condvar,
}

/// A read on its way through the queue and the backend: its buffer, and its slot.
pub struct Waiting {
    buf: Vec<u8>,
    slot: Arc<Slot>,
}

impl AsMut<[u8]> for Waiting {
    fn as_mut(&mut self) -> &mut [u8] {
        &mut self.buf
    }
}

impl Waiting {
    /// The read is over: hand its outcome to its thread.
    pub fn finish(self, outcome: anyhow::Result<()>) {
        let Waiting { buf, slot } = self;
        *crate::lock(&slot.out) = Some(outcome.map(|()| buf));
        slot.ready.notify_one();
    }
}

/// What a backend reads a stream with: requests from `next` (asked again when it gave
/// none, until the backend has nothing in flight), each handed back through `done`.
pub type Next<'a> = &'a mut dyn FnMut() -> Option<(u64, Waiting)>;
pub type Done<'a> = &'a mut dyn FnMut(u64, Waiting, anyhow::Result<()>);

/// The reads waiting for the backend.
#[derive(Default)]
pub struct Batch {
    waiting: Mutex<VecDeque<(u64, Waiting)>>,
}

/// Whether a read of `len` bytes at `offset` goes through the queue: whole blocks, 1 MiB
/// at most.
pub fn fits(offset: u64, len: usize) -> bool {
    let block = u64::from(BLOCK_BYTES);
    offset.is_multiple_of(block) && len > 0 && (len as u64).is_multiple_of(block) && len <= MAX_REQUEST_BYTES as usize
}

impl Batch {
    pub const fn new() -> Batch {
        Batch { waiting: Mutex::new(VecDeque::new()) }
    }

    /// Read `buf.len()` bytes at `offset` from the backend behind `backend`, streamed by
    /// `stream` together with the other reads in flight (module doc).
    pub fn read<B>(
        &self,
        backend: &Mutex<B>,
        offset: u64,
        buf: &mut [u8],
        stream: impl Fn(&mut B, Next<'_>, Done<'_>),
    ) -> anyhow::Result<()> {
        let slot = Arc::new(Slot::default());
        crate::lock(&self.waiting).push_back((offset, Waiting { buf: vec![0; buf.len()], slot: Arc::clone(&slot) }));
        loop {
            if let Some(got) = crate::lock(&slot.out).take() {
                return got.map(|bytes| buf.copy_from_slice(&bytes));
            }
            // A lock a panicking holder poisoned is still the backend (`crate::lock`).
            let held = match backend.try_lock() {
                Ok(b) => Some(b),
                Err(TryLockError::Poisoned(p)) => Some(p.into_inner()),
                Err(TryLockError::WouldBlock) => None,
            };
            if let Some(mut b) = held {
                self.serve(&mut *b, &stream);
                drop(b);
                self.kick();
            } else {
                let out = crate::lock(&slot.out);
                if out.is_none() {
                    drop(slot.ready.wait_timeout(out, RECHECK));
                }
            }
        }
    }

    /// The backend's lock was let go: wake the thread of the oldest queued read, if any,
    /// to take it (a read queued while the lock was held waits for this).
    pub fn kick(&self) {
        if let Some((_, w)) = crate::lock(&self.waiting).front() {
            let _out = crate::lock(&w.slot.out);
            w.slot.ready.notify_one();
        }
    }

    /// Hold the backend: stream at most [`TURN`] queued reads through it.
    fn serve<B>(&self, b: &mut B, stream: &impl Fn(&mut B, Next<'_>, Done<'_>)) {
        let mut taken = 0;
        let mut next = || {
            if taken == TURN {
                return None;
            }
            let got = crate::lock(&self.waiting).pop_front();
            taken += usize::from(got.is_some());
            got
        };
        stream(b, &mut next, &mut |_, w: Waiting, outcome| w.finish(outcome));
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::atomic::{AtomicUsize, Ordering};

    /// A volume whose byte at `i` is `i / 4096` (mod 256), read in streams whose lengths
    /// are counted, each request taking 100 µs; reads at 1 GiB fail.
    struct Fake {
        streams: Vec<usize>,
    }

    fn stream(f: &mut Fake, next: Next<'_>, done: Done<'_>) {
        let mut n = 0;
        while let Some((o, mut w)) = next() {
            n += 1;
            std::thread::sleep(Duration::from_micros(100));
            let outcome = if o == 1 << 30 {
                Err(anyhow::anyhow!("server: I/O error"))
            } else {
                for (i, x) in w.as_mut().iter_mut().enumerate() {
                    *x = ((o + i as u64) / 4096) as u8;
                }
                Ok(())
            };
            done(o, w, outcome);
        }
        f.streams.push(n);
    }

    #[test]
    fn every_thread_gets_its_own_bytes_or_its_own_error_and_reads_share_a_stream() {
        static BATCH: Batch = Batch::new();
        let backend = Mutex::new(Fake { streams: Vec::new() });
        let failed = AtomicUsize::new(0);
        std::thread::scope(|s| {
            for t in 0..8u64 {
                let (backend, failed) = (&backend, &failed);
                s.spawn(move || {
                    for k in 0..50u64 {
                        let offset = if t == 7 && k == 3 { 1 << 30 } else { (t * 50 + k) * 65536 };
                        let mut buf = vec![0xAAu8; 65536];
                        match BATCH.read(backend, offset, &mut buf, stream) {
                            Ok(()) => {
                                assert!(buf.iter().enumerate().all(|(i, &x)| x == ((offset + i as u64) / 4096) as u8))
                            }
                            Err(e) => {
                                assert_eq!(offset, 1 << 30, "{e}");
                                failed.fetch_add(1, Ordering::Relaxed);
                            }
                        }
                    }
                });
            }
        });
        assert_eq!(failed.load(Ordering::Relaxed), 1, "only the read at 1 GiB fails");
        let streams = &backend.lock().unwrap().streams;
        assert_eq!(streams.iter().sum::<usize>(), 400, "every read once");
        assert!(streams.iter().any(|&n| n > 1), "reads waiting together went together: {streams:?}");
        assert!(streams.iter().all(|&n| n <= TURN), "a holder lets the lock go after {TURN}");
    }

    #[test]
    fn only_whole_blocks_up_to_a_mebibyte_are_queued() {
        assert!(fits(0, 4096) && fits(1 << 20, 1 << 20));
        assert!(!fits(512, 4096) && !fits(0, 4000) && !fits(0, 0) && !fits(0, (1 << 20) + 4096));
    }
}
