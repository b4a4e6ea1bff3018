// SPDX-License-Identifier: GPL-2.0-only
//! The link: carries whole Trapeze packets between NICs over a backend (in-process
//! switch, UDP, raw Ethernet), the way Myrinet's link hardware carried them.
//!
//! [`Link::send_packet`] takes a packet (Trapeze header + control message + payload, as
//! the firmware's link-out pulses assembled it), appends the CRC-32 trailer
//! (`iface::wire::crc32`; inverted when the sender aborts the packet), splits it into
//! link frames no larger than the backend allows, and sends them to the packet's
//! destination node. [`Link::poll_packet`] reassembles frames into packets and checks
//! the trailer: the receiver sees each packet once, whole, with `crc_ok`. Over a memory
//! medium (the in-process switch) with no faults configured, a one-frame packet carries a
//! verdict instead of a CRC ([`frame::FLAG_VERDICT`]; nothing between the two buffers can
//! damage it, as Linux's loopback skips checksums). A seeded
//! [`faults::FaultInjector`] can drop, duplicate, reorder or corrupt frames on the way.
//!
//! Frame format (little-endian), defined in [`frame`]:
//! ```text
//! +0 magic u16 0x7A4C | version u8 | flags u8
//! +4 src node u16 | dst node u16
//! +8 packet id u32 (per sender)
//! +12 fragment index u16 | fragment count u16
//! +16 total packet length u32 (including the 4-byte trailer)
//! +20 fragment offset u32
//! +24 fragment bytes...
//! ```
//!
//! Delivery rules (details in `reassembly.rs` and `faults.rs`):
//! - A packet is delivered at most once, whole, with `crc_ok` computed over all of it;
//!   duplicated frames (even every frame of a packet) do not make a second copy unless
//!   they arrive more than [`REASSEMBLY_TIMEOUT`] after the first copy completed.
//! - A packet missing a fragment for [`REASSEMBLY_TIMEOUT`] is dropped and counted.
//! - The frame header is not covered by the CRC (the trailer belongs to the Trapeze
//!   packet). A corrupted header makes a frame unparsable, misaddressed or inconsistent
//!   with its packet (dropped, counted), or puts its bytes into another packet, whose CRC
//!   then fails; the packet bytes delivered with `crc_ok` are always the ones sent.
//!
//! Call order: `send_packet` any time; wait for [`Link::readable_fd`] (or until
//! [`Link::poll_deadline`]), then call [`Link::poll_packet`] until it returns `None`.
//! `poll_packet` runs the link's timers (reassembly timeouts, a reordered frame held by
//! the fault injector, frames due off the wire-delay line); [`Link::poll_timers`] runs
//! them alone. `send_packet` never looks
//! at the clock's timers, so a seeded fault run is reproducible.
//!
//! ```
//! use trapeze_vnic::link::{backend::InProcSwitch, FaultConfig, Link};
//! let switch = InProcSwitch::new();
//! let mut a = Link::new(1, Box::new(switch.port(1)), FaultConfig::NONE);
//! let mut b = Link::new(2, Box::new(switch.port(2)), FaultConfig::NONE);
//! let mut packet = [0u8; 40];
//! packet[6..8].copy_from_slice(&2u16.to_le_bytes()); // Trapeze header: dst node 2
//! a.send_packet(&packet, false).unwrap();
//! let mut out = [0u8; 128];
//! let rx = b.poll_packet(&mut out).unwrap();
//! assert_eq!((rx.len, rx.src, rx.crc_ok), (40, 1, true));
//! assert_eq!(&out[..40], &packet[..]);
//! ```

pub mod backend;
pub mod faults;
pub mod frame;
mod reassembly;

pub use backend::{BackendSpec, LinkBackend, SpecError};
pub use faults::{FaultConfig, FaultInjector};
pub use reassembly::{MAX_PARTIAL_PACKETS, MAX_READY_PACKETS, REASSEMBLY_TIMEOUT};

use std::fmt;
use std::io;
use std::os::fd::BorrowedFd;
use std::time::Instant;

use frame::FrameHeader;
use reassembly::Reassembler;
use trapeze_firmware::iface::wire;

