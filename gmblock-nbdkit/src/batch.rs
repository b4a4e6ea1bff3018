// SPDX-License-Identifier: GPL-2.0-only
//! Reads that wait together go to the servers together. nbdkit calls the plugin from many
//! threads (clients keep many requests in flight, on several connections), but the
//! backend is one station behind one lock. A thread that wants to read queues its
//! request, then takes the lock; if the thread that held it before already read its
//! request, it is done, otherwise it reads every request queued by then as one batch
//! (gmblock's [`gmblock::client::Client::read_many`]: their chunks share the window) and
//! hands each its outcome before it lets the lock go. So the servers see the chunks of all
//! the reads in flight, not one request's at a time, and no request waits for a wake-up
//! that nobody sends: every queued request is read by the next holder of the lock at the
//! latest.
//!
//! Only whole-block reads of at most 1 MiB are batched ([`fits`]); the rest go through
//! [`crate::span`] alone. Writes, flushes and trims take the lock alone as before, so a
//! read-modify-write of a partial block still has the backend to itself.

use gmblock::proto::{BLOCK_BYTES, MAX_REQUEST_BYTES};
use std::sync::{Arc, Mutex};

/// Where a queued read's outcome goes: its bytes, or its error.
type Outcome = Arc<Mutex<Option<anyhow::Result<Vec<u8>>>>>;

/// A read waiting for the backend.
struct Waiting {
    offset: u64,
    buf: Vec<u8>,
    done: Outcome,
}

/// The reads waiting for the backend's lock.
#[derive(Default)]
pub struct Batch {
    waiting: Mutex<Vec<Waiting>>,
}

/// Whether a read of `len` bytes at `offset` is batched: whole blocks, 1 MiB at most.
pub fn fits(offset: u64, len: usize) -> bool {
    let block = u64::from(BLOCK_BYTES);
    offset.is_multiple_of(block) && len > 0 && (len as u64).is_multiple_of(block) && len <= MAX_REQUEST_BYTES as usize
}

impl Batch {
    pub const fn new() -> Batch {
        Batch { waiting: Mutex::new(Vec::new()) }
    }

    /// Read `buf.len()` bytes at `offset` from the backend behind `backend`, batched with
    /// every read waiting when this thread gets the lock; `many` reads a batch, one
    /// outcome per request, in order.
    pub fn read<B>(
        &self,
        backend: &Mutex<B>,
        offset: u64,
        buf: &mut [u8],
        many: impl FnOnce(&mut B, &mut [(u64, &mut [u8])]) -> Vec<anyhow::Result<()>>,
    ) -> anyhow::Result<()> {
        let done = Outcome::default();
        crate::lock(&self.waiting).push(Waiting { offset, buf: vec![0; buf.len()], done: Arc::clone(&done) });
        {
            let mut b = crate::lock(backend);
            // Still unread: this request is in the queue, and no other thread can take
            // it while this one holds the lock.
            if crate::lock(&done).is_none() {
                let batch = std::mem::take(&mut *crate::lock(&self.waiting));
                run(&mut *b, batch, many);
            }
        }
        let got = crate::lock(&done).take();
        got.unwrap_or_else(|| Err(anyhow::anyhow!("the read at {offset} was left out of its batch")))
            .map(|bytes| buf.copy_from_slice(&bytes))
    }
}

/// Read `batch` with `many` and hand each request its outcome.
fn run<B>(
    b: &mut B,
    mut batch: Vec<Waiting>,
    many: impl FnOnce(&mut B, &mut [(u64, &mut [u8])]) -> Vec<anyhow::Result<()>>,
) {
    let mut reqs: Vec<(u64, &mut [u8])> = batch.iter_mut().map(|w| (w.offset, w.buf.as_mut_slice())).collect();
    let mut outs = many(b, &mut reqs).into_iter();
    drop(reqs);
    for w in batch {
        let o = outs.next().unwrap_or_else(|| Err(anyhow::anyhow!("the backend gave no outcome for this read")));
        *crate::lock(&w.done) = Some(o.map(|()| w.buf));
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::atomic::{AtomicUsize, Ordering};

    /// A volume whose byte at `i` is `i / 4096` (mod 256), read in batches that are
    /// counted; reads at 1 GiB fail.
    struct Fake {
        batches: Vec<usize>,
    }

    fn many(f: &mut Fake, reqs: &mut [(u64, &mut [u8])]) -> Vec<anyhow::Result<()>> {
        f.batches.push(reqs.len());
        std::thread::sleep(std::time::Duration::from_millis(2));
        reqs.iter_mut()
            .map(|(o, buf)| {
                anyhow::ensure!(*o != 1 << 30, "server: I/O error");
                for (i, x) in buf.iter_mut().enumerate() {
                    *x = ((*o + i as u64) / 4096) as u8;
                }
                Ok(())
            })
            .collect()
    }

    #[test]
    fn every_thread_gets_its_own_bytes_or_its_own_error_and_reads_are_batched() {
        static BATCH: Batch = Batch::new();
        let backend = Mutex::new(Fake { batches: Vec::new() });
        let failed = AtomicUsize::new(0);
        std::thread::scope(|s| {
            for t in 0..8u64 {
                let (backend, failed) = (&backend, &failed);
                s.spawn(move || {
                    for k in 0..20u64 {
                        let offset = if t == 7 && k == 3 { 1 << 30 } else { (t * 20 + k) * 65536 };
                        let mut buf = vec![0xAAu8; 65536];
                        match BATCH.read(backend, offset, &mut buf, many) {
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
        let batches = &backend.lock().unwrap().batches;
        assert_eq!(batches.iter().sum::<usize>(), 160, "every read once");
        assert!(batches.iter().any(|&n| n > 1), "reads waiting together went together: {batches:?}");
    }

    #[test]
    fn only_whole_blocks_up_to_a_mebibyte_are_batched() {
        assert!(fits(0, 4096) && fits(1 << 20, 1 << 20));
        assert!(!fits(512, 4096) && !fits(0, 4000) && !fits(0, 0) && !fits(0, (1 << 20) + 4096));
    }
}
