// SPDX-License-Identifier: GPL-2.0-only
//! The cached volume's jobs: accepting requests, one job per page at a time, the steps
//! of reads, writes, cleanings and flushes, and the records of dirty pages.

use super::*;

impl<Io: Copy, const JOBS: usize, const DIRTY: usize> Cache<Io, JOBS, DIRTY> {
    pub fn new(cfg: Config) -> Result<Self, ConfigError> {
        let bad_clean = cfg.clean_at == 0 || usize::from(cfg.clean_at) > DIRTY;
        if cfg.blocks == 0 || JOBS < 2 || JOBS > usize::from(u16::MAX) || bad_clean || cfg.tries == 0 {
            return Err(ConfigError::Sizes);
        }
        if cfg.first_version == 0 || cfg.copies == 0 || cfg.copies > MAX_REPLICAS {
            return Err(ConfigError::Sizes);
        }
        if cfg.space >> 60 != 0 {
            return Err(ConfigError::Space);
        }
        Ok(Cache {
            cfg,
            jobs: [None; JOBS],
            recs: [Rec::Free; DIRTY],
            done: Ring::new(),
            next_version: cfg.first_version,
            room: Room::Stored,
            seq: 0,
            rescue: 0,
            order: 0,
            stats: Stats::default(),
        })
    }

    pub fn config(&self) -> &Config {
        &self.cfg
    }
    pub fn stats(&self) -> Stats {
        self.stats
    }
    /// The writer's records of dirty (and lost) pages.
    pub fn records(&self) -> impl Iterator<Item = &Rec> {
        self.recs.iter().filter(|r| **r != Rec::Free)
    }
    /// Pages only GMS holds (the block server has an older block).
    pub fn dirty(&self) -> usize {
        self.recs.iter().filter(|r| matches!(r, Rec::Dirty { .. } | Rec::Stuck { .. })).count()
    }
    /// No job running and nothing to hand back.
    pub fn is_idle(&self) -> bool {
        self.jobs.iter().all(Option::is_none) && self.done.is_empty()
    }
    /// Copy `copy` of `block`'s page (copy 0: the page itself).
    fn page(&self, block: u64, copy: u8) -> PageId {
        replica(PageId::new(self.cfg.space, block), copy)
    }
    pub(super) fn version(&mut self) -> Version {
        let v = Version(self.next_version);
        self.next_version += 1;
        v
    }

    /// Read `block` into the request's buffer.
    pub fn read(&mut self, io: Io, block: u64) -> Result<(), CachedError> {
        self.accept(io, Some(block), Kind::Read)?;
        self.stats.reads += 1;
        Ok(())
    }

    /// Write the request's buffer to `block` (by the configured policy).
    pub fn write(&mut self, io: Io, block: u64) -> Result<(), CachedError> {
        self.accept(io, Some(block), Kind::Write)
    }

    /// A lender died or left: a page dirty now may have lost a copy, and one more death
    /// would lose it, so every one of them is cleaned at once (as for a flush, whatever
    /// [`Config::clean_at`] says). Pages written from now on get all their copies on the
    /// lenders left.
    pub fn handle_lender_lost(&mut self) {
        self.rescue = self.seq;
    }

    /// Make every write acknowledged so far durable on the block server's disk.
    pub fn flush(&mut self, io: Io) -> Result<(), CachedError> {
        self.accept(io, None, Kind::Flush)?;
        self.stats.flushes += 1;
        Ok(())
    }

    fn accept(&mut self, io: Io, block: Option<u64>, kind: Kind) -> Result<(), CachedError> {
        if block.is_some_and(|b| b >= self.cfg.blocks) {
            return Err(CachedError::PastEnd);
        }
        // Each user request's handle is in a job or the done ring: the ring never
        // overflows. One job is kept for cleaning.
        let users = self.jobs.iter().flatten().filter(|j| j.io.is_some()).count() + self.done.len();
        let free = self.jobs.iter().filter(|j| j.is_none()).count();
        if users + 1 >= JOBS || free < 2 {
            return Err(CachedError::Busy);
        }
        self.start_job(Some(io), block, kind).ok_or(CachedError::Busy)
    }

    fn start_job(&mut self, io: Option<Io>, block: Option<u64>, kind: Kind) -> Option<()> {
        let i = self.jobs.iter().position(Option::is_none)?;
        self.order += 1;
        let (step, phase, spares) = (Step::Start(kind), Phase::Ready, Spares::None);
        self.jobs[i] = Some(Job { io, block, order: self.order, step, phase, tries: 0, spares });
        Some(())
    }

    /// Whether an older job is on `block` than the one ordered `order`.
    fn page_taken(&self, block: u64, order: u64) -> bool {
        self.jobs.iter().flatten().any(|j| j.block == Some(block) && j.order < order)
    }

