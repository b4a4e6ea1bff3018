// SPDX-License-Identifier: GPL-2.0-only
//! The in-process crossbar: one bounded frame queue per node, each with an eventfd that
//! polls readable when frames arrive. For tests and one-process clusters.
//!
//! The hot path allocates nothing and copies each frame once: a sender fills a frame
//! buffer taken from the destination's pool of spare buffers
//! ([`LinkBackend::send_frame_with`]) and moves it into the queue; the receiver lends
//! it out in place ([`LinkBackend::recv_frame_with`]) and gives it back to the pool at its
//! next pop. A reader finding its queue empty looks at an atomic count, not the lock, so
//! a polling reader never contends with its senders.

use std::collections::{HashMap, VecDeque};
use std::io;
use std::os::fd::{AsFd, BorrowedFd, OwnedFd};
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};

use rustix::event::{eventfd, EventfdFlags};

use super::LinkBackend;

/// Frames a port queues before the switch drops further frames to it.
pub const DEFAULT_QUEUE_FRAMES: usize = 4096;
/// Bytes a port queues before the switch drops further frames to it.
pub const DEFAULT_QUEUE_BYTES: usize = 64 << 20;
/// Largest frame the switch carries.
pub const INPROC_MAX_FRAME_BYTES: usize = 65536;
/// Spare frame buffers a port's pool keeps for its senders.
const SPARE_BUFFERS: usize = 64;

/// A handle to an in-process switch; clones share the switch.
///
/// ```
/// use trapeze_vnic::link::backend::{InProcSwitch, LinkBackend};
/// let switch = InProcSwitch::new();
/// let mut a = switch.port(1);
/// let mut b = switch.port(2);
/// a.send_frame(2, b"hello").unwrap();
/// let mut buf = [0u8; 16];
/// assert_eq!(b.try_recv_frame(&mut buf).unwrap(), Some(5));
/// assert_eq!(b.try_recv_frame(&mut buf).unwrap(), None);
/// ```
#[derive(Clone, Debug)]
pub struct InProcSwitch {
    inner: Arc<Switch>,
}

#[derive(Debug)]
struct Switch {
    ports: Mutex<HashMap<u16, Arc<PortQueue>>>,
    /// Bumped whenever a port is attached or detached: invalidates senders' caches.
    generation: AtomicU64,
    queue_frames: usize,
    queue_bytes: usize,
    dropped_frames: AtomicU64,
}

#[derive(Debug)]
struct PortQueue {
    frames: Mutex<Queue>,
    /// Signalled (written) after an enqueue while the reader is `waiting`; signals merge,
    /// so the reader drains the queue rather than counting signals.
    event: OwnedFd,
    /// The reader announced it is about to sleep on `event` (see `prepare_wait`): a
    /// sender that sees this after its push signals `event`; a reader that set it and
    /// then finds the queue empty may sleep. (SeqCst on both sides, with the queue lock
    /// ordering push and check, means one of them sees the other.)
    waiting: AtomicBool,
    dropped_frames: AtomicU64,
    /// `frames.frames.len()`, stored under the lock after each push and pop: a reader
    /// that sees 0 returns without locking (a push racing with that look is found by the
    /// next poll, or by `prepare_wait`, which looks under the lock).
    queued: AtomicUsize,
}

/// A frame in a queue: the buffer (kept at the largest length it ever had, so reuse
/// never zero-fills it again) and the frame's length.
#[derive(Debug)]
struct QueuedFrame {
    buf: Vec<u8>,
    len: usize,
}

#[derive(Debug, Default)]
struct Queue {
    frames: VecDeque<QueuedFrame>,
    bytes: usize,
    /// Buffers given back by the reader, for senders to fill.
    spare: Vec<Vec<u8>>,
}

/// Lock a mutex, ignoring poisoning: every critical section here leaves the data
/// consistent (a push or a pop), so a panic elsewhere cannot break it.
fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|e| e.into_inner())
}

impl Default for InProcSwitch {
    fn default() -> Self {
        Self::new()
    }
}

impl InProcSwitch {
    /// A switch whose ports queue up to [`DEFAULT_QUEUE_FRAMES`] frames or
    /// [`DEFAULT_QUEUE_BYTES`] bytes each.
    pub fn new() -> Self {
        Self::with_queue_limits(DEFAULT_QUEUE_FRAMES, DEFAULT_QUEUE_BYTES)
    }

    /// A switch whose ports queue at most `frames` frames and `bytes` bytes each; frames
    /// beyond that are dropped and counted.
    pub fn with_queue_limits(frames: usize, bytes: usize) -> Self {
        InProcSwitch {
            inner: Arc::new(Switch {
                ports: Mutex::new(HashMap::new()),
                generation: AtomicU64::new(0),
                queue_frames: frames,
                queue_bytes: bytes,
                dropped_frames: AtomicU64::new(0),
            }),
        }
    }

