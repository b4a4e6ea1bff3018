// SPDX-License-Identifier: GPL-2.0-only
//! A reloaded disk finds what an earlier load of the module wrote.
//!
//! The versions of a load live in its memory, so a new load starts knowing no page. The
//! first read of a page it has not written (nor looked for) asks every member in turn
//! (in order of node id, so a member failing meanwhile skips none), straight (`GmsNode::getpage_hinted`, so a directory that is still being filled again
//! after the reload cannot answer for the holder), each for a version newer than the best
//! found so far: a hit lands in the request's page and raises the best, a miss leaves
//! the page alone, so once every member has answered the page holds the newest copy any
//! member keeps. Its version and holder are recovered (later reads go straight there,
//! and a write puts a version above it); re-replication makes the page's other replicas
//! again from it. A page no member holds, for any replica, is known unwritten from then
//! on and reads as zeros without the network. A member that does not answer is asked
//! again, up to [`super::MAX_TRIES`] tries; then the read fails (`EIO`) rather than guess.
//!
//! Every replica counts: replica `k + 1` is looked for only when no member held replica
//! `k`. What cannot be told apart without a record of the written pages kept in the
//! cluster: a page never written reads as zeros, and so does one whose every copy died
//! before the reload.

use super::{fail_io, DiskCore, DiskState, InFlight, Waiting, MAX_TRIES};
use crate::net::{Frame, KHost};
use crate::tpz::gms::prelude::*;
use crate::tpz::gms::replica::replica;
use crate::tpz::netrpc::prelude::Mode;

impl DiskState {
    /// Whether `page` is known to this load: written by it, or looked for.
    pub(super) fn known(&self, page: u64) -> bool {
        let Ok(p) = usize::try_from(page) else { return true };
        self.known.get(p / 64).map_or(true, |w| w & (1 << (p % 64)) != 0)
    }

    pub(super) fn set_known(&mut self, page: u64) {
        if let Some(w) = usize::try_from(page).ok().and_then(|p| self.known.get_mut(p / 64).map(|w| (w, p % 64))) {
            *w.0 |= 1 << w.1;
        }
    }
}

/// Ask the next member for `w`'s replica (the read is probing: `w.probe` > 0), or, once
/// every member answered, finish it. Core lock held; the operation sent, whose completion
/// the caller takes if it already came (a local answer).
pub(super) fn issue_probe(c: &mut DiskCore, w: Waiting, now: u64) -> Option<OpId> {
    let d = c.client.as_mut()?;
    let (page, k) = (w.page, w.replica);
    let Some(at) = d.at(page, k) else {
        d.fail(w.io);
        return None;
    };
    let best = d.versions[at];
    let next = d.placement.targets().filter(|&t| u32::from(t) + 2 > w.probe).min();
    let Some(member) = next else {
        // Every member answered for this replica.
        if w.found {
            // Found on a later replica, none holding the first: the first gets that
            // version with no holder, so reads go on to this one and re-replication
            // makes the first again.
            if let (Some(i0), true) = (d.at(page, 0), k > 0) {
                if d.versions[i0] == 0 {
                    d.versions[i0] = best;
                    d.set_target(i0, super::NO_TARGET);
                }
            }
            d.set_known(page);
            d.counters.recovered += 1;
            d.counters.reads_ok += 1;
            d.finish(w.io, Ok(()));
        } else if best != 0 {
            // Written meanwhile by this load: an ordinary read of what it wrote.
            d.push_or_fail(Waiting { probe: 0, tries: 0, ..w });
        } else if k + 1 < d.replicas {
            d.push_or_fail(Waiting { replica: k + 1, probe: 1, tries: 0, ..w });
        } else {
            d.set_known(page);
            let r = w.io.fill_zero();
            match r {
                Ok(()) => d.counters.reads_zero += 1,
                Err(_) => d.counters.errors += 1,
            }
            d.finish(w.io, r);
        }
        return None;
    };
    let id = replica(PageId::new(super::DISK_SPACE, page), k);
    let Some(f) = c.node.host.lend(&w.io) else {
        fail_io(c, w.io);
        return None;
    };
    let Some(reply_to) = c.node.host.arm(f) else {
        c.node.host.release(f);
        fail_io(c, w.io);
        return None;
    };
    let want = best + 1;
    match c.node.getpage_hinted(now, &mut c.rpc, id, Version(want), member, None, reply_to, Mode::NonBlocking) {
        Ok(op) => {
            if let Some(d) = c.client.as_mut() {
                let get = InFlight::new(op, f, false, k, want);
                let Waiting { io, tries, probe, found, .. } = w;
                let probe = InFlight { io: Some(io), tries, probe, found, target: member, ..get };
                d.in_flight[usize::from(op.slot)] = Some(probe);
            }
            Some(op)
        }
        Err(_) => {
            c.node.host.release(f);
            fail_io(c, w.io);
            None
        }
    }
}

/// A probe ended: the member had the replica at `want` or newer (the best so far, its
/// bytes in the page), had not, or did not answer (asked again, a few times).
pub(super) fn completed(host: &mut KHost, d: &mut DiskState, f: InFlight, done: &Completion<Frame>) {
    let page = done.page.page;
    let Some(io) = f.io else {
        host.release(f.frame);
        return;
    };
    let asked = u32::from(f.target) + 2;
    let next = Waiting { probe: asked, found: f.found, replica: f.replica, ..Waiting::new(page, io, false, false) };
    match done.result {
        OpResult::Get(GetResult::Hit { version, frame, len, .. }) => {
            // A copy newer than the best so far (and than anything this load wrote since):
            // its bytes are in the page.
            let newer = d.at(page, f.replica).filter(|&i| version.0 > d.versions[i]);
            let whole = version.0 >= f.version && len as usize == crate::blk::PAGE_BYTES && frame == f.frame;
            let found = match newer {
                Some(i) if whole => {
                    d.versions[i] = version.0;
                    d.stored_at(i, f.target);
                    true
                }
                _ => f.found,
            };
            host.release(f.frame);
            if frame != f.frame {
                host.release(frame);
            }
            d.push_or_fail(Waiting { found, ..next });
        }
        OpResult::Get(GetResult::Miss { reason: MissReason::Failed(_) | MissReason::Malformed, frame }) => {
            if let Some(fr) = frame {
                host.release(fr);
            }
            // A member that never answers leaves the page undecided: an I/O error.
            if f.tries + 1 < MAX_TRIES {
                d.counters.retries += 1;
                d.push_or_fail(Waiting { probe: f.probe, tries: f.tries + 1, ..next });
            } else {
                d.fail(next.io);
            }
        }
        OpResult::Get(GetResult::Miss { frame, .. }) => {
            if let Some(fr) = frame {
                host.release(fr);
            }
            d.push_or_fail(next);
        }
        _ => {
            host.release(f.frame);
            d.fail(next.io);
        }
    }
}
