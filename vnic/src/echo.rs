// SPDX-License-Identifier: GPL-2.0-only
//! The NIC's link-level echo (`trapeze-nic ping`): its packet format, and the board where
//! the control socket posts probes and the engines post what came back.
//!
//! The echo belongs to the NIC device, not to its firmware or host: the link-in engine
//! answers an echo request itself, before the firmware sees the packet, as an Ethernet
//! adapter answers a loopback frame. So a NIC with no host attached, running the native
//! firmware or a flashed image, answers; only a NIC that is not running (or not on the
//! link) does not. An echo travels as any packet does: routed by its destination node,
//! carrying a MAC tag under a cluster key (a NIC on another key drops it and counts it as
//! `mac_rejected`), with a CRC trailer.
//!
//! Packet (32 bytes, little-endian; laid out like a Trapeze header so the link routes it
//! by the same `dst` field, but with its own magic, which the firmware drops as malformed
//! should one ever reach it):
//! ```text
//! +0  magic u16 0x5A7F (Trapeze packets: 0x5A7E) | version u8 1 | op u8 (1 request, 2 reply)
//! +4  src node u16 | dst node u16
//! +8  id u32       the asking NIC's incarnation (a reply from its previous life is not matched)
//! +12 seq u32      the probe's number, per asking NIC
//! +16 reserved, 16 bytes: zero when sent, ignored when received
//! ```
//! A packet with the echo magic that is not exactly this (another length, version or op,
//! a `dst` other than this NIC, a `src` other than the NIC the link says sent it, a bad
//! trailer) is dropped and counted (`malformed`), never answered; a reply matching no probe
//! outstanding (late, or not ours) is counted (`unmatched`).
//!
//! Call order: the control socket's thread calls [`EchoBoard::probe`], which queues a probe,
//! wakes the processor and waits; the engines take queued probes with
//! [`EchoBoard::take_queued`] and send them, hand each echo packet they receive to
//! [`EchoBoard::handle_packet`], send the reply it returns for a request, and after a
//! matched reply call [`EchoBoard::wake_waiters`].

use std::sync::atomic::{AtomicBool, AtomicU32, AtomicU64, Ordering};
use std::sync::{Condvar, Mutex};
use std::time::{Duration, Instant};

/// The echo packet's magic (Trapeze packets carry `0x5A7E`).
pub const ECHO_MAGIC: u16 = 0x5A7F;
/// The echo format's version.
pub const ECHO_VERSION: u8 = 1;
/// Bytes of an echo packet (without the link's tag and trailer).
pub const ECHO_BYTES: usize = 32;
/// Probes outstanding at once on one NIC, at most (a further one is refused).
pub const MAX_PROBES_IN_FLIGHT: usize = 64;

/// What an echo packet asks.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Op {
    Request = 1,
    Reply = 2,
}

/// An echo packet, parsed.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct EchoRepr {
    pub op: Op,
    pub src: u16,
    pub dst: u16,
    pub id: u32,
    pub seq: u32,
}

/// A packet with the echo magic that is not a well-formed echo for this NIC.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Malformed;

/// Whether `bytes` (a packet as the link delivers it) carries the echo magic: then it is
/// the NIC's, never the firmware's.
pub fn is_echo(bytes: &[u8]) -> bool {
    bytes.len() >= 2 && u16::from_le_bytes([bytes[0], bytes[1]]) == ECHO_MAGIC
}

impl EchoRepr {
    /// Parse an echo packet. Checks the length, magic, version and op; the caller checks
    /// who sent it and to whom ([`EchoBoard::handle_packet`]).
    pub fn parse(bytes: &[u8]) -> Result<EchoRepr, Malformed> {
        let b: &[u8; ECHO_BYTES] = bytes.try_into().map_err(|_| Malformed)?;
        if u16::from_le_bytes([b[0], b[1]]) != ECHO_MAGIC || b[2] != ECHO_VERSION {
            return Err(Malformed);
        }
        let op = match b[3] {
            1 => Op::Request,
            2 => Op::Reply,
            _ => return Err(Malformed),
        };
        let word = |i: usize| u32::from_le_bytes([b[i], b[i + 1], b[i + 2], b[i + 3]]);
        Ok(EchoRepr {
            op,
            src: u16::from_le_bytes([b[4], b[5]]),
            dst: u16::from_le_bytes([b[6], b[7]]),
            id: word(8),
            seq: word(12),
        })
    }

    pub fn emit(&self) -> [u8; ECHO_BYTES] {
        let mut b = [0u8; ECHO_BYTES];
        b[..2].copy_from_slice(&ECHO_MAGIC.to_le_bytes());
        b[2] = ECHO_VERSION;
        b[3] = self.op as u8;
        b[4..6].copy_from_slice(&self.src.to_le_bytes());
        b[6..8].copy_from_slice(&self.dst.to_le_bytes());
        b[8..12].copy_from_slice(&self.id.to_le_bytes());
        b[12..16].copy_from_slice(&self.seq.to_le_bytes());
        b
    }
}

