// SPDX-License-Identifier: GPL-2.0-only
//! The in-process crossbar: a bounded frame lane from each sender to each destination
//! node, and per node an eventfd that polls readable when frames arrive. For tests and
//! one-process clusters.
//!
//! Each lane is a pair of single-producer single-consumer rings ([`rtrb`]): frames from
//! the sender to the destination, spare buffers back. No lock and no atomic
//! read-modify-write is on the hot path apart from one barrier per send (see below): a
//! lock per push and per pop cost 5-8 % of a one-thread 8 KB round trip, and its cache
//! line crossed cores with every frame between threads. A sender fills a buffer taken
//! from its lane's spare ring ([`LinkBackend::send_frame_with`]) and pushes it; the
//! receiver lends it out in place ([`LinkBackend::recv_frame_with`]) and gives it back to
//! that lane's spare ring at its next pop. Frames of one sender stay in order; a reader
//! takes its lanes round-robin. A sender attaches its lane to the destination at its
//! first send (under the destination's lock, once); the reader adopts new lanes when a
//! counter says some arrived.
//!
//! Sleeping readers: a reader about to sleep stores `waiting`, fences, and then looks at
//! its lanes; a sender pushes, fences, and then reads `waiting`. With a SeqCst fence on
//! each side one of the two sees the other, so no wakeup is lost. (An asymmetric barrier,
//! membarrier on the sleep and a compiler fence per send, took the fence out of the
//! send path's profile but did not change the round trip measurably here, so the simple
//! symmetric form stays.)

use std::collections::HashMap;
use std::io;
use std::os::fd::{AsFd, BorrowedFd, OwnedFd};
use std::sync::atomic::{fence, AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};

use rtrb::{Consumer, Producer, RingBuffer};
use rustix::event::{eventfd, EventfdFlags};

use super::LinkBackend;

/// Frames one sender queues to a port before the switch drops its further frames there
/// (a lane's ring is allocated whole: 40 KiB at this size; a NIC's send ring holds far
/// fewer packets).
pub const DEFAULT_QUEUE_FRAMES: usize = 1024;
/// Bytes one sender queues to a port before the switch drops its further frames there
/// (per lane, so a stalled reader holds at most this much from each sender).
pub const DEFAULT_QUEUE_BYTES: usize = 8 << 20;
/// Largest frame the switch carries.
pub const INPROC_MAX_FRAME_BYTES: usize = 65536;
/// Spare frame buffers a lane's ring returns to its sender (each as large as the largest
/// frame it carried; with the sender's pool of ones taken off the ring, at most ~4 MiB
/// per lane).
const SPARE_BUFFERS: usize = 32;

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

/// A destination's shared state: lanes not yet adopted by its reader, the wakeup.
#[derive(Debug)]
struct PortQueue {
    /// Lanes senders attached since the reader last looked.
    arrivals: Mutex<Vec<RxLane>>,
    /// Lanes ever attached (the reader adopts when this differs from its count).
    attached: AtomicUsize,
    /// Signalled (written) after a push while the reader is `waiting`; signals merge, so
    /// the reader drains its lanes rather than counting signals.
    event: OwnedFd,
    /// The reader announced it is about to sleep on `event` (see the module doc).
    waiting: AtomicBool,
    dropped_frames: AtomicU64,
}

#[derive(Debug)]
struct QueuedFrame {
    buf: Vec<u8>,
    /// The frame is `buf[off..off + len]`.
    off: usize,
    len: usize,
}

impl QueuedFrame {
    fn bytes(&self) -> &[u8] {
        &self.buf[self.off..self.off + self.len]
    }
}

/// Cache-line size the frames' payloads are aligned to.
const CACHE_LINE: usize = 64;

/// Where in `buf` a frame starts so that its byte `align_at` lies on a cache line.
fn frame_offset(buf: &[u8], align_at: usize) -> usize {
    let at = (buf.as_ptr() as usize).wrapping_add(align_at);
    (CACHE_LINE - at % CACHE_LINE) % CACHE_LINE
}

