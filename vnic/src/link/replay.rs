// SPDX-License-Identifier: GPL-2.0-only
//! Replay protection under a cluster key: each link's incarnation stamp on what it sends,
//! and the receive windows that refuse a stamp seen before. State only, no I/O; the tag
//! that makes a stamp believable is `super::mac`'s.
//!
//! Every keyed packet carries a [`STAMP_BYTES`] stamp after its bytes, inside its MAC tag:
//! the sending link's *epoch* (chosen when the link is made, a NIC start: the wall clock
//! in ns, made strictly greater than any epoch this process chose before) and the
//! packet's *sequence number* (1, 2, 3 … per link, across all destinations). A receiver
//! keeps, per source node, the newest epoch it accepted and a window of the
//! [`WINDOW_PACKETS`] highest sequence numbers under it, and accepts a packet whose tag
//! checked only if
//! - its epoch is newer (the source restarted: the window starts afresh), or
//! - its epoch is the current one and its sequence number is above the window, or inside
//!   it and not yet seen (packets reordered by up to [`WINDOW_PACKETS`] get through).
//!
//! Anything else is refused: an older epoch (`replay_stale_epoch`), a number seen before
//! or below the window (`replayed`). Sources are kept in a fixed table of
//! [`REPLAY_PEERS`]; a packet from one source more is refused (`replay_table_full`):
//! forgetting a source would let its old packets through again.
//!
//! Limits, said plainly: a receiver that restarts forgets its windows. Until it hears a
//! source again, every packet recorded from that source's current epoch is new to it and
//! can be replayed to it once (in increasing order of sequence number, or within
//! [`WINDOW_PACKETS`] of the highest replayed); once the source's own next packet arrives,
//! only unseen recorded packets among the [`WINDOW_PACKETS`] below it still can. The
//! stamps cannot tell a restarted receiver from one that was always there without a
//! handshake (the receiver's epoch bound into the sender's tags), which the link does not
//! have. Sequence numbers count a source's packets to every node, so a packet to this
//! node overtaken by more than [`WINDOW_PACKETS`] of the source's later packets (to any
//! node) is refused as `replayed`: on the link's media (FIFO lanes, one reordered frame
//! held at most 1 ms by the fault injector) that does not happen. A source whose clock steps back across its own restart has its packets
//! refused as stale until its clock passes the old epoch.

use std::sync::atomic::{AtomicU64, Ordering};

/// Bytes of a packet's stamp: epoch u64, then sequence number u64, little-endian.
pub const STAMP_BYTES: usize = 16;
/// Sequence numbers a receive window spans: a packet may arrive this many packets (of
/// its source's, to any node) late and still be accepted.
pub const WINDOW_PACKETS: u64 = 128;
/// Source nodes a link keeps windows for.
pub const REPLAY_PEERS: usize = 64;

/// The epochs chosen in this process so far, the newest: a link made within the same
/// nanosecond as another, or after the clock stepped back, still gets a newer one.
static LAST_EPOCH: AtomicU64 = AtomicU64::new(0);

/// A new epoch: the wall clock in ns, or one more than the last epoch this process chose
/// if that is not older.
pub fn new_epoch() -> u64 {
    let now = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map_or(0, |d| d.as_nanos() as u64);
    // Relaxed: only this counter's own order matters, and fetch_update is atomic on it.
    let prev =
        LAST_EPOCH.fetch_update(Ordering::Relaxed, Ordering::Relaxed, |last| Some(now.max(last.saturating_add(1))));
    // `fetch_update` with a closure that always returns `Some` never fails.
    let last = prev.unwrap_or_else(|l| l);
    now.max(last.saturating_add(1))
}

/// A packet's stamp, parsed.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Stamp {
    pub epoch: u64,
    pub seq: u64,
}

