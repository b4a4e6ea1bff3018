// SPDX-License-Identifier: GPL-2.0-only
//! `gmsd`'s peers: the shared liveness table ([`gms::store::liveness::Liveness`], whose
//! rules the kernel's nodes follow too) run on the daemon's clock, and what the daemon
//! keeps beside it for `gms stat` and its log: each peer's memory use from its heartbeats,
//! when it was last heard, and how many link packets claiming to be from it failed the
//! cluster key check.
//!
//! The rules are the table's: a peer is *never heard* until its first heartbeat, and is
//! then not a member (no put is aimed at it) and is not called failed either; *alive* while
//! heard within `dead_after`; *dead* after that silence. This file only turns the table's
//! events into [`Change`]s (telling a first join from a rejoin), says which peers were never
//! heard [`NEVER_HEARD_AFTER`] after start, and which peers' packets fail the MAC
//! ([`Notice`]), once each, not per packet. [`absent_cause`] words why a node is not a
//! member, for the log, `gms stat` and a failed put alike.
//!
//! The link's header names a packet's source without authenticating it (that is what the
//! failed MAC would have done), so a count is of packets *claiming* to be from a node.

use crate::proto::{NodeMem, PeerState};
use crate::units::Human;
use anyhow::anyhow;
use gms::heartbeat::Heartbeat;
use gms::store::liveness::{Event, Liveness, LivenessConfig, Peer};
use std::collections::BTreeMap;
use std::time::{Duration, Instant};
use trapeze_vnic::link::mac::MacRejects;

/// Peers a daemon has at most (a cluster of 16 nodes).
pub const MAX_PEERS: usize = 15;

/// A peer still never heard this long after start is reported (once) in the log: nodes are
/// started one by one, and a peer started a moment later is no news.
pub const NEVER_HEARD_AFTER: Duration = Duration::from_secs(5);

/// Packets failing the MAC that claim a source already reported are reported again only
/// after this long without any.
pub const KEY_NOTICE_QUIET: Duration = Duration::from_secs(60);

/// A membership change, from the table's events.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Change {
    /// Heard for the first time since this daemon started: a member.
    Joined(u16),
    /// Heard again after it was declared failed, in the same run (it kept its memory, but
    /// this daemon forgot what it stored there when it failed).
    Rejoined(u16),
    /// Running anew (another incarnation): a member, and everything it held is gone.
    Restarted(u16),
    /// Silent for the failure timeout.
    Failed(u16),
}

/// Something about a peer for the log (each once, not per packet or per check).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Notice {
    /// Packets claiming to be from `node` started failing the cluster key check.
    KeyMismatch { node: u16, packets: u64 },
    /// `node` is still never heard [`NEVER_HEARD_AFTER`] after start.
    NeverHeard { node: u16 },
}

#[derive(Clone, Copy, Debug, Default)]
struct Side {
    last: Option<Instant>,
    held: u32,
    budget: u32,
    /// Packets claiming to be from this peer that failed the MAC, and when that count last
    /// grew (a notice goes out when it grows after [`KEY_NOTICE_QUIET`] or for the first time).
    mac_rejected: u64,
    mac_grew: Option<Instant>,
    /// Whether it has been a member since start (a later `Joined` is a rejoin).
    joined: bool,
    never_heard_told: bool,
}

/// The peer table of one daemon.
pub struct Peers {
    live: Liveness<MAX_PEERS>,
    /// The origin of the table's clock (ns).
    epoch: Instant,
    side: BTreeMap<u16, Side>,
}

impl Peers {
    /// The table of node `me` with `peers`, none heard yet, at `now`; heartbeats every
    /// `interval`, a peer silent for `dead_after` failed.
    pub fn new(me: u16, peers: &[u16], interval: Duration, dead_after: Duration, now: Instant) -> anyhow::Result<Self> {
        // A new incarnation every start: the wall clock's ns (never 0).
        let incarnation = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(1, |d| d.as_nanos() as u64)
            .max(1);
        let cfg = LivenessConfig { interval_ns: ns(interval), dead_after_ns: ns(dead_after) };
        let live = Liveness::new(me, incarnation, peers, cfg, 0)
            .map_err(|e| anyhow!("node {me} with peers {peers:?}: the liveness table refused them: {e:?}"))?;
        let side = peers.iter().map(|&n| (n, Side::default())).collect();
        Ok(Peers { live, epoch: now, side })
    }