    pub(super) fn rec_of(&self, block: u64) -> Option<usize> {
        self.recs.iter().position(|r| r.block() == Some(block))
    }

    /// What to do next: start cleanings that are due, then issue the oldest ready step.
    pub fn poll_command(&mut self) -> Option<Command<Io>> {
        loop {
            // A flush that just began may want cleanings.
            self.start_cleanings();
            let i = (0..JOBS)
                .filter(|&i| self.jobs[i].is_some_and(|j| j.phase == Phase::Ready && self.may_go(j)))
                .min_by_key(|&i| self.jobs[i].map_or(u64::MAX, |j| j.order))?;
            if let Some(c) = self.step(i) {
                return Some(c);
            }
        }
    }

    /// A job may go unless it has not begun and an older job holds its page, or it waits
    /// for a flush's pages.
    fn may_go(&self, j: Job<Io>) -> bool {
        match (j.step, j.block) {
            (Step::Start(_), Some(b)) => !self.page_taken(b, j.order),
            (Step::FlushWait { upto }, _) => {
                !self.recs.iter().any(|r| matches!(r, Rec::Dirty { seq, .. } if *seq <= upto))
            }
            _ => true,
        }
    }

    /// Cleanings of the oldest dirty pages with no job on them, while the records pass
    /// `clean_at` or a flush waits for them, and a job is free.
    fn start_cleanings(&mut self) {
        loop {
            let flush_upto = self.jobs.iter().flatten().filter_map(|j| match j.step {
                Step::FlushWait { upto } => Some(upto),
                _ => None,
            });
            let upto = flush_upto.max().unwrap_or(0).max(self.rescue);
            let over = self.dirty() >= usize::from(self.cfg.clean_at) || self.room == Room::Refused;
            let due = self
                .recs
                .iter()
                .filter(|r| matches!(r, Rec::Dirty { seq, .. } if over || *seq <= upto))
                .filter(|r| r.block().is_some_and(|b| !self.jobs.iter().flatten().any(|j| j.block == Some(b))))
                .min_by_key(|r| r.seq())
                .and_then(Rec::block);
            match due {
                Some(b) if self.start_job(None, Some(b), Kind::Clean).is_some() => {}
                _ => return,
            }
        }
    }

    /// Issue job `i`'s step (or move it on): the command to run, if any.
    fn step(&mut self, i: usize) -> Option<Command<Io>> {
        let mut j = self.jobs[i]?;
        let job = i as u16;
        let buf = match j.io {
            Some(io) => Buf::User(io),
            None => Buf::Scratch(job),
        };
        let block = j.block.unwrap_or(0);
        let page = self.page(block, 0);
        let apart = Holders::NONE;
        j.phase = Phase::Flying;
        j.tries += 1;
        let cmd = match j.step {
            Step::Start(kind) => {
                // A page with a record may have copies beyond the first in GMS.
                let recorded = j.block.is_some() && self.rec_of(block).is_some();
                let spares = if recorded && self.cfg.copies > 1 { Spares::Maybe } else { Spares::None };
                match self.first_step(kind, block) {
                    Ok(step) => self.jobs[i] = Some(Job { tries: 0, phase: Phase::Ready, step, spares, ..j }),
                    Err(e) => self.end(i, e.map_or(Ok(Served::Through), Err)),
                }
                return None;
            }
            Step::Get { at_least, copy, .. } => Command::Get { job, page: self.page(block, copy), at_least, buf },
            Step::Read => Command::BlockRead { job, block, buf },
            Step::Insert { version } => {
                // The bytes are taken as the put is made: the reader has its block.
                if let Some(io) = j.io.take() {
                    self.finish_user(io, Ok(Served::FromBlock));
                }
                Command::Put { job, page, version, dirt: Dirt::Clean, buf, apart }
            }
            Step::PutDirty { version, copy, held } => {
                if copy > 0 {
                    j.spares = Spares::Maybe;
                }
                let page = self.page(block, copy);
                Command::Put { job, page, version, dirt: Dirt::Dirty, buf, apart: held }
            }
            Step::WriteThrough | Step::Clean { .. } => Command::BlockWrite { job, block, buf },
            Step::PutClean { version } => {
                // The block server has the write: the writer has its answer once the
                // put took the bytes.
                if let Some(io) = j.io.take() {
                    self.finish_user(io, Ok(Served::Through));
                }
                Command::Put { job, page, version, dirt: Dirt::Clean, buf, apart }
            }
            Step::Discard { version } => Command::Discard { job, page, version },
            Step::DropCopy { version, copy } => Command::Discard { job, page: self.page(block, copy), version },
            Step::Fetch { version, copy, .. } => {
                Command::Get { job, page: self.page(block, copy), at_least: version, buf }
            }
            Step::FlushWait { upto } => {
                self.jobs[i] = Some(j);
                return self.flush_ready(i, upto);
            }
            Step::Flush => Command::BlockFlush { job },
        };
        self.jobs[i] = Some(j);
        Some(cmd)
    }