    /// Attach node `node` and return its port. Attaching a node again replaces the old
    /// port (which then receives nothing more). Fails only if no eventfd can be made.
    pub fn try_port(&self, node: u16) -> io::Result<InProcPort> {
        let queue = Arc::new(PortQueue {
            frames: Mutex::new(Queue::default()),
            event: eventfd(0, EventfdFlags::NONBLOCK | EventfdFlags::CLOEXEC)?,
            waiting: AtomicBool::new(false),
            dropped_frames: AtomicU64::new(0),
            queued: AtomicUsize::new(0),
        });
        lock(&self.inner.ports).insert(node, queue.clone());
        self.inner.generation.fetch_add(1, Ordering::AcqRel);
        Ok(InProcPort {
            node,
            switch: self.inner.clone(),
            queue,
            routes: Vec::new(),
            routes_generation: u64::MAX,
            next_buf: None,
            lent: None,
            lent_len: 0,
        })
    }

    /// [`try_port`](Self::try_port), panicking if the process is out of file descriptors
    /// (for tests and examples, where that is a setup failure).
    pub fn port(&self, node: u16) -> InProcPort {
        self.try_port(node)
            .expect("eventfd for an in-process switch port")
    }

    /// Frames dropped because the destination queue was full, over all ports.
    pub fn dropped_frames(&self) -> u64 {
        self.inner.dropped_frames.load(Ordering::Relaxed)
    }
}

/// One node's attachment to an [`InProcSwitch`]. Dropping it detaches the node.
#[derive(Debug)]
pub struct InProcPort {
    node: u16,
    switch: Arc<Switch>,
    queue: Arc<PortQueue>,
    /// Destination queues looked up so far, valid while the switch generation matches.
    routes: Vec<(u16, Arc<PortQueue>)>,
    routes_generation: u64,
    /// A spare buffer taken from a destination's pool at the last send, for the next.
    next_buf: Option<Vec<u8>>,
    /// The buffer of the frame last lent out by `recv_frame_with`, given back to this
    /// port's pool at the next pop.
    lent: Option<Vec<u8>>,
    /// The length of the frame in `lent`.
    lent_len: usize,
}

impl InProcPort {
    pub fn node(&self) -> u16 {
        self.node
    }

    /// Frames dropped on the way to this port because its queue was full.
    pub fn dropped_frames(&self) -> u64 {
        self.queue.dropped_frames.load(Ordering::Relaxed)
    }

    /// Frames waiting in this port's queue.
    pub fn queued_frames(&self) -> usize {
        lock(&self.queue.frames).frames.len()
    }

    fn clear_event(&self) {
        let mut b = [0u8; 8];
        // EAGAIN means the counter was already zero; nothing else can fail on an eventfd.
        let _ = rustix::io::read(&self.queue.event, &mut b);
    }
}

impl Drop for InProcPort {
    fn drop(&mut self) {
        let mut ports = lock(&self.switch.ports);
        if ports
            .get(&self.node)
            .is_some_and(|q| Arc::ptr_eq(q, &self.queue))
        {
            ports.remove(&self.node);
            self.switch.generation.fetch_add(1, Ordering::AcqRel);
        }
    }
}

impl InProcPort {
    /// The queue of node `dst`, from the cache while no port was attached or detached.
    /// Where `dst`'s queue is in the route cache (no reference count touched on a hit).
    fn route(&mut self, dst: u16) -> Option<usize> {
        let generation = self.switch.generation.load(Ordering::Acquire);
        if generation != self.routes_generation {
            self.routes.clear();
            self.routes_generation = generation;
        }
        if let Some(i) = self.routes.iter().position(|(d, _)| *d == dst) {
            return Some(i);
        }
        let q = lock(&self.switch.ports).get(&dst).cloned()?;
        self.routes.push((dst, q));
        Some(self.routes.len() - 1)
    }
}