/// Bytes of the CRC-32 trailer the link appends to every packet.
pub const TRAILER_BYTES: usize = 4;
/// Largest packet (trailer included) the link carries: a maximal Trapeze packet
/// (32-byte header, 128-byte control message, 64 KiB payload) fits with room to spare.
pub const MAX_PACKET_BYTES: usize = 256 * 1024;
/// Bytes at the start of a packet that must be present to route it (the Trapeze header;
/// the destination node is the u16 at bytes 6..8).
pub const ROUTE_HEADER_BYTES: usize = 32;
/// Frames taken from the backend per `poll_packet` call at most, so a flood of bad
/// frames cannot keep the caller inside the link.
const RX_FRAMES_PER_POLL: usize = 1024;

/// Counters kept by a link endpoint.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, serde::Serialize)]
pub struct LinkStats {
    pub packets_sent: u64,
    pub frames_sent: u64,
    pub packets_received: u64,
    pub frames_received: u64,
    /// Packets whose trailer did not check (corrupted or aborted).
    pub crc_errors: u64,
    /// Frames that could not be parsed, were for another node, or did not fit their
    /// packet (size limit, fragment geometry).
    pub bad_frames: u64,
    /// Frames ignored because their fragment (or whole packet) had already arrived.
    pub duplicate_frames: u64,
    /// Partially received packets abandoned (a fragment never came).
    pub reassembly_timeouts: u64,
    /// Packets to a node the backend has no route to.
    pub unroutable: u64,
    /// Send errors reported by the backend.
    pub send_errors: u64,
    /// Receive errors reported by the backend.
    pub recv_errors: u64,
    /// Completed packets dropped because [`MAX_READY_PACKETS`] were waiting.
    pub rx_queue_drops: u64,
    /// Packets cut short because the caller's buffer was too small.
    pub rx_truncated: u64,
    /// Injected faults.
    pub injected_drops: u64,
    pub injected_duplicates: u64,
    pub injected_reorders: u64,
    pub injected_corruptions: u64,
    /// Frames dropped because the wire-delay line already held
    /// [`faults::DELAY_LINE_FRAMES`] (a sender outrunning its modelled wire).
    pub delay_line_drops: u64,
}

/// A packet delivered by [`Link::poll_packet`]. If the caller's buffer was too small,
/// `len` is the buffer's length (the bytes copied) and `crc_ok` is false.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct RxPacket {
    /// Bytes of the packet without the trailer.
    pub len: usize,
    pub src: u16,
    pub crc_ok: bool,
}

/// One NIC's end of the link: fragments, faults and sends packets; receives and
/// reassembles them. See the module doc for the rules and the call order.
pub struct Link {
    node: u16,
    backend: Box<dyn LinkBackend>,
    faults: FaultInjector,
    stats: LinkStats,
    next_packet_id: u32,
    tx_frame: Vec<u8>,
    rx_frame: Vec<u8>,
    rx: Reassembler,
    /// The last packet lent straight from the backend's kept frame: (offset in that
    /// frame, length without trailer). Cleared by every receiving call.
    held: Option<(usize, usize)>,
    /// The backend's [`keeps_last_frame`](LinkBackend::keeps_last_frame) and
    /// [`is_memory_medium`](LinkBackend::is_memory_medium): properties of its medium,
    /// asked once here rather than through the trait object on every receive and send.
    keeps_last_frame: bool,
    memory_medium: bool,
}

impl fmt::Debug for Link {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Link")
            .field("node", &self.node)
            .field("backend", &self.backend.describe())
            .field("faults", self.faults.config())
            .field("stats", &self.stats)
            .finish_non_exhaustive()
    }
}

/// A starting packet id that differs between runs, so a restarted sender's packets are
/// not mistaken for duplicates of its previous life's (ids are only compared, never
/// interpreted, so this does not affect determinism of anything else).
fn initial_packet_id(node: u16) -> u32 {
    let t = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map_or(0, |d| d.as_nanos() as u64);
    let x = (t ^ (std::process::id() as u64) << 32 ^ node as u64).wrapping_mul(0x9E37_79B9_7F4A_7C15);
    (x >> 32) as u32
}

impl Link {
    /// A link endpoint for node `node` over `backend`, injecting `faults` on send.
    pub fn new(node: u16, backend: Box<dyn LinkBackend>, faults: FaultConfig) -> Link {
        let max_frame = backend.max_frame_bytes();
        let (keeps_last_frame, memory_medium) = (backend.keeps_last_frame(), backend.is_memory_medium());
        Link {
            node,
            tx_frame: vec![0; max_frame.max(frame::HEADER_BYTES)],
            // Slack so an oversized frame is seen as such (and rejected), not cut to fit.
            rx_frame: vec![0; max_frame + 64],
            backend,
            faults: FaultInjector::new(faults),
            stats: LinkStats::default(),
            next_packet_id: initial_packet_id(node),
            rx: Reassembler::new(node),
            held: None,
            keeps_last_frame,
            memory_medium,
        }
    }