    /// The first step of a job now holding its page; `Err`: it ends at once (with this
    /// error for its user, if any).
    fn first_step(&mut self, kind: Kind, block: u64) -> Result<Step, Option<CachedError>> {
        let rec = self.rec_of(block).map(|r| self.recs[r]);
        match (kind, rec) {
            (Kind::Read, Some(Rec::Lost { .. })) => {
                self.stats.lost += 1;
                Err(Some(CachedError::Lost { block }))
            }
            (Kind::Read, Some(Rec::Dirty { version, .. } | Rec::Stuck { version, .. })) => {
                Ok(Step::Get { at_least: version, dirt: Dirt::Dirty, copy: 0, replies: Replies::AllMissed })
            }
            (Kind::Read, Some(Rec::Stale { version, .. })) => {
                Ok(Step::Get { at_least: version, dirt: Dirt::Clean, copy: 0, replies: Replies::AllMissed })
            }
            (Kind::Read, _) => {
                Ok(Step::Get { at_least: Version(0), dirt: Dirt::Clean, copy: 0, replies: Replies::AllMissed })
            }
            (Kind::Write, _) => Ok(self.write_step(block)),
            (Kind::Clean, Some(Rec::Dirty { version, .. })) => {
                Ok(Step::Fetch { version, copy: 0, replies: Replies::AllMissed })
            }
            // A cleaning of a page a write cleaned meanwhile: nothing left to do.
            (Kind::Clean, _) => Err(None),
            (Kind::Flush, _) => Ok(Step::FlushWait { upto: self.seq }),
        }
    }

    /// A write-back write needs a record for its page (its own, or a free one no other
    /// dirty put in flight counts on) before its dirty put; without one, or in
    /// write-through, it goes to the block server. The record changes only once the put
    /// stored.
    fn write_step(&mut self, block: u64) -> Step {
        if self.cfg.writes == WritePolicy::WriteThrough {
            return Step::WriteThrough;
        }
        let counted =
            |j: &Job<Io>| matches!(j.step, Step::PutDirty { .. }) && j.block.is_some_and(|b| self.rec_of(b).is_none());
        let reserved = self.jobs.iter().flatten().filter(|j| counted(j)).count();
        let free = self.recs.iter().filter(|r| **r == Rec::Free).count();
        if self.rec_of(block).is_none() && free <= reserved {
            self.stats.fallbacks += 1;
            return Step::WriteThrough;
        }
        Step::PutDirty { version: self.version(), copy: 0, held: Holders::NONE }
    }

    /// A flush whose pages are cleaned: it fails on the first of them lost or stuck
    /// (stuck ones are tried again later), else the server's flush goes.
    fn flush_ready(&mut self, i: usize, upto: u64) -> Option<Command<Io>> {
        let bad =
            self.recs.iter().position(|r| matches!(r, Rec::Lost { seq, .. } | Rec::Stuck { seq, .. } if *seq <= upto));
        if let Some(r) = bad {
            let e = match self.recs[r] {
                Rec::Stuck { block, version, seq, error } => {
                    self.recs[r] = Rec::Dirty { block, version, seq };
                    error
                }
                rec => CachedError::Lost { block: rec.block().unwrap_or(0) },
            };
            self.end(i, Err(e));
            return None;
        }
        let j = self.jobs[i].as_mut()?;
        j.step = Step::Flush;
        Some(Command::BlockFlush { job: i as u16 })
    }

    /// Job `i` ends; its user (if still waiting) gets `result`.
    pub(super) fn set_rec(&mut self, block: u64, rec: Rec) -> bool {
        match self.rec_of(block).or_else(|| self.recs.iter().position(|r| *r == Rec::Free)) {
            Some(r) => {
                self.recs[r] = rec;
                true
            }
            None => false,
        }
    }

    pub(super) fn free_rec(&mut self, block: u64) {
        if let Some(r) = self.rec_of(block) {
            self.recs[r] = Rec::Free;
        }
    }

    pub(super) fn end(&mut self, i: usize, result: Result<Served, CachedError>) {
        if let Some(io) = self.jobs[i].take().and_then(|j| j.io) {
            self.finish_user(io, result);
        }
    }

    pub(super) fn finish_user(&mut self, io: Io, result: Result<Served, CachedError>) {
        // Room is kept for every user's answer (`accept`).
        let _ = self.done.push(Done { io, result });
    }

    /// A finished request.
    pub fn poll_done(&mut self) -> Option<Done<Io>> {
        self.done.pop()
    }
}
