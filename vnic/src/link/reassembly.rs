// SPDX-License-Identifier: GPL-2.0-only
//! Reassembly of link frames into packets: sans-IO (frames and the time go in, whole
//! packets come out), bounded in every dimension, no unsafe.
//!
//! Rules:
//! - A frame must parse, be addressed to this node, describe a packet of
//!   [`TRAILER_BYTES`]..=[`MAX_PACKET_BYTES`] bytes, and follow the fragment geometry of
//!   [`super::frame`]; its geometry must agree with the other fragments of its packet.
//!   Otherwise it is counted in `bad_frames` and dropped.
//! - Packets are keyed by (source node, packet id). A fragment whose index already
//!   arrived is a duplicate: counted in `duplicate_frames`, ignored.
//! - At most [`MAX_PARTIAL_PACKETS`] packets are in progress; a new one evicts the one
//!   that heard from its sender longest ago. A packet with no new fragment for
//!   [`REASSEMBLY_TIMEOUT`] is evicted too. Both count as `reassembly_timeouts`.
//! - A completed packet is queued (at most [`MAX_READY_PACKETS`], in completion order;
//!   when full the new packet is dropped and counted in `rx_queue_drops`) and its key is
//!   remembered for [`REASSEMBLY_TIMEOUT`] (at most [`RECENT_PACKETS`] keys): fragments of
//!   it arriving in that window are duplicates. So a packet is delivered at most once per
//!   window even when the network duplicates some or all of its frames; only a copy
//!   arriving later than that would be delivered again.
//! - A whole-frame packet taken without the time ([`Reassembler::take_whole`] with
//!   `None`) is remembered unstamped; the next call that brings the time stamps it with
//!   that (later) time. Its window can only grow that way, never shrink: duplicates stay
//!   caught, and memory stays bounded by [`RECENT_PACKETS`].

use std::collections::{HashSet, VecDeque};
use std::hash::{BuildHasherDefault, Hasher};
use std::time::{Duration, Instant};

use super::frame::{FrameHeader, FLAG_VERDICT, HEADER_BYTES};
use super::{LinkStats, MAX_PACKET_BYTES, TRAILER_BYTES};

pub const MAX_PARTIAL_PACKETS: usize = 32;
pub const MAX_READY_PACKETS: usize = 256;
pub const REASSEMBLY_TIMEOUT: Duration = Duration::from_millis(100);
pub const RECENT_PACKETS: usize = 1024;
/// Spare packet buffers kept for reuse.
const POOL_BUFFERS: usize = 16;

/// A whole packet, trailer included.
#[derive(Debug)]
pub struct Ready {
    pub src: u16,
    /// The frame flags of its fragments, or-ed together.
    pub flags: u8,
    pub bytes: Vec<u8>,
}

#[derive(Debug)]
struct Partial {
    src: u16,
    flags: u8,
    id: u32,
    total: usize,
    count: u16,
    chunk: usize,
    have: Vec<u64>,
    have_count: u16,
    buf: Vec<u8>,
    last: Instant,
}

/// The fragment size a frame implies, if its geometry is valid (see `frame`).
fn chunk_of(h: &FrameHeader, len: usize) -> Option<usize> {
    let (total, count, index, offset) =
        (h.total_len as usize, h.frag_count as usize, h.frag_index as usize, h.frag_offset as usize);
    let chunk = if count == 1 {
        (offset == 0 && len == total).then_some(total)?
    } else if index + 1 < count {
        (len > 0 && offset == index * len).then_some(len)?
    } else {
        let chunk = offset / (count - 1);
        (offset % (count - 1) == 0 && offset + len == total && len > 0 && len <= chunk).then_some(chunk)?
    };
    // The other fragments must fit as well: count - 1 full ones plus a non-empty last.
    (count == 1 || ((count - 1) * chunk < total && total <= count * chunk)).then_some(chunk)
}

