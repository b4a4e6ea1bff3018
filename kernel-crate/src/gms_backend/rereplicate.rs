// SPDX-License-Identifier: GPL-2.0-only
//! Re-replication: once a member is declared failed, every page that had a replica on it
//! gets that replica back on another member; once a member is back (admitted again, or
//! restarted), every replica that has no holder — it was on that member, or a write
//! found no member for it — gets one, while enough members live to place it. Each copy
//! comes from a surviving replica (a getpage, then a putpage of the same frame). A scan
//! walks the disk's pages; a few copies are in
//! flight at a time, and only while no disk page waits in the backlog (the disk's own I/O
//! goes first). A write of the page meanwhile makes the copy moot: it is dropped before
//! its put if either replica's version moved. A pass that found lost replicas is followed
//! by another, [`PASS_GAP_NS`] later (a copy that failed — e.g. fetched before its holder
//! had registered it with its new directory node — is made then), up to [`PASSES`]; each
//! pass's count of lost replicas it met is `disk_replicas_short` (0: every page has its
//! copies again).

use super::sites::Place;
use super::{DiskCore, DiskState, InFlight, DISK_SPACE, NO_TARGET, OPS_RESERVE};
use crate::blk::PAGE_BYTES;
use crate::net::{Frame, KHost, OPS};
use crate::stats::STATS;
use crate::tpz::gms::placement::Outcome;
use crate::tpz::gms::prelude::*;
use crate::tpz::gms::replica::replica;
use crate::tpz::netrpc::prelude::Mode;

/// Copies in flight at once (fetches, fetched copies waiting for their put, and puts).
pub(super) const IN_FLIGHT: usize = 4;
/// Pages the scan looks at per call.
const SCAN: u64 = 1024;
/// Passes over the disk after a failure, at most.
pub(super) const PASSES: u8 = 10;
/// The wait before a pass that follows one which met lost replicas.
const PASS_GAP_NS: u64 = 1_000_000_000;

/// What an operation of re-replication is for: replica `k` of its page, whose version was
/// `want` when the scan found its holder gone.
#[derive(Clone, Copy)]
pub(super) struct Rerep {
    k: u8,
    want: u64,
}

/// A surviving replica fetched into `frame` (disarmed: the disk's own now), waiting for
/// its put as replica `rerep.k`; `src` is the replica it came from, at version `version`.
pub(super) struct Fetched {
    page: u64,
    src: u8,
    version: u64,
    rerep: Rerep,
    frame: Frame,
}

impl DiskState {
    /// Re-replication operations under way.
    fn rerep_busy(&self) -> usize {
        self.in_flight.iter().flatten().filter(|f| f.rerep.is_some()).count() + self.fetched.iter().flatten().count()
    }

    /// The next page (from the scan's cursor) with a replica on a failed member and
    /// another one to copy it from: (page, the lost replica, its version, the source
    /// replica, its version). Moves the cursor past it; `None` when this call's share of
    /// the scan is done (the cursor is cleared at the disk's end).
    fn next_lost(&mut self, now: u64) -> Option<(u64, u8, u64, u8, u64)> {
        let pages = (self.versions.len() / usize::from(self.replicas)) as u64;
        let from = self.rerep_from?;
        if now < self.rerep_not_before {
            return None;
        }
        let placeable = self.placement.targets().count() >= usize::from(self.replicas);
        for page in from..(from + SCAN).min(pages) {
            self.rerep_from = Some(page + 1);
            let Some(i0) = self.at(page, 0) else { continue };
            if self.versions[i0] == 0 {
                continue;
            }
            let replica_at = |k: u8| self.at(page, k).map(|i| (self.targets[i], self.versions[i]));
            // Lost: its holder failed, or it has none (a write found no member for it, or
            // its holder came back without it) and enough members live to place it.
            let lost = (0..self.replicas)
                .find(|&k| replica_at(k).is_some_and(|(t, _)| if t == NO_TARGET { placeable } else { !self.live(t) }));
            let src = (0..self.replicas).find(|&k| replica_at(k).is_some_and(|(t, _)| self.live(t)));
            let copy = match (lost, src) {
                (Some(k), Some(j)) => Some((page, k, replica_at(k)?.1, j, replica_at(j)?.1)),
                _ => None,
            };
            if lost.is_some() {
                self.rerep_short += 1;
            }
            if copy.is_some() {
                return copy;
            }
        }
        if from + SCAN >= pages {
            // The pass is over: another one if it met lost replicas.
            STATS.disk_rereplicate_passes.inc();
            STATS.disk_replicas_short.set(self.rerep_short);
            self.rerep_from = None;
            if self.rerep_short > 0 && self.rerep_passes_left > 0 {
                self.rerep_passes_left -= 1;
                self.start_rereplication(now.saturating_add(PASS_GAP_NS));
            }
        }
        None
    }

    /// Start a pass of re-replication at `at` (ns).
    pub(super) fn start_rereplication(&mut self, at: u64) {
        self.rerep_from = Some(0);
        self.rerep_short = 0;
        self.rerep_not_before = at;
    }
}