impl Stamp {
    pub fn emit(&self) -> [u8; STAMP_BYTES] {
        let mut b = [0u8; STAMP_BYTES];
        b[..8].copy_from_slice(&self.epoch.to_le_bytes());
        b[8..].copy_from_slice(&self.seq.to_le_bytes());
        b
    }

    pub fn parse(b: &[u8; STAMP_BYTES]) -> Stamp {
        let (e, s) = b.split_at(8);
        let word = |x: &[u8]| {
            let mut a = [0u8; 8];
            a.copy_from_slice(x);
            u64::from_le_bytes(a)
        };
        Stamp { epoch: word(e), seq: word(s) }
    }
}

/// A sending link's incarnation: its epoch and the sequence number of its next packet.
#[derive(Clone, Debug)]
pub struct Stamper {
    epoch: u64,
    next_seq: u64,
}

impl Stamper {
    /// An incarnation with a [`new_epoch`].
    pub fn new() -> Stamper {
        Stamper::with_epoch(new_epoch())
    }

    pub fn with_epoch(epoch: u64) -> Stamper {
        Stamper { epoch, next_seq: 1 }
    }

    pub fn epoch(&self) -> u64 {
        self.epoch
    }

    /// The next packet's stamp.
    pub fn stamp(&mut self) -> Stamp {
        let seq = self.next_seq;
        // 2^64 packets: never, at any rate a link can send.
        self.next_seq = seq.wrapping_add(1);
        Stamp { epoch: self.epoch, seq }
    }
}

impl Default for Stamper {
    fn default() -> Self {
        Stamper::new()
    }
}

/// What a receive window says of a stamp.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Freshness {
    /// Not seen before: accepted (and now remembered).
    Fresh,
    /// Seen before, or older than the window.
    Replayed,
    /// From an epoch older than the source's newest.
    StaleEpoch,
    /// From a source the full table has no room for.
    TableFull,
}

/// One source's newest epoch and window: `seen` bit `i` is sequence number `top - i`.
#[derive(Clone, Copy, Debug, Default)]
struct Window {
    epoch: u64,
    top: u64,
    seen: u128,
}

const _: () = assert!(WINDOW_PACKETS == u128::BITS as u64, "the window is one u128");

impl Window {
    /// A window for a new epoch: nothing seen but sequence number 0, which no sender uses.
    fn start(epoch: u64) -> Window {
        Window { epoch, top: 0, seen: 1 }
    }

    fn handle(&mut self, s: Stamp) -> Freshness {
        if s.epoch < self.epoch {
            return Freshness::StaleEpoch;
        }
        if s.epoch > self.epoch {
            *self = Window::start(s.epoch);
        }
        if s.seq > self.top {
            let shift = s.seq - self.top;
            self.seen = if shift >= WINDOW_PACKETS { 0 } else { self.seen << shift };
            self.seen |= 1;
            self.top = s.seq;
            return Freshness::Fresh;
        }
        let back = self.top - s.seq;
        if back >= WINDOW_PACKETS || self.seen & (1 << back) != 0 {
            return Freshness::Replayed;
        }
        self.seen |= 1 << back;
        Freshness::Fresh
    }
}

/// A receiving link's windows, one per source node, at most [`REPLAY_PEERS`].
#[derive(Clone, Debug)]
pub struct Windows {
    /// The sources, `len` of them, in the order first accepted (scanned for each packet).
    srcs: [u16; REPLAY_PEERS],
    windows: [Window; REPLAY_PEERS],
    len: usize,
}

impl Default for Windows {
    fn default() -> Self {
        Windows { srcs: [0; REPLAY_PEERS], windows: [Window::default(); REPLAY_PEERS], len: 0 }
    }
}