    pub fn node(&self) -> u16 {
        self.node
    }

    pub fn stats(&self) -> LinkStats {
        self.stats
    }

    /// Packets with some but not all fragments received.
    pub fn partial_packets(&self) -> usize {
        self.rx.partial_packets()
    }

    /// The backend, e.g. for its description.
    pub fn backend(&self) -> &dyn LinkBackend {
        &*self.backend
    }

    /// Polls readable when frames may have arrived (see [`LinkBackend::readable_fd`]).
    /// About to sleep on [`Self::readable_fd`]: `false` if packets or frames are already
    /// waiting (then do not sleep). Pair with [`Self::end_wait`].
    pub fn prepare_wait(&self) -> bool {
        !self.rx.has_ready() && self.backend.prepare_wait()
    }

    pub fn end_wait(&self) {
        self.backend.end_wait()
    }

    pub fn readable_fd(&self) -> Option<BorrowedFd<'_>> {
        self.backend.readable_fd()
    }

    /// When the link's timers next need running (a held reordered frame, a frame due off
    /// the wire-delay line, a packet waiting for fragments), if ever: wake by then and
    /// call [`poll_packet`] or [`poll_timers`](Self::poll_timers).
    ///
    /// [`poll_packet`]: Self::poll_packet
    pub fn poll_deadline(&self) -> Option<Instant> {
        match (self.faults.deadline(), self.rx.deadline()) {
            (Some(a), Some(b)) => Some(a.min(b)),
            (a, b) => a.or(b),
        }
    }

    /// Whether [`Self::poll_deadline`] is `Some`, without working out when (a check on
    /// every poll).
    pub fn has_timers(&self) -> bool {
        self.faults.holding() || self.rx.has_partials()
    }

    /// The packet the last [`poll_packet_held_with`](Self::poll_packet_held_with) lent
    /// with `held` set, while it is still readable (until the next receiving call).
    pub fn held_packet(&self) -> Option<&[u8]> {
        let (start, len) = self.held?;
        self.backend.last_frame()?.get(start..start + len)
    }

    /// Whether [`poll_packet`](Self::poll_packet) could return a packet or run a timer
    /// now: a packet is reassembled and waiting, a timer is pending, or the backend may
    /// hold frames. `false` only when a poll would surely find nothing.
    pub fn rx_pending(&self) -> bool {
        self.rx.has_ready() || self.has_timers() || self.backend.frames_waiting()
    }

    /// Run the timers: send a reordered frame held too long and the frames due off the
    /// delay line, drop packets whose fragments stopped coming. Returns a backend send
    /// error, if one happened (a delayed frame's send error surfaces here, not from the
    /// `send_packet` that queued it; either way it is counted in `send_errors`).
    #[inline]
    pub fn poll_timers(&mut self) -> io::Result<()> {
        // Called on every engine poll: the check is inlined, the rare work is not.
        if !self.has_timers() {
            return Ok(());
        }
        self.run_timers()
    }

    #[inline(never)]
    fn run_timers(&mut self) -> io::Result<()> {
        let now = Instant::now();
        self.rx.handle_timeout(now, &mut self.stats);
        self.faults.release_due(&mut *self.backend, now, &mut self.stats)
    }

    /// Send any frame the fault injector is holding back, now.
    pub fn flush(&mut self) -> io::Result<()> {
        self.faults.flush(&mut *self.backend, &mut self.stats)
    }

    /// Send one packet (Trapeze header + control message + payload) to the node in its
    /// header, with the CRC-32 trailer appended (inverted if `abort`, so the receiver
    /// sees a bad CRC). A packet shorter than the header or for a node the backend cannot
    /// reach is counted as `unroutable` and dropped (`Ok`). A packet longer than
    /// [`MAX_PACKET_BYTES`] − 4 is an `InvalidInput` error. Backend errors are counted
    /// (`send_errors`) and the first is returned; the packet is then lost. (With a wire
    /// delay the backend sees the frames later, from the link's timers, which report
    /// their errors.)
    pub fn send_packet(&mut self, packet: &[u8], abort: bool) -> io::Result<()> {
        self.send_packet_from(packet.len(), abort, &mut |off, buf| {
            buf.copy_from_slice(&packet[off..off + buf.len()]);
            true
        })
    }

    /// [`send_packet`](Self::send_packet) for a packet of `len` bytes that `read(offset,
    /// buf)` copies out of wherever it is (a NIC's send staging), straight into each
    /// frame: with no faults configured and a backend that queues its own buffers, each
    /// byte is copied once (and checksummed while hot, where the link carries a CRC).
    /// `read` is asked for the first 12 bytes (the route) and then for every byte exactly
    /// once, in order; if it returns `false` the packet goes out aborted.
    pub fn send_packet_from(
        &mut self,
        len: usize,
        abort: bool,
        read: &mut dyn FnMut(usize, &mut [u8]) -> bool,
    ) -> io::Result<()> {
        if len < ROUTE_HEADER_BYTES {
            self.stats.unroutable += 1;
            return Ok(());
        }
        let mut route = [0u8; 12];
        let mut ok = read(0, &mut route);
        let dst = u16::from_le_bytes([route[6], route[7]]);
        // Where the payload starts (after the header and the control message, padded to
        // 4 bytes): the first frame asks its backend to put it on a cache line. Only a
        // placement hint, so a malformed length does no harm.
        let ctrl_len = u16::from_le_bytes([route[8], route[9]]) as u32;
        let payload_at = (wire::HEADER_BYTES + wire::ctrl_wire_bytes(ctrl_len)) as usize;
        if !self.backend.routes_to(dst) {
            self.stats.unroutable += 1;
            return Ok(());
        }
        let total = len + TRAILER_BYTES;
        let chunk = reassembly::chunk_bytes(self.tx_frame.len());
        if total <= chunk && self.memory_medium && self.faults.is_passthrough() {
            // The common case: one frame, a verdict, straight to the backend.
            return self.send_verdict_frame(dst, len, abort, ok, payload_at, read);
        }
        let count = if chunk == 0 { usize::MAX } else { total.div_ceil(chunk) };
        if total > MAX_PACKET_BYTES || count > u16::MAX as usize {
            return Err(io::Error::new(
                io::ErrorKind::InvalidInput,
                format!(
                    "packet of {} bytes too large for the link (max {} bytes, frames of {})",
                    len,
                    MAX_PACKET_BYTES - TRAILER_BYTES,
                    self.tx_frame.len()
                ),
            ));
        }
        let id = self.next_packet_id;
        self.next_packet_id = id.wrapping_add(1);
        // One frame through process memory and no faults (a wire delay is not one): a
        // verdict, not a CRC (see `LinkBackend::is_memory_medium`).
        let verdict = count == 1 && self.faults.faultless() && self.memory_medium;
        // A verdict frame carries no CRC: no hasher (making one detects CPU features).
        let mut hasher = (!verdict).then(crc32fast::Hasher::new);
        let mut trailer: Option<[u8; TRAILER_BYTES]> = None;
        let mut now = None;
        let mut result = Ok(());
        for index in 0..count {
            let start = index * chunk;
            let end = (start + chunk).min(total);
            let header = FrameHeader {
                flags: if verdict { frame::FLAG_VERDICT } else { 0 },
                src: self.node,
                dst,
                packet_id: id,
                frag_index: index as u16,
                frag_count: count as u16,
                total_len: total as u32,
                frag_offset: start as u32,
            };
            // Bytes start..end of (packet ++ trailer): a part of each, either possibly
            // empty. The trailer is known once every packet byte went through the hasher,
            // which happens before it is needed (fragments are filled in order).
            let mut fill = |f: &mut [u8]| {
                header.emit(f);
                let body = &mut f[frame::HEADER_BYTES..];
                let (p_start, p_end) = (start.min(len), end.min(len));
                let data = &mut body[..p_end - p_start];
                if !data.is_empty() {
                    ok &= read(p_start, data);
                    if let Some(h) = hasher.as_mut() {
                        h.update(data);
                    }
                }
                if end > len {
                    let t = *trailer.get_or_insert_with(|| {
                        if verdict {
                            return verdict_trailer(abort || !ok);
                        }
                        let crc = hasher.clone().map_or(0, crc32fast::Hasher::finalize);
                        if abort || !ok { !crc } else { crc }.to_le_bytes()
                    });
                    body[p_end - p_start..].copy_from_slice(&t[start.max(len) - len..end - len]);
                }
            };
            let n = frame::HEADER_BYTES + end - start;
            // The payload starts in the first fragment; later ones are all payload.
            let align_at = frame::HEADER_BYTES + if index == 0 { payload_at } else { 0 };
            let r = if self.faults.is_passthrough() {
                let r = self.backend.send_frame_with(dst, n, align_at, &mut self.tx_frame, &mut fill);
                match r {
                    Ok(()) => self.stats.frames_sent += 1,
                    Err(_) => self.stats.send_errors += 1,
                }
                r
            } else if self.faults.delay_with(dst, n, *now.get_or_insert_with(Instant::now), &mut self.stats, &mut fill)
            {
                Ok(())
            } else {
                fill(&mut self.tx_frame[..n]);
                let t = *now.get_or_insert_with(Instant::now);
                self.faults.transmit(&mut *self.backend, dst, &mut self.tx_frame[..n], t, &mut self.stats)
            };
            if r.is_err() && result.is_ok() {
                result = r;
            }
        }
        if result.is_ok() {
            self.stats.packets_sent += 1;
        }
        result
    }

    /// [`send_packet_from`](Self::send_packet_from) for a packet that fits one frame, over
    /// a memory medium with frames passing untouched (no faults, no delay, none held):
    /// what the general loop does for that case (a [`frame::FLAG_VERDICT`] frame, counted
    /// the same), without its per-fragment bookkeeping. `ok`: the route peek's result.
    #[inline]
    fn send_verdict_frame(
        &mut self,
        dst: u16,
        len: usize,
        abort: bool,
        mut ok: bool,
        payload_at: usize,
        read: &mut dyn FnMut(usize, &mut [u8]) -> bool,
    ) -> io::Result<()> {
        let id = self.next_packet_id;
        self.next_packet_id = id.wrapping_add(1);
        let mut header = [0u8; frame::HEADER_BYTES];
        FrameHeader {
            flags: frame::FLAG_VERDICT,
            src: self.node,
            dst,
            packet_id: id,
            frag_index: 0,
            frag_count: 1,
            total_len: (len + TRAILER_BYTES) as u32,
            frag_offset: 0,
        }
        .emit(&mut header);
        let mut fill = |f: &mut [u8]| {
            let (h, body) = f.split_at_mut(frame::HEADER_BYTES);
            h.copy_from_slice(&header);
            let (data, trailer) = body.split_at_mut(len);
            ok &= read(0, data);
            trailer.copy_from_slice(&verdict_trailer(abort || !ok));
        };
        let n = frame::HEADER_BYTES + len + TRAILER_BYTES;
        let r = self.backend.send_frame_with(dst, n, frame::HEADER_BYTES + payload_at, &mut self.tx_frame, &mut fill);
        match r {
            Ok(()) => {
                self.stats.frames_sent += 1;
                self.stats.packets_sent += 1;
            }
            Err(_) => self.stats.send_errors += 1,
        }
        r
    }

    /// Take frames that have arrived (without blocking) and return the next complete
    /// packet, copied into `out` without its trailer, or `None` if no packet is complete.
    /// If `out` is shorter than the packet, the first `out.len()` bytes are delivered
    /// with `len == out.len()` and `crc_ok == false` (counted in `rx_truncated`).
    /// Packets come out in the order they completed.
    pub fn poll_packet(&mut self, out: &mut [u8]) -> Option<RxPacket> {
        let (rx, truncated) = self.poll_packet_with(|body, src, crc_ok| {
            if out.len() >= body.len() {
                out[..body.len()].copy_from_slice(body);
                (RxPacket { len: body.len(), src, crc_ok }, false)
            } else {
                let n = out.len();
                out.copy_from_slice(&body[..n]);
                (RxPacket { len: n, src, crc_ok: false }, true)
            }
        })?;
        if truncated {
            self.stats.rx_truncated += 1;
        }
        Some(rx)
    }

    /// [`poll_packet`](Self::poll_packet), lending the next complete packet (without its
    /// trailer) to `take` with its source node and whether its CRC checked, and returning
    /// what `take` returns. A packet that is one frame is lent straight from the
    /// backend's buffer when the backend lends frames (no copy in the link).
    pub fn poll_packet_with<R>(&mut self, take: impl FnOnce(&[u8], u16, bool) -> R) -> Option<R> {
        self.poll_packet_held_with(|body, src, crc_ok, _held| take(body, src, crc_ok))
    }

    /// [`poll_packet_with`](Self::poll_packet_with), telling `take` also whether the
    /// packet's bytes stay readable, unchanged, through [`held_packet`](Self::held_packet)
    /// until the next call that receives (this one, [`poll_packet`](Self::poll_packet)):
    /// then a receiver may leave them where they are instead of copying them out now.
    pub fn poll_packet_held_with<R>(&mut self, take: impl FnOnce(&[u8], u16, bool, bool) -> R) -> Option<R> {
        self.held = None;
        if self.has_timers() {
            // A send error here is counted; the receive path has nothing to add to it.
            let _ = self.poll_timers();
        }
        let mut take = Some(take);
        let mut out = None;
        let mut now = None;
        let mut budget = RX_FRAMES_PER_POLL;
        let (keeps, memory) = (self.keeps_last_frame, self.memory_medium);
        let mut held = None;
        while !self.rx.has_ready() && out.is_none() && budget > 0 {
            budget -= 1;
            let (rx, stats) = (&mut self.rx, &mut self.stats);
            let r = self.backend.recv_frame_with(&mut self.rx_frame, &mut |frame| {
                stats.frames_received += 1;
                // A whole-frame packet needs no time: its key is stamped at the next
                // clock read, at the latest every STAMP_FRAMES frames (so its
                // duplicate window can only grow; see `reassembly`).
                let t = (stats.frames_received % STAMP_FRAMES == 0).then(|| *now.get_or_insert_with(Instant::now));
                match rx.take_whole(frame, t, memory) {
                    Some((src, bytes, flags)) => {
                        let verdict = (flags & frame::FLAG_VERDICT != 0).then_some(memory);
                        let (body, crc_ok) = check_trailer(bytes, verdict, stats);
                        if keeps {
                            // Where the body lies in the frame the backend keeps.
                            held = Some((body.as_ptr() as usize - frame.as_ptr() as usize, body.len()));
                        }
                        out = take.take().map(|f| f(body, src, crc_ok, keeps));
                    }
                    None => {
                        let t = *now.get_or_insert_with(Instant::now);
                        rx.handle_frame(frame, t, stats)
                    }
                }
            });
            match r {
                Ok(true) => {}
                Ok(false) => break,
                Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
                Err(_) => {
                    self.stats.recv_errors += 1;
                    break;
                }
            }
        }
        if out.is_some() {
            self.held = held;
            return out;
        }
        let take = take.take()?;
        let ready = self.rx.pop()?;
        let (body, crc_ok) = check_trailer(&ready.bytes, None, &mut self.stats);
        let r = take(body, ready.src, crc_ok, false);
        self.rx.recycle(ready.bytes);
        Some(r)
    }
}

