// SPDX-License-Identifier: GPL-2.0-only
//! Several pages in one round trip: the backlog's reads of pages that one member holds,
//! within `gms::ops::GETPAGES_SPAN` of the first, go as one `GETPAGES` (`gms::getpages`)
//! whose reply lands in their request pages at once — one IPT entry on a group of lent
//! pages (`net::pool`), which the holder fills from its frames in one gathered send. A
//! sequential read, or swap's read-ahead of eight slots, costs a message pair per member
//! rather than one per page.
//!
//! A hit finishes every page. Any other answer queues each page again, to be read alone
//! (`Waiting::solo`): its miss then asks the page's directory, and a lost message is
//! tried again, as for any read.

use super::{DiskCore, DiskState, InFlight, Waiting, DISK_SPACE};
use crate::blk::{PageIo, PAGE_BYTES};
use crate::net::pool::GROUP_FRAMES;
use crate::net::stack::Core;
use crate::net::{Frame, KHost};
use crate::stats::STATS;
use crate::tpz::gms::ops::GETPAGES_SPAN;
use crate::tpz::gms::prelude::*;
use crate::tpz::gms::replica::replica;
use crate::tpz::netrpc::prelude::Mode;

/// Reads looked at past the first for its group.
const LOOK_AHEAD: usize = 2 * GROUP_FRAMES;

/// The pages of one `GETPAGES` and their requests, in its mask's order.
pub(super) struct Pages(pub(super) [Option<(u64, PageIo)>; GROUP_FRAMES]);

impl Pages {
    const EMPTY: Option<(u64, PageIo)> = None;
    pub(super) const NONE: Pages = Pages([Self::EMPTY; GROUP_FRAMES]);

    /// The next page, taken out (in place: a kernel stack has no room for them all).
    pub(super) fn take_next(&mut self) -> Option<(u64, PageIo)> {
        self.0.iter_mut().find_map(Option::take)
    }
}

/// Whether `w`, a read of replica `k`, may go in a group to `holder`: a plain read (not
/// read-ahead's, not a probe, not one tried before or sent to the directory) of a page
/// whose replica was last put to `holder`.
fn groupable(d: &DiskState, w: &Waiting, k: u8, holder: u16) -> bool {
    let plain = !w.write && w.probe == 0 && !w.ra && !w.solo && w.tries == 0 && !w.via_dir && w.replica == k;
    plain && d.at(w.page, k).is_some_and(|at| d.targets[at] == holder && d.versions[at] != 0)
}

/// Issue `w` (a read just taken from the backlog) together with the next reads in the
/// backlog that the same member holds, as one `GETPAGES`: its operation (the caller
/// handles a completion that came inside the call). `Err(w)`: no group (no such
/// read, no lend slot or IPT entry, or GMS refused it): read `w` alone; the backlog is
/// as it was. The reads are gathered in the disk's state, not on the stack (which a
/// kernel's is too small for).
pub(super) fn issue(c: &mut DiskCore, w: Waiting, now: u64) -> Result<Option<OpId>, Waiting> {
    let Some(d) = c.client.as_mut() else { return Err(w) };
    let k = w.replica;
    let Some(holder) = d.at(w.page, k).map(|at| d.targets[at]) else { return Err(w) };
    if !d.direct_reads || !d.live(holder) || !groupable(d, &w, k, holder) {
        return Err(w);
    }
    let first = w.page;
    let mask = d.take_group(first, LOOK_AHEAD, |d, x| {
        let bit = x.page.wrapping_sub(first);
        (bit < GETPAGES_SPAN && groupable(d, x, k, holder)).then_some(bit)
    });
    // `w` is bit 0; the reply's pieces land in page order, the mask's.
    d.forming.0[0] = Some((w.page, w.io));
    let n = mask.count_ones() as usize;
    let mut known = [Version(0); GROUP_FRAMES];
    for (v, (page, _)) in known.iter_mut().zip(d.forming.0.iter().flatten()) {
        *v = d.at(*page, k).map_or(Version(0), |at| Version(d.versions[at]));
    }
    let sent = if n > 1 { send(c, mask, &known[..n], k, holder, now) } else { None };
    let Some(d) = c.client.as_mut() else { return Ok(None) };
    let Some((op, frame)) = sent else {
        // Back to the backlog's front, in order, but the first read, which goes alone.
        let again = |(page, io)| Waiting { replica: k, ..Waiting::new(page, io, false, false) };
        for i in (1..GROUP_FRAMES).rev() {
            if let Some(x) = d.forming.0[i].take() {
                d.unpop(again(x));
            }
        }
        return match d.forming.0[0].take() {
            Some(x) => Err(again(x)),
            None => Ok(None), // cannot be: the first read is bit 0
        };
    };
    STATS.disk_getpages.inc();
    STATS.disk_getpages_pages.add(n as u64);
    let slot = usize::from(op.slot);
    for i in 0..GROUP_FRAMES {
        d.groups[slot].0[i] = d.forming.0[i].take();
    }
    let min = known[..n].iter().min().map_or(0, |v| v.0);
    let get = InFlight::new(op, frame, false, k, min);
    d.in_flight[slot] = Some(InFlight { hinted: true, group: true, ..get });
    Ok(Some(op))
}

