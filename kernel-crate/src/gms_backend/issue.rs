// SPDX-License-Identifier: GPL-2.0-only
//! Issuing the disk's pages to GMS: the backlog as putpages (placed by `gms::placement`)
//! and getpages, the prefetches read-ahead wants, and what happens to a page that could
//! not be issued.

use super::sites::Place;
use super::{complete, fail_io, write_failed, DiskCore, DiskState, InFlight, Waiting, DISK_SPACE, OPS_RESERVE};
use crate::blk::{PageIo, PAGE_BYTES};
use crate::net::OPS;
use crate::tpz::gms::placement::{Outcome, Via};
use crate::tpz::gms::prelude::*;
use crate::tpz::gms::replica::replica;
use crate::tpz::netrpc::prelude::Mode;

/// Issue backlogged disk pages while GMS has operation slots and frames. Returns
/// whether anything was issued (flush after).
pub(crate) fn issue(core: &mut DiskCore, now: u64) -> bool {
    issue_disk(core, now) | issue_prefetches(core, now) | super::rereplicate::issue_rereplication(core, now)
}

pub(super) fn issue_disk(core: &mut DiskCore, now: u64) -> bool {
    let mut issued = false;
    if let Some(d) = core.client.as_mut() {
        d.release_due(now);
    }
    loop {
        let c = &mut *core;
        let coordinator = c.node.lru_coordinator();
        let Some(d) = c.client.as_ref() else { return issued };
        if d.queued == 0 || c.node.ops_in_use() + OPS_RESERVE >= OPS || !c.node.host.can_lend(1) {
            return issued;
        }
        let Some(d) = c.client.as_mut() else { return issued };
        let Some(w) = d.pop() else { return issued };
        if w.probe > 0 {
            // A page an earlier load may have written: the next member is asked.
            if let Some(op) = super::recover::issue_probe(c, w, now) {
                if let Some(done) = c.node.host.take_done(op) {
                    complete(&mut c.node.host, &mut c.client, &done);
                }
                issued = true;
            }
            continue;
        }
        // A read goes with the next ones its member holds, in one round trip, if it can.
        let w = if w.write {
            w
        } else {
            match super::group::issue(c, w, now) {
                Ok(op) => {
                    // Answered inside the call (it found no in-flight entry then).
                    if let Some(done) = op.and_then(|op| c.node.host.take_done(op)) {
                        complete(&mut c.node.host, &mut c.client, &done);
                    }
                    issued = true;
                    continue;
                }
                Err(w) => w,
            }
        };
        let Some(d) = c.client.as_mut() else {
            fail_io(c, w.io);
            return issued;
        };
        let Waiting { page, io, write, ra, tries, since, replica: k, via_dir, .. } = w;
        let id = replica(PageId::new(DISK_SPACE, page), k);
        let Some(at) = d.at(page, k) else {
            d.fail(io);
            continue;
        };
        let v = d.versions[at];
        if write {
            // Each copy on its own member: clear of every member that may hold another
            // replica's newest data (`sites`).
            let (target, via) = match d.place(page, k, tries, now, &mut c.lru, coordinator) {
                Place::At(target, via) => (target, via),
                Place::UnderReplicated => {
                    // Fewer live targets than replicas: the write is stored without this copy.
                    d.under_replicated(page, k, io);
                    continue;
                }
                Place::Wait => {
                    d.wait_for_sites(Waiting { tries, since, replica: k, ..Waiting::new(page, io, true, false) }, now);
                    continue;
                }
                Place::Nowhere => {
                    write_failed(page, k, format_args!("no target"));
                    d.fail(io);
                    continue;
                }
            };
            match via {
                Via::Plan => crate::stats::STATS.lru_puts_by_plan.inc(),
                Via::Fallback => crate::stats::STATS.lru_puts_fallback.inc(),
            }
            // The page itself rides the send: lent to the NIC until the send is reaped.
            let Some(f) = c.node.host.lend(&io) else {
                unpick(c, target, now);
                write_failed(
                    page,
                    k,
                    format_args!("the page could not be lent to the NIC (the request ended, or a misaligned buffer)"),
                );
                fail_io(c, io);
                continue;
            };
            let nv = d.next_version(v);
            match c.node.putpage(
                now,
                &mut c.rpc,
                id,
                Version(nv),
                f,
                PAGE_BYTES as u32,
                target,
                false,
                Mode::NonBlocking,
            ) {
                Ok(op) => {
                    let d = c.client.as_mut();
                    if let Some(d) = d {
                        d.versions[at] = nv;
                        d.set_target(at, target);
                        let (io, put) = (Some(io), InFlight::new(op, f, true, k, nv));
                        d.in_flight[usize::from(op.slot)] = Some(InFlight { tries, since, target, io, ..put });
                    }
                    issued = true;
                }
                Err(e) => {
                    c.node.host.release(f);
                    unpick(c, target, now);
                    write_failed(page, k, format_args!("putpage to node {}: {:?}", target, e));
                    fail_io(c, io);
                }
            }
        } else {
            // A replica never stored (its write found no member for it, or its holder came
            // back without it), or whose holder has been declared failed, is not asked for
            // while another one is left.
            let gone = !d.live(d.targets[at]);
            if v == 0 || (gone && k + 1 < d.replicas) {
                if k + 1 < d.replicas {
                    d.next_replica(page, ra, Some(Waiting { replica: k + 1, ..Waiting::new(page, io, write, false) }));
                } else {
                    d.next_replica(page, ra, None);
                    d.fail(io);
                }
                continue;
            }
            // The reply lands in the request's own page, armed in the IPT.
            let Some(f) = c.node.host.lend(&io) else {
                fail_read(c, page, io, ra);
                continue;
            };
            let Some(reply_to) = c.node.host.arm(f) else {
                c.node.host.release(f);
                fail_read(c, page, io, ra);
                continue;
            };
            // Straight to the member the replica was put to (two messages, never three,
            // and no wait for a directory that moved with a failure to learn of the copy),
            // unless that member has been found without it.
            let holder = d.targets[at];
            let hinted = d.direct_reads && !via_dir && d.live(holder);
            // The holder's NIC answers it by itself when it told where (one-sided).
            let answer = Some(d.answers[at]).filter(|a| a.key != 0 && d.nic_answers);
            let r = if hinted {
                c.node.getpage_hinted(now, &mut c.rpc, id, Version(v), holder, answer, reply_to, Mode::NonBlocking)
            } else {
                c.node.getpage(now, &mut c.rpc, id, reply_to, Mode::NonBlocking)
            };
            match r {
                Ok(op) => {
                    // A getpage answered locally completed inside the call (and found no
                    // in-flight entry): handle that completion now.
                    let slot = usize::from(op.slot);
                    if let Some(d) = c.client.as_mut() {
                        let (io, get) = (Some(io), InFlight::new(op, f, false, k, v));
                        d.in_flight[slot] = Some(InFlight { tries, io, ra, hinted, ..get });
                    }
                    if let Some(done) = c.node.host.take_done(op) {
                        complete(&mut c.node.host, &mut c.client, &done);
                    }
                    issued = true;
                }
                Err(_) => {
                    c.node.host.release(f);
                    fail_read(c, page, io, ra);
                }
            }
        }
    }
}

