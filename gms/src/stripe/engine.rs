// SPDX-License-Identifier: GPL-2.0-only
//! The striper's request and chunk machinery: accepting requests, handing out sends per
//! server within the depth, completions, retries, deadlines and failure.

use super::*;

impl<Io: Copy, const SERVERS: usize, const REQS: usize, const CHUNKS: usize, const AHEAD: usize>
    Striper<Io, SERVERS, REQS, CHUNKS, AHEAD>
{
    /// A striper over `servers` servers of at least `server_bytes` each.
    pub fn new(cfg: Config, servers: u16, server_bytes: u64) -> Result<Self, ConfigError> {
        if usize::from(servers) > SERVERS {
            return Err(ConfigError::Servers);
        }
        let layout = Layout::new(servers, cfg.grain_bytes, cfg.block_bytes, server_bytes)?;
        let block = cfg.block_bytes;
        let sizes = [cfg.max_read_bytes, cfg.max_write_bytes, cfg.max_request_bytes];
        if sizes.iter().any(|&s| s == 0 || !s.is_multiple_of(block)) {
            return Err(ConfigError::Sizes);
        }
        if cfg.depth == 0 || cfg.tries == 0 || usize::from(cfg.depth) * usize::from(servers) > CHUNKS {
            return Err(ConfigError::Depth);
        }
        if REQS == 0 || REQS > 32 {
            return Err(ConfigError::Requests);
        }
        let piece_bytes = cfg.grain_bytes.min(cfg.max_read_bytes);
        let window = Self::window_pieces(&cfg, servers, piece_bytes);
        if window > AHEAD as u64 || (window > 0 && !cfg.grain_bytes.is_multiple_of(piece_bytes)) {
            return Err(ConfigError::ReadAhead);
        }
        Ok(Striper {
            cfg,
            layout,
            piece_bytes,
            reqs: [None; REQS],
            chunks: [Chunk::FREE; CHUNKS],
            ahead: [Ahead::Free; AHEAD],
            flying: [0; SERVERS],
            turn: 0,
            seq: 0,
            stream_end: u64::MAX,
            run: 0,
            ahead_next: [0; SERVERS],
            stats: Stats::default(),
        })
    }

    pub(super) fn window_pieces(cfg: &Config, servers: u16, piece_bytes: u32) -> u64 {
        let per_unit = u64::from(cfg.grain_bytes / piece_bytes.max(1));
        u64::from(cfg.readahead_stripes) * u64::from(servers) * per_unit
    }

    pub fn layout(&self) -> &Layout {
        &self.layout
    }

    pub fn config(&self) -> &Config {
        &self.cfg
    }

    pub fn stats(&self) -> Stats {
        self.stats
    }

    /// Bytes of an ahead slot (the driver's buffer for each).
    pub fn piece_bytes(&self) -> u32 {
        self.piece_bytes
    }

    /// Whether nothing is in flight or waiting: no request, no chunk, no fetch.
    pub fn is_idle(&self) -> bool {
        self.reqs.iter().all(Option::is_none) && self.chunks.iter().all(|c| c.slot == Slot::Free)
    }

    /// Accept a read of `len` bytes at `offset` into the caller's request `io`.
    pub fn read(&mut self, io: Io, offset: u64, len: u32) -> Result<(), StripeError> {
        let r = self.accept(io, Dir::Read, offset, len)?;
        self.join_ahead(r);
        self.follow_stream(offset, len);
        self.place_cursors(r);
        Ok(())
    }

    /// Accept a write of `len` bytes at `offset` from the caller's request `io`.
    pub fn write(&mut self, io: Io, offset: u64, len: u32) -> Result<(), StripeError> {
        let r = self.accept(io, Dir::Write, offset, len)?;
        self.invalidate(offset, offset + u64::from(len));
        self.place_cursors(r);
        Ok(())
    }

    fn accept(&mut self, io: Io, dir: Dir, offset: u64, len: u32) -> Result<usize, StripeError> {
        if len == 0 || len > self.cfg.max_request_bytes {
            return Err(StripeError::BadLength);
        }
        let block = u64::from(self.cfg.block_bytes);
        if !offset.is_multiple_of(block) || !u64::from(len).is_multiple_of(block) {
            return Err(StripeError::Misaligned);
        }
        let end = offset.checked_add(u64::from(len)).ok_or(StripeError::PastEnd)?;
        if end > self.layout.volume_bytes() {
            return Err(StripeError::PastEnd);
        }
        let r = self.reqs.iter().position(Option::is_none).ok_or(StripeError::Busy)?;
        self.seq += 1;
        self.stats.requests += 1;
        let next = [end; SERVERS];
        self.reqs[r] = Some(Req { io, seq: self.seq, dir, offset, end, next, left: len, owned: 0, failed: None });
        Ok(r)
    }

    /// Each server's cursor at the request's first piece on it not taken from a slot.
    fn place_cursors(&mut self, r: usize) {
        let Some(req) = self.reqs[r] else { return };
        let mut next = [req.end; SERVERS];
        for (s, n) in next.iter_mut().enumerate().take(usize::from(self.layout.servers())) {
            *n = self.skip_joined(r, self.layout.first_on(s as u16, req.offset), req.end);
        }
        if let Some(q) = self.reqs[r].as_mut() {
            q.next = next;
        }
    }

    /// The piece of request `r` at `v` on its server: its length (within the unit and a
    /// chunk), or `None` when `v` is past the request.
    fn piece_len(&self, dir: Dir, v: u64, end: u64) -> Option<u32> {
        if v >= end {
            return None;
        }
        let g = u64::from(self.layout.grain());
        let max = u64::from(match dir {
            Dir::Read => self.cfg.max_read_bytes,
            Dir::Write => self.cfg.max_write_bytes,
        });
        let unit_start = v / g * g;
        let cut = unit_start + ((v - unit_start) / max + 1) * max;
        Some((cut.min(unit_start + g).min(end) - v) as u32)
    }

    /// What to do next: cancels first, then copies from ahead slots, then sends.
    pub fn poll_command(&mut self, now: u64) -> Option<Command<Io>> {
        if let Some(c) = self.poll_cancel(now) {
            return Some(c);
        }
        if let Some(c) = self.poll_copy() {
            return Some(c);
        }
        let n = self.layout.servers();
        for k in 0..n {
            let s = (self.turn + k) % n;
            if self.flying[usize::from(s)] >= self.cfg.depth {
                continue;
            }
            if let Some(send) = self.send_for(now, s) {
                self.turn = (s + 1) % n;
                return Some(Command::Send(send));
            }
        }
        None
    }

    fn poll_cancel(&mut self, now: u64) -> Option<Command<Io>> {
        let i = self.chunks.iter().position(|c| matches!(c.slot, Slot::Cancel { .. }))?;
        let id = ChunkId { slot: i as u16, generation: self.chunks[i].generation };
        match self.chunks[i].slot {
            Slot::Cancel { retry: Some(at) } => self.chunks[i].slot = Slot::Waiting { at: at.max(now) },
            _ => self.release(i),
        }
        Some(Command::Abandon(id))
    }

    /// A send to server `s`: a chunk due again, a user's piece (oldest request first),
    /// or a piece to read ahead.
    fn send_for(&mut self, now: u64, s: u16) -> Option<Send<Io>> {
        let due = self.chunks.iter().position(|c| {
            matches!(c.slot, Slot::Waiting { at } if at <= now) && self.layout.locate(c.volume_offset).0 == s
        });
        if let Some(i) = due {
            return Some(self.launch(now, i));
        }
        let free = self.chunks.iter().position(|c| c.slot == Slot::Free)?;
        let oldest = (0..REQS)
            .filter(|&r| self.reqs[r].is_some_and(|q| q.failed.is_none() && q.next[usize::from(s)] < q.end))
            .min_by_key(|&r| self.reqs[r].map_or(u64::MAX, |q| q.seq));
        match oldest.and_then(|r| self.reqs[r].map(|q| (r, q))) {
            Some((r, q)) => Some(self.take_piece(now, free, r, q, s)),
            None => self.fetch_ahead(now, free, s),
        }
    }

    /// Cut request `r`'s next piece on server `s` into chunk slot `i` and send it.
    fn take_piece(&mut self, now: u64, i: usize, r: usize, q: Req<Io, SERVERS>, s: u16) -> Send<Io> {
        let v = q.next[usize::from(s)];
        let len = self.piece_len(q.dir, v, q.end).unwrap_or(0);
        let after = self.skip_joined(r, self.layout.next_on(v + u64::from(len)), q.end);
        if let Some(q) = self.reqs[r].as_mut() {
            q.next[usize::from(s)] = after;
            q.owned += 1;
        }
        let generation = self.chunks[i].generation;
        self.chunks[i] = Chunk {
            slot: Slot::Free,
            generation,
            owner: Owner::Request(r as u8),
            dir: q.dir,
            volume_offset: v,
            len,
            tries: 0,
        };
        self.launch(now, i)
    }

    /// Send chunk `i` (again): a new generation, a deadline, one more try.
    pub(super) fn launch(&mut self, now: u64, i: usize) -> Send<Io> {
        let c = &mut self.chunks[i];
        c.generation = c.generation.wrapping_add(1);
        c.tries += 1;
        c.slot = Slot::Flying { deadline: now.saturating_add(self.cfg.chunk_timeout_ns) };
        let c = *c;
        let (server, server_offset) = self.layout.locate(c.volume_offset);
        self.flying[usize::from(server)] += 1;
        self.stats.sends += 1;
        if c.tries > 1 {
            self.stats.retries += 1;
        }
        let target = match c.owner {
            // A request is handed back only once it owns no chunk (`poll_done`), so the
            // request of a chunk being sent is there.
            Owner::Request(r) => {
                let q = self.reqs[usize::from(r)].expect("a chunk's request lives while it owns chunks");
                Target::Request { io: q.io, at: (c.volume_offset - q.offset) as u32 }
            }
            Owner::Ahead(slot) => Target::Ahead { slot },
        };
        let chunk = ChunkId { slot: i as u16, generation: c.generation };
        Send { chunk, dir: c.dir, server, server_offset, volume_offset: c.volume_offset, len: c.len, target }
    }

    /// A call ended. `false`: it was not the chunk's current send (given up on, or
    /// unknown), and changed nothing.
    pub fn handle_complete(&mut self, now: u64, id: ChunkId, result: Result<(), Fault>) -> bool {
        let i = usize::from(id.slot);
        let Some(c) = self.chunks.get(i).copied() else { return false };
        if c.generation != id.generation || !matches!(c.slot, Slot::Flying { .. }) {
            return false;
        }
        self.land(i);
        match result {
            Ok(()) => self.succeed(i),
            Err(f) => self.fail_try(now, i, f, false),
        }
        true
    }

    /// The chunk is no longer flying.
    fn land(&mut self, i: usize) {
        let s = self.layout.locate(self.chunks[i].volume_offset).0;
        self.flying[usize::from(s)] -= 1;
        self.chunks[i].slot = Slot::Free;
    }

    fn succeed(&mut self, i: usize) {
        let c = self.chunks[i];
        match c.owner {
            Owner::Request(r) => {
                if let Some(q) = self.reqs[usize::from(r)].as_mut() {
                    q.left -= c.len;
                }
            }
            Owner::Ahead(slot) => self.ahead_landed(usize::from(slot)),
        }
        self.release(i);
    }

    /// One send of chunk `i` failed with `f`; `cancel`: the driver still holds the call.
    fn fail_try(&mut self, now: u64, i: usize, f: Fault, cancel: bool) {
        let c = self.chunks[i];
        let retry = (f.retryable() && c.tries < self.cfg.tries).then(|| now.saturating_add(self.cfg.retry_delay_ns));
        if retry.is_none() {
            let (server, _) = self.layout.locate(c.volume_offset);
            let e = match f {
                Fault::Refused(code) => StripeError::Refused { server, code },
                fault => StripeError::GaveUp { server, fault },
            };
            self.fail_owner(c.owner, e, i);
        }
        self.chunks[i].slot = match (cancel, retry) {
            (true, retry) => Slot::Cancel { retry },
            (false, Some(at)) => Slot::Waiting { at },
            (false, None) => {
                self.release(i);
                return;
            }
        };
    }

    /// The request or ahead fetch owning chunk `except` fails with `e`: its other chunks
    /// are dropped (those in flight cancelled), its readers fail too.
    fn fail_owner(&mut self, owner: Owner, e: StripeError, except: usize) {
        match owner {
            Owner::Request(r) => self.fail_request(usize::from(r), e, except),
            Owner::Ahead(slot) => {
                let waiters = match self.ahead[usize::from(slot)] {
                    Ahead::Fetching { waiters, .. } | Ahead::Ready { waiters, .. } => waiters,
                    Ahead::Free => 0,
                };
                // Freed when the chunk is released.
                self.ahead[usize::from(slot)] = Ahead::Fetching { piece: u64::MAX, stale: true, waiters: 0 };
                for r in 0..REQS {
                    if waiters & (1 << r) != 0 {
                        self.fail_request(r, e, usize::MAX);
                    }
                }
            }
        }
    }

    fn fail_request(&mut self, r: usize, e: StripeError, except: usize) {
        let Some(q) = self.reqs[r].as_mut() else { return };
        if q.failed.is_some() {
            return;
        }
        q.failed = Some(e);
        q.next = [q.end; SERVERS];
        self.stats.failed += 1;
        self.leave_ahead(r);
        for i in 0..CHUNKS {
            if i == except || self.chunks[i].owner != Owner::Request(r as u8) {
                continue;
            }
            match self.chunks[i].slot {
                Slot::Flying { .. } => {
                    self.land(i);
                    self.chunks[i].slot = Slot::Cancel { retry: None };
                }
                Slot::Waiting { .. } => self.release(i),
                Slot::Cancel { .. } => self.chunks[i].slot = Slot::Cancel { retry: None },
                Slot::Free => {}
            }
        }
    }

    /// Chunk slot `i` is free again; its owner lets it go.
    fn release(&mut self, i: usize) {
        let c = self.chunks[i];
        self.chunks[i].slot = Slot::Free;
        match c.owner {
            Owner::Request(r) => {
                if let Some(q) = self.reqs[usize::from(r)].as_mut() {
                    q.owned -= 1;
                }
            }
            // A fetch that failed, or was made stale and has no reader, lets its slot go.
            Owner::Ahead(slot) => {
                if let Ahead::Fetching { stale: true, waiters: 0, .. } = self.ahead[usize::from(slot)] {
                    self.ahead[usize::from(slot)] = Ahead::Free;
                }
            }
        }
    }

    /// When to call [`Self::handle_timeout`] and [`Self::poll_command`] again: a
    /// deadline, or a retry due on a server with room (one without waits for an answer).
    pub fn poll_timeout(&self) -> Option<u64> {
        let room = |v: u64| self.flying[usize::from(self.layout.locate(v).0)] < self.cfg.depth;
        self.chunks
            .iter()
            .filter_map(|c| match c.slot {
                Slot::Flying { deadline } => Some(deadline),
                Slot::Waiting { at } if room(c.volume_offset) => Some(at),
                _ => None,
            })
            .min()
    }

    /// Give up on the sends whose deadline passed (each counts as a failed try).
    pub fn handle_timeout(&mut self, now: u64) {
        for i in 0..CHUNKS {
            if let Slot::Flying { deadline } = self.chunks[i].slot {
                if deadline <= now {
                    self.stats.timeouts += 1;
                    self.land(i);
                    self.fail_try(now, i, Fault::Timeout, true);
                }
            }
        }
    }

    /// A finished request: every byte done, or failed with nothing of it left in flight.
    pub fn poll_done(&mut self) -> Option<Done<Io>> {
        let r = (0..REQS).find(|&r| {
            self.reqs[r].is_some_and(|q| q.owned == 0 && !self.waits_on_ahead(r) && (q.left == 0 || q.failed.is_some()))
        })?;
        self.leave_ahead(r);
        let q = self.reqs[r].take()?;
        Some(Done { io: q.io, result: q.failed.map_or(Ok(()), Err) })
    }
}
