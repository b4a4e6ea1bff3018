// SPDX-License-Identifier: GPL-2.0-only
//! The simulated network: messages between node ids on the virtual clock, with latency,
//! loss, duplication, reordering and partitions, every choice drawn from the caller's
//! [`Rng`].
//!
//! A sent message becomes a [`Packet`] in flight, due after its latency. The driver asks
//! [`Net::poll`] for the next delivery when it chooses (between workload steps, or until
//! the network is empty); it names the packet's fate. The draws, in this order, are the
//! whole of the network's randomness:
//!
//! 1. which due packet: the first in queue order, or with `reorder` one uniformly among
//!    the due ones (one draw, also when only one is due);
//! 2. with faults on: whether it is duplicated (one draw). A duplicate is delivered now
//!    and the original stays in flight, to be delivered again later: the receiver's
//!    protocol sees the same message twice, as when a link retransmits a frame whose
//!    acknowledgement was lost — unlike back-to-back copies, which the link's reassembler
//!    suppresses before the protocol sees them;
//! 3. with faults on: whether it is lost (one draw);
//! 4. with a latency range: each send, and a duplicate's original, draw a latency.
//!
//! A partition ([`Net::partition`]) gives each node a side; a packet is lost at delivery
//! when its ends are on different sides, until [`Net::heal`]. Packets already in flight
//! are judged when delivered, so a message sent before a cut may die at it and one sent
//! during it may survive past the heal. Whether a node is up is the driver's business:
//! the network delivers to crashed nodes too, and the driver throws those away.

use crate::rng::Rng;
use core::ops::Deref;

/// The network's fault knobs.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Faults {
    /// Percent of deliveries lost.
    pub loss_pct: u32,
    /// Percent of deliveries duplicated.
    pub dup_pct: u32,
    /// Deliver due packets in random order rather than in queue order.
    pub reorder: bool,
    /// Ticks a packet is in flight: uniform in `latency.0..=latency.1` (no draw when the
    /// range is one value).
    pub latency: (u64, u64),
}

/// A message in flight from `src` to `dst`, deliverable from `due` on. Derefs to its
/// body, so a driver reads `packet.ctrl` for a body with a `ctrl` field.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Packet<M> {
    pub src: u16,
    pub dst: u16,
    pub due: u64,
    pub body: M,
}

impl<M> Packet<M> {
    /// A packet due at once (for a test to inject into the queue).
    pub fn new(src: u16, dst: u16, body: M) -> Packet<M> {
        Packet { src, dst, due: 0, body }
    }
}

impl<M> Deref for Packet<M> {
    type Target = M;
    fn deref(&self) -> &M {
        &self.body
    }
}

/// What became of a packet [`Net::poll`] took.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Fate {
    /// The driver hands it to the receiver.
    Arrives,
    /// The loss draw dropped it.
    Lost,
    /// Its ends are on different sides of a partition.
    Cut,
}

/// One delivery: the packet, whether it is a duplicate (the original is still in
/// flight), and its fate.
#[derive(Clone, Debug)]
#[must_use]
pub struct Delivery<M> {
    pub packet: Packet<M>,
    pub duplicate: bool,
    pub fate: Fate,
}

/// How many packets met each fate.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct NetStats {
    pub sent: u64,
    pub arrived: u64,
    pub lost: u64,
    pub duplicated: u64,
    pub cut: u64,
}

/// The packets in flight, the faults, the partition.
#[derive(Clone, Debug)]
pub struct Net<M> {
    pub faults: Faults,
    queue: Vec<Packet<M>>,
    sides: Option<Vec<u8>>,
    stats: NetStats,
}

impl<M: Clone> Net<M> {
    pub fn new(faults: Faults) -> Net<M> {
        Net { faults, queue: Vec::new(), sides: None, stats: NetStats::default() }
    }

    /// Put a message in flight.
    pub fn send(&mut self, rng: &mut Rng, now: u64, src: u16, dst: u16, body: M) {
        let due = now + self.latency(rng);
        self.stats.sent += 1;
        self.queue.push(Packet { src, dst, due, body });
    }

    fn latency(&self, rng: &mut Rng) -> u64 {
        let (lo, hi) = self.faults.latency;
        if hi > lo {
            lo + rng.below(hi - lo + 1)
        } else {
            lo
        }
    }

    /// Take the next packet due at `now` and decide its fate (see the module doc for the
    /// draws). `faults`: whether loss and duplication apply (a settling driver turns them
    /// off; partitions always apply). `None`: nothing is due.
    pub fn poll(&mut self, rng: &mut Rng, now: u64, faults: bool) -> Option<Delivery<M>> {
        let due = self.queue.iter().filter(|p| p.due <= now).count();
        if due == 0 {
            return None;
        }
        let k = if self.faults.reorder { rng.below(due as u64) as usize } else { 0 };
        let i = self.queue.iter().enumerate().filter(|(_, p)| p.due <= now).nth(k).map(|(i, _)| i)?;
        let duplicate = faults && rng.pct(self.faults.dup_pct);
        let packet = if duplicate {
            self.stats.duplicated += 1;
            let later = now + self.latency(rng);
            let copy = self.queue[i].clone();
            self.queue[i].due = self.queue[i].due.max(later);
            copy
        } else {
            self.queue.remove(i)
        };
        let fate = if faults && rng.pct(self.faults.loss_pct) {
            self.stats.lost += 1;
            Fate::Lost
        } else if self.is_cut(packet.src, packet.dst) {
            self.stats.cut += 1;
            Fate::Cut
        } else {
            self.stats.arrived += 1;
            Fate::Arrives
        };
        Some(Delivery { packet, duplicate, fate })
    }