/// Echo counters, as status reports them.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, serde::Serialize)]
pub struct EchoStats {
    /// Echo requests this NIC sent (`trapeze-nic ping`).
    pub requests_sent: u64,
    /// Replies to them that came back in time.
    pub replies_received: u64,
    /// Echo requests from other NICs this NIC answered.
    pub requests_answered: u64,
    /// Packets with the echo magic dropped as malformed (see the module doc).
    pub malformed: u64,
    /// Replies that matched no probe outstanding (late, or not this NIC's).
    pub unmatched: u64,
}

/// What [`EchoBoard::handle_packet`] decided about one received echo packet.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Handled {
    /// A request: send this reply.
    Answer(EchoRepr),
    /// A reply to a probe outstanding, which now has its round trip.
    Matched { peer: u16, seq: u32 },
    /// Dropped and counted (malformed or unmatched).
    Dropped,
}

struct Outstanding {
    peer: u16,
    seq: u32,
    /// When the engines sent it (`None`: still queued).
    sent: Option<Instant>,
    /// The round trip, once its reply came.
    rtt: Option<Duration>,
}

/// Probes between the control socket and the engines, and the echo counters.
pub struct EchoBoard {
    /// This NIC's incarnation, in every request it sends.
    id: u32,
    next_seq: AtomicU32,
    /// Set when a probe is queued, so the engines look at the board only then.
    queued: AtomicBool,
    probes: Mutex<Vec<Outstanding>>,
    came_back: Condvar,
    requests_sent: AtomicU64,
    replies_received: AtomicU64,
    requests_answered: AtomicU64,
    malformed: AtomicU64,
    unmatched: AtomicU64,
}

impl Default for EchoBoard {
    fn default() -> Self {
        // Differs between runs; only compared, never interpreted.
        let t = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map_or(0, |d| d.as_nanos() as u64);
        let id = ((t ^ u64::from(std::process::id()) << 32).wrapping_mul(0x9E37_79B9_7F4A_7C15) >> 32) as u32;
        EchoBoard {
            id,
            next_seq: AtomicU32::new(1),
            queued: AtomicBool::new(false),
            probes: Mutex::new(Vec::new()),
            came_back: Condvar::new(),
            requests_sent: AtomicU64::new(0),
            replies_received: AtomicU64::new(0),
            requests_answered: AtomicU64::new(0),
            malformed: AtomicU64::new(0),
            unmatched: AtomicU64::new(0),
        }
    }
}

/// A probe that could not be made.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Busy;

impl EchoBoard {
    /// Queue an echo request to `peer`, call `wake` (the engines take it at their next
    /// pass), and wait up to `wait` for its reply: the round trip the engines measured
    /// (their send to the reply's arrival), or `None` if none came in time. `Err(Busy)`
    /// when [`MAX_PROBES_IN_FLIGHT`] probes are already waiting.
    pub fn probe(&self, peer: u16, wait: Duration, wake: impl FnOnce()) -> Result<Option<Duration>, Busy> {
        let seq = self.next_seq.fetch_add(1, Ordering::Relaxed);
        let mut probes = self.probes.lock().unwrap_or_else(|e| e.into_inner());
        if probes.len() >= MAX_PROBES_IN_FLIGHT {
            return Err(Busy);
        }
        probes.push(Outstanding { peer, seq, sent: None, rtt: None });
        // Release: the engine that sees the flag sees the probe (it takes the lock anyway).
        self.queued.store(true, Ordering::Release);
        wake();
        let deadline = Instant::now() + wait;
        loop {
            let at = probes.iter().position(|p| p.seq == seq);
            if let Some(rtt) = at.and_then(|i| probes[i].rtt) {
                probes.retain(|p| p.seq != seq);
                return Ok(Some(rtt));
            }
            let now = Instant::now();
            if now >= deadline {
                probes.retain(|p| p.seq != seq);
                return Ok(None);
            }
            probes = self.came_back.wait_timeout(probes, deadline - now).unwrap_or_else(|e| e.into_inner()).0;
        }
    }

    /// Whether requests may be queued (a plain load: [`Self::take_queued`] decides).
    #[inline]
    pub fn any_queued(&self) -> bool {
        self.queued.load(Ordering::Relaxed)
    }

    /// For the engines: the requests queued since the last call, each marked sent now
    /// (the caller sends them at once). Cheap when nothing is queued.
    pub fn take_queued(&self, me: u16, out: &mut Vec<EchoRepr>) {
        // A plain load first: this runs on every engine poll, and nearly always finds
        // nothing (no read-modify-write on the hot path).
        if !self.queued.load(Ordering::Relaxed) || !self.queued.swap(false, Ordering::Acquire) {
            return;
        }
        let mut probes = self.probes.lock().unwrap_or_else(|e| e.into_inner());
        let now = Instant::now();
        for p in probes.iter_mut().filter(|p| p.sent.is_none()) {
            p.sent = Some(now);
            out.push(EchoRepr { op: Op::Request, src: me, dst: p.peer, id: self.id, seq: p.seq });
        }
        self.requests_sent.fetch_add(out.len() as u64, Ordering::Relaxed);
    }