impl InProcPort {
    /// Queue a frame of `len` bytes that `fill` writes, to node `dst`.
    fn push_frame(
        &mut self,
        dst: u16,
        len: usize,
        fill: &mut dyn FnMut(&mut [u8]),
    ) -> io::Result<()> {
        if len > INPROC_MAX_FRAME_BYTES {
            return Err(io::Error::new(
                io::ErrorKind::InvalidInput,
                format!("frame of {len} bytes exceeds {INPROC_MAX_FRAME_BYTES}"),
            ));
        }
        let Some(route) = self.route(dst) else {
            return Err(io::Error::new(
                io::ErrorKind::NotFound,
                format!("no port for node {dst} on the in-process switch"),
            ));
        };
        // Fill outside the lock: the reader may be popping meanwhile.
        let mut buf = self.next_buf.take().unwrap_or_default();
        if buf.len() < len {
            buf.resize(len, 0);
        }
        fill(&mut buf[..len]);
        let q = &self.routes[route].1;
        {
            let mut fq = lock(&q.frames);
            self.next_buf = fq.spare.pop();
            if fq.frames.len() >= self.switch.queue_frames
                || fq.bytes + len > self.switch.queue_bytes
            {
                if fq.spare.len() < SPARE_BUFFERS {
                    fq.spare.push(buf);
                }
                drop(fq);
                q.dropped_frames.fetch_add(1, Ordering::Relaxed);
                self.switch.dropped_frames.fetch_add(1, Ordering::Relaxed);
                return Ok(());
            }
            fq.bytes += len;
            fq.frames.push_back(QueuedFrame { buf, len });
            q.queued.store(fq.frames.len(), Ordering::Release);
        }
        // Wake the reader only if it announced it is going to sleep (see `waiting`).
        // EAGAIN (counter saturated) still leaves the fd readable, which is all it needs.
        if q.waiting.load(Ordering::SeqCst) {
            let _ = rustix::io::write(&q.event, &1u64.to_ne_bytes());
        }
        Ok(())
    }

    /// Take the next frame off this port's queue, giving the last lent buffer back.
    fn pop_frame(&mut self) -> Option<QueuedFrame> {
        if self.queue.queued.load(Ordering::Acquire) == 0 {
            return None;
        }
        let mut fq = lock(&self.queue.frames);
        let f = fq.frames.pop_front()?;
        fq.bytes -= f.len;
        self.queue.queued.store(fq.frames.len(), Ordering::Release);
        if let Some(b) = self.lent.take() {
            if fq.spare.len() < SPARE_BUFFERS {
                fq.spare.push(b);
            }
        }
        Some(f)
    }
}

impl LinkBackend for InProcPort {
    fn send_frame(&mut self, dst: u16, frame: &[u8]) -> io::Result<()> {
        self.push_frame(dst, frame.len(), &mut |buf| buf.copy_from_slice(frame))
    }

    fn send_frame_with(
        &mut self,
        dst: u16,
        len: usize,
        _scratch: &mut [u8],
        fill: &mut dyn FnMut(&mut [u8]),
    ) -> io::Result<()> {
        self.push_frame(dst, len, fill)
    }

    fn try_recv_frame(&mut self, buf: &mut [u8]) -> io::Result<Option<usize>> {
        let Some(f) = self.pop_frame() else {
            return Ok(None);
        };
        let n = f.len.min(buf.len());
        buf[..n].copy_from_slice(&f.buf[..n]);
        self.lent = Some(f.buf);
        self.lent_len = f.len;
        Ok(Some(n))
    }

    fn recv_frame_with(
        &mut self,
        _scratch: &mut [u8],
        take: &mut dyn FnMut(&[u8]),
    ) -> io::Result<bool> {
        let Some(f) = self.pop_frame() else {
            return Ok(false);
        };
        take(&f.buf[..f.len]);
        self.lent = Some(f.buf);
        self.lent_len = f.len;
        Ok(true)
    }

    fn keeps_last_frame(&self) -> bool {
        true
    }

    fn last_frame(&self) -> Option<&[u8]> {
        // The buffer goes back to the pool only at the next pop.
        self.lent.as_deref().and_then(|b| b.get(..self.lent_len))
    }