/// Received frames between clock reads while whole-frame packets arrive (each read
/// stamps and expires the duplicate keys remembered since the last).
const STAMP_FRAMES: u64 = 64;

/// The trailer of a [`frame::FLAG_VERDICT`] packet: [`frame::VERDICT_GOOD`], or its
/// complement for a packet going out aborted (`bad`).
#[inline]
fn verdict_trailer(bad: bool) -> [u8; TRAILER_BYTES] {
    let good = u32::from_le_bytes(frame::VERDICT_GOOD);
    if bad { !good } else { good }.to_le_bytes()
}

/// Split a whole packet into body and trailer, check the trailer and count the packet.
/// `verdict`: `None` for a CRC trailer; for a [`frame::FLAG_VERDICT`] packet, whether it
/// came over a memory medium (only there is a verdict believed).
#[inline]
fn check_trailer<'p>(bytes: &'p [u8], verdict: Option<bool>, stats: &mut LinkStats) -> (&'p [u8], bool) {
    let len = bytes.len() - TRAILER_BYTES;
    let (body, trailer) = bytes.split_at(len);
    let crc_ok = match verdict {
        None => crc32fast::hash(body).to_le_bytes() == trailer,
        Some(memory) => memory && trailer == frame::VERDICT_GOOD,
    };
    stats.packets_received += 1;
    if !crc_ok {
        stats.crc_errors += 1;
    }
    (body, crc_ok)
}

