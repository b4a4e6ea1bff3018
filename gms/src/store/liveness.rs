// SPDX-License-Identifier: GPL-2.0-only
//! Liveness: which configured peers are members now, from their GMS heartbeats
//! ([`crate::heartbeat`]). One table for every runtime (the kernel's `/dev/gms0` node,
//! `gmsd`); it does no I/O and reads no clock.
//!
//! A peer is *unheard* until its first heartbeat, *alive* while it was heard within
//! `dead_after`, and *dead* after that silence; a heartbeat with another incarnation than
//! the last one is a restart (the peer's memory, and every copy in it, is gone). An unheard
//! peer is not a member: puts are never aimed at a node that never started, and a runtime
//! can say "never heard" rather than "failed".
//!
//! The consumer learns transitions through [`Liveness::poll_event`], which compares each
//! peer's state with what it last reported, so a flap the consumer never saw (dead and
//! back between two polls, same incarnation) costs nothing, and a restart is never missed.
//!
//! Only heartbeats that are fresh count: the caller passes what its link authenticated
//! and did not see before; a heartbeat naming a node that is not a configured peer, or
//! this node, is refused and counted ([`Liveness::refused`]).
//!
//! An incarnation only rises while it beats: a heartbeat of a lower incarnation than the
//! alive peer's, which sent a heartbeat within `dead_after`, is refused and counted
//! ([`Liveness::stale_incarnations`]), so a member (or a replay) alternating between an
//! old incarnation and a new one restarts once, not at every heartbeat. A real restart
//! whose incarnation happens to be lower (a random one, a clock set back) is taken once the
//! old incarnation has been silent for `dead_after`; a higher one at once.
//!
//! A host that did not run for a while (an emulator starved of CPU, a suspended VM) heard
//! nothing meanwhile through no fault of its peers: when [`Liveness::handle_timeout`] runs
//! more than half of `dead_after` after the previous call, every alive peer gets a fresh
//! grace period instead of being declared dead ([`Liveness::stalls`]).
//!
//! A peer never heard is never declared dead either (it has no incarnation to have ended):
//! it is simply not a member. A consumer that must see the cluster before it acts (a
//! volume's load, which would take a label nobody answered for as missing) waits until
//! the table has *settled* ([`Liveness::settled`]): every peer heard, or `dead_after`
//! passed since the table was made; a peer still unheard then is not running, and joins
//! when it is first heard.

use super::nodes::{NodeOutOfRange, NodeSet};

/// Heartbeat timing (ns).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct LivenessConfig {
    /// How often this node sends its heartbeat.
    pub interval_ns: u64,
    /// Silence after which an alive peer is declared dead.
    pub dead_after_ns: u64,
}

impl Default for LivenessConfig {
    fn default() -> Self {
        LivenessConfig { interval_ns: 200_000_000, dead_after_ns: 1_500_000_000 }
    }
}

/// A peer's state.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Peer {
    /// Never heard since this table was made.
    Unheard,
    /// Heard at `last` (ns), running as `incarnation`.
    Alive { last: u64, incarnation: u64 },
    /// Silent for `dead_after`; `incarnation` was its last.
    Dead { incarnation: u64 },
}

/// A transition the consumer has not seen yet.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Event {
    /// A member again: first heard, or heard after it was reported dead, in the same run
    /// (it was silent, not gone: it kept its memory).
    Joined(u16),
    /// Running anew (another incarnation): a member, and everything it held is gone.
    Restarted(u16),
    /// Declared dead.
    Failed(u16),
}

/// Why a table could not be made.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum LivenessError {
    /// A node id the store does not cover.
    OutOfRange(NodeOutOfRange),
    /// More peers than the table's capacity `M`.
    TooManyPeers,
    /// This node listed as its own peer.
    SelfAsPeer,
}

#[derive(Clone, Copy, Debug)]
struct Slot {
    node: u16,
    now: Peer,
    /// When the alive incarnation last sent a heartbeat (other messages do not count).
    beat: u64,
    /// What the consumer was told last.
    told: Peer,
}

