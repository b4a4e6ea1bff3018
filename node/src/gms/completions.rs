// SPDX-License-Identifier: GPL-2.0-only
//! A port's client operations in flight, and what their completions do.

use super::GmsPort;
use crate::rpc::Frame;
use gms::placement::Outcome;
use gms::prelude::*;
use gms::reader::Heard;

/// Where a read was served from.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Source {
    /// The local page cache (no network).
    Cache,
    /// This node held the page itself.
    Local,
    TwoWay,
    ThreeWay,
}

/// What the client operation is for.
#[derive(Clone, Copy, Debug)]
pub(super) enum Pending {
    /// A getpage into `frame` (a solicited frame armed in the IPT), for the operation its
    /// caller knows (`for_op`: itself, or the answerable getpage it asks again for);
    /// `answerable`: sent to a holder's NIC ([`GmsPort::issue_get`]).
    Get { frame: Frame, issued: u64, kind: GetKind, for_op: OpId, answerable: bool },
    /// A putpage from `frame` to `target`.
    Put { frame: Frame, target: u16, version: Version },
}

/// Who a getpage is for.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum GetKind {
    /// [`GmsPort::get_start`]: the result is kept by operation for [`GmsPort::get_poll`].
    Plain,
    /// A reader's fetch through the cache: kept by page for the reader.
    Reader,
    /// Read-ahead: a hit goes into the cache; a miss that found no copy is remembered
    /// briefly for a reader that waited for it.
    Prefetch,
}

/// How long a prefetch's miss answers a reader that comes for the page (ns).
pub(super) const MISS_TTL: u64 = 100_000_000;

/// A finished get, kept until the reader takes it (fetches the cache cannot keep).
#[derive(Clone, Copy, Debug)]
pub(super) enum Finished {
    /// `len`: the page's length in bytes (the bytes the hit carried into `frame`).
    Hit { version: Version, frame: Frame, len: u32, source: Source },
    /// How the getpage missed (a reader's retry policy, [`gms::reader`], needs to know
    /// whether anyone answered).
    Miss(Heard),
}

impl GmsPort {
    pub(super) fn handle_completions(&mut self) -> bool {
        if self.node.host.done.is_empty() {
            return false;
        }
        let now = self.now();
        let done = std::mem::take(&mut self.node.host.done);
        for c in done {
            let Some((page, what)) = self.pending.remove(&c.op) else {
                match &mut self.store_done {
                    Some(d) => d.push(c),
                    None => self.release_completion(&c),
                }
                continue;
            };
            match (what, c.result) {
                (Pending::Get { kind, for_op, answerable: true, .. }, OpResult::Get(GetResult::Miss { frame, .. }))
                    if self.answers.remove(&page).is_some() =>
                {
                    // The holder has the page no more (nor does its NIC answer for it): ask
                    // GMS where it is now, for the same caller.
                    if let Some(f) = frame {
                        self.node.host.release(f);
                    }
                    if self.issue_get_for(page, kind, false, Some(for_op)).is_err() {
                        self.stats.gets_miss += 1;
                        self.finish_get(page, kind, for_op, Finished::Miss(Heard::NoAnswer), now);
                    }
                }
                (Pending::Get { frame, issued, kind, for_op, .. }, OpResult::Get(r)) => {
                    let fin = match r {
                        GetResult::Hit { version, frame: f, len, via, held } => {
                            let source = match via {
                                Via::Local => Source::Local,
                                Via::TwoWay => Source::TwoWay,
                                Via::ThreeWay => Source::ThreeWay,
                            };
                            match via {
                                Via::TwoWay => self.lat_2way.push(now - issued),
                                Via::ThreeWay => self.lat_3way.push(now - issued),
                                Via::Local => {}
                            }
                            self.stats.gets_hit += 1;
                            self.stats.bytes_in += len as u64;
                            if held {
                                // A moving read made this node the holder: copy out of GMS's frame.
                                let mine = frame;
                                let ok = self.node.host.copy_payload(&f, &mine, len);
                                // A frame whose IPT entry stays busy is leaked (counted).
                                match (self.node.host.frames.unarm(mine), ok) {
                                    (true, true) => Finished::Hit { version, frame: mine, len, source },
                                    (true, false) => {
                                        self.node.host.frames.free(mine);
                                        Finished::Miss(Heard::NoAnswer)
                                    }
                                    (false, _) => Finished::Miss(Heard::NoAnswer),
                                }
                            } else if self.node.host.frames.unarm(f) {
                                Finished::Hit { version, frame: f, len, source }
                            } else {
                                Finished::Miss(Heard::NoAnswer)
                            }
                        }
                        GetResult::Miss { frame: f, reason } => {
                            self.stats.gets_miss += 1;
                            if let Some(f) = f {
                                self.node.host.release(f);
                            }
                            Finished::Miss(Heard::of_miss(reason))
                        }
                    };
                    self.finish_get(page, kind, for_op, fin, now);
                }
                (Pending::Put { frame, target, version }, OpResult::Put(r)) => {
                    // The send may not be reaped yet: free after the sends posted so far.
                    self.node.host.frames.retire(frame);
                    let outcome = match r {
                        PutResult::Stored { .. } => {
                            self.stats.puts_stored += 1;
                            Outcome::Stored
                        }
                        PutResult::Refused | PutResult::Busy => {
                            self.stats.puts_refused += 1;
                            Outcome::Refused
                        }
                        _ => {
                            self.stats.puts_other += 1;
                            Outcome::Failed
                        }
                    };
                    self.placement.done(target, outcome, now);
                    match (r, c.answer) {
                        (PutResult::Stored { target }, Some(a)) => {
                            self.answers.insert(page, (target, version, a));
                        }
                        (PutResult::Stored { .. }, None) => {
                            self.answers.remove(&page);
                        }
                        _ => {}
                    }
                    self.put_log.push((page, version, r));
                }
                (Pending::Get { frame, .. }, _) => self.node.host.release(frame),
                (Pending::Put { frame, .. }, _) => self.node.host.frames.retire(frame),
            }
        }
        true
    }

    /// Hand a finished get to whoever waits for it.
    fn finish_get(&mut self, page: PageId, kind: GetKind, op: OpId, fin: Finished, now: u64) {
        if kind != GetKind::Plain {
            self.ra.complete(page.space, page.page, matches!(fin, Finished::Hit { .. }));
        }
        match (kind, fin) {
            (GetKind::Plain, fin) => {
                self.plain.insert(op, fin);
            }
            (GetKind::Prefetch, Finished::Hit { version, frame, len, .. }) => {
                self.cache_insert(page, version, frame, len)
            }
            // A prefetch that got no answer says nothing of the page: its reader asks itself.
            (GetKind::Prefetch, Finished::Miss(heard)) if heard != Heard::NotFound => {}
            (GetKind::Prefetch, Finished::Miss(_)) => {
                if self.missed.len() > 4096 {
                    self.missed.retain(|_, t| now.saturating_sub(*t) < MISS_TTL);
                }
                self.missed.insert(page, now);
            }
            (GetKind::Reader, fin) => {
                if let Some(Finished::Hit { frame, .. }) = self.finished.insert(page, fin) {
                    self.node.host.frames.free(frame);
                }
            }
        }
    }
}