    fn ns(&self, t: Instant) -> u64 {
        ns(t.saturating_duration_since(self.epoch))
    }

    fn at(&self, ns: u64) -> Instant {
        self.epoch.checked_add(Duration::from_nanos(ns)).unwrap_or(self.epoch + Duration::from_secs(3600))
    }

    /// When [`Self::due`] or [`Self::check`] next has something to do: a caller that
    /// sleeps wakes by then, and asks again after every heartbeat it hands to [`Self::heard`].
    pub fn deadline(&self) -> Instant {
        let table = self.at(self.live.poll_timeout());
        let untold = self.side.iter().any(|(&n, s)| !s.never_heard_told && self.state(n) == PeerState::NeverHeard);
        if untold {
            table.min(self.epoch + NEVER_HEARD_AFTER)
        } else {
            table
        }
    }

    /// This node's heartbeat, with its memory use, if one is due at `now` (send it to
    /// every peer).
    pub fn due(&mut self, now: Instant, held: u32, budget: u32) -> Option<Heartbeat> {
        let t = self.ns(now);
        self.live.poll_beat(t).then(|| Heartbeat {
            node: self.live.me(),
            incarnation: self.live.incarnation(),
            held,
            budget,
        })
    }

    /// Heartbeats refused for an incarnation older than the one alive and beating.
    pub fn stale_incarnations(&self) -> u64 {
        self.live.stale_incarnations
    }

    /// A heartbeat arrived at `now` (the port checked that it names its sender). Whether
    /// the table took it (a node not configured, or this node's own id, is refused).
    pub fn heard(&mut self, now: Instant, hb: &Heartbeat) -> bool {
        let t = self.ns(now);
        if !self.live.handle_heartbeat(t, hb.node, hb.incarnation) {
            return false;
        }
        if let Some(s) = self.side.get_mut(&hb.node) {
            *s = Side { last: Some(now), held: hb.held, budget: hb.budget, ..*s };
        }
        true
    }

    /// Run the table at `now` and read the link's MAC rejections `rejects`: the membership
    /// changes into `changes`, what to log into `notices`.
    pub fn check(&mut self, now: Instant, rejects: &MacRejects, changes: &mut Vec<Change>, notices: &mut Vec<Notice>) {
        let t = self.ns(now);
        self.live.handle_timeout(t);
        while let Some(e) = self.live.poll_event() {
            let (Event::Joined(n) | Event::Restarted(n) | Event::Failed(n)) = e;
            let Some(s) = self.side.get_mut(&n) else { continue };
            changes.push(match e {
                Event::Joined(_) if s.joined => Change::Rejoined(n),
                Event::Joined(_) => Change::Joined(n),
                Event::Restarted(_) => Change::Restarted(n),
                Event::Failed(_) => Change::Failed(n),
            });
            s.joined = true;
        }
        let never_heard_due = now >= self.epoch + NEVER_HEARD_AFTER;
        for (&n, s) in self.side.iter_mut() {
            let count = rejects.claiming(n);
            if count > s.mac_rejected {
                if s.mac_grew.is_none_or(|at| now.saturating_duration_since(at) >= KEY_NOTICE_QUIET) {
                    notices.push(Notice::KeyMismatch { node: n, packets: count });
                }
                s.mac_rejected = count;
                s.mac_grew = Some(now);
            }
            if never_heard_due && !s.never_heard_told && matches!(self.live.peer(n), Some(Peer::Unheard)) {
                s.never_heard_told = true;
                notices.push(Notice::NeverHeard { node: n });
            }
        }
    }

    /// `node`'s state (a node not configured reads as never heard).
    pub fn state(&self, node: u16) -> PeerState {
        match self.live.peer(node) {
            Some(Peer::Alive { .. }) => PeerState::Alive,
            Some(Peer::Dead { .. }) => PeerState::Dead,
            Some(Peer::Unheard) | None => PeerState::NeverHeard,
        }
    }

    /// The peers that are members: alive, as the last [`Self::check`] reported.
    /// The view number of the member set `ids` ([`Liveness::view`]).
    pub fn view(&self, ids: &[u16]) -> u64 {
        self.live.view(ids)
    }