/// Lend the pages of the group being formed, arm one IPT entry on them all and ask
/// `holder` for them: the operation and the group's frame, or `None` with nothing lent
/// or sent.
fn send(c: &mut DiskCore, mask: u64, known: &[Version], k: u8, holder: u16, now: u64) -> Option<(OpId, Frame)> {
    let Core { node, client, rpc, .. } = c;
    let d = client.as_mut()?;
    let host = &mut node.host;
    if !host.can_lend(known.len()) {
        return None;
    }
    let mut lent = [0 as Frame; GROUP_FRAMES];
    let mut n = 0;
    for (f, (_, io)) in lent.iter_mut().zip(d.forming.0.iter().flatten()) {
        let Some(l) = host.lend(io) else { break };
        *f = l;
        n += 1;
    }
    let g = (n == known.len()).then(|| host.group(&lent[..n])).flatten();
    let Some(g) = g else {
        lent[..n].iter().for_each(|&f| host.release(f));
        return None;
    };
    // Releasing the group from here on gives its pages back.
    let Some(reply_to) = host.arm(g) else {
        host.release(g);
        return None;
    };
    let first = d.forming.0[0].as_ref()?.0;
    let id = replica(PageId::new(DISK_SPACE, first), k);
    match node.getpages_hinted(now, rpc, id, mask, known, holder, reply_to, Mode::NonBlocking) {
        Ok(op) => Some((op, g)),
        Err(_) => {
            node.host.release(g);
            None
        }
    }
}

/// How a `GETPAGES` of the disk ended (`f` its operation, `done` its completion).
pub(super) fn completed(host: &mut KHost, d: &mut DiskState, f: InFlight, done: &Completion<Frame>) {
    let slot = usize::from(done.op.slot);
    let n = d.groups[slot].0.iter().flatten().count();
    let (hit, frame) = match done.result {
        OpResult::Get(GetResult::Hit { frame, len, .. }) => {
            (len as usize == n * PAGE_BYTES && frame == f.frame, Some(frame))
        }
        OpResult::Get(GetResult::Miss { frame, .. }) => (false, frame),
        _ => (false, Some(f.frame)),
    };
    if !hit {
        STATS.disk_getpages_missed.inc();
    }
    while let Some((page, io)) = d.groups[slot].take_next() {
        if hit {
            d.counters.reads_ok += 1;
            d.finish(io, Ok(()));
        } else {
            d.push_or_fail(Waiting { solo: true, replica: f.replica, ..Waiting::new(page, io, false, false) });
        }
    }
    // The reply's pages are the requests' own: releasing the group gives them back.
    if let Some(fr) = frame {
        host.release(fr);
    }
}