/// The sender's end of a lane.
#[derive(Debug)]
struct TxLane {
    dst: u16,
    queue: Arc<PortQueue>,
    frames: Producer<QueuedFrame>,
    spare: Consumer<Vec<u8>>,
    /// Bytes pushed so far; `popped` is the reader's count.
    pushed: u64,
    popped: Arc<AtomicU64>,
    /// `popped` as last read: it only grows, so a stale value only overstates what is
    /// queued, and the sender rereads it (a cache line the reader writes on every pop)
    /// only when the stale value says the lane is over its byte limit.
    seen_popped: u64,
    /// Spare buffers taken off `spare` and not used yet: the ring is drained in one go
    /// when this runs dry, so under load its tail (which the reader writes) is read once
    /// per batch rather than once per frame.
    pool: Vec<Vec<u8>>,
}

/// The reader's end of a lane.
#[derive(Debug)]
struct RxLane {
    frames: Consumer<QueuedFrame>,
    spare: Producer<Vec<u8>>,
    popped: Arc<AtomicU64>,
}

fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|e| e.into_inner())
}

impl Default for InProcSwitch {
    fn default() -> Self {
        Self::new()
    }
}

impl InProcSwitch {
    pub fn new() -> Self {
        Self::with_queue_limits(DEFAULT_QUEUE_FRAMES, DEFAULT_QUEUE_BYTES)
    }

    /// A switch whose lanes hold at most `frames` frames and `bytes` bytes each.
    pub fn with_queue_limits(frames: usize, bytes: usize) -> Self {
        InProcSwitch {
            inner: Arc::new(Switch {
                ports: Mutex::new(HashMap::new()),
                generation: AtomicU64::new(0),
                queue_frames: frames.max(1),
                queue_bytes: bytes,
                dropped_frames: AtomicU64::new(0),
            }),
        }
    }

    /// Attach node `node` and return its port. Attaching a node again replaces the old
    /// port (which then receives nothing more). Fails only if no eventfd can be made.
    pub fn try_port(&self, node: u16) -> io::Result<InProcPort> {
        let queue = Arc::new(PortQueue {
            arrivals: Mutex::new(Vec::new()),
            attached: AtomicUsize::new(0),
            event: eventfd(0, EventfdFlags::NONBLOCK | EventfdFlags::CLOEXEC)?,
            waiting: AtomicBool::new(false),
            dropped_frames: AtomicU64::new(0),
        });
        lock(&self.inner.ports).insert(node, queue.clone());
        self.inner.generation.fetch_add(1, Ordering::AcqRel);
        Ok(InProcPort {
            node,
            switch: self.inner.clone(),
            queue,
            routes: Vec::new(),
            routes_generation: u64::MAX,
            lanes: Vec::new(),
            adopted: 0,
            next_lane: 0,
            next_buf: None,
            lent: None,
        })
    }

    /// [`try_port`](Self::try_port), panicking if the process is out of file descriptors
    /// (for tests and examples, where that is a setup failure).
    pub fn port(&self, node: u16) -> InProcPort {
        self.try_port(node).expect("eventfd for an in-process switch port")
    }

    /// Frames dropped because a lane was full, over all ports.
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
    /// Lanes to the destinations sent to so far, valid while the switch generation
    /// matches (a re-attached destination gets a new lane).
    routes: Vec<TxLane>,
    routes_generation: u64,
    /// Lanes into this port, adopted from `queue.arrivals`.
    lanes: Vec<RxLane>,
    adopted: usize,
    /// The lane the next pop looks at first.
    next_lane: usize,
    /// A buffer left over from a dropped send, for the next.
    next_buf: Option<Vec<u8>>,
    /// The frame last lent out by `recv_frame_with` and its lane; its buffer goes back to
    /// that lane's spare ring at the next pop.
    lent: Option<(QueuedFrame, usize)>,
}

impl InProcPort {
    pub fn node(&self) -> u16 {
        self.node
    }

    /// Frames dropped on the way to this port because a lane was full.
    pub fn dropped_frames(&self) -> u64 {
        self.queue.dropped_frames.load(Ordering::Relaxed)
    }

    /// Frames waiting for this port.
    pub fn queued_frames(&self) -> usize {
        let adopted: usize = self.lanes.iter().map(|l| l.frames.slots()).sum();
        adopted + lock(&self.queue.arrivals).iter().map(|l| l.frames.slots()).sum::<usize>()
    }