    /// For the engines: an echo packet `bytes` received by node `me` from `src` (as the
    /// link says), whose trailer checked if `crc_ok`.
    pub fn handle_packet(&self, me: u16, bytes: &[u8], src: u16, crc_ok: bool) -> Handled {
        let r = match EchoRepr::parse(bytes) {
            Ok(r) if crc_ok && r.dst == me && r.src == src => r,
            _ => {
                self.malformed.fetch_add(1, Ordering::Relaxed);
                return Handled::Dropped;
            }
        };
        match r.op {
            Op::Request => {
                self.requests_answered.fetch_add(1, Ordering::Relaxed);
                Handled::Answer(EchoRepr { op: Op::Reply, src: me, dst: src, ..r })
            }
            Op::Reply => {
                let now = Instant::now();
                let mut probes = self.probes.lock().unwrap_or_else(|e| e.into_inner());
                let found = probes.iter_mut().find(|p| r.id == self.id && p.seq == r.seq && p.peer == src);
                match found {
                    Some(Outstanding { sent: Some(sent), rtt: rtt @ None, .. }) => {
                        *rtt = Some(now.duration_since(*sent));
                        self.replies_received.fetch_add(1, Ordering::Relaxed);
                        Handled::Matched { peer: src, seq: r.seq }
                    }
                    _ => {
                        self.unmatched.fetch_add(1, Ordering::Relaxed);
                        Handled::Dropped
                    }
                }
            }
        }
    }

    /// For the engines, after a [`Handled::Matched`] (and after tracing it: the waiter
    /// woken may take the core): wake the probes waiting for their replies.
    pub fn wake_waiters(&self) {
        let _one = self.probes.lock().unwrap_or_else(|e| e.into_inner());
        self.came_back.notify_all();
    }

    pub fn stats(&self) -> EchoStats {
        let n = |c: &AtomicU64| c.load(Ordering::Relaxed);
        EchoStats {
            requests_sent: n(&self.requests_sent),
            replies_received: n(&self.replies_received),
            requests_answered: n(&self.requests_answered),
            malformed: n(&self.malformed),
            unmatched: n(&self.unmatched),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_packet_round_trips_through_bytes() {
        let r = EchoRepr { op: Op::Request, src: 3, dst: 9, id: 0xdead_beef, seq: 42 };
        let b = r.emit();
        assert!(is_echo(&b));
        assert_eq!(EchoRepr::parse(&b), Ok(r));
        assert_eq!(&b[16..], &[0u8; 16]);
    }

    #[test]
    fn malformed_packets_are_refused() {
        let good = EchoRepr { op: Op::Reply, src: 1, dst: 2, id: 7, seq: 1 }.emit();
        for bad in [&good[..31], &[good.as_slice(), &[0]].concat()[..], &good[..2], &[][..]] {
            assert_eq!(EchoRepr::parse(bad), Err(Malformed), "{} bytes", bad.len());
        }
        for (at, v) in [(0, 0x7E), (2, 2), (3, 0), (3, 3)] {
            let mut b = good;
            b[at] = v;
            assert_eq!(EchoRepr::parse(&b), Err(Malformed), "byte {at} = {v}");
        }
    }

    #[test]
    fn a_request_is_answered_and_the_reply_matched_once() {
        let (a, b) = (EchoBoard::default(), EchoBoard::default());
        std::thread::scope(|s| {
            let asker = s.spawn(|| a.probe(2, Duration::from_secs(10), || {}));
            let mut out = Vec::new();
            while out.is_empty() {
                a.take_queued(1, &mut out);
                std::thread::yield_now();
            }
            let req = out[0].emit();
            let Handled::Answer(reply) = b.handle_packet(2, &req, 1, true) else { panic!("not answered") };
            // Who sent it is the link's word, not the packet's; a bad trailer is refused.
            assert_eq!(b.handle_packet(2, &req, 5, true), Handled::Dropped);
            assert_eq!(b.handle_packet(2, &req, 1, false), Handled::Dropped);
            assert_eq!(b.handle_packet(3, &req, 1, true), Handled::Dropped);
            let m = a.handle_packet(1, &reply.emit(), 2, true);
            assert_eq!(m, Handled::Matched { peer: 2, seq: out[0].seq });
            a.wake_waiters();
            // A duplicate reply is not a second round trip.
            assert_eq!(a.handle_packet(1, &reply.emit(), 2, true), Handled::Dropped);
            assert!(asker.join().unwrap().unwrap().is_some());
        });
        let (sa, sb) = (a.stats(), b.stats());
        assert_eq!((sa.requests_sent, sa.replies_received, sa.unmatched), (1, 1, 1));
        assert_eq!((sb.requests_answered, sb.malformed), (1, 3));
    }

    #[test]
    fn a_probe_without_reply_times_out_and_is_forgotten() {
        let a = EchoBoard::default();
        assert_eq!(a.probe(2, Duration::from_millis(20), || {}), Ok(None));
        let mut out = Vec::new();
        a.take_queued(1, &mut out);
        assert!(out.is_empty(), "a timed-out probe is still queued");
    }
}