/// Fetch and put copies while there is room and no disk page waits. Whether anything was
/// issued (flush after).
pub(super) fn issue_rereplication(core: &mut DiskCore, now: u64) -> bool {
    let mut issued = put_fetched(core, now);
    loop {
        let c = &mut *core;
        let Some(d) = c.client.as_mut() else { return issued };
        if d.rerep_from.is_none()
            || d.queued > 0
            || d.rerep_busy() >= IN_FLIGHT
            || c.node.ops_in_use() + OPS_RESERVE + 4 >= OPS
            || c.node.host.free_frames() < 8
        {
            return issued;
        }
        let Some((page, k, want, src, version)) = d.next_lost(now) else { return issued };
        let Some(reply_to) = c.node.host.solicit() else { return issued };
        let Some(&f) = reply_to.caller_frame() else { return issued };
        let id = replica(PageId::new(DISK_SPACE, page), src);
        match c.node.getpage(now, &mut c.rpc, id, reply_to, Mode::NonBlocking) {
            Ok(op) => {
                if let Some(d) = c.client.as_mut() {
                    let rerep = Some(Rerep { k, want });
                    d.in_flight[usize::from(op.slot)] =
                        Some(InFlight { rerep, ..InFlight::new(op, f, false, src, version) });
                }
                issued = true;
            }
            Err(_) => {
                c.node.host.release(f);
                STATS.disk_rereplicate_failed.inc();
                return issued;
            }
        }
    }
}

/// Put the fetched copies whose page was not written meanwhile.
fn put_fetched(core: &mut DiskCore, now: u64) -> bool {
    let mut issued = false;
    let slots = core.client.as_ref().map_or(0, |d| d.fetched.len());
    for s in 0..slots {
        let c = &mut *core;
        let coordinator = c.node.lru_coordinator();
        let Some(d) = c.client.as_mut() else { return issued };
        let Some(x) = d.fetched[s].take() else { continue };
        let (Some(ik), Some(isrc)) = (d.at(x.page, x.rerep.k), d.at(x.page, x.src)) else {
            c.node.host.release(x.frame);
            continue;
        };
        if d.versions[ik] != x.rerep.want || d.versions[isrc] != x.version {
            // Written since: the write put both replicas anew.
            c.node.host.release(x.frame);
            continue;
        }
        // Placed like a write's replica, with no wait: `u8::MAX` rounds waited already.
        let Place::At(target, _) = d.place(x.page, x.rerep.k, u8::MAX, now, &mut c.lru, coordinator) else {
            c.node.host.release(x.frame);
            STATS.disk_rereplicate_failed.inc();
            continue;
        };
        let id = replica(PageId::new(DISK_SPACE, x.page), x.rerep.k);
        let v = x.rerep.want + 1;
        let len = PAGE_BYTES as u32;
        match c.node.putpage(now, &mut c.rpc, id, Version(v), x.frame, len, target, false, Mode::NonBlocking) {
            Ok(op) => {
                if let Some(d) = c.client.as_mut() {
                    d.versions[ik] = v;
                    let rerep = Some(x.rerep);
                    let put = InFlight::new(op, x.frame, true, x.rerep.k, v);
                    d.in_flight[usize::from(op.slot)] = Some(InFlight { target, rerep, ..put });
                }
                issued = true;
            }
            Err(_) => {
                c.node.host.release(x.frame);
                if let Some(d) = c.client.as_mut() {
                    d.placement.done(target, Outcome::Failed, now);
                }
                STATS.disk_rereplicate_failed.inc();
            }
        }
    }
    issued
}

/// A re-replication operation ended (`f` was taken from the in-flight table). A fetch
/// that found another version because the page was written meanwhile is moot, not a
/// failure: the write put both replicas anew.
pub(super) fn completed(host: &mut KHost, d: &mut DiskState, f: InFlight, r: Rerep, done: &Completion<Frame>) {
    let page = done.page.page;
    let written = !f.write && d.at(page, f.replica).map_or(true, |i| d.versions[i] != f.version);
    let failed = || {
        if !written {
            STATS.disk_rereplicate_failed.inc();
        }
    };
    match done.result {
        OpResult::Put(result) if f.write => {
            let stored = matches!(result, PutResult::Stored { .. });
            let outcome = if stored { Outcome::Stored } else { Outcome::Failed };
            d.placement.done(f.target, outcome, super::now_ns());
            if stored {
                if let Some(i) = d.at(page, r.k) {
                    d.stored_at(i, f.target);
                }
                STATS.disk_rereplicated.inc();
            } else {
                STATS.disk_rereplicate_failed.inc();
            }
            host.retire(f.frame);
        }
        OpResult::Get(GetResult::Hit { version, frame, len, held, .. }) if !held => {
            let good = version.0 == f.version && len as usize >= PAGE_BYTES;
            let slot = d.fetched.iter().position(|x| x.is_none());
            match slot {
                Some(s) if good && host.disarm_frame(frame) => {
                    d.fetched[s] = Some(Fetched { page, src: f.replica, version: f.version, rerep: r, frame });
                }
                // A frame whose IPT entry stays busy is leaked (counted by the runtime).
                Some(_) if good => failed(),
                _ => {
                    host.release(frame);
                    failed();
                }
            }
        }
        OpResult::Get(GetResult::Hit { .. }) => {
            host.release(f.frame);
            failed();
        }
        OpResult::Get(GetResult::Miss { frame, .. }) => {
            if let Some(fr) = frame {
                host.release(fr);
            }
            failed();
        }
        _ => {
            host.release(f.frame);
            failed();
        }
    }
}
