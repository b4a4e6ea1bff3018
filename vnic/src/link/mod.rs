// SPDX-License-Identifier: GPL-2.0-only
//! The link: carries whole Trapeze packets between NICs over a backend (in-process
//! switch, UDP, raw Ethernet), the way Myrinet's link hardware carried them.
//!
//! [`Link::send_packet`] takes a packet (Trapeze header + control message + payload, as
//! the firmware's link-out pulses assembled it), appends the CRC-32 trailer
//! (`iface::wire::crc32`; inverted when the sender aborts the packet) or a verdict (see
//! below), splits it into
//! link frames no larger than the backend allows, and sends them to the packet's
//! destination node. [`Link::poll_packet`] reassembles frames into packets and checks
//! the trailer: the receiver sees each packet once, whole, with `crc_ok`. A seeded
//! [`faults::FaultInjector`] can drop, duplicate, reorder or corrupt frames on the way.
//!
//! Under a cluster key ([`Link::set_key`]) every packet carries a stamp (this link's
//! epoch and the packet's sequence number, [`replay`]) and a MAC tag between its bytes and
//! its trailer, and a received packet whose tag does not check, or whose stamp was seen
//! before, is dropped and counted (`mac_rejected`, `trailer_forged`, `replayed`,
//! `replay_stale_epoch`) before anything sees it ([`mac`] says what that does and does not
//! protect). Without a key the link authenticates nothing, adds nothing to a packet, and
//! says so once in the log.
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
//! When a packet carries a CRC and when a verdict ([`frame::FLAG_VERDICT`]: `GOOD`, or
//! anything else for an aborted packet): a CRC guards against damage the link cannot
//! otherwise see. A packet that is one frame, sent with no faults configured, carries a
//! verdict over a medium that delivers frames whole and undamaged or not at all: a
//! memory medium (the in-process switch: nothing between the two buffers can damage it,
//! as Linux's loopback skips checksums) and UDP (the datagram's checksum, computed and
//! verified by the kernels, covers the frame, header included;
//! [`LinkBackend::checksums_frames`]). A CRC is still computed where it protects
//! something the medium's check does not: a packet of several frames (reassembly could
//! put it together from fragments of different packets that share a key — a sender that
//! restarted, an id that wrapped), any packet while a fault injector may corrupt, drop,
//! duplicate or reorder frames (the tests and fuzz targets that check the link's
//! guarantees run there), and every packet over raw Ethernet, whose frame check is
//! hop-by-hop. A receiver believes a verdict only over a medium where it would send one;
//! elsewhere the packet fails its check. (Verdicts over UDP date from 2026-11-29: a node
//! built before then counts such packets as CRC errors, so both ends of a UDP link must
//! be at least that new.) Under a cluster key the MAC tag covers the
//! packet's bytes, its stamp and its verdict, whichever trailer it has.
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
pub mod mac;
pub mod polyval;
mod reassembly;
mod receive;
pub mod replay;
mod send;
#[cfg(any(test, feature = "test-support"))]
pub mod testing;
#[cfg(test)]
mod tests;

pub use backend::{BackendSpec, LinkBackend, SpecError};
pub use faults::{FaultConfig, FaultInjector};
pub use reassembly::{MAX_PARTIAL_PACKETS, MAX_READY_PACKETS, REASSEMBLY_TIMEOUT};

use std::fmt;
use std::io;
use std::os::fd::BorrowedFd;
use std::time::Instant;

use crate::key::ClusterKey;
use mac::LinkMac;
use reassembly::Reassembler;
use trapeze_firmware::iface::layout::LinkCounter;

/// Bytes of the CRC-32 trailer the link appends to every packet.
pub const TRAILER_BYTES: usize = 4;
/// Largest packet (trailer included) the link carries: a maximal Trapeze packet
/// (32-byte header, 128-byte control message, 64 KiB payload) fits with room to spare.
pub const MAX_PACKET_BYTES: usize = 256 * 1024;
/// Bytes at the start of a packet that must be present to route it (the Trapeze header;
/// the destination node is the u16 at bytes 6..8).
pub const ROUTE_HEADER_BYTES: usize = 32;

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
    /// Frames the backend dropped as not coming from the node they name.
    pub foreign_frames: u64,
    /// Completed packets dropped because [`MAX_READY_PACKETS`] were waiting.
    pub rx_queue_drops: u64,
    /// Packets cut short because the caller's buffer was too small.
    pub rx_truncated: u64,
    /// Injected faults.
    pub injected_drops: u64,
    pub injected_duplicates: u64,
    pub injected_reorders: u64,
    pub injected_corruptions: u64,
    /// Packets dropped because their MAC did not check: a wrong or missing tag under a
    /// key, or a tag this link, without a key, cannot check (see [`mac`]).
    pub mac_rejected: u64,
    /// `mac_rejected` by the source node each packet's header claims (unauthenticated;
    /// not in the JSON form, whose values are all counts).
    #[serde(skip)]
    pub mac_rejected_by: mac::MacRejects,
    /// Keyed packets whose tag checked but whose stamp was seen before or lies below the
    /// source's receive window ([`replay`]): replays (or duplicates older than the
    /// reassembler's memory).
    pub replayed: u64,
    /// Keyed packets whose tag checked but whose epoch is older than the newest accepted
    /// from their source: a previous incarnation's packets, replayed.
    pub replay_stale_epoch: u64,
    /// Keyed packets from a source beyond the [`replay::REPLAY_PEERS`] this link keeps
    /// windows for.
    pub replay_table_full: u64,
    /// `replayed`, `replay_stale_epoch` and `replay_table_full` by source (authenticated
    /// by the tag, unlike `mac_rejected_by`'s).
    #[serde(skip)]
    pub replay_rejected_by: mac::MacRejects,
    /// Keyed packets whose tag checks only with the other verdict than their trailer
    /// gives: a trailer changed on the way (a good packet made to look aborted, or an
    /// aborted one made to look good).
    pub trailer_forged: u64,
    /// Frames dropped because the wire-delay line already held
    /// [`faults::DELAY_LINE_FRAMES`] (a sender outrunning its modelled wire).
    pub delay_line_drops: u64,
}