/// The common frame on a memory medium ([`super::frame::whole_verdict`]) if it is for
/// `node` and of a packet's possible length: what [`Reassembler::take_whole`] returns for
/// it (with `memory`, such a packet is neither looked up nor remembered). `None` for
/// anything else, which then goes the general way and gets the same answer for every
/// frame this accepts.
#[inline]
fn whole_verdict(frame: &[u8], node: u16) -> Option<(u16, &[u8], u8)> {
    let (src, dst, flags, frag) = super::frame::whole_verdict(frame)?;
    (dst == node && (TRAILER_BYTES..=MAX_PACKET_BYTES).contains(&frag.len())).then_some((src, frag, flags))
}

/// Hashes (source node, packet id) keys with one multiply per field: SipHash would cost
/// more than the rest of a packet's bookkeeping, and the set is bounded
/// ([`RECENT_PACKETS`]), so even colliding keys cannot make it slow for long.
#[derive(Clone, Copy, Debug, Default)]
struct KeyHasher(u64);

impl KeyHasher {
    fn mix(&mut self, n: u64) {
        self.0 = (self.0.rotate_left(5) ^ n).wrapping_mul(0x517C_C1B7_2722_0A95);
    }
}

impl Hasher for KeyHasher {
    fn finish(&self) -> u64 {
        self.0
    }
    fn write(&mut self, bytes: &[u8]) {
        for &b in bytes {
            self.mix(b as u64);
        }
    }
    fn write_u16(&mut self, n: u16) {
        self.mix(n as u64);
    }
    fn write_u32(&mut self, n: u32) {
        self.mix(n as u64);
    }
}

type KeySet = HashSet<(u16, u32), BuildHasherDefault<KeyHasher>>;

#[derive(Debug)]
pub struct Reassembler {
    node: u16,
    partials: Vec<Partial>,
    ready: VecDeque<Ready>,
    recent: KeySet,
    /// Remembered keys, oldest first, with when they were remembered; the last
    /// `unstamped` have no time yet (see the module rules).
    recent_order: VecDeque<(u16, u32, Option<Instant>)>,
    unstamped: usize,
    pool: Vec<Vec<u8>>,
}

impl Reassembler {
    pub fn new(node: u16) -> Self {
        Reassembler {
            node,
            partials: Vec::new(),
            ready: VecDeque::new(),
            recent: KeySet::default(),
            recent_order: VecDeque::new(),
            unstamped: 0,
            pool: Vec::new(),
        }
    }

    /// Take one received frame.
    pub fn handle_frame(&mut self, frame: &[u8], now: Instant, stats: &mut LinkStats) {
        let Ok((h, frag)) = FrameHeader::parse(frame) else {
            stats.bad_frames += 1;
            return;
        };
        let total = h.total_len as usize;
        let chunk = chunk_of(&h, frag.len());
        if h.dst != self.node || !(TRAILER_BYTES..=MAX_PACKET_BYTES).contains(&total) || chunk.is_none() {
            stats.bad_frames += 1;
            return;
        }
        let chunk = chunk.unwrap_or(0);
        let key = (h.src, h.packet_id);
        let offset = h.frag_offset as usize;
        if let Some(i) = self.partials.iter().position(|p| (p.src, p.id) == key) {
            let p = &mut self.partials[i];
            if p.total != total || p.count != h.frag_count || p.chunk != chunk {
                stats.bad_frames += 1;
                return;
            }
            let (word, bit) = (h.frag_index as usize / 64, 1u64 << (h.frag_index % 64));
            if p.have[word] & bit != 0 {
                stats.duplicate_frames += 1;
                return;
            }
            p.have[word] |= bit;
            p.have_count += 1;
            p.flags |= h.flags;
            p.buf[offset..offset + frag.len()].copy_from_slice(frag);
            p.last = now;
            if p.have_count == p.count {
                let p = self.partials.swap_remove(i);
                self.finish(p.src, p.flags, p.id, p.buf, now, stats);
            }
            return;
        }
        self.expire_recent(now);
        if self.recent.contains(&key) {
            stats.duplicate_frames += 1;
            return;
        }
        let mut buf = self.pool.pop().unwrap_or_default();
        buf.clear();
        if h.frag_count == 1 {
            buf.extend_from_slice(frag);
            self.finish(h.src, h.flags, h.packet_id, buf, now, stats);
            return;
        }
        buf.resize(total, 0);
        buf[offset..offset + frag.len()].copy_from_slice(frag);
        let mut have = vec![0u64; (h.frag_count as usize).div_ceil(64)];
        have[h.frag_index as usize / 64] |= 1 << (h.frag_index % 64);
        if self.partials.len() >= MAX_PARTIAL_PACKETS {
            if let Some(oldest) = (0..self.partials.len()).min_by_key(|&i| self.partials[i].last) {
                let p = self.partials.swap_remove(oldest);
                self.recycle(p.buf);
                stats.reassembly_timeouts += 1;
            }
        }
        self.partials.push(Partial {
            src: h.src,
            flags: h.flags,
            id: h.packet_id,
            total,
            count: h.frag_count,
            chunk,
            have,
            have_count: 1,
            buf,
            last: now,
        });
    }