/// The peers of one node (at most `M`).
#[derive(Clone, Debug)]
pub struct Liveness<const M: usize> {
    me: u16,
    incarnation: u64,
    cfg: LivenessConfig,
    peers: [Slot; M],
    len: usize,
    last_check: u64,
    next_beat: u64,
    /// When the table was made (for [`Self::settled`]).
    made: u64,
    /// Heartbeats refused: from this node's own id or a node not configured.
    pub refused: u64,
    /// Heartbeats refused for an incarnation lower than the one alive and beating (see the
    /// module doc).
    pub stale_incarnations: u64,
    /// Checks that found this host had not run for half of `dead_after`.
    pub stalls: u64,
}

impl<const M: usize> Liveness<M> {
    /// The table of node `me`, running as `incarnation` (never 0: a new one every start),
    /// with `peers`, none heard yet, at `now`.
    pub fn new(me: u16, incarnation: u64, peers: &[u16], cfg: LivenessConfig, now: u64) -> Result<Self, LivenessError> {
        NodeSet::check(me).map_err(LivenessError::OutOfRange)?;
        let empty = Slot { node: 0, now: Peer::Unheard, told: Peer::Unheard, beat: 0 };
        let mut t = Liveness {
            me,
            incarnation: incarnation.max(1),
            cfg,
            peers: [empty; M],
            len: 0,
            last_check: now,
            next_beat: now,
            made: now,
            refused: 0,
            stale_incarnations: 0,
            stalls: 0,
        };
        for &p in peers {
            NodeSet::check(p).map_err(LivenessError::OutOfRange)?;
            if p == me {
                return Err(LivenessError::SelfAsPeer);
            }
            if t.slot(p).is_none() {
                let slot = t.peers.get_mut(t.len).ok_or(LivenessError::TooManyPeers)?;
                *slot = Slot { node: p, ..empty };
                t.len += 1;
            }
        }
        Ok(t)
    }

    pub fn me(&self) -> u16 {
        self.me
    }

    /// This node's incarnation (what its heartbeats carry).
    pub fn incarnation(&self) -> u64 {
        self.incarnation
    }

    fn slot(&self, node: u16) -> Option<usize> {
        self.peers[..self.len].iter().position(|s| s.node == node)
    }

    /// The view number of the member set `ids` as it runs now
    /// ([`crate::heartbeat::view_of_run`]): each member's incarnation as this table last
    /// heard it, this node's own for itself. Every node that heard the same heartbeats
    /// computes the same number; a member's restart, or a cluster's, gives a new one.
    pub fn view(&self, ids: &[u16]) -> u64 {
        super::super::heartbeat::view_of_run(ids, |n| match self.peer(n) {
            _ if n == self.me => self.incarnation,
            Some(Peer::Alive { incarnation, .. } | Peer::Dead { incarnation }) => incarnation,
            Some(Peer::Unheard) | None => 0,
        })
    }

    /// `node`'s state (`None`: not a configured peer).
    pub fn peer(&self, node: u16) -> Option<Peer> {
        self.slot(node).map(|i| self.peers[i].now)
    }