    pub fn members(&self) -> Vec<u16> {
        self.live.members().iter().collect()
    }

    /// Heartbeats refused: from a node not configured, or with this node's id.
    pub fn refused(&self) -> u64 {
        self.live.refused
    }

    /// The peers as `stat` shows them at `now`.
    pub fn rows(&self, now: Instant) -> Vec<NodeMem> {
        self.side
            .iter()
            .map(|(&n, s)| {
                let state = self.state(n);
                NodeMem {
                    node: n,
                    alive: state == PeerState::Alive,
                    state,
                    mac_rejected: s.mac_rejected,
                    held: u64::from(s.held),
                    budget: u64::from(s.budget),
                    last_heard_ms: s.last.map_or(u64::MAX, |t| now.saturating_duration_since(t).as_millis() as u64),
                }
            })
            .collect()
    }

    /// Peer `node` as `stat` shows it at `now`.
    pub fn row(&self, node: u16, now: Instant) -> Option<NodeMem> {
        self.rows(now).into_iter().find(|r| r.node == node)
    }
}

fn ns(d: Duration) -> u64 {
    u64::try_from(d.as_nanos()).unwrap_or(u64::MAX)
}

/// The fix for packets failing the cluster key check.
pub const KEY_FIX: &str = "run every daemon and NIC with the same --key";

/// Why node `n` (a row of `stat`) is not a member, with the fix, in words; `None` while it
/// is alive. The log, `gms stat` and a put that found too few members say it the same way.
pub fn absent_cause(n: &NodeMem) -> Option<String> {
    let key = (n.mac_rejected > 0).then(|| {
        format!("{} packets claiming to be node {} failed the cluster key check: {KEY_FIX}", n.mac_rejected, n.node)
    });
    match (n.state, key) {
        (PeerState::Alive, _) => None,
        (PeerState::NeverHeard, Some(key)) => Some(format!("node {} was never heard ({key})", n.node)),
        (PeerState::NeverHeard, None) => Some(format!(
            "node {} was never heard (no heartbeat since this daemon started): start its gmsd with this node among \
             its --peer, or check both daemons' --listen/--peer addresses",
            n.node
        )),
        (PeerState::Dead, key) => {
            let silent = Duration::from_millis(n.last_heard_ms);
            let fix = key.unwrap_or_else(|| "restart its gmsd, or check the link between the two".into());
            Some(format!("node {} is dead (silent for {}): {fix}", n.node, Human(silent)))
        }
    }
}

/// [`absent_cause`] of each node of `rows` that is not a member, joined with "; "
/// (`None`: every one is alive).
pub fn absent_causes<'a>(rows: impl IntoIterator<Item = &'a NodeMem>) -> Option<String> {
    let causes: Vec<String> = rows.into_iter().filter_map(absent_cause).collect();
    (!causes.is_empty()).then(|| causes.join("; "))
}

#[cfg(test)]
mod tests {
    use super::*;

    const MS: Duration = Duration::from_millis(1);

    fn hb(node: u16, incarnation: u64) -> Heartbeat {
        Heartbeat { node, incarnation, held: 3, budget: 10 }
    }