    fn readable_fd(&self) -> Option<BorrowedFd<'_>> {
        Some(self.queue.event.as_fd())
    }

    fn max_frame_bytes(&self) -> usize {
        INPROC_MAX_FRAME_BYTES
    }

    fn prepare_wait(&self) -> bool {
        self.queue.waiting.store(true, Ordering::SeqCst);
        // Clear old signals first, then look: a frame pushed before our store is found by
        // the look; one pushed after it signals afresh.
        self.clear_event();
        if !lock(&self.queue.frames).frames.is_empty() {
            self.queue.waiting.store(false, Ordering::SeqCst);
            return false;
        }
        true
    }

    fn end_wait(&self) {
        self.queue.waiting.store(false, Ordering::SeqCst);
    }

    fn frames_waiting(&self) -> bool {
        self.queue.queued.load(Ordering::Acquire) != 0
    }

    fn is_memory_medium(&self) -> bool {
        true
    }

    fn routes_to(&self, dst: u16) -> bool {
        // The route cache first: the switch-wide lock is shared by every sender.
        let cached = self.switch.generation.load(Ordering::Acquire) == self.routes_generation
            && self.routes.iter().any(|(d, _)| *d == dst);
        cached || lock(&self.switch.ports).contains_key(&dst)
    }

    fn describe(&self) -> String {
        format!("inproc node {}", self.node)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use rustix::event::{poll, PollFd, PollFlags, Timespec};

    fn readable(fd: BorrowedFd<'_>) -> bool {
        let mut fds = [PollFd::from_borrowed_fd(fd, PollFlags::IN)];
        let zero = Timespec {
            tv_sec: 0,
            tv_nsec: 0,
        };
        poll(&mut fds, Some(&zero)).unwrap() == 1
    }

    #[test]
    fn queue_limit_drops_and_counts() {
        let sw = InProcSwitch::with_queue_limits(2, 1 << 20);
        let mut a = sw.port(1);
        let mut b = sw.port(2);
        assert!(!readable(b.readable_fd().unwrap()));
        for i in 0..3u8 {
            a.send_frame(2, &[i]).unwrap();
        }
        assert_eq!(sw.dropped_frames(), 1);
        assert_eq!(b.dropped_frames(), 1);
        // Frames are waiting: a reader about to sleep is told not to.
        assert!(!b.prepare_wait());
        let mut buf = [0u8; 4];
        assert_eq!(b.try_recv_frame(&mut buf).unwrap(), Some(1));
        assert_eq!(buf[0], 0);
        assert_eq!(b.try_recv_frame(&mut buf).unwrap(), Some(1));
        assert_eq!(buf[0], 1);
        assert_eq!(b.try_recv_frame(&mut buf).unwrap(), None);
    }

    #[test]
    fn senders_signal_only_a_reader_that_announced_its_sleep() {
        let sw = InProcSwitch::new();
        let mut a = sw.port(1);
        let mut b = sw.port(2);
        // A busy (polling) reader costs the sender no syscall: nothing is signalled.
        a.send_frame(2, b"x").unwrap();
        assert!(!readable(b.readable_fd().unwrap()));
        let mut buf = [0u8; 4];
        assert_eq!(b.try_recv_frame(&mut buf).unwrap(), Some(1));
        // A reader going to sleep: the next frame makes its fd readable.
        assert!(b.prepare_wait());
        assert!(!readable(b.readable_fd().unwrap()));
        a.send_frame(2, b"y").unwrap();
        assert!(readable(b.readable_fd().unwrap()));
        b.end_wait();
        assert_eq!(b.try_recv_frame(&mut buf).unwrap(), Some(1));
        // A re-attached destination is found again (the sender's route cache is renewed).
        let mut b2 = sw.port(2);
        a.send_frame(2, b"z").unwrap();
        assert_eq!(b2.try_recv_frame(&mut buf).unwrap(), Some(1));
        assert_eq!(b.try_recv_frame(&mut buf).unwrap(), None);
    }

    #[test]
    fn frames_filled_in_place_are_lent_in_place_and_buffers_reused() {
        let sw = InProcSwitch::with_queue_limits(2, 1 << 20);
        let mut a = sw.port(1);
        let mut b = sw.port(2);
        let mut scratch = [0u8; 0]; // unused by this backend
        for round in 0..3u8 {
            for i in 0..3u8 {
                let len = 1000 + 3000 * i as usize;
                a.send_frame_with(2, len, &mut scratch, &mut |buf| buf.fill(round * 16 + i))
                    .unwrap();
            }
            // The third frame of each round overflowed the 2-frame queue.
            assert_eq!(sw.dropped_frames(), round as u64 + 1);
            let mut got = Vec::new();
            while b
                .recv_frame_with(&mut scratch, &mut |f| {
                    got.push((f.len(), f[0], f[f.len() - 1]))
                })
                .unwrap()
            {}
            assert_eq!(
                got,
                [
                    (1000, round * 16, round * 16),
                    (4000, round * 16 + 1, round * 16 + 1)
                ]
            );
        }
        // Buffers went back to the destination's pool: at most a few were ever made.
        let pooled = lock(&b.queue.frames).spare.len();
        assert!((1..=3).contains(&pooled), "{pooled} spare buffers");
    }

    #[test]
    fn routes_and_detach() {
        let sw = InProcSwitch::new();
        let mut a = sw.port(1);
        assert!(!a.routes_to(2));
        assert_eq!(
            a.send_frame(2, b"x").unwrap_err().kind(),
            io::ErrorKind::NotFound
        );
        let b = sw.port(2);
        assert!(a.routes_to(2));
        let b2 = sw.port(2); // replaces b
        drop(b); // must not detach b2
        assert!(a.routes_to(2));
        drop(b2);
        assert!(!a.routes_to(2));
        assert!(a
            .send_frame(1, &vec![0; INPROC_MAX_FRAME_BYTES + 1])
            .is_err());
    }
}
