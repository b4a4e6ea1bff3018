// SPDX-License-Identifier: GPL-2.0-only
//! The cached volume's completions: how a getpage, put, discard or block operation that
//! ended moves its job on.

use super::*;

/// `step` (a dirty page's getpage) after its copy did not answer.
fn silent(step: Step) -> Step {
    match step {
        Step::Get { at_least, dirt, copy, .. } => Step::Get { at_least, dirt, copy, replies: Replies::NoAnswer },
        Step::Fetch { version, copy, .. } => Step::Fetch { version, copy, replies: Replies::NoAnswer },
        s => s,
    }
}

impl<Io: Copy, const JOBS: usize, const DIRTY: usize> Cache<Io, JOBS, DIRTY> {
    /// The flying job `job`, if it is one.
    fn flying(&self, job: u16) -> Option<(usize, Job<Io>)> {
        let i = usize::from(job);
        let j = (*self.jobs.get(i)?)?;
        (j.phase == Phase::Flying).then_some((i, j))
    }

    /// Job `i` goes on with `step` (its tries counted afresh).
    fn next(&mut self, i: usize, step: Step) {
        if let Some(j) = self.jobs[i].as_mut() {
            j.step = step;
            j.phase = Phase::Ready;
            j.tries = 0;
        }
    }

    /// Job `i`'s step goes again if it has tries left; `false`: it has none.
    fn again(&mut self, i: usize) -> bool {
        let tries = self.cfg.tries;
        match self.jobs[i].as_mut() {
            Some(j) if j.tries < tries => {
                j.phase = Phase::Ready;
                true
            }
            _ => false,
        }
    }

    /// A getpage ended. `false`: no such command in flight (ignored).
    pub fn handle_get(&mut self, job: u16, got: Got) -> bool {
        let Some((i, j)) = self.flying(job) else { return false };
        let block = j.block.unwrap_or(0);
        let spare = |s: Step| matches!(s, Step::Get { copy: 1.., .. } | Step::Fetch { copy: 1.., .. });
        if matches!(got, Got::Hit { .. }) && spare(j.step) {
            self.stats.from_spare += 1;
        }
        match (j.step, got) {
            (Step::Get { .. }, Got::Hit { .. }) => {
                self.stats.read_hits += 1;
                self.end(i, Ok(Served::FromGms));
            }
            (Step::Get { dirt: Dirt::Dirty, .. } | Step::Fetch { .. }, Got::Miss) => self.next_copy(i, block, j.step),
            (Step::Get { dirt: Dirt::Dirty, .. } | Step::Fetch { .. }, Got::Failed) => {
                if !self.again(i) {
                    self.next_copy(i, block, silent(j.step));
                }
            }
            // A clean page: the block server has it.
            (Step::Get { .. }, _) => {
                self.stats.read_misses += 1;
                self.next(i, Step::Read);
            }
            (Step::Fetch { .. }, Got::Hit { version }) => self.next(i, Step::Clean { version }),
            _ => return false,
        }
        true
    }

    /// A dirty page's copy did not give it (`step`, the getpage's, says whether one of its
    /// copies asked so far did not answer): the next copy is asked; after the last, the
    /// page is lost if every copy missed, else unreachable (a cleaning's stays dirty).
    fn next_copy(&mut self, i: usize, block: u64, step: Step) {
        let next = match step {
            Step::Get { at_least, dirt, copy, replies } => Step::Get { at_least, dirt, copy: copy + 1, replies },
            Step::Fetch { version, copy, replies } => Step::Fetch { version, copy: copy + 1, replies },
            _ => return,
        };
        let (Step::Get { copy, replies, .. } | Step::Fetch { copy, replies, .. }) = next else { return };
        if copy < self.cfg.copies {
            self.next(i, next);
            return;
        }
        let unreachable = CachedError::Unreachable { block };
        match (next, replies) {
            (Step::Fetch { .. }, Replies::NoAnswer) => self.stuck(i, block, unreachable),
            (_, Replies::NoAnswer) => self.end(i, Err(unreachable)),
            (_, Replies::AllMissed) => {
                self.lose(block);
                self.end(i, Err(CachedError::Lost { block }));
            }
        }
    }

    /// Every copy of block `block`'s dirty data is gone.
    fn lose(&mut self, block: u64) {
        self.stats.lost += 1;
        let seq = self.rec_of(block).map_or(0, |r| self.recs[r].seq());
        self.set_rec(block, Rec::Lost { block, seq });
    }

    /// A cleaning of `block` failed: the page stays dirty, and the next flush says why.
    fn stuck(&mut self, i: usize, block: u64, error: CachedError) {
        self.stats.clean_failures += 1;
        if let Some(r) = self.rec_of(block) {
            if let Rec::Dirty { version, seq, .. } = self.recs[r] {
                self.recs[r] = Rec::Stuck { block, version, seq, error };
            }
        }
        self.end(i, Err(error));
    }

    /// A write's block write failed for good. A copy of it may have landed in GMS (a dirty
    /// put whose answer was lost): unless an older dirty copy is recorded (then the newer
    /// one, if any, is what its cleaning writes), the block server's data is marked the
    /// page's, every copy below the next version stale.
    fn write_failed(&mut self, i: usize, block: u64, error: CachedError) {
        let dirty = self.rec_of(block).is_some_and(|r| matches!(self.recs[r], Rec::Dirty { .. } | Rec::Stuck { .. }));
        if !dirty {
            // Without a free record the copy may be read (a failed write's outcome is
            // unspecified); it is superseded by the block's next clean put.
            let version = self.version();
            self.stale(block, version);
        }
        self.end(i, Err(error));
    }