#[cfg(test)]
mod tests {
    use super::backend::{InProcSwitch, UdpBackend};
    use super::*;

    fn packet(len: usize) -> Vec<u8> {
        let mut p: Vec<u8> = (0..len).map(|i| (i * 13 + 1) as u8).collect();
        p[6..8].copy_from_slice(&2u16.to_le_bytes());
        p
    }

    #[test]
    fn send_from_asks_for_each_byte_once_in_order() {
        let sw = InProcSwitch::new();
        let mut a = Link::new(1, Box::new(sw.port(1)), FaultConfig::NONE);
        let mut b = Link::new(2, Box::new(sw.port(2)), FaultConfig::NONE);
        let p = packet(70_000); // two frames on the in-process switch
        let mut asked = Vec::new();
        a.send_packet_from(p.len(), false, &mut |off, buf| {
            asked.push((off, buf.len()));
            buf.copy_from_slice(&p[off..off + buf.len()]);
            true
        })
        .unwrap();
        // The route peek (destination and control-message length), then every byte
        // once, in order.
        assert_eq!(asked[0], (0, 12));
        let mut next = 0;
        for &(off, len) in &asked[1..] {
            assert_eq!(off, next);
            next += len;
        }
        assert_eq!(next, p.len());
        let mut out = vec![0u8; 80_000];
        let rx = b.poll_packet(&mut out).unwrap();
        assert_eq!((rx.len, rx.crc_ok), (p.len(), true));
        assert_eq!(&out[..p.len()], &p[..]);
        assert_eq!(a.stats().frames_sent, 2);
    }

