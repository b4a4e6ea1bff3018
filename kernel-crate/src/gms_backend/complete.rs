// SPDX-License-Identifier: GPL-2.0-only
//! What happens when GMS finishes one of the disk's operations: a write's replica stored
//! (its token of the page completed), put again, or failed; a read filled, cached,
//! sent on to the next replica, tried again, or failed; re-replication's handed over.

use super::{rereplicate, DiskState, Waiting, DISK_SPACE, FULL_AFTER, MAX_TRIES, WRITE_FAILURES_LOGGED};
use crate::blk::{PageIo, PAGE_BYTES};
use crate::net::{now_ns, Frame, KHost, Pool};
use crate::sys::dma::DmaBuf;
use crate::tpz::gms::cache::Cached;
use crate::tpz::gms::placement::Outcome;
use crate::tpz::gms::prelude::*;
use kernel::prelude::*;

/// A GMS completion: a disk page's, handled here (`true`), or someone else's.
pub(super) fn complete(host: &mut KHost, disk: &mut Option<KBox<DiskState>>, done: &Completion<Frame>) -> bool {
    let Some(d) = disk.as_mut() else { return false };
    let slot = usize::from(done.op.slot);
    let Some(entry) = d.in_flight.get_mut(slot) else { return false };
    if !entry.as_ref().is_some_and(|f| f.op == done.op) {
        return false;
    }
    let Some(f) = entry.take() else { return false };
    if let Some(r) = f.rerep {
        rereplicate::completed(host, d, f, r, done);
        return true;
    }
    if f.probe > 0 {
        super::recover::completed(host, d, f, done);
        return true;
    }
    if f.group {
        super::group::completed(host, d, f, done);
        return true;
    }
    let page = done.page.page;
    // A write's frame rode a send: retired (freed once it completed; a lent page the
    // target stored is released at once). A read's frame is released (its IPT entry
    // disarmed) or, fetched ahead, cached; a moving read leaves GMS's frame with GMS.
    // A put's target learns how it ended (one that refused is skipped for a while); after
    // a refusal, whether another target takes puts.
    let elsewhere = match &done.result {
        OpResult::Put(r) if f.write => {
            if matches!(r, PutResult::Failed | PutResult::WrongView) {
                if let Some(i) = d.at(page, f.replica) {
                    d.unanswered(i, f.target);
                }
            }
            let outcome = match r {
                PutResult::Stored { .. } => Outcome::Stored,
                PutResult::Refused => Outcome::Refused,
                _ => Outcome::Failed,
            };
            d.placement.done(f.target, outcome, now_ns())
        }
        _ => false,
    };
    // The same page again: the next replica, or this one tried again.
    let again = |io: PageIo, write: bool, tries: u8, replica: u8| Waiting {
        tries,
        replica,
        ..Waiting::new(page, io, write, false)
    };
    // A read whose replica missed or was stale goes on to the next one.
    let next_replica = !f.write && f.io.is_some() && f.replica + 1 < d.replicas;
    let want = f.version;
    let stale = move |version: Version, len: u32| version.0 < want || (len as usize) < PAGE_BYTES;
    let (verdict, retire, release) = match done.result {
        OpResult::Put(PutResult::Stored { .. }) if f.write => {
            if let Some(c) = crate::stats::PUTS_TO.get(usize::from(f.target)) {
                c.inc();
            }
            if let Some(i) = d.at(page, f.replica) {
                d.stored_at(i, f.target);
                d.answers[i] = done.answer.unwrap_or_default();
            }
            // This replica's token of the page completes; the write ends with the last.
            // Its page, lent to the NIC, goes back at once: the target stored its bytes,
            // so the NIC is done reading them (the limbo would hold it, and so the
            // request, until the sends posted after it were reaped too).
            if Pool::is_lent(f.frame) {
                (Ok(()), None, Some(f.frame))
            } else {
                (Ok(()), Some(f.frame), None)
            }
        }
        // A target whose budget is full: put the page again at another, unless every
        // target refused lately (the cluster is full: the write fails).
        OpResult::Put(PutResult::Refused) if f.write && f.replica == 0 && elsewhere => {
            if let Some(io) = f.io {
                d.push_or_fail(again(io, true, 0, f.replica));
            }
            host.retire(f.frame);
            return true;
        }
        // No answer in time, or the membership changed: the outcome is unknown, so the
        // page is put again (a new version). A target in another view, or refusing while
        // busy with an older copy (a later replica, which must avoid the others' members;
        // replica 0 when every target refused lately, up to `FULL_AFTER` rounds), is asked
        // again a little later.
        OpResult::Put(r @ (PutResult::Failed | PutResult::WrongView | PutResult::Refused))
            if f.write && f.io.is_some() && (f.replica > 0 || r != PutResult::Refused || f.tries + 1 < FULL_AFTER) =>
        {
            if let Some(io) = f.io {
                let w = Waiting { since: f.since, ..again(io, true, f.tries, f.replica) };
                let why = format_args!("{:?} from node {} after {} tries", r, f.target, f.tries + 1);
                d.retry_write(w, r != PutResult::Failed, r == PutResult::Refused, now_ns(), why);
            }
            host.retire(f.frame);
            return true;
        }
        OpResult::Get(GetResult::Hit { version, frame, len, held, .. }) if next_replica && stale(version, len) => {
            d.next_replica(page, f.ra, f.io.map(|io| again(io, false, 0, f.replica + 1)));
            host.release(if held { f.frame } else { frame });
            return true;
        }
        // Refused with no member taking puts lately, `FULL_AFTER` rounds running: the
        // cluster is full (`ENOSPC`).
        OpResult::Put(r) => {
            let full = r == PutResult::Refused;
            if f.io.is_some() {
                let why = if full { ": no member has room" } else { "" };
                write_failed(
                    page,
                    f.replica,
                    format_args!("{:?} from node {} after {} tries{}", r, f.target, f.tries + 1, why),
                );
            }
            (Err(if full { ENOSPC } else { EIO }), Some(f.frame), None)
        }
        OpResult::Get(GetResult::Hit { version, frame, len, held, .. }) if !f.write => {
            let good = !stale(version, len);
            let r = if !good {
                Err(EIO)
            } else {
                // A read's reply landed in its own request page (lent, armed in the IPT);
                // a prefetch's in a frame of the pool, cached below.
                match f.io {
                    Some(_) if Pool::is_lent(frame) => Ok(()),
                    None if f.prefetch => Ok(()),
                    _ => Err(EIO),
                }
            };
            let mut release = Some(if held { f.frame } else { frame });
            let mut cache_it = false;
            if let Some(d) = disk.as_mut() {
                // Readers parked on this fetch get the same bytes (or are queued again).
                let buf = if good { host.ep.frame(frame) } else { None };
                d.wake(page, buf);
                if f.ra {
                    let _ = d.ra.complete(DISK_SPACE, page, good);
                }
                let current = d.version(page).is_some_and(|v| version.0 >= v);
                cache_it = f.prefetch && good && current && !held && d.ra_on;
            }
            if cache_it {
                // A frame whose IPT entry stays busy is leaked (counted), never cached.
                release = None;
                if host.disarm_frame(frame) {
                    match disk.as_mut() {
                        Some(d) => d.cache.insert(
                            PageId::new(DISK_SPACE, page),
                            Cached { version, frame, len: PAGE_BYTES as u32 },
                            |old| host.release(old),
                        ),
                        None => release = Some(frame),
                    }
                }
            }
            (r, None, release)
        }
        // No answer (a lost or late message, a membership change) is not a lost page: the
        // reader tries again, a few times.
        OpResult::Get(GetResult::Miss { reason: MissReason::Failed(_) | MissReason::Malformed, frame })
            if !f.write && f.io.is_some() && f.tries + 1 < MAX_TRIES =>
        {
            d.wake(page, None);
            if f.ra {
                let _ = d.ra.complete(DISK_SPACE, page, false);
            }
            if let Some(io) = f.io {
                d.counters.retries += 1;
                d.push_or_fail(again(io, false, f.tries + 1, f.replica));
            }
            if let Some(fr) = frame {
                host.release(fr);
            }
            return true;
        }
        // The member the replica was put to has no copy at its version (moved, dropped, or
        // older): the page's directory knows where it is.
        OpResult::Get(GetResult::Miss { reason: MissReason::NotCached, frame }) if f.hinted && f.io.is_some() => {
            if let Some(io) = f.io {
                d.push_or_fail(Waiting { via_dir: true, ..again(io, false, f.tries, f.replica) });
            }
            if let Some(fr) = frame {
                host.release(fr);
            }
            return true;
        }
        OpResult::Get(GetResult::Miss { frame, .. }) if next_replica => {
            d.next_replica(page, f.ra, f.io.map(|io| again(io, false, 0, f.replica + 1)));
            if let Some(fr) = frame {
                host.release(fr);
            }
            return true;
        }
        OpResult::Get(GetResult::Miss { frame, .. }) => {
            if let Some(d) = disk.as_mut() {
                d.wake(page, None);
                if f.ra {
                    let _ = d.ra.complete(DISK_SPACE, page, false);
                }
            }
            (Err(EIO), None, frame)
        }
        _ => (Err(EIO), None, Some(f.frame)),
    };
    if let (Some(d), true) = (disk.as_mut(), f.prefetch) {
        d.counters.prefetches += 1;
    }
    if let Some(io) = f.io {
        match disk.as_mut() {
            Some(d) => {
                match verdict {
                    Ok(()) if f.write && f.replica == 0 => d.counters.writes_ok += 1,
                    Ok(()) if f.write => {}
                    Ok(()) => d.counters.reads_ok += 1,
                    Err(e) => {
                        d.counters.errors += 1;
                        d.counters.full += u64::from(e == ENOSPC);
                    }
                }
                d.finish(io, verdict);
            }
            None => io.complete(verdict),
        }
    }
    if let Some(r) = retire {
        host.retire(r);
    }
    if let Some(r) = release {
        host.release(r);
    }
    true
}

/// Log why a write of `page` (its replica `k`) ends with an I/O error: the first
/// [`WRITE_FAILURES_LOGGED`] of them after the load.
pub(super) fn write_failed(page: u64, k: u8, why: core::fmt::Arguments<'_>) {
    static LOGGED: core::sync::atomic::AtomicU32 = core::sync::atomic::AtomicU32::new(0);
    if LOGGED.fetch_add(1, core::sync::atomic::Ordering::Relaxed) < WRITE_FAILURES_LOGGED {
        pr_warn!("gms0: write of page {} (replica {}) failed: {}\n", page, k, why);
    }
}

/// Copy a frame's first page into a read's request.
pub(super) fn fill_from(io: &PageIo, buf: &DmaBuf) -> Result {
    let mut chunk = [0u8; 256];
    for off in (0..PAGE_BYTES).step_by(chunk.len()) {
        buf.read(off, &mut chunk)?;
        io.fill(off, &chunk)?;
    }
    Ok(())
}