    /// A frame that is a whole packet by itself, delivered in place: if `frame` is a
    /// valid single-fragment packet for this node, not a duplicate, and no completed
    /// packet is queued before it, remember it as delivered and return its source and
    /// bytes (trailer included). Otherwise `None`, and the frame must go to
    /// [`handle_frame`](Self::handle_frame), which applies the same rules with copying
    /// (and counts what this leaves alone). Counts nothing itself.
    ///
    /// `now` may be `None` to spare the caller a clock read per frame: then nothing
    /// expires now and the packet is remembered unstamped (see the module rules).
    ///
    /// With `memory` (the backend is a memory medium), a [`FLAG_VERDICT`] packet is not
    /// remembered: its sender had no fault injector and the medium copies nothing twice,
    /// so no duplicate of it can come.
    #[inline]
    pub fn take_whole<'f>(
        &mut self,
        frame: &'f [u8],
        now: Option<Instant>,
        memory: bool,
    ) -> Option<(u16, &'f [u8], u8)> {
        if !self.ready.is_empty() {
            return None;
        }
        if memory {
            if let Some(whole) = whole_verdict(frame, self.node) {
                return Some(whole);
            }
        }
        let (h, frag) = FrameHeader::parse(frame).ok()?;
        let total = h.total_len as usize;
        if h.frag_count != 1
            || h.dst != self.node
            || !(TRAILER_BYTES..=MAX_PACKET_BYTES).contains(&total)
            || chunk_of(&h, frag.len()).is_none()
        {
            return None;
        }
        if memory && h.flags & FLAG_VERDICT != 0 {
            return Some((h.src, frag, h.flags));
        }
        let key = (h.src, h.packet_id);
        if self.partials.iter().any(|p| (p.src, p.id) == key) {
            return None;
        }
        if let Some(now) = now {
            self.expire_recent(now);
        }
        if self.recent.contains(&key) {
            return None;
        }
        self.remember(h.src, h.packet_id, now);
        Some((h.src, frag, h.flags))
    }

    /// Note a completed packet, so its late fragments count as duplicates.
    fn remember(&mut self, src: u16, id: u32, now: Option<Instant>) {
        if self.recent_order.len() >= RECENT_PACKETS {
            if let Some((s, i, _)) = self.recent_order.pop_front() {
                self.recent.remove(&(s, i));
            }
            self.unstamped = self.unstamped.min(self.recent_order.len());
        }
        if now.is_some() {
            self.stamp(now);
        } else {
            self.unstamped += 1;
        }
        self.recent.insert((src, id));
        self.recent_order.push_back((src, id, now));
    }

    /// Give the unstamped remembered keys the time `now` (later than when they came).
    fn stamp(&mut self, now: Option<Instant>) {
        let len = self.recent_order.len();
        for e in self.recent_order.range_mut(len - self.unstamped..) {
            e.2 = now;
        }
        self.unstamped = 0;
    }

    fn finish(&mut self, src: u16, flags: u8, id: u32, bytes: Vec<u8>, now: Instant, stats: &mut LinkStats) {
        self.remember(src, id, Some(now));
        if self.ready.len() >= MAX_READY_PACKETS {
            stats.rx_queue_drops += 1;
            self.recycle(bytes);
            return;
        }
        self.ready.push_back(Ready { src, flags, bytes });
    }

    fn expire_recent(&mut self, now: Instant) {
        self.stamp(Some(now));
        while let Some(&(s, i, Some(t))) = self.recent_order.front() {
            if now.saturating_duration_since(t) <= REASSEMBLY_TIMEOUT {
                break;
            }
            self.recent_order.pop_front();
            self.recent.remove(&(s, i));
        }
    }

    /// Evict packets that have waited too long for a fragment.
    pub fn handle_timeout(&mut self, now: Instant, stats: &mut LinkStats) {
        let mut i = 0;
        while i < self.partials.len() {
            if now.saturating_duration_since(self.partials[i].last) > REASSEMBLY_TIMEOUT {
                let p = self.partials.swap_remove(i);
                self.recycle(p.buf);
                stats.reassembly_timeouts += 1;
            } else {
                i += 1;
            }
        }
        self.expire_recent(now);
    }

    /// Whether a partial packet is waiting for fragments (then [`Self::deadline`] is
    /// `Some`).
    pub fn has_partials(&self) -> bool {
        !self.partials.is_empty()
    }

    /// When [`handle_timeout`](Self::handle_timeout) next has work, if ever.
    pub fn deadline(&self) -> Option<Instant> {
        self.partials.iter().map(|p| p.last + REASSEMBLY_TIMEOUT).min()
    }

    /// The next completed packet.
    pub fn pop(&mut self) -> Option<Ready> {
        self.ready.pop_front()
    }

    pub fn has_ready(&self) -> bool {
        !self.ready.is_empty()
    }

    pub fn partial_packets(&self) -> usize {
        self.partials.len()
    }

    /// Give a packet buffer back for reuse.
    pub fn recycle(&mut self, buf: Vec<u8>) {
        if self.pool.len() < POOL_BUFFERS && buf.capacity() <= MAX_PACKET_BYTES {
            self.pool.push(buf);
        }
    }
}