    #[test]
    fn whole_frame_packets_are_lent_once_and_duplicates_dropped() {
        let sw = InProcSwitch::new();
        let dup = FaultConfig { duplicate_ppm: 1_000_000, ..FaultConfig::NONE };
        let mut a = Link::new(1, Box::new(sw.port(1)), dup);
        let mut b = Link::new(2, Box::new(sw.port(2)), FaultConfig::NONE);
        let p = packet(9000);
        a.send_packet(&p, false).unwrap();
        a.send_packet(&p[..100], true).unwrap();
        let got = b.poll_packet_with(|body, src, ok| (body.to_vec(), src, ok));
        assert_eq!(got, Some((p.clone(), 1, true)));
        // The duplicate of the first is ignored; the aborted second comes with a bad CRC.
        let got = b.poll_packet_with(|body, _, ok| (body.len(), ok));
        assert_eq!(got, Some((100, false)));
        assert_eq!(b.poll_packet_with(|_, _, _| ()), None);
        let s = b.stats();
        assert_eq!((s.packets_received, s.duplicate_frames, s.crc_errors), (2, 2, 1));
    }

    /// Every frame a backend has queued, taken raw.
    fn raw_frames(port: &mut dyn LinkBackend) -> Vec<Vec<u8>> {
        let mut buf = vec![0u8; 80_000];
        let mut out = Vec::new();
        while let Some(n) = port.try_recv_frame(&mut buf).unwrap() {
            out.push(buf[..n].to_vec());
        }
        out
    }