    /// The configured peers and their states.
    pub fn peers(&self) -> impl Iterator<Item = (u16, Peer)> + '_ {
        self.peers[..self.len].iter().map(|s| (s.node, s.now))
    }

    /// The peers alive now, as the consumer was told (the members it acts on).
    pub fn members(&self) -> NodeSet {
        let mut s = NodeSet::EMPTY;
        for p in self.peers[..self.len].iter().filter(|p| matches!(p.told, Peer::Alive { .. })) {
            s.insert(p.node);
        }
        s
    }

    /// A fresh heartbeat from `node`, running as `incarnation`, arrived at `now`.
    /// Returns whether it was accepted: not from a stranger, and not of an incarnation
    /// lower than the one alive and beating (see the module doc).
    pub fn handle_heartbeat(&mut self, now: u64, node: u16, incarnation: u64) -> bool {
        let Some(i) = self.slot(node).filter(|_| incarnation != 0) else {
            self.refused += 1;
            return false;
        };
        let p = &mut self.peers[i];
        if let Peer::Alive { incarnation: alive, .. } = p.now {
            if incarnation < alive && now.saturating_sub(p.beat) < self.cfg.dead_after_ns {
                self.stale_incarnations += 1;
                return false;
            }
        }
        p.now = Peer::Alive { last: now, incarnation };
        p.beat = now;
        true
    }

    /// Another fresh message from `node` arrived at `now` (a reply, a put, a directory
    /// update): an alive peer is running, so its silence restarts. It never makes an
    /// unheard or dead peer alive: only a heartbeat names the incarnation, which tells a
    /// return from a restart. Messages from strangers are ignored (not counted).
    pub fn handle_heard(&mut self, now: u64, node: u16) {
        if let Some(i) = self.slot(node) {
            if let Peer::Alive { last, incarnation } = self.peers[i].now {
                self.peers[i].now = Peer::Alive { last: last.max(now), incarnation };
            }
        }
    }

    /// Whether the table has settled at `now`: every peer was heard since it was made and
    /// the consumer was told so ([`Self::poll_event`]: [`Self::members`] has it), or
    /// `dead_after` has passed since then (a peer unheard so long is taken as not running:
    /// not a member until it is heard). See the module doc.
    pub fn settled(&self, now: u64) -> bool {
        now.saturating_sub(self.made) >= self.cfg.dead_after_ns
            || self.peers[..self.len].iter().all(|p| !matches!(p.told, Peer::Unheard))
    }

    /// Declare dead every peer silent for `dead_after` at `now`. Call at
    /// [`Self::poll_timeout`] (earlier is harmless).
    pub fn handle_timeout(&mut self, now: u64) {
        let gap = now.saturating_sub(self.last_check);
        self.last_check = now;
        let stalled = gap > self.cfg.dead_after_ns / 2;
        if stalled {
            self.stalls += 1;
        }
        for p in self.peers[..self.len].iter_mut() {
            if let Peer::Alive { last, incarnation } = p.now {
                if stalled {
                    p.now = Peer::Alive { last: now.max(last), incarnation };
                    p.beat = now.max(p.beat);
                } else if now.saturating_sub(last) >= self.cfg.dead_after_ns {
                    p.now = Peer::Dead { incarnation };
                }
            }
        }
    }

    /// The next transition the consumer has not been told, oldest peer first.
    pub fn poll_event(&mut self) -> Option<Event> {
        for p in self.peers[..self.len].iter_mut() {
            let event = match (p.told, p.now) {
                (Peer::Alive { incarnation: a, .. }, Peer::Alive { incarnation: b, .. }) if a != b => {
                    Some(Event::Restarted(p.node))
                }
                (Peer::Alive { .. }, Peer::Dead { .. }) => Some(Event::Failed(p.node)),
                // Heard again after its death was told: the same run (it was only silent)
                // or a new one (its memory is gone).
                (Peer::Dead { incarnation: a }, Peer::Alive { incarnation: b, .. }) if a != b => {
                    Some(Event::Restarted(p.node))
                }
                (Peer::Unheard | Peer::Dead { .. }, Peer::Alive { .. }) => Some(Event::Joined(p.node)),
                _ => None,
            };
            if let Some(e) = event {
                p.told = p.now;
                return Some(e);
            }
            // Keep the last-heard time current in what was told (no event needed).
            p.told = p.now;
        }
        None
    }

    /// Whether this node's heartbeat is due at `now`; if so, the next one is scheduled.
    pub fn poll_beat(&mut self, now: u64) -> bool {
        if now < self.next_beat {
            return false;
        }
        self.next_beat = now.saturating_add(self.cfg.interval_ns);
        true
    }

    /// When [`Self::handle_timeout`] or [`Self::poll_beat`] next has something to do.
    pub fn poll_timeout(&self) -> u64 {
        let deaths = self.peers[..self.len]
            .iter()
            .filter_map(|p| match p.now {
                Peer::Alive { last, .. } => Some(last.saturating_add(self.cfg.dead_after_ns)),
                _ => None,
            })
            .min()
            .unwrap_or(u64::MAX);
        // Checks at least every half `dead_after`, so that a stall is told from silence.
        deaths.min(self.next_beat).min(self.last_check.saturating_add(self.cfg.dead_after_ns / 2))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const MS: u64 = 1_000_000;

    fn table() -> Liveness<4> {
        let cfg = LivenessConfig { interval_ns: 100 * MS, dead_after_ns: 1000 * MS };
        Liveness::new(0, 7, &[1, 2], cfg, 0).unwrap()
    }

    #[test]
    fn peers_join_when_heard_die_when_silent_and_restart_with_a_new_incarnation() {
        let mut t = table();
        assert_eq!(t.poll_event(), None);
        assert!(t.members().is_empty(), "a peer never heard is not a member");
        assert!(t.handle_heartbeat(10 * MS, 1, 5));
        assert_eq!(t.poll_event(), Some(Event::Joined(1)));
        assert!(t.members().contains(1));
        let mut now = 10 * MS;
        while now < 1200 * MS {
            now += 100 * MS;
            t.handle_timeout(now);
        }
        assert_eq!(t.poll_event(), Some(Event::Failed(1)));
        assert!(t.handle_heartbeat(now, 1, 5));
        assert_eq!(t.poll_event(), Some(Event::Joined(1)), "the same run: it only went silent");
        assert!(t.handle_heartbeat(now, 1, 6));
        assert_eq!(t.poll_event(), Some(Event::Restarted(1)));
        for dt in [400, 800, 1200] {
            t.handle_timeout(now + dt * MS);
        }
        assert_eq!(t.poll_event(), Some(Event::Failed(1)));
        assert!(t.handle_heartbeat(now + 1300 * MS, 1, 7));
        assert_eq!(t.poll_event(), Some(Event::Restarted(1)), "back as a new run after its death");
        assert_eq!(t.poll_event(), None);
    }

    #[test]
    fn strangers_self_and_ids_out_of_range_are_refused() {
        let mut t = table();
        assert!(!t.handle_heartbeat(0, 3, 1));
        assert!(!t.handle_heartbeat(0, 0, 1));
        assert!(!t.handle_heartbeat(0, 1, 0));
        assert_eq!(t.refused, 3);
        let cfg = LivenessConfig::default();
        assert!(matches!(Liveness::<4>::new(0, 1, &[64], cfg, 0), Err(LivenessError::OutOfRange(_))));
        assert!(matches!(Liveness::<4>::new(0, 1, &[0], cfg, 0), Err(LivenessError::SelfAsPeer)));
        assert!(matches!(Liveness::<1>::new(0, 1, &[1, 2], cfg, 0), Err(LivenessError::TooManyPeers)));
    }

    #[test]
    fn a_peer_never_heard_is_never_a_member_and_never_failed() {
        let mut t = table();
        assert!(!t.settled(0));
        assert!(t.handle_heartbeat(10 * MS, 1, 5));
        assert!(!t.settled(10 * MS), "node 2 may still be starting");
        let mut now = 10 * MS;
        let mut events = [None; 4];
        let mut n = 0;
        while now < 5000 * MS {
            now += 100 * MS;
            t.handle_timeout(now);
            t.handle_heard(now, 1);
            t.handle_heard(now, 2);
            while let Some(e) = t.poll_event() {
                events[n] = Some(e);
                n += 1;
            }
        }
        assert_eq!(&events[..n], &[Some(Event::Joined(1))], "node 2 neither joins nor fails");
        assert!(t.settled(now), "settled once dead_after passed");
        assert_eq!(t.peer(2), Some(Peer::Unheard));
        assert!(t.members().contains(1) && !t.members().contains(2));
        assert_eq!(t.refused, 0, "other messages from configured peers are not refusals");
        // Heard at last: a member from then on.
        assert!(t.handle_heartbeat(now, 2, 9));
        assert_eq!(t.poll_event(), Some(Event::Joined(2)));
        assert!(t.settled(now));
    }

    #[test]
    fn settled_once_every_peer_was_heard_and_told() {
        let mut t = table();
        t.handle_heartbeat(10 * MS, 1, 5);
        t.handle_heartbeat(20 * MS, 2, 6);
        assert!(!t.settled(20 * MS), "heard, but the consumer's members do not have them yet");
        assert_eq!(t.poll_event(), Some(Event::Joined(1)));
        assert_eq!(t.poll_event(), Some(Event::Joined(2)));
        assert!(t.settled(20 * MS));
        assert_eq!(t.members().len(), 2);
    }

    #[test]
    fn other_messages_keep_an_alive_peer_alive_but_revive_nobody() {
        let mut t = table();
        t.handle_heartbeat(0, 1, 5);
        t.poll_event();
        for now in (100..=3000).step_by(100) {
            t.handle_heard(now * MS, 1);
            t.handle_timeout(now * MS);
        }
        assert_eq!(t.poll_event(), None, "a peer that keeps sending is alive");
        for now in (3100..=4500).step_by(100) {
            t.handle_timeout(now * MS);
        }
        assert_eq!(t.poll_event(), Some(Event::Failed(1)));
        t.handle_heard(4600 * MS, 1);
        assert_eq!(t.poll_event(), None, "only a heartbeat brings a dead peer back");
        assert_eq!(t.peer(1), Some(Peer::Dead { incarnation: 5 }));
    }

    #[test]
    fn an_older_incarnation_is_refused_while_the_newer_one_beats() {
        let mut t = table();
        // A member (or a replay of its old packets) alternating two incarnations.
        for k in 0..10u64 {
            let inc = if k % 2 == 0 { 5 } else { 9 };
            assert_eq!(t.handle_heartbeat(k * 100 * MS, 1, inc), inc == 9 || k == 0, "heartbeat {k}");
        }
        assert_eq!(t.stale_incarnations, 4);
        assert_eq!(t.poll_event(), Some(Event::Joined(1)));
        assert_eq!(t.poll_event(), None, "one restart at most, told as the newest run");
        assert_eq!(t.peer(1), Some(Peer::Alive { last: 900 * MS, incarnation: 9 }));
        // Other messages keep it alive but are no heartbeat of incarnation 9: once 9 has been
        // silent for `dead_after`, a lower one is a real restart (a random incarnation).
        t.handle_heard(1500 * MS, 1);
        assert!(!t.handle_heartbeat(1800 * MS, 1, 3));
        assert!(t.handle_heartbeat(1900 * MS, 1, 3));
        assert_eq!(t.poll_event(), Some(Event::Restarted(1)));
        assert_eq!(t.stale_incarnations, 5);
        // A higher one is taken at once.
        assert!(t.handle_heartbeat(2000 * MS, 1, 4));
        assert_eq!(t.poll_event(), Some(Event::Restarted(1)));
    }

    #[test]
    fn a_host_that_stalled_gives_its_peers_a_grace_period() {
        let mut t = table();
        t.handle_heartbeat(0, 1, 5);
        t.poll_event();
        t.handle_timeout(5000 * MS);
        assert_eq!(t.stalls, 1);
        assert_eq!(t.poll_event(), None, "silence while this host did not run is not a failure");
        for now in [5400, 5800, 6200] {
            t.handle_timeout(now * MS);
        }
        assert_eq!(t.poll_event(), Some(Event::Failed(1)));
    }

    /// Two nodes that heard each other compute one view; a restart of either gives
    /// another, so a message of the earlier run does not match.
    #[test]
    fn a_view_names_the_members_incarnations() {
        let cfg = LivenessConfig { interval_ns: 100, dead_after_ns: 1000 };
        let mut a = Liveness::<4>::new(0, 7, &[1], cfg, 0).unwrap();
        let mut b = Liveness::<4>::new(1, 9, &[0], cfg, 0).unwrap();
        a.handle_heartbeat(10, 1, 9);
        b.handle_heartbeat(10, 0, 7);
        let ids = [0, 1];
        assert_eq!(a.view(&ids), b.view(&ids));
        assert_ne!(a.view(&ids), crate::heartbeat::view_of(&ids));
        let mut b2 = Liveness::<4>::new(1, 10, &[0], cfg, 20).unwrap();
        b2.handle_heartbeat(30, 0, 7);
        a.handle_heartbeat(30, 1, 10);
        assert_eq!(a.view(&ids), b2.view(&ids));
        assert_ne!(a.view(&ids), b.view(&ids), "the restarted run's view is new");
    }
}
