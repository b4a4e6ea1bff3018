// SPDX-License-Identifier: GPL-2.0-only
//! Cluster liveness for `gmsd`: a static peer list and the GMS heartbeat
//! ([`gms::heartbeat`]), the same one-way NetRPC message the kernel module's nodes send,
//! so a daemon and in-kernel nodes on one link see each other alive.
//!
//! Every `interval` the daemon sends each peer a heartbeat (node, incarnation, pages
//! held, budget) through its GMS port, and declares a peer dead after `dead_after`
//! without one (a peer never heard from is given [`STARTUP_GRACE`] first). Each heartbeat
//! carries the sender's memory use, so `stat` on any daemon shows the whole cluster's. A
//! heartbeat with a new incarnation (the peer restarted) is reported as a rejoin. This
//! table does no I/O: the daemon sends what [`Liveness::due`] returns and feeds what the
//! port received to [`Liveness::heard`].

use gms::heartbeat::Heartbeat;
use std::collections::BTreeMap;
use std::time::{Duration, Instant};

/// A peer never heard from is declared dead only after this long (nodes start one by one).
pub const STARTUP_GRACE: Duration = Duration::from_secs(5);

/// What the liveness table reports.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Event {
    /// Silent for too long.
    Dead(u16),
    /// Heard from again after being declared dead (or restarted with a new incarnation).
    Rejoined(u16),
}

/// One peer as last heard.
#[derive(Clone, Copy, Debug, Default)]
pub struct Peer {
    pub alive: bool,
    pub last: Option<Instant>,
    pub incarnation: u64,
    pub held: u32,
    pub budget: u32,
}

/// The peer table.
pub struct Liveness {
    me: u16,
    incarnation: u64,
    pub peers: BTreeMap<u16, Peer>,
    interval: Duration,
    dead_after: Duration,
    started: Instant,
    next_send: Instant,
    /// Heartbeats received that named an unknown node.
    pub rejected: u64,
}

impl Liveness {
    /// The table of node `me` with `peers`, all presumed alive.
    pub fn new(me: u16, peers: &[u16], interval: Duration, dead_after: Duration) -> Self {
        let now = Instant::now();
        let incarnation = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(1, |d| d.as_nanos() as u64)
            .max(1);
        let peers = peers.iter().map(|&n| (n, Peer { alive: true, ..Peer::default() })).collect();
        Liveness { me, incarnation, peers, interval, dead_after, started: now, next_send: now, rejected: 0 }
    }

    /// The next time [`Self::due`] has something to send or [`Self::check`] may declare a
    /// peer failed (the first moment a live peer's silence can exceed the timeout, or the
    /// start-up grace ends for one never heard): a caller that sleeps wakes by then, and
    /// after every heartbeat it hands to [`Self::heard`] asks again.
    pub fn deadline(&self) -> Instant {
        let grace = self.started + STARTUP_GRACE.max(self.dead_after);
        let failure = self.peers.values().filter(|p| p.alive).map(|p| p.last.map_or(grace, |t| t + self.dead_after));
        failure.fold(self.next_send, Instant::min)
    }

    /// This node's heartbeat if one is due (send it to every peer), with its memory use.
    pub fn due(&mut self, now: Instant, held: u32, budget: u32) -> Option<Heartbeat> {
        if now < self.next_send {
            return None;
        }
        self.next_send = now + self.interval;
        Some(Heartbeat { node: self.me, incarnation: self.incarnation, held, budget })
    }

    /// A heartbeat arrived (the port checked that it names its sender).
    pub fn heard(&mut self, now: Instant, hb: &Heartbeat, events: &mut Vec<Event>) {
        let Some(p) = self.peers.get_mut(&hb.node) else {
            self.rejected += 1;
            return;
        };
        let restarted = p.incarnation != 0 && hb.incarnation != p.incarnation;
        if !p.alive || restarted {
            events.push(Event::Rejoined(hb.node));
        }
        p.alive = true;
        p.last = Some(now);
        p.incarnation = hb.incarnation;
        p.held = hb.held;
        p.budget = hb.budget;
    }

