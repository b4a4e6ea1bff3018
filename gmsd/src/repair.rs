// SPDX-License-Identifier: GPL-2.0-only
//! Re-replication: a replica this daemon wrote whose holder failed is put again from a
//! surviving copy, at a bounded rate. For each lost replica ([`Written::next_lost`]): a
//! getpage of a surviving replica (at the write's version or newer), then a putpage of the
//! lost one, at a newer version, to a target none of the page's live copies is on; once
//! stored, the page's record names the new holder ([`Written::replaced`]). At most
//! [`IN_FLIGHT`] at once and [`PER_SECOND`] started a second, and only while the clients'
//! window has room: repair never starves the clients' own operations.

use crate::targets::Targets;
use crate::written::Written;
use gms::prelude::*;
use std::collections::HashMap;
use std::time::{Duration, Instant};
use trapeze_node::gms::{replica, GmsPort, Got};

/// Repairs under way at most.
pub const IN_FLIGHT: usize = 4;
/// Repairs started a second at most.
pub const PER_SECOND: u32 = 2000;
/// How soon a repair that could not start (no target free of the page's copies, or all at
/// their cap) is tried again by a daemon with nothing else to do.
pub const RETRY: Duration = Duration::from_millis(1);

/// What a repair waits for.
struct Job {
    page: PageId,
    k: u8,
    /// The write's version (the record's).
    version: Version,
}

/// The repairs under way.
#[derive(Default)]
pub struct Repair {
    /// Getpages of surviving replicas.
    gets: HashMap<OpId, Job>,
    /// Putpages of replicas again: (replica's page, version) → (job, target).
    puts: HashMap<(PageId, u64), (Job, u16)>,
    next_at: Option<Instant>,
    /// The membership view in which the last attempt found too few live nodes for the
    /// page's copies: nothing starts until the view changes.
    blocked_in: Option<u64>,
    /// Replicas put again.
    pub done: u64,
}

impl Repair {
    /// Repairs under way.
    pub fn busy(&self) -> usize {
        self.gets.len() + self.puts.len()
    }

    /// When [`Self::start`] should be tried again, with `lost` replicas waiting in
    /// membership view `view`: when the rate allows the next one, or [`RETRY`] from `now`;
    /// never while the view has too few live nodes for them (a member joining wakes the
    /// daemon).
    pub fn poll_timeout(&self, lost: usize, view: u64, now: Instant) -> Option<Instant> {
        if lost == 0 || self.blocked_in == Some(view) {
            return None;
        }
        Some(self.next_at.filter(|&t| t > now).unwrap_or(now + RETRY))
    }

    /// Start repairs while the rate, [`IN_FLIGHT`] and the clients' window allow.
    pub fn start(&mut self, port: &mut GmsPort, written: &mut Written, window: usize) -> bool {
        let mut any = false;
        let now = Instant::now();
        self.blocked_in = None;
        while self.busy() < IN_FLIGHT && port.in_flight() < window && self.next_at.is_none_or(|t| now >= t) {
            let Some((page, k)) = written.next_lost() else { break };
            let Some(rec) = written.get(&page).copied() else { continue };
            let me = port.id();
            if port.node.members().ids().iter().filter(|&&n| n != me).count() < rec.holders.len() {
                // Too few live nodes for the page's copies: wait for a member to (re)join.
                written.retry_lost_later(page, k);
                self.blocked_in = Some(port.node.members().view());
                break;
            }
            // A live copy to read: the first replica whose holder did not fail.
            let Some(j) = (0..rec.holders.len() as u8).find(|&j| rec.lost & (1 << j) == 0) else { continue };
            if rec.lost & (1 << k) == 0 {
                continue; // put again already
            }
            match port.get_start(replica(page, j)) {
                Ok(op) => {
                    self.gets.insert(op, Job { page, k, version: rec.version });
                    let step = Duration::from_secs(1) / PER_SECOND;
                    self.next_at = Some(self.next_at.map_or(now, |t| t.max(now)) + step);
                    any = true;
                }
                Err(_) => {
                    written.retry_lost(page, k);
                    break;
                }
            }
        }
        any
    }

    /// Take finished getpages and put the replicas they read.
    pub fn poll(
        &mut self,
        port: &mut GmsPort,
        targets: &mut Targets,
        written: &mut Written,
        window: usize,
        mut newer: impl FnMut() -> Version,
    ) -> bool {
        if self.gets.is_empty() {
            return false;
        }
        let mut any = false;
        let ops: Vec<OpId> = self.gets.keys().copied().collect();
        for op in ops {
            let Some(got) = port.get_poll(op) else { continue };
            any = true;
            let job = self.gets.remove(&op).expect("key taken from the map");
            let data = match got {
                Got::Hit { version, data, .. } if version >= job.version => data,
                // No current copy read now (its registration may be on its way): the
                // replica waits for another try (skipped once every copy is lost).
                _ => {
                    tracing::debug!(page = ?job.page, k = job.k, "re-replication: no current copy read");
                    written.retry_lost_later(job.page, job.k);
                    continue;
                }
            };
            if written.get(&job.page).is_none_or(|r| r.version != job.version) {
                continue; // written again since
            }
            let me = port.id();
            let members: Vec<u16> = port.node.members().ids().iter().copied().filter(|&n| n != me).collect();
            // Clear of every node that may hold another replica's newest data.
            let avoid = written.avoid(&job.page, job.k, &members);
            let now = Instant::now();
            let c = port.coordinator();
            let Some(target) = targets.pick(&mut port.lru, c, &members, window, now, &avoid) else {
                // No node free of the page's copies (or all at their cap): later.
                written.retry_lost(job.page, job.k);
                continue;
            };
            let v = newer();
            let rpage = replica(job.page, job.k);
            match port.put(rpage, v, &data, Some(target)) {
                Ok(_) => {
                    self.puts.insert((rpage, v.0), (job, target));
                }
                Err(e) => {
                    targets.done(target, None, now);
                    tracing::debug!("re-replication put: {e:#}");
                    written.retry_lost(job.page, job.k);
                }
            }
        }
        any
    }

    /// A putpage finished: whether it was a repair's (then handled here).
    pub fn put_done(
        &mut self,
        rpage: PageId,
        version: Version,
        r: &PutResult,
        targets: &mut Targets,
        written: &mut Written,
    ) -> bool {
        let Some((job, target)) = self.puts.remove(&(rpage, version.0)) else { return false };
        targets.done(target, Some(r), Instant::now());
        match r {
            PutResult::Stored { target } => {
                if written.replaced(job.page, job.k, job.version, *target) {
                    self.done += 1;
                }
            }
            _ => written.retry_lost_later(job.page, job.k),
        }
        true
    }
}