impl LinkStats {
    /// The count a host reads as `c` among the control block's link counters
    /// (`ctrl::LINK_COUNTERS`, named as this struct's fields).
    pub fn counter(&self, c: LinkCounter) -> u64 {
        match c {
            LinkCounter::MacRejected => self.mac_rejected,
            LinkCounter::Replayed => self.replayed,
            LinkCounter::ReplayStaleEpoch => self.replay_stale_epoch,
            LinkCounter::ReplayTableFull => self.replay_table_full,
            LinkCounter::TrailerForged => self.trailer_forged,
            LinkCounter::CrcErrors => self.crc_errors,
            LinkCounter::BadFrames => self.bad_frames,
            LinkCounter::ForeignFrames => self.foreign_frames,
            LinkCounter::ReassemblyTimeouts => self.reassembly_timeouts,
            LinkCounter::RxQueueDrops => self.rx_queue_drops,
        }
    }
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
    /// Whether one-frame packets carry a verdict, and a received verdict is believed: a
    /// memory medium, or one that checks its frames itself
    /// ([`LinkBackend::checksums_frames`]). Asked once, when the link is made.
    verdict_medium: bool,
    /// The backend's [`looks_are_system_calls`](LinkBackend::looks_are_system_calls),
    /// asked once; whether the caller has asked [`Self::rx_pending`] (then it looks
    /// before its passes); and whether the next receive skips its look at the medium (set
    /// by a receive that delivered a packet when both hold, cleared by the next receive
    /// and by a look through `rx_pending`).
    looks_are_system_calls: bool,
    caller_looks: bool,
    skip_look: bool,
    /// The MAC key, under a cluster key.
    mac: Option<LinkMac>,
    /// This incarnation's epoch and next sequence number (used under a key).
    stamper: replay::Stamper,
    /// The receive windows of the sources heard under a key.
    windows: Box<replay::Windows>,
    /// Whether the log has been told this link is unauthenticated.
    noted_unauthenticated: bool,
}

impl fmt::Debug for Link {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Link")
            .field("node", &self.node)
            .field("backend", &self.backend.describe())
            .field("faults", self.faults.config())
            .field("authenticated", &self.mac.is_some())
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
        let verdict_medium = memory_medium || backend.checksums_frames();
        let looks_are_system_calls = backend.looks_are_system_calls();
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
            verdict_medium,
            looks_are_system_calls,
            caller_looks: false,
            skip_look: false,
            mac: None,
            stamper: replay::Stamper::new(),
            windows: Box::default(),
            noted_unauthenticated: false,
        }
    }

    /// Put the link under a cluster key (every packet sent carries a MAC tag, every
    /// packet received must), or with `None` take it off. Both ends of a link need the
    /// same key: packets between a keyed and an unkeyed end, or under different keys,
    /// are all dropped (`mac_rejected`).
    pub fn set_key(&mut self, key: Option<&ClusterKey>) {
        self.mac = key.map(LinkMac::new);
    }

    /// Whether the link is under a cluster key.
    pub fn is_authenticated(&self) -> bool {
        self.mac.is_some()
    }

    /// The first packet of a link without a key: say once that nothing is authenticated.
    #[cold]
    fn note_unauthenticated(&mut self) {
        self.noted_unauthenticated = true;
        tracing::warn!(
            "link of node {} ({}): no cluster key, packets are not authenticated (give a key file with --key)",
            self.node,
            self.backend.describe()
        );
    }

    pub fn node(&self) -> u16 {
        self.node
    }

    pub fn stats(&self) -> LinkStats {
        LinkStats { foreign_frames: self.backend.foreign_frames(), ..self.stats }
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
    pub fn rx_pending(&mut self) -> bool {
        self.caller_looks = true;
        if self.rx.has_ready() || self.has_timers() {
            return true;
        }
        // A look: what it finds, the next receive takes, so that receive looks again.
        self.skip_look = false;
        self.backend.frames_waiting()
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
}