    /// A put ended.
    pub fn handle_put(&mut self, job: u16, result: PutResult) -> bool {
        let Some((i, j)) = self.flying(job) else { return false };
        let block = j.block.unwrap_or(0);
        let stored = matches!(result, PutResult::Stored { .. });
        match (j.step, result) {
            // A copy is stored, on a lender none of the others is on: the next one goes.
            (Step::PutDirty { version, copy, held }, PutResult::Stored { target })
                if !held.contains(target) && copy + 1 < self.cfg.copies =>
            {
                self.next(i, Step::PutDirty { version, copy: copy + 1, held: held.with(target) });
            }
            (Step::PutDirty { version, held, .. }, PutResult::Stored { target }) if !held.contains(target) => {
                self.room = Room::Stored;
                // Dirty since its oldest unwritten write: a flush that began before a
                // rewrite still waits for the page (and writes the newer data).
                self.seq += 1;
                let seq = match self.rec_of(block).map(|r| self.recs[r]) {
                    Some(Rec::Dirty { seq, .. } | Rec::Stuck { seq, .. }) => seq,
                    _ => self.seq,
                };
                // Room was kept for it (`write_step`); were it taken all the same, the
                // write goes through the block server rather than leave a dirty copy
                // unrecorded.
                if self.set_rec(block, Rec::Dirty { block, version, seq }) {
                    self.stats.writes_dirty += 1;
                    self.end(i, Ok(Served::Dirty));
                } else {
                    self.stats.fallbacks += 1;
                    self.next(i, Step::WriteThrough);
                }
            }
            // Refused, its outcome unknown, or stored beside another copy: through the
            // block server, whose clean put (or discard) covers a dirty copy 0 that may
            // have landed, and the discard of the others.
            (Step::PutDirty { copy, .. }, _) => {
                if result == PutResult::Refused {
                    self.room = Room::Refused;
                }
                self.stats.fallbacks += 1;
                if copy > 0 {
                    self.stats.short_copies += 1;
                }
                self.next(i, Step::WriteThrough);
            }
            (Step::Insert { version } | Step::PutClean { version }, _) if stored => {
                // Every older copy 0 is superseded: none is dirty or stale any more.
                self.free_rec(block);
                self.drop_copies(i, version, 1);
            }
            (Step::Insert { .. }, _) => self.end(i, Ok(Served::FromBlock)),
            (Step::PutClean { version }, _) => {
                self.stats.discards += 1;
                self.next(i, Step::Discard { version });
            }
            _ => return false,
        }
        if matches!(j.step, Step::Insert { .. } | Step::PutClean { .. }) {
            self.stats.clean_puts += 1;
        }
        true
    }

    /// A discard ended (`done`: the directory forgot every version up to the one asked).
    pub fn handle_discard(&mut self, job: u16, done: bool) -> bool {
        let Some((i, j)) = self.flying(job) else { return false };
        let block = j.block.unwrap_or(0);
        let version = match j.step {
            Step::Discard { version } => version,
            Step::DropCopy { version, copy } => {
                if !done {
                    if self.again(i) {
                        return true;
                    }
                    // Its holder keeps the frame; the block's next clean put discards it
                    // again.
                    self.stale(block, version);
                }
                self.drop_copies(i, version, copy + 1);
                return true;
            }
            _ => return false,
        };
        if done {
            self.free_rec(block);
        } else if self.again(i) {
            return true;
        } else {
            // Copies below `version` may stay: reads skip them, a cleaning tries again.
            self.stale(block, version);
        }
        self.drop_copies(i, version, 1);
        true
    }

    /// Block `block`'s copies below `version` may stay in GMS.
    fn stale(&mut self, block: u64, version: Version) {
        self.stats.stale += 1;
        self.set_rec(block, Rec::Stale { block, version });
    }

    /// Job `i`'s page is clean at `version`: copies `from..` of a write-back write that
    /// may be in GMS are discarded (up to `version`) one after another, then it ends.
    fn drop_copies(&mut self, i: usize, version: Version, from: u8) {
        let spares = self.jobs[i].is_some_and(|j| j.spares == Spares::Maybe);
        if spares && from < self.cfg.copies {
            self.stats.copies_dropped += 1;
            self.next(i, Step::DropCopy { version, copy: from });
        } else {
            self.end(i, Ok(Served::Through));
        }
    }

    /// A block operation (read, write, flush) ended.
    pub fn handle_block(&mut self, job: u16, result: Result<(), BlockFault>) -> bool {
        let Some((i, j)) = self.flying(job) else { return false };
        let block = j.block.unwrap_or(0);
        if let Err(fault) = result {
            let retry = fault == BlockFault::Failed && self.again(i);
            if !retry {
                let error = CachedError::Block { block: j.block, fault };
                match j.step {
                    Step::Clean { .. } => self.stuck(i, block, error),
                    Step::WriteThrough => self.write_failed(i, block, error),
                    _ => self.end(i, Err(error)),
                }
            }
            return true;
        }
        match j.step {
            Step::Read => {
                let version = self.version();
                self.next(i, Step::Insert { version });
            }
            Step::WriteThrough => {
                self.stats.writes_through += 1;
                let version = self.version();
                self.next(i, Step::PutClean { version });
            }
            Step::Clean { .. } => {
                // The block server has the data; a clean put supersedes the dirty copy
                // (or a discard drops it) so that its holder may let it go.
                self.stats.cleaned += 1;
                let version = self.version();
                self.next(i, Step::PutClean { version });
            }
            Step::Flush => self.end(i, Ok(Served::Flushed)),
            _ => return false,
        }
        true
    }
}