/// Bytes of fragment payload a frame of `max_frame` bytes carries.
pub fn chunk_bytes(max_frame: usize) -> usize {
    max_frame.saturating_sub(HEADER_BYTES)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn frame(src: u16, id: u32, index: u16, count: u16, total: u32, offset: u32, data: &[u8]) -> Vec<u8> {
        let h = FrameHeader {
            flags: 0,
            src,
            dst: 9,
            packet_id: id,
            frag_index: index,
            frag_count: count,
            total_len: total,
            frag_offset: offset,
        };
        let mut f = vec![0; HEADER_BYTES];
        h.emit(&mut f);
        f.extend_from_slice(data);
        f
    }

    /// Frames of a `total`-byte packet in chunks of `chunk`.
    fn frames(src: u16, id: u32, total: usize, chunk: usize) -> Vec<Vec<u8>> {
        let data: Vec<u8> = (0..total).map(|i| (i * 7 + id as usize) as u8).collect();
        let count = total.div_ceil(chunk);
        (0..count)
            .map(|i| {
                let end = ((i + 1) * chunk).min(total);
                frame(src, id, i as u16, count as u16, total as u32, (i * chunk) as u32, &data[i * chunk..end])
            })
            .collect()
    }

    #[test]
    fn out_of_order_and_duplicates() {
        let mut r = Reassembler::new(9);
        let mut s = LinkStats::default();
        let t = Instant::now();
        let f = frames(1, 5, 1000, 300);
        for i in [3, 1, 1, 0] {
            r.handle_frame(&f[i], t, &mut s);
        }
        assert!(!r.has_ready());
        r.handle_frame(&f[2], t, &mut s);
        let p = r.pop().unwrap();
        assert_eq!((p.src, p.bytes.len()), (1, 1000));
        assert_eq!(p.bytes, (0..1000).map(|i| (i * 7 + 5) as u8).collect::<Vec<_>>());
        // Late duplicates of a completed packet are ignored, all of them.
        for f in &f {
            r.handle_frame(f, t, &mut s);
        }
        assert!(!r.has_ready());
        assert_eq!(s.duplicate_frames, 5);
        assert_eq!(r.partial_packets(), 0);
        // ... until the window has passed.
        r.handle_timeout(t + REASSEMBLY_TIMEOUT * 2, &mut s);
        for f in &f {
            r.handle_frame(f, t + REASSEMBLY_TIMEOUT * 2, &mut s);
        }
        assert!(r.pop().is_some());
        assert_eq!((s.bad_frames, s.reassembly_timeouts), (0, 0));
    }

    #[test]
    fn geometry_and_address_checks() {
        let mut r = Reassembler::new(9);
        let mut s = LinkStats::default();
        let t = Instant::now();
        let good = frames(1, 1, 1000, 300);
        let bad = [
            frame(1, 2, 0, 2, 1000, 0, &[0; 299]),                      // 2 x 299 < 1000
            frame(1, 2, 1, 4, 1000, 299, &[0; 300]),                    // offset != index * len
            frame(1, 2, 3, 4, 1000, 900, &[0; 99]),                     // does not end at total
            frame(1, 2, 0, 1, 10, 0, &[0; 9]),                          // single fragment short
            frame(1, 2, 0, 1, 3, 0, &[0; 3]),                           // shorter than a trailer
            frame(1, 2, 0, 2, MAX_PACKET_BYTES as u32 + 2, 0, &[0; 1]), // too large
            vec![0; 30],                                                // no magic
        ];
        for f in &bad {
            r.handle_frame(f, t, &mut s);
        }
        let mut other = good[0].clone();
        other[6] = 8; // dst 8
        r.handle_frame(&other, t, &mut s);
        assert_eq!(s.bad_frames, bad.len() as u64 + 1);
        // A fragment disagreeing with its packet's geometry.
        r.handle_frame(&good[0], t, &mut s);
        r.handle_frame(&frame(1, 1, 1, 5, 1000, 250, &[0; 250]), t, &mut s);
        assert_eq!(s.bad_frames, bad.len() as u64 + 2);
        assert_eq!(r.partial_packets(), 1);
    }

    #[test]
    fn bounded_partials_and_timeouts() {
        let mut r = Reassembler::new(9);
        let mut s = LinkStats::default();
        let t = Instant::now();
        for id in 0..(MAX_PARTIAL_PACKETS as u32 + 3) {
            let f = frames(2, id, 100, 40);
            r.handle_frame(&f[0], t + Duration::from_micros(id as u64), &mut s);
        }
        assert_eq!(r.partial_packets(), MAX_PARTIAL_PACKETS);
        assert_eq!(s.reassembly_timeouts, 3);
        // The oldest (ids 0..3) went; id 3 can still complete.
        for f in &frames(2, 3, 100, 40)[1..] {
            r.handle_frame(f, t, &mut s);
        }
        assert_eq!(r.pop().map(|p| p.bytes.len()), Some(100));
        let d = r.deadline().unwrap();
        assert!(r.has_partials());
        r.handle_timeout(d - Duration::from_micros(1), &mut s);
        assert_eq!(s.reassembly_timeouts, 3);
        r.handle_timeout(t + REASSEMBLY_TIMEOUT + Duration::from_millis(1), &mut s);
        assert_eq!(r.partial_packets(), 0);
        assert_eq!(s.reassembly_timeouts, 3 + MAX_PARTIAL_PACKETS as u64 - 1);
        assert!(r.deadline().is_none() && !r.has_partials());
    }

    #[test]
    fn ready_queue_bounded() {
        let mut r = Reassembler::new(9);
        let mut s = LinkStats::default();
        let t = Instant::now();
        for id in 0..(MAX_READY_PACKETS as u32 + 5) {
            r.handle_frame(&frames(3, id, 8, 8)[0], t, &mut s);
        }
        assert_eq!(s.rx_queue_drops, 5);
        let mut n = 0;
        while let Some(p) = r.pop() {
            r.recycle(p.bytes);
            n += 1;
        }
        assert_eq!(n, MAX_READY_PACKETS);
    }

    #[test]
    fn untimed_whole_frames_stay_duplicates_until_stamped_and_expired() {
        let mut r = Reassembler::new(9);
        let mut s = LinkStats::default();
        let t = Instant::now();
        let a = frames(1, 7, 100, 100).remove(0);
        let b = frames(1, 8, 100, 100).remove(0);
        assert_eq!(r.take_whole(&a, None, false).map(|(src, p, _)| (src, p.len())), Some((1, 100)));
        assert!(r.take_whole(&a, None, false).is_none());
        // Long after it arrived, but the time was never read: still a duplicate.
        let late = t + REASSEMBLY_TIMEOUT * 5;
        r.handle_frame(&a, late, &mut s);
        assert_eq!(s.duplicate_frames, 1);
        assert!(!r.has_ready());
        // That read stamped it with `late`: its window runs from there.
        assert!(r.take_whole(&b, Some(late), false).is_some());
        r.handle_timeout(late + REASSEMBLY_TIMEOUT, &mut s);
        assert!(r.take_whole(&a, Some(late + REASSEMBLY_TIMEOUT), false).is_none());
        // Both expire once the window from the stamp has passed.
        let later = late + REASSEMBLY_TIMEOUT * 2;
        assert!(r.take_whole(&a, Some(later), false).is_some());
        assert!(r.take_whole(&b, Some(later), false).is_some());
        // Untimed keys still count against the bound, and eviction keeps the stamp count
        // in range.
        for id in 100..(100 + RECENT_PACKETS as u32 + 10) {
            assert!(r.take_whole(&frames(2, id, 8, 8)[0], None, false).is_some());
        }
        r.handle_timeout(later, &mut s);
        assert!(r.take_whole(&frames(2, 100 + RECENT_PACKETS as u32 + 9, 8, 8)[0], None, false).is_none());
        assert!(r.take_whole(&frames(2, 100, 8, 8)[0], None, false).is_some()); // evicted by count
    }

    #[test]
    fn verdict_packets_over_memory_are_not_tracked_as_possible_duplicates() {
        let mut r = Reassembler::new(9);
        let mut v = frames(1, 7, 100, 100).remove(0);
        v[3] = FLAG_VERDICT; // the flags byte
                             // Over a memory medium: delivered each time, nothing remembered.
        assert!(r.take_whole(&v, None, true).is_some());
        assert!(r.take_whole(&v, None, true).is_some());
        assert!(r.recent.is_empty());
        // The same frame from another medium, and a CRC frame over memory, are tracked.
        assert!(r.take_whole(&v, None, false).is_some());
        assert!(r.take_whole(&v, None, false).is_none());
        let c = frames(1, 8, 100, 100).remove(0);
        assert!(r.take_whole(&c, None, true).is_some());
        assert!(r.take_whole(&c, None, true).is_none());
    }

    #[test]
    fn chunk_sizes() {
        assert_eq!(chunk_bytes(65536), 65512);
        assert_eq!(chunk_bytes(3), 0);
    }
}