/// Issue the prefetches read-ahead wants, while GMS has room.
pub(super) fn issue_prefetches(core: &mut DiskCore, now: u64) -> bool {
    let mut issued = false;
    loop {
        let c = &mut *core;
        if c.node.ops_in_use() + OPS_RESERVE + 4 >= OPS || c.node.host.free_frames() < 8 {
            return issued;
        }
        let Some(d) = c.client.as_mut() else { return issued };
        if !d.ra_on {
            return issued;
        }
        let DiskState { ra, versions, cache, .. } = &mut **d;
        // Pages never written read as zeros; cached ones need no fetch.
        let skip =
            |s: u64, p: u64| versions.get(p as usize).map_or(true, |&v| v == 0) || cache.contains(&PageId::new(s, p));
        let Some(p) = ra.poll_prefetch(skip) else { return issued };
        let page = p.page;
        let v = versions.get(page as usize).copied().unwrap_or(0);
        let Some(reply_to) = c.node.host.solicit() else {
            if let Some(d) = c.client.as_mut() {
                let _ = d.ra.complete(DISK_SPACE, page, false);
            }
            return issued;
        };
        let Some(&f) = reply_to.caller_frame() else { return issued };
        match c.node.getpage(now, &mut c.rpc, PageId::new(DISK_SPACE, page), reply_to, Mode::NonBlocking) {
            Ok(op) => {
                if let Some(d) = c.client.as_mut() {
                    let fetch = InFlight::new(op, f, false, 0, v);
                    d.in_flight[usize::from(op.slot)] = Some(InFlight { ra: true, prefetch: true, ..fetch });
                }
                if let Some(done) = c.node.host.take_done(op) {
                    complete(&mut c.node.host, &mut c.client, &done);
                }
                issued = true;
            }
            Err(_) => {
                c.node.host.release(f);
                if let Some(d) = c.client.as_mut() {
                    let _ = d.ra.complete(DISK_SPACE, page, false);
                }
                return issued;
            }
        }
    }
}

/// A read that could not be issued: fail it, and end its read-ahead entry (its parked
/// readers are queued as plain reads).
pub(super) fn fail_read(c: &mut DiskCore, page: u64, io: PageIo, ra: bool) {
    if let Some(d) = c.client.as_mut() {
        if ra {
            let _ = d.ra.complete(DISK_SPACE, page, false);
            d.wake(page, None);
        }
    }
    fail_io(c, io);
}

/// A put picked `target` but was never sent.
fn unpick(c: &mut DiskCore, target: u16, now: u64) {
    if let Some(d) = c.client.as_mut() {
        d.placement.done(target, Outcome::Failed, now);
    }
}