impl Windows {
    /// Whether a packet from `src` stamped `s`, its tag checked, is fresh; if so it is
    /// remembered, so the same stamp is never fresh again.
    pub fn handle(&mut self, src: u16, s: Stamp) -> Freshness {
        if let Some(i) = self.srcs[..self.len].iter().position(|&n| n == src) {
            return self.windows[i].handle(s);
        }
        if self.len == REPLAY_PEERS {
            return Freshness::TableFull;
        }
        self.srcs[self.len] = src;
        self.windows[self.len] = Window::start(s.epoch);
        self.len += 1;
        self.windows[self.len - 1].handle(s)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn st(epoch: u64, seq: u64) -> Stamp {
        Stamp { epoch, seq }
    }

    #[test]
    fn a_window_takes_each_stamp_once_reordered_or_not() {
        let mut w = Windows::default();
        assert_eq!(w.handle(1, st(10, 1)), Freshness::Fresh);
        assert_eq!(w.handle(1, st(10, 1)), Freshness::Replayed, "the same packet again");
        assert_eq!(w.handle(1, st(10, 5)), Freshness::Fresh);
        for seq in [3, 2, 4] {
            assert_eq!(w.handle(1, st(10, seq)), Freshness::Fresh, "reordered within the window: {seq}");
        }
        assert_eq!(w.handle(1, st(10, 3)), Freshness::Replayed);
        assert_eq!(w.handle(1, st(10, 0)), Freshness::Replayed, "no sender uses 0");
        // The window moves up: what falls below it is refused even if never seen.
        assert_eq!(w.handle(1, st(10, 200)), Freshness::Fresh);
        assert_eq!(w.handle(1, st(10, 200 - WINDOW_PACKETS)), Freshness::Replayed, "below the window");
        assert_eq!(w.handle(1, st(10, 200 - WINDOW_PACKETS + 1)), Freshness::Fresh, "its bottom edge");
        // Another source has its own window.
        assert_eq!(w.handle(2, st(10, 1)), Freshness::Fresh);
    }

    #[test]
    fn a_restart_starts_a_window_and_the_old_epoch_is_stale() {
        let mut w = Windows::default();
        assert_eq!(w.handle(1, st(10, 7)), Freshness::Fresh);
        assert_eq!(w.handle(1, st(11, 1)), Freshness::Fresh, "the source restarted");
        assert_eq!(w.handle(1, st(10, 8)), Freshness::StaleEpoch);
        assert_eq!(w.handle(1, st(11, 1)), Freshness::Replayed);
        assert_eq!(w.handle(1, st(11, 2)), Freshness::Fresh);
    }

    #[test]
    fn extreme_stamps_never_panic() {
        let mut w = Windows::default();
        for s in [st(0, 0), st(0, u64::MAX), st(u64::MAX, 0), st(u64::MAX, u64::MAX), st(u64::MAX, 1)] {
            let _ = w.handle(3, s);
        }
        assert_eq!(w.handle(3, st(u64::MAX, u64::MAX)), Freshness::Replayed);
        assert_eq!(w.handle(3, st(0, 5)), Freshness::StaleEpoch);
        let b = [0xff; STAMP_BYTES];
        assert_eq!(Stamp::parse(&b), st(u64::MAX, u64::MAX));
        assert_eq!(Stamp::parse(&st(5, 9).emit()), st(5, 9));
    }

    #[test]
    fn the_table_is_bounded_and_refuses_rather_than_forgets() {
        let mut w = Windows::default();
        for src in 0..REPLAY_PEERS as u16 {
            assert_eq!(w.handle(src, st(1, 1)), Freshness::Fresh);
        }
        assert_eq!(w.handle(999, st(1, 1)), Freshness::TableFull);
        assert_eq!(w.handle(0, st(1, 1)), Freshness::Replayed, "a known source is still remembered");
    }

    #[test]
    fn epochs_increase_within_a_process() {
        let a = new_epoch();
        let b = new_epoch();
        assert!(b > a);
        assert!(Stamper::new().epoch() > b);
        let mut s = Stamper::with_epoch(4);
        assert_eq!((s.stamp(), s.stamp()), (st(4, 1), st(4, 2)));
    }
}