    /// First heard is a join, not a rejoin; silence is a failure; heard again the same run
    /// a rejoin; a new incarnation a restart. A peer never heard is no member and is
    /// reported once, after [`NEVER_HEARD_AFTER`].
    #[test]
    fn the_shared_table_on_the_daemons_clock() {
        let t0 = Instant::now();
        let mut p = Peers::new(0, &[1, 2], 100 * MS, 1000 * MS, t0).unwrap();
        let (mut ch, mut no) = (Vec::new(), Vec::new());
        let none = MacRejects::default();
        assert!(p.due(t0, 0, 0).is_some(), "the first heartbeat is due at once");
        assert!(p.members().is_empty(), "no peer heard yet: none is a member");
        assert_eq!(p.state(1), PeerState::NeverHeard);
        assert!(p.heard(t0 + 10 * MS, &hb(1, 5)));
        assert!(!p.heard(t0 + 10 * MS, &hb(7, 5)), "not a configured peer");
        assert_eq!(p.refused(), 1);
        p.check(t0 + 10 * MS, &none, &mut ch, &mut no);
        assert_eq!(ch, [Change::Joined(1)]);
        assert_eq!(p.members(), [1]);
        let r = p.row(1, t0 + 20 * MS).unwrap();
        assert_eq!((r.state, r.held, r.budget, r.last_heard_ms), (PeerState::Alive, 3, 10, 10));
        let r2 = p.row(2, t0 + 20 * MS).unwrap();
        assert_eq!((r2.state, r2.alive, r2.last_heard_ms), (PeerState::NeverHeard, false, u64::MAX));
        ch.clear();
        // Peer 1 silent: failed after the timeout (checked at least every half of it).
        let mut now = t0 + 10 * MS;
        while ch.is_empty() {
            now = p.deadline().max(now + MS);
            p.check(now, &none, &mut ch, &mut no);
        }
        assert_eq!(ch, [Change::Failed(1)]);
        assert!(now >= t0 + 1010 * MS && now < t0 + 1200 * MS, "{:?}", now - t0);
        assert_eq!(p.state(1), PeerState::Dead);
        ch.clear();
        p.heard(now, &hb(1, 5));
        p.check(now, &none, &mut ch, &mut no);
        assert_eq!(ch, [Change::Rejoined(1)], "the same run, heard again");
        ch.clear();
        p.heard(now, &hb(1, 6));
        p.check(now, &none, &mut ch, &mut no);
        assert_eq!(ch, [Change::Restarted(1)]);
        assert!(no.is_empty(), "{no:?}");
        // Peer 2 is reported never heard once, at NEVER_HEARD_AFTER.
        while now < t0 + NEVER_HEARD_AFTER {
            p.heard(now, &hb(1, 6));
            now = p.deadline().max(now + MS);
            p.check(now, &none, &mut ch, &mut no);
        }
        assert_eq!(no, [Notice::NeverHeard { node: 2 }]);
        assert!(now - t0 <= NEVER_HEARD_AFTER + 100 * MS, "the deadline covers the report: {:?}", now - t0);
        p.check(now + MS, &none, &mut ch, &mut no);
        assert_eq!(no.len(), 1, "reported once");
    }

    /// Rejections claiming a peer are noticed when they start, not per packet, and again
    /// only after a quiet spell; the never-heard cause then names the key.
    #[test]
    fn key_mismatches_are_noticed_once_and_named_as_the_cause() {
        let t0 = Instant::now();
        let mut p = Peers::new(0, &[1, 2], 100 * MS, 1000 * MS, t0).unwrap();
        let (mut ch, mut no) = (Vec::new(), Vec::new());
        let mut rej = MacRejects::default();
        for i in 0..50u32 {
            rej.record(2);
            rej.record(9);
            p.check(t0 + i * 10 * MS, &rej, &mut ch, &mut no);
        }
        assert_eq!(no, [Notice::KeyMismatch { node: 2, packets: 1 }], "node 9 is no peer");
        rej.record(2);
        p.check(t0 + 500 * MS + KEY_NOTICE_QUIET, &rej, &mut ch, &mut no);
        let keys: Vec<_> = no.iter().filter(|n| matches!(n, Notice::KeyMismatch { .. })).collect();
        assert_eq!(keys, [&Notice::KeyMismatch { node: 2, packets: 1 }, &Notice::KeyMismatch { node: 2, packets: 51 }]);
        let r = p.row(2, t0).unwrap();
        assert_eq!(r.mac_rejected, 51);
        let cause = absent_cause(&r).unwrap();
        assert!(cause.contains("never heard") && cause.contains("claiming to be node 2"), "{cause}");
        assert!(cause.contains("same --key"), "{cause}");
        let plain = absent_cause(&p.row(1, t0).unwrap()).unwrap();
        assert!(plain.contains("never heard") && !plain.contains("--key"), "{plain}");
        let dead = NodeMem { state: PeerState::Dead, last_heard_ms: 2500, ..r.clone() };
        let dead = absent_cause(&NodeMem { mac_rejected: 0, ..dead }).unwrap();
        assert!(dead.contains("dead (silent for 2.5 s)") && dead.contains("restart"), "{dead}");
        assert_eq!(absent_cause(&NodeMem { state: PeerState::Alive, ..r }), None);
    }
}