    fn clear_event(&self) {
        let mut b = [0u8; 8];
        // EAGAIN means the counter was already zero; nothing else can fail on an eventfd.
        let _ = rustix::io::read(&self.queue.event, &mut b);
    }

    /// Take over lanes senders attached since the last look.
    fn adopt(&mut self) {
        if self.queue.attached.load(Ordering::Acquire) == self.adopted {
            return;
        }
        let mut arrivals = lock(&self.queue.arrivals);
        self.adopted += arrivals.len();
        self.lanes.append(&mut arrivals);
    }

    /// Whether any lane (adopted or not) holds a frame.
    fn any_waiting(&self) -> bool {
        self.queue.attached.load(Ordering::Acquire) != self.adopted || self.lanes.iter().any(|l| !l.frames.is_empty())
    }
}

impl Drop for InProcPort {
    fn drop(&mut self) {
        let mut ports = lock(&self.switch.ports);
        if ports.get(&self.node).is_some_and(|q| Arc::ptr_eq(q, &self.queue)) {
            ports.remove(&self.node);
            self.switch.generation.fetch_add(1, Ordering::AcqRel);
        }
    }
}

impl InProcPort {
    /// The lane to `dst` (made and attached at the first send to it), by index.
    fn route(&mut self, dst: u16) -> Option<usize> {
        let generation = self.switch.generation.load(Ordering::Acquire);
        if generation != self.routes_generation {
            // Keep the lanes whose destination is still attached as it was: dropping them
            // would let this sender's later frames overtake ones still queued there.
            let ports = lock(&self.switch.ports);
            self.routes.retain(|l| ports.get(&l.dst).is_some_and(|q| Arc::ptr_eq(q, &l.queue)));
            drop(ports);
            self.routes_generation = generation;
        }
        if let Some(i) = self.routes.iter().position(|l| l.dst == dst) {
            return Some(i);
        }
        let queue = lock(&self.switch.ports).get(&dst).cloned()?;
        let (tx_frames, rx_frames) = RingBuffer::new(self.switch.queue_frames);
        let (tx_spare, rx_spare) = RingBuffer::new(SPARE_BUFFERS);
        let popped = Arc::new(AtomicU64::new(0));
        {
            let mut arrivals = lock(&queue.arrivals);
            arrivals.push(RxLane { frames: rx_frames, spare: tx_spare, popped: popped.clone() });
            queue.attached.fetch_add(1, Ordering::Release);
        }
        self.routes.push(TxLane {
            dst,
            queue,
            frames: tx_frames,
            spare: rx_spare,
            pushed: 0,
            popped,
            seen_popped: 0,
            pool: Vec::new(),
        });
        Some(self.routes.len() - 1)
    }

    /// Queue a frame of `len` bytes that `fill` writes, to node `dst`, its byte
    /// `align_at` on a cache line.
    fn push_frame(&mut self, dst: u16, len: usize, align_at: usize, fill: &mut dyn FnMut(&mut [u8])) -> io::Result<()> {
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
        let (queue_bytes, lane) = (self.switch.queue_bytes, &mut self.routes[route]);
        let mut buf = match self.next_buf.take() {
            Some(b) => b,
            None if lane.pool.is_empty() => match lane.spare.slots() {
                // One frame in flight per lane is the common case: its buffer is the only
                // spare, taken straight off the ring (what draining it into the pool and
                // popping that would give, without the pool's round trip).
                1 => lane.spare.pop().unwrap_or_default(),
                n => {
                    for _ in 0..n {
                        if let Ok(b) = lane.spare.pop() {
                            lane.pool.push(b);
                        }
                    }
                    lane.pool.pop().unwrap_or_default()
                }
            },
            None => lane.pool.pop().unwrap_or_default(),
        };
        if buf.len() < len + CACHE_LINE {
            buf.resize(len + CACHE_LINE, 0);
        }
        let off = frame_offset(&buf, align_at);
        fill(&mut buf[off..off + len]);
        if lane.pushed - lane.seen_popped + len as u64 > queue_bytes as u64 {
            lane.seen_popped = lane.popped.load(Ordering::Acquire);
        }
        let queued = lane.pushed - lane.seen_popped;
        if lane.frames.is_full() || queued + len as u64 > queue_bytes as u64 {
            self.next_buf = Some(buf);
            lane.queue.dropped_frames.fetch_add(1, Ordering::Relaxed);
            self.switch.dropped_frames.fetch_add(1, Ordering::Relaxed);
            return Ok(());
        }
        if let Err(rtrb::PushError::Full(f)) = lane.frames.push(QueuedFrame { buf, off, len }) {
            // Not reached (checked above, and only this sender pushes); keep the buffer.
            self.next_buf = Some(f.buf);
            return Ok(());
        }
        lane.pushed += len as u64;
        // The push must be visible before `waiting` is read: a full fence, paired with the
        // reader's between storing `waiting` and looking at its lanes (module doc).
        fence(Ordering::SeqCst);
        if lane.queue.waiting.load(Ordering::Relaxed) {
            // EAGAIN (counter saturated) still leaves the fd readable, which is all it needs.
            let _ = rustix::io::write(&lane.queue.event, &1u64.to_ne_bytes());
        }
        Ok(())
    }