    #[test]
    fn memory_medium_packets_carry_a_verdict_believed_only_there() {
        let sw = InProcSwitch::new();
        let mut a = Link::new(1, Box::new(sw.port(1)), FaultConfig::NONE);
        let mut raw = sw.port(2);
        let p = packet(9000);
        a.send_packet(&p, false).unwrap();
        a.send_packet(&p[..100], true).unwrap();
        a.send_packet(&packet(70_000), false).unwrap(); // two frames: a real CRC
        let frames = raw_frames(&mut raw);
        assert_eq!(frames.len(), 4);
        let trailer = |f: &[u8]| {
            let (h, frag) = frame::FrameHeader::parse(f).unwrap();
            (h.flags, frag[frag.len() - TRAILER_BYTES..].to_vec())
        };
        assert_eq!(trailer(&frames[0]), (frame::FLAG_VERDICT, frame::VERDICT_GOOD.to_vec()));
        let (flags, t) = trailer(&frames[1]);
        assert_eq!(flags, frame::FLAG_VERDICT);
        assert_ne!(t, frame::VERDICT_GOOD.to_vec(), "an aborted packet's verdict is bad");
        assert_eq!(trailer(&frames[2]).0, 0);
        assert_eq!(trailer(&frames[3]).0, 0);

        // With faults configured the switch carries CRCs again.
        let dup = FaultConfig { duplicate_ppm: 1, ..FaultConfig::NONE };
        let mut c = Link::new(3, Box::new(sw.port(3)), dup);
        c.send_packet(&p, false).unwrap();
        let again = raw_frames(&mut raw);
        assert!(!again.is_empty());
        assert!(again.iter().all(|f| trailer(f).0 == 0));

        // Over the switch the good packet checks and the aborted one fails ...
        drop(raw);
        let mut b = Link::new(2, Box::new(sw.port(2)), FaultConfig::NONE);
        let mut injector = sw.port(9);
        for f in &frames[..2] {
            injector.send_frame(2, f).unwrap();
        }
        assert_eq!(b.poll_packet_with(|body, _, ok| (body.to_vec(), ok)), Some((p.clone(), true)));
        assert_eq!(b.poll_packet_with(|body, _, ok| (body.len(), ok)), Some((100, false)));
        assert_eq!(b.stats().crc_errors, 1);

        // ... while a link that is not a memory medium never believes a verdict.
        let udp = UdpBackend::bind("127.0.0.1:0".parse().unwrap()).unwrap();
        let addr = udp.local_addr();
        let mut u = Link::new(2, Box::new(udp), FaultConfig::NONE);
        let sock = std::net::UdpSocket::bind("127.0.0.1:0").unwrap();
        sock.send_to(&frames[0], addr).unwrap();
        let deadline = Instant::now() + std::time::Duration::from_secs(5);
        let got = loop {
            if let Some(r) = u.poll_packet_with(|body, _, ok| (body.len(), ok)) {
                break r;
            }
            assert!(Instant::now() < deadline, "the UDP frame never arrived");
        };
        assert_eq!(got, (9000, false));
        assert_eq!(u.stats().crc_errors, 1);
    }

