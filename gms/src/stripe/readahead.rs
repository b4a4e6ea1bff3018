// SPDX-License-Identifier: GPL-2.0-only
//! The striper's read-ahead: the sequential stream and its window, ahead slots a read
//! joins and copies from, fetches ahead per server, and invalidation by writes.

use super::*;

impl<Io: Copy, const SERVERS: usize, const REQS: usize, const CHUNKS: usize, const AHEAD: usize>
    Striper<Io, SERVERS, REQS, CHUNKS, AHEAD>
{
    /// The pieces `[from, to)` a range covers.
    fn pieces_of(&self, lo: u64, hi: u64) -> (u64, u64) {
        let p = u64::from(self.piece_bytes);
        (lo / p, hi.div_ceil(p))
    }

    /// Read `r` takes every piece it overlaps that a slot holds (or is fetching).
    pub(super) fn join_ahead(&mut self, r: usize) {
        let Some(q) = self.reqs[r] else { return };
        let (from, to) = self.pieces_of(q.offset, q.end);
        for a in self.ahead.iter_mut() {
            if a.fresh_piece().is_some_and(|p| (from..to).contains(&p)) {
                if let Ahead::Fetching { waiters, .. } | Ahead::Ready { waiters, .. } = a {
                    *waiters |= 1 << r;
                }
            }
        }
    }

    /// The first byte at or after `v` (a piece start on its server) of request `r` that
    /// is not in a piece `r` takes from a slot.
    pub(super) fn skip_joined(&self, r: usize, mut v: u64, end: u64) -> u64 {
        let p = u64::from(self.piece_bytes);
        while v < end {
            let piece = v / p;
            let joined = self.ahead.iter().any(|a| match *a {
                Ahead::Fetching { piece: h, waiters, .. } | Ahead::Ready { piece: h, waiters, .. } => {
                    h == piece && waiters & (1 << r) != 0
                }
                Ahead::Free => false,
            });
            if !joined {
                return v;
            }
            v = self.layout.next_on((piece + 1) * p);
        }
        end
    }

    /// Whether request `r` still waits for a slot to copy from.
    pub(super) fn waits_on_ahead(&self, r: usize) -> bool {
        self.ahead.iter().any(|a| match *a {
            Ahead::Fetching { waiters, .. } => waiters & (1 << r) != 0,
            Ahead::Ready { waiters, served, .. } => waiters & !served & (1 << r) != 0,
            Ahead::Free => false,
        })
    }

    /// Request `r` ended: it reads from no slot any more.
    pub(super) fn leave_ahead(&mut self, r: usize) {
        for a in self.ahead.iter_mut() {
            match a {
                Ahead::Fetching { waiters, .. } => *waiters &= !(1 << r),
                Ahead::Ready { waiters, served, stale, .. } => {
                    *waiters &= !(1 << r);
                    *served &= !(1 << r);
                    if *stale && *waiters == 0 {
                        *a = Ahead::Free;
                    }
                }
                Ahead::Free => {}
            }
        }
    }

    /// A read at `offset` was accepted: follow the stream, let go of slots outside its
    /// window (those still fetching become stale and go when they land).
    pub(super) fn follow_stream(&mut self, offset: u64, len: u32) {
        if offset == self.stream_end {
            self.run = self.run.saturating_add(1);
        } else {
            self.run = 0;
            self.ahead_next = [0; SERVERS];
        }
        self.stream_end = offset + u64::from(len);
        let (w0, w1) = self.window();
        for a in self.ahead.iter_mut() {
            match *a {
                Ahead::Ready { piece, waiters: 0, .. } if !(w0..w1).contains(&piece) => *a = Ahead::Free,
                Ahead::Fetching { piece, stale: false, waiters: 0 } if !(w0..w1).contains(&piece) => {
                    *a = Ahead::Fetching { piece, stale: true, waiters: 0 }
                }
                _ => {}
            }
        }
    }

    /// The pieces to hold ahead: the next stripes past the stream's end, once the
    /// stream is sequential; empty otherwise.
    fn window(&self) -> (u64, u64) {
        let window = Self::window_pieces(&self.cfg, self.layout.servers(), self.piece_bytes);
        if self.run == 0 || window == 0 || self.stream_end == u64::MAX {
            return (0, 0);
        }
        let (w0, _) = self.pieces_of(self.stream_end, self.stream_end);
        let last = self.layout.volume_bytes() / u64::from(self.piece_bytes);
        (w0.min(last), (w0 + window).min(last))
    }

    /// A write over `[lo, hi)` was accepted: no slot over it serves a new reader again.
    pub(super) fn invalidate(&mut self, lo: u64, hi: u64) {
        let (from, to) = self.pieces_of(lo, hi);
        for a in self.ahead.iter_mut() {
            match *a {
                Ahead::Ready { piece, waiters: 0, .. } if (from..to).contains(&piece) => *a = Ahead::Free,
                Ahead::Ready { piece, waiters, served, .. } if (from..to).contains(&piece) => {
                    *a = Ahead::Ready { piece, stale: true, waiters, served }
                }
                Ahead::Fetching { piece, waiters, .. } if (from..to).contains(&piece) => {
                    *a = Ahead::Fetching { piece, stale: true, waiters }
                }
                _ => {}
            }
        }
    }

    /// Whether a write not yet done overlaps piece `piece`.
    fn written(&self, piece: u64) -> bool {
        let p = u64::from(self.piece_bytes);
        let (lo, hi) = (piece * p, (piece + 1) * p);
        self.reqs.iter().flatten().any(|q| q.dir == Dir::Write && q.offset < hi && lo < q.end)
    }

    /// Fetch the next window piece on server `s` into a free slot, with chunk slot `i`.
    pub(super) fn fetch_ahead(&mut self, now: u64, i: usize, s: u16) -> Option<Send<Io>> {
        let (w0, w1) = self.window();
        let p = u64::from(self.piece_bytes);
        let mut piece = self.ahead_next[usize::from(s)].max(self.layout.first_on(s, w0 * p) / p);
        while piece < w1 {
            let held = self.ahead.iter().any(|a| a.fresh_piece() == Some(piece));
            if !held && !self.written(piece) {
                break;
            }
            piece = self.layout.next_on((piece + 1) * p) / p;
        }
        self.ahead_next[usize::from(s)] = piece;
        if piece >= w1 {
            return None;
        }
        let k = self.ahead.iter().position(|a| *a == Ahead::Free)?;
        self.ahead[k] = Ahead::Fetching { piece, stale: false, waiters: 0 };
        self.ahead_next[usize::from(s)] = self.layout.next_on((piece + 1) * p) / p;
        let generation = self.chunks[i].generation;
        let owner = Owner::Ahead(k as u16);
        self.chunks[i] = Chunk {
            slot: Slot::Free,
            generation,
            owner,
            dir: Dir::Read,
            volume_offset: piece * p,
            len: p as u32,
            tries: 0,
        };
        self.stats.ahead_fetches += 1;
        Some(self.launch(now, i))
    }

    /// Ahead slot `k`'s fetch landed.
    pub(super) fn ahead_landed(&mut self, k: usize) {
        if let Ahead::Fetching { piece, stale, waiters } = self.ahead[k] {
            self.ahead[k] =
                if stale && waiters == 0 { Ahead::Free } else { Ahead::Ready { piece, stale, waiters, served: 0 } };
        }
    }

    /// A copy a ready slot owes a reader.
    pub(super) fn poll_copy(&mut self) -> Option<Command<Io>> {
        let p = u64::from(self.piece_bytes);
        for k in 0..AHEAD {
            let Ahead::Ready { piece, stale, waiters, served } = self.ahead[k] else { continue };
            let owed = waiters & !served;
            if owed == 0 {
                continue;
            }
            let r = owed.trailing_zeros() as usize;
            self.ahead[k] = Ahead::Ready { piece, stale, waiters, served: served | (1 << r) };
            let Some(q) = self.reqs[r].as_mut() else { continue };
            let (lo, hi) = ((piece * p).max(q.offset), ((piece + 1) * p).min(q.end));
            let len = (hi - lo) as u32;
            q.left -= len;
            self.stats.ahead_bytes_used += u64::from(len);
            let (slot_at, at) = ((lo - piece * p) as u32, (lo - q.offset) as u32);
            return Some(Command::Copy { slot: k as u16, slot_at, io: q.io, at, len });
        }
        None
    }
}