    /// When the next packet becomes due (`None`: nothing in flight). A due packet's time
    /// may be in the past.
    pub fn poll_timeout(&self) -> Option<u64> {
        self.queue.iter().map(|p| p.due).min()
    }

    /// Cut the network: `sides[n]` is node n's side.
    pub fn partition(&mut self, sides: Vec<u8>) {
        self.sides = Some(sides);
    }

    /// End the partition; false if there was none.
    pub fn heal(&mut self) -> bool {
        self.sides.take().is_some()
    }

    /// Each node's side while the network is cut.
    pub fn sides(&self) -> Option<&[u8]> {
        self.sides.as_deref()
    }

    /// Whether a packet from `a` to `b` would be cut now.
    pub fn is_cut(&self, a: u16, b: u16) -> bool {
        let side = |n: u16| self.sides.as_ref().and_then(|s| s.get(n as usize).copied()).unwrap_or(0);
        self.sides.is_some() && side(a) != side(b)
    }

    pub fn stats(&self) -> NetStats {
        self.stats
    }

    pub fn len(&self) -> usize {
        self.queue.len()
    }

    pub fn is_empty(&self) -> bool {
        self.queue.is_empty()
    }

    /// The packets in flight, in queue order (send order unless a test rearranged it).
    pub fn queue(&self) -> &[Packet<M>] {
        &self.queue
    }

    /// The packets in flight, for a test to hold back, take, rearrange or inject
    /// ([`Packet::new`] is due at once). Queue order is delivery order without `reorder`.
    pub fn queue_mut(&mut self) -> &mut Vec<Packet<M>> {
        &mut self.queue
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn drain(net: &mut Net<u32>, rng: &mut Rng, now: u64) -> Vec<(u32, bool, Fate)> {
        core::iter::from_fn(|| net.poll(rng, now, true)).map(|d| (d.packet.body, d.duplicate, d.fate)).collect()
    }

    #[test]
    fn a_quiet_network_delivers_in_order_after_the_latency() {
        let mut rng = Rng::new(1, 0);
        let mut net = Net::new(Faults { latency: (5, 5), ..Faults::default() });
        for m in 0..4 {
            net.send(&mut rng, 10, 0, 1, m);
        }
        assert_eq!(net.poll_timeout(), Some(15));
        assert!(net.poll(&mut rng, 14, true).is_none(), "not due yet");
        let got = drain(&mut net, &mut rng, 15);
        assert_eq!(got, (0..4).map(|m| (m, false, Fate::Arrives)).collect::<Vec<_>>());
        assert_eq!(net.stats(), NetStats { sent: 4, arrived: 4, ..NetStats::default() });
    }

    #[test]
    fn a_duplicate_arrives_again_and_a_lost_packet_never() {
        let mut rng = Rng::new(2, 0);
        let faults = Faults { loss_pct: 20, dup_pct: 30, reorder: true, latency: (0, 3) };
        let mut net = Net::new(faults);
        for m in 0..200 {
            net.send(&mut rng, 0, 0, 1, m);
        }
        let mut arrivals = vec![0u32; 200];
        let mut now = 0;
        while let Some(t) = net.poll_timeout() {
            now = now.max(t);
            for (m, _, fate) in drain(&mut net, &mut rng, now) {
                arrivals[m as usize] += u32::from(fate == Fate::Arrives);
            }
        }
        let s = net.stats();
        assert_eq!(s.arrived + s.lost, s.sent + s.duplicated, "every copy met one fate");
        assert!(arrivals.iter().any(|&a| a >= 2), "a duplicate reaches the receiver as a second message");
        assert!(arrivals.contains(&0) && s.lost > 0);
        assert_eq!(arrivals.iter().map(|&a| u64::from(a)).sum::<u64>(), s.arrived);
    }

    #[test]
    fn reordering_permutes_and_the_seed_replays_it() {
        let run = |seed| {
            let mut rng = Rng::new(seed, 0);
            let mut net = Net::new(Faults { reorder: true, ..Faults::default() });
            (0..16).for_each(|m| net.send(&mut rng, 0, 0, 1, m));
            drain(&mut net, &mut rng, 0).into_iter().map(|d| d.0).collect::<Vec<_>>()
        };
        let order = run(3);
        assert_eq!(order, run(3));
        assert_ne!(order, (0..16).collect::<Vec<_>>());
        let mut sorted = order.clone();
        sorted.sort();
        assert_eq!(sorted, (0..16).collect::<Vec<_>>(), "nothing lost or doubled without faults");
    }

    #[test]
    fn a_partition_cuts_across_sides_until_healed() {
        let mut rng = Rng::new(4, 0);
        let mut net = Net::new(Faults::default());
        net.partition(vec![0, 0, 1]);
        assert!(net.is_cut(0, 2) && net.is_cut(2, 1) && !net.is_cut(0, 1));
        net.send(&mut rng, 0, 0, 2, 1);
        net.send(&mut rng, 0, 0, 1, 2);
        let fates: Vec<Fate> = drain(&mut net, &mut rng, 0).into_iter().map(|d| d.2).collect();
        assert_eq!(fates, [Fate::Cut, Fate::Arrives]);
        assert!(net.heal() && !net.heal());
        net.send(&mut rng, 0, 2, 0, 3);
        assert_eq!(drain(&mut net, &mut rng, 0), [(3, false, Fate::Arrives)]);
        assert_eq!(net.stats().cut, 1);
    }
}