    /// Take the next frame off this port's lanes (round-robin), giving the last lent
    /// buffer back to its lane.
    fn pop_frame(&mut self) -> Option<(QueuedFrame, usize)> {
        self.adopt();
        if let Some((f, lane)) = self.lent.take() {
            if let Some(l) = self.lanes.get_mut(lane) {
                // A full spare ring (or an abandoned lane) just drops the buffer.
                let _ = l.spare.push(f.buf);
            }
        }
        let n = self.lanes.len();
        for k in 0..n {
            let i = (self.next_lane + k) % n;
            let lane = &mut self.lanes[i];
            if let Ok(f) = lane.frames.pop() {
                // Only this reader writes `popped`: a plain store, no read-modify-write.
                let popped = lane.popped.load(Ordering::Relaxed) + f.len as u64;
                lane.popped.store(popped, Ordering::Release);
                self.next_lane = (i + 1) % n;
                return Some((f, i));
            }
        }
        // Lanes whose sender is gone and which hold nothing more are dropped.
        if self.lanes.iter().any(|l| l.frames.is_abandoned() && l.frames.is_empty()) {
            self.lanes.retain(|l| !(l.frames.is_abandoned() && l.frames.is_empty()));
            self.next_lane = 0;
        }
        None
    }
}

impl LinkBackend for InProcPort {
    fn send_frame(&mut self, dst: u16, frame: &[u8]) -> io::Result<()> {
        self.push_frame(dst, frame.len(), 0, &mut |buf| buf.copy_from_slice(frame))
    }

    fn send_frame_with(
        &mut self,
        dst: u16,
        len: usize,
        align_at: usize,
        _scratch: &mut [u8],
        fill: &mut dyn FnMut(&mut [u8]),
    ) -> io::Result<()> {
        self.push_frame(dst, len, align_at, fill)
    }

    fn try_recv_frame(&mut self, buf: &mut [u8]) -> io::Result<Option<usize>> {
        let mut got = None;
        self.recv_frame_with(&mut [], &mut |f| {
            let n = f.len().min(buf.len());
            buf[..n].copy_from_slice(&f[..n]);
            got = Some(n);
        })?;
        Ok(got)
    }

    fn recv_frame_with(&mut self, _scratch: &mut [u8], take: &mut dyn FnMut(&[u8])) -> io::Result<bool> {
        let Some((f, lane)) = self.pop_frame() else {
            return Ok(false);
        };
        take(f.bytes());
        self.lent = Some((f, lane));
        Ok(true)
    }

    fn keeps_last_frame(&self) -> bool {
        true
    }

    fn last_frame(&self) -> Option<&[u8]> {
        // The buffer goes back to its lane only at the next pop.
        self.lent.as_ref().map(|(f, _)| f.bytes())
    }