    #[test]
    fn a_wire_delay_holds_packets_for_it_in_order_and_keeps_verdicts() {
        let sw = InProcSwitch::new();
        let delay = std::time::Duration::from_millis(2);
        let wire = FaultConfig { delay_ns: delay.as_nanos() as u64, ..FaultConfig::NONE };
        let mut a = Link::new(1, Box::new(sw.port(1)), wire);
        let mut b = Link::new(2, Box::new(sw.port(2)), FaultConfig::NONE);
        let (p, big) = (packet(9000), packet(70_000));
        let t0 = Instant::now();
        a.send_packet(&p, false).unwrap();
        a.send_packet(&big, false).unwrap();
        a.send_packet(&p[..100], true).unwrap();
        // The sender's next timer is the first frame's arrival.
        assert!(a.poll_deadline().is_some_and(|d| d >= t0 + delay));
        assert!(a.has_timers());
        let mut got = Vec::new();
        while got.len() < 3 {
            a.poll_timers().unwrap();
            if let Some(r) = b.poll_packet_with(|body, _, ok| (body.to_vec(), ok, Instant::now())) {
                got.push(r);
            }
            assert!(t0.elapsed() < std::time::Duration::from_secs(5), "delayed packets never arrived");
        }
        assert!(got.iter().all(|g| g.2 >= t0 + delay), "a packet beat the wire delay");
        assert_eq!((&got[0].0, got[0].1), (&p, true));
        assert_eq!((&got[1].0, got[1].1), (&big, true));
        assert_eq!((got[2].0.len(), got[2].1), (100, false), "the aborted packet still fails");
        assert_eq!(a.stats().frames_sent, 4);
        assert!(a.poll_deadline().is_none() && !a.has_timers());

        // A delay is not a fault: one-frame packets still carry a verdict.
        let mut raw = sw.port(3);
        let mut c = Link::new(4, Box::new(sw.port(4)), wire);
        let mut p3 = p.clone();
        p3[6..8].copy_from_slice(&3u16.to_le_bytes());
        c.send_packet(&p3, false).unwrap();
        c.flush().unwrap();
        let frames = raw_frames(&mut raw);
        assert_eq!(frames.len(), 1);
        assert_eq!(frame::FrameHeader::parse(&frames[0]).unwrap().0.flags, frame::FLAG_VERDICT);
    }

    #[test]
    fn crc_matches_the_firmware() {
        let data: Vec<u8> = (0..5000u32).map(|i| (i * 31 + 7) as u8).collect();
        assert_eq!(crc32fast::hash(&data), trapeze_firmware::iface::wire::crc32(&data));
        assert_eq!(crc32fast::hash(b""), trapeze_firmware::iface::wire::crc32(b""));
    }
}