    /// Report the peers that have just been silent for too long.
    pub fn check(&mut self, now: Instant, events: &mut Vec<Event>) {
        let grace = self.started + STARTUP_GRACE.max(self.dead_after);
        for (&n, p) in self.peers.iter_mut() {
            let silent = match p.last {
                Some(t) => now.saturating_duration_since(t) > self.dead_after,
                None => now > grace,
            };
            if p.alive && silent {
                p.alive = false;
                events.push(Event::Dead(n));
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const MS: Duration = Duration::from_millis(1);

    /// Two tables exchanging heartbeats by hand, on a simulated clock.
    #[test]
    fn heartbeats_keep_peers_alive_and_silence_kills_them() {
        let mut a = Liveness::new(0, &[1], 5 * MS, 100 * MS);
        let mut b = Liveness::new(1, &[0], 5 * MS, 100 * MS);
        let t0 = Instant::now();
        let mut ev = Vec::new();
        let mut sent = 0;
        for i in 0..300u32 {
            let now = t0 + i * MS;
            if let Some(hb) = a.due(now, 3, 10) {
                b.heard(now, &hb, &mut ev);
                sent += 1;
            }
            if let Some(hb) = b.due(now, 4, 20) {
                assert_eq!(hb.node, 1);
                a.heard(now, &hb, &mut ev);
            }
            a.check(now, &mut ev);
            b.check(now, &mut ev);
        }
        assert!(ev.is_empty(), "{ev:?}");
        assert_eq!(sent, 60, "one heartbeat every 5 ms");
        assert_eq!((a.peers[&1].held, a.peers[&1].budget), (4, 20));
        // b goes silent: a declares it dead once, after the timeout.
        let last = a.peers[&1].last.unwrap();
        let mut died = None;
        for i in 300..700u32 {
            let now = t0 + i * MS;
            a.check(now, &mut ev);
            if died.is_none() && !ev.is_empty() {
                died = Some(now);
            }
        }
        assert_eq!(ev, vec![Event::Dead(1)]);
        let after = died.unwrap() - last;
        assert!(after > 100 * MS && after <= 101 * MS, "{after:?}");
        // b speaks again: a rejoin; a restart (new incarnation) is one too.
        ev.clear();
        let now = t0 + 700 * MS;
        let hb = b.due(now, 4, 20).unwrap();
        a.heard(now, &hb, &mut ev);
        a.heard(now, &hb, &mut ev);
        assert_eq!(ev, vec![Event::Rejoined(1)]);
        ev.clear();
        let restarted = Heartbeat { incarnation: hb.incarnation + 1, ..hb };
        a.heard(now, &restarted, &mut ev);
        assert_eq!(ev, vec![Event::Rejoined(1)]);
    }

    /// The deadline is the next heartbeat or the first moment a peer can be declared
    /// failed, whichever comes first: a loop that sleeps until then detects a failure as
    /// soon as one that checks every millisecond.
    #[test]
    fn the_deadline_covers_sends_and_failures() {
        let mut a = Liveness::new(0, &[1, 2], 100 * MS, 250 * MS);
        let t0 = a.started;
        assert_eq!(a.deadline(), t0, "the first heartbeat is due at once");
        let hb = a.due(t0, 0, 0).unwrap();
        assert_eq!(a.deadline(), t0 + 100 * MS);
        let mut ev = Vec::new();
        let from = |node| Heartbeat { node, ..hb };
        a.heard(t0 + 10 * MS, &from(1), &mut ev);
        a.heard(t0 + 20 * MS, &from(2), &mut ev);
        let _ = a.due(t0 + 100 * MS, 0, 0).unwrap();
        let _ = a.due(t0 + 200 * MS, 0, 0).unwrap();
        assert_eq!(a.deadline(), t0 + 260 * MS, "peer 1's silence can pass the timeout first");
        let d = a.deadline();
        a.check(d, &mut ev);
        assert!(ev.is_empty(), "silent exactly the timeout is not failed: {ev:?}");
        a.check(d + Duration::from_nanos(1), &mut ev);
        assert_eq!(ev, vec![Event::Dead(1)]);
        assert_eq!(a.deadline(), t0 + 270 * MS, "a failed peer's silence sets no deadline; peer 2's does");
        ev.clear();
        a.check(a.deadline() + MS, &mut ev);
        assert_eq!(ev, vec![Event::Dead(2)]);
        assert_eq!(a.deadline(), t0 + 300 * MS, "only the next heartbeat is left");
        // A peer never heard: the start-up grace's end, once the heartbeats go past it.
        let mut never = Liveness::new(0, &[1], 100 * MS, 250 * MS);
        let grace = never.started + STARTUP_GRACE;
        for i in 0..=(STARTUP_GRACE.as_millis() / 100) as u32 {
            let _ = never.due(never.started + i * 100 * MS, 0, 0);
        }
        assert_eq!(never.deadline(), grace);
    }

    #[test]
    fn strangers_are_rejected_and_silent_peers_get_a_grace() {
        let mut a = Liveness::new(0, &[1], 5 * MS, 100 * MS);
        let t0 = a.started;
        let mut ev = Vec::new();
        a.heard(t0, &Heartbeat { node: 9, incarnation: 1, held: 0, budget: 0 }, &mut ev);
        assert_eq!(a.rejected, 1);
        a.check(t0 + STARTUP_GRACE - MS, &mut ev);
        assert!(ev.is_empty(), "never heard, still in the start-up grace: {ev:?}");
        a.check(t0 + STARTUP_GRACE + MS, &mut ev);
        assert_eq!(ev, vec![Event::Dead(1)]);
    }
}