    fn readable_fd(&self) -> Option<BorrowedFd<'_>> {
        Some(self.queue.event.as_fd())
    }

    fn max_frame_bytes(&self) -> usize {
        INPROC_MAX_FRAME_BYTES
    }

    fn prepare_wait(&self) -> bool {
        self.queue.waiting.store(true, Ordering::Relaxed);
        // Paired with the sender's fence after its push: one of the two sees the other.
        fence(Ordering::SeqCst);
        // Clear old signals first, then look: a frame pushed before our store is found by
        // the look; one pushed after it signals afresh.
        self.clear_event();
        if self.any_waiting() {
            self.queue.waiting.store(false, Ordering::SeqCst);
            return false;
        }
        true
    }

    fn end_wait(&self) {
        self.queue.waiting.store(false, Ordering::SeqCst);
    }

    fn frames_waiting(&mut self) -> bool {
        self.any_waiting()
    }

    fn is_memory_medium(&self) -> bool {
        true
    }

    fn routes_to(&self, dst: u16) -> bool {
        // The route cache first: the switch-wide lock is shared by every sender.
        let cached = self.switch.generation.load(Ordering::Acquire) == self.routes_generation
            && self.routes.iter().any(|l| l.dst == dst);
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
        let zero = Timespec { tv_sec: 0, tv_nsec: 0 };
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
    fn byte_limit_drops_and_frees_as_the_reader_pops() {
        let sw = InProcSwitch::with_queue_limits(100, 1000);
        let mut a = sw.port(1);
        let mut b = sw.port(2);
        let mut buf = [0u8; 500];
        // 400 + 400 fit in 1000 bytes; a third is dropped until the reader takes one.
        for round in 0..3u8 {
            a.send_frame(2, &[round; 400]).unwrap();
            a.send_frame(2, &[round; 400]).unwrap();
            a.send_frame(2, &[round; 400]).unwrap();
            assert_eq!(sw.dropped_frames(), 1 + round as u64);
            assert_eq!(b.try_recv_frame(&mut buf).unwrap(), Some(400));
            // The sender sees the room the pop made.
            a.send_frame(2, &[round; 400]).unwrap();
            assert_eq!(sw.dropped_frames(), 1 + round as u64);
            for _ in 0..2 {
                assert_eq!(b.try_recv_frame(&mut buf).unwrap(), Some(400));
                assert_eq!(buf[0], round);
            }
            assert_eq!(b.try_recv_frame(&mut buf).unwrap(), None);
        }
    }

    #[test]
    fn frames_are_placed_with_the_hinted_byte_on_a_cache_line() {
        let sw = InProcSwitch::new();
        let mut a = sw.port(1);
        let mut b = sw.port(2);
        let mut scratch = [0u8; 0];
        for (k, align_at) in [0usize, 24, 80, 184, 1000, 3].into_iter().enumerate() {
            let len = 2000 + k;
            let fill = &mut |buf: &mut [u8]| {
                for (i, x) in buf.iter_mut().enumerate() {
                    *x = (i * 7 + k) as u8;
                }
            };
            a.send_frame_with(2, len, align_at, &mut scratch, fill).unwrap();
            let mut seen = None;
            assert!(b
                .recv_frame_with(&mut scratch, &mut |f| {
                    let ok = f.iter().enumerate().all(|(i, &x)| x == (i * 7 + k) as u8);
                    seen = Some((f.len(), ok, f[align_at..].as_ptr() as usize % CACHE_LINE));
                })
                .unwrap());
            assert_eq!(seen, Some((len, true, 0)), "hint {align_at}");
        }
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
                a.send_frame_with(2, len, 0, &mut scratch, &mut |buf| buf.fill(round * 16 + i)).unwrap();
            }
            // The third frame of each round overflowed the 2-frame queue.
            assert_eq!(sw.dropped_frames(), round as u64 + 1);
            let mut got = Vec::new();
            while b.recv_frame_with(&mut scratch, &mut |f| got.push((f.len(), f[0], f[f.len() - 1]))).unwrap() {}
            assert_eq!(got, [(1000, round * 16, round * 16), (4000, round * 16 + 1, round * 16 + 1)]);
        }
        // Buffers went back to the lane's spare ring: at most a few were ever made.
        let pooled = a.routes[0].spare.slots();
        assert!((1..=3).contains(&pooled), "{pooled} spare buffers");
    }

    #[test]
    fn a_senders_frames_stay_in_order_while_other_ports_come_and_go() {
        let sw = InProcSwitch::new();
        let mut a = sw.port(1);
        let mut b = sw.port(2);
        for i in 0..10u8 {
            a.send_frame(2, &[2 * i]).unwrap();
            a.send_frame(2, &[2 * i + 1]).unwrap();
            drop(sw.port(10 + i as u16)); // another node attaches and detaches
        }
        let mut buf = [0u8; 4];
        for i in 0..20u8 {
            assert_eq!(b.try_recv_frame(&mut buf).unwrap(), Some(1));
            assert_eq!(buf[0], i, "frame {i}");
        }
        assert_eq!(b.lanes.len(), 1, "one lane from one sender");
    }

    /// Two sender threads and a reader that sleeps whenever it finds nothing: every frame
    /// arrives once, each sender's in order, and no sleep misses its wakeup (a sleep that
    /// times out while frames are still due fails the test). The senders stay within a
    /// lane's capacity (a full lane drops, as a network would).
    #[test]
    fn senders_on_threads_and_a_sleeping_reader_lose_nothing() {
        use std::sync::atomic::AtomicU32;
        const N: u32 = 20_000;
        let sw = InProcSwitch::new();
        let mut r = sw.port(3);
        let taken: Arc<[AtomicU32; 3]> = Arc::new(Default::default());
        let senders: Vec<_> = [1u16, 2]
            .into_iter()
            .map(|id| {
                let (mut p, taken) = (sw.port(id), taken.clone());
                std::thread::spawn(move || {
                    for i in 0..N {
                        while i - taken[id as usize].load(Ordering::Acquire) >= DEFAULT_QUEUE_FRAMES as u32 / 2 {
                            std::thread::yield_now();
                        }
                        let mut f = [0u8; 6];
                        f[..2].copy_from_slice(&id.to_le_bytes());
                        f[2..].copy_from_slice(&i.to_le_bytes());
                        p.send_frame(3, &f).unwrap();
                        if i % 97 == 0 {
                            std::thread::yield_now(); // let the reader run dry and sleep
                        }
                    }
                    p
                })
            })
            .collect();
        let mut next = [0u32; 3];
        let (mut buf, mut sleeps) = ([0u8; 8], 0u32);
        while next[1] < N || next[2] < N {
            match r.try_recv_frame(&mut buf).unwrap() {
                Some(6) => {
                    let id = u16::from_le_bytes([buf[0], buf[1]]) as usize;
                    let i = u32::from_le_bytes([buf[2], buf[3], buf[4], buf[5]]);
                    assert_eq!(i, next[id], "sender {id} out of order");
                    next[id] += 1;
                    taken[id].store(next[id], Ordering::Release);
                }
                Some(n) => panic!("frame of {n} bytes"),
                None => {
                    if r.prepare_wait() {
                        sleeps += 1;
                        let mut fds = [PollFd::from_borrowed_fd(r.readable_fd().unwrap(), PollFlags::IN)];
                        let limit = Timespec { tv_sec: 5, tv_nsec: 0 };
                        let woke = poll(&mut fds, Some(&limit)).unwrap();
                        assert_eq!(woke, 1, "a sleep missed its wakeup at {next:?}");
                    }
                    r.end_wait();
                }
            }
        }
        for t in senders {
            t.join().unwrap();
        }
        assert_eq!(sw.dropped_frames(), 0);
        assert!(sleeps > 0, "the reader never slept: the wakeup path went untested");
    }

    #[test]
    fn routes_and_detach() {
        let sw = InProcSwitch::new();
        let mut a = sw.port(1);
        assert!(!a.routes_to(2));
        assert_eq!(a.send_frame(2, b"x").unwrap_err().kind(), io::ErrorKind::NotFound);
        let b = sw.port(2);
        assert!(a.routes_to(2));
        let b2 = sw.port(2); // replaces b
        drop(b); // must not detach b2
        assert!(a.routes_to(2));
        drop(b2);
        assert!(!a.routes_to(2));
        assert!(a.send_frame(1, &vec![0; INPROC_MAX_FRAME_BYTES + 1]).is_err());
    }
}
