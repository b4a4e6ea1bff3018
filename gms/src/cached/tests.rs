// SPDX-License-Identifier: GPL-2.0-only
//! The cached volume driven by a simulated GMS (one copy per page, versions, a budget
//! whose room-making lets only clean copies go, a holder that may die) and a simulated
//! block server (acknowledged writes volatile until a flush): reads, both write policies,
//! cleaning under pressure, flushes, lost pages, and a property test over random request
//! mixes, completion orders and faults.

extern crate std;

use super::*;
use proptest::prelude::*;
use std::collections::HashMap;
use std::vec::Vec;

type C = Cache<u32, 8, 4>;

#[derive(Clone, Copy, Debug)]
struct Held {
    version: Version,
    data: u64,
    dirt: Dirt,
}

/// GMS, the block server, the buffers, and the commands in flight (each with the bytes a
/// put or block write took when it was issued).
#[derive(Default)]
struct Sim {
    gms: HashMap<u64, Held>,
    /// GMS holds at most this many pages; a put beyond it first lets the oldest clean
    /// copy go (the holder's rule), and is refused if every copy is dirty.
    budget: usize,
    evicted: u64,
    volatile: HashMap<u64, u64>,
    durable: HashMap<u64, u64>,
    user: HashMap<u32, u64>,
    scratch: HashMap<u16, u64>,
    flying: Vec<(Command<u32>, u64)>,
    done: Vec<Done<u32>>,
    /// Faults: puts refused, puts failed (stored or not, unknown), getpages failed,
    /// block calls failed.
    refuse_puts: bool,
    fail_puts: bool,
    fail_gets: bool,
    fail_blocks: bool,
}

impl Sim {
    fn new(budget: usize) -> Sim {
        Sim { budget, ..Sim::default() }
    }

    fn buf(&mut self, b: Buf<u32>) -> &mut u64 {
        match b {
            Buf::User(io) => self.user.entry(io).or_insert(0),
            Buf::Scratch(j) => self.scratch.entry(j).or_insert(0),
        }
    }

    /// Room for one more page: the oldest clean copy goes; `false`: all are dirty.
    fn room(&mut self, page: u64) -> bool {
        if self.gms.contains_key(&page) || self.gms.len() < self.budget {
            return true;
        }
        let clean = self.gms.iter().filter(|(_, h)| h.dirt == Dirt::Clean);
        match clean.min_by_key(|(_, h)| h.version).map(|(p, _)| *p) {
            Some(p) => {
                self.gms.remove(&p);
                self.evicted += 1;
                true
            }
            None => false,
        }
    }

    /// Take every command `c` has, then its finished requests.
    fn issue(&mut self, c: &mut C) {
        while let Some(cmd) = c.poll_command() {
            let bytes = match cmd {
                Command::Put { buf, .. } | Command::BlockWrite { buf, .. } => *self.buf(buf),
                _ => 0,
            };
            self.flying.push((cmd, bytes));
        }
        while let Some(d) = c.poll_done() {
            self.done.push(d);
        }
    }

    /// End the command in flight at `k`.
    fn complete(&mut self, c: &mut C, k: usize) {
        let (cmd, bytes) = self.flying.remove(k);
        let known = match cmd {
            Command::Get { job, page, at_least, buf } => {
                let got = match self.gms.get(&page.page).copied() {
                    _ if self.fail_gets => Got::Failed,
                    Some(h) if h.version >= at_least => {
                        *self.buf(buf) = h.data;
                        Got::Hit { version: h.version }
                    }
                    _ => Got::Miss,
                };
                c.handle_get(job, got)
            }
            Command::Put { job, page, version, dirt, .. } => {
                c.handle_put(job, self.put(page.page, version, dirt, bytes))
            }
            Command::Discard { job, page, version } => {
                if self.gms.get(&page.page).is_some_and(|h| h.version <= version) {
                    self.gms.remove(&page.page);
                }
                c.handle_discard(job, true)
            }
            Command::BlockRead { job, block, buf } => {
                let r = self.block_fault();
                if r.is_ok() {
                    let d = self.volatile.get(&block).or(self.durable.get(&block)).copied().unwrap_or(0);
                    *self.buf(buf) = d;
                }
                c.handle_block(job, r)
            }
            Command::BlockWrite { job, block, .. } => {
                let r = self.block_fault();
                if r.is_ok() {
                    self.volatile.insert(block, bytes);
                }
                c.handle_block(job, r)
            }
            Command::BlockFlush { job } => {
                let r = self.block_fault();
                if r.is_ok() {
                    self.durable.extend(self.volatile.drain());
                }
                c.handle_block(job, r)
            }
        };
        assert!(known, "the cache disowned its own command {cmd:?}");
    }

    fn block_fault(&self) -> Result<(), BlockFault> {
        if self.fail_blocks {
            Err(BlockFault::Failed)
        } else {
            Ok(())
        }
    }

    fn put(&mut self, page: u64, version: Version, dirt: Dirt, data: u64) -> PutResult {
        if self.refuse_puts {
            return PutResult::Refused;
        }
        if self.gms.get(&page).is_some_and(|h| h.version > version) {
            return PutResult::Superseded;
        }
        if !self.room(page) {
            return PutResult::Refused;
        }
        self.gms.insert(page, Held { version, data, dirt });
        if self.fail_puts {
            // Stored, but the answer is lost.
            return PutResult::Failed;
        }
        PutResult::Stored { target: 1 }
    }

    /// Run until `c` is idle, completing the oldest command first.
    fn run(&mut self, c: &mut C) {
        for _ in 0..10_000 {
            self.issue(c);
            if self.flying.is_empty() {
                return;
            }
            self.complete(c, 0);
        }
        panic!("the cache never went idle");
    }

    /// One request run to its end: its result.
    fn one(
        &mut self,
        c: &mut C,
        io: u32,
        req: impl FnOnce(&mut C) -> Result<(), CachedError>,
    ) -> Result<Served, CachedError> {
        req(c)?;
        self.run(c);
        let k = self.done.iter().position(|d| d.io == io).expect("the request ended");
        self.done.remove(k).result
    }
}

fn cache(writes: WritePolicy) -> C {
    C::new(Config { space: 5, blocks: 64, writes, clean_at: 3, ..Config::DEFAULT }).unwrap()
}

#[test]
fn a_miss_reads_the_block_and_puts_it_clean() {
    let (mut c, mut s) = (cache(WritePolicy::WriteBack), Sim::new(8));
    s.durable.insert(3, 33);
    assert_eq!(s.one(&mut c, 1, |c| c.read(1, 3)), Ok(Served::FromBlock));
    assert_eq!(s.user[&1], 33);
    assert!(matches!(s.gms[&3], Held { data: 33, dirt: Dirt::Clean, .. }));
    assert_eq!(s.one(&mut c, 2, |c| c.read(2, 3)), Ok(Served::FromGms));
    assert_eq!(s.user[&2], 33);
}

#[test]
fn write_through_reaches_the_block_server_first() {
    let (mut c, mut s) = (cache(WritePolicy::WriteThrough), Sim::new(8));
    s.user.insert(1, 77);
    assert_eq!(s.one(&mut c, 1, |c| c.write(1, 9)), Ok(Served::Through));
    assert_eq!(s.volatile[&9], 77);
    assert!(matches!(s.gms[&9], Held { data: 77, dirt: Dirt::Clean, .. }));
    assert_eq!(c.dirty(), 0);
}

#[test]
fn write_back_stays_dirty_until_a_flush_makes_it_durable() {
    let (mut c, mut s) = (cache(WritePolicy::WriteBack), Sim::new(8));
    s.user.insert(1, 11);
    assert_eq!(s.one(&mut c, 1, |c| c.write(1, 4)), Ok(Served::Dirty));
    assert!(matches!(s.gms[&4], Held { data: 11, dirt: Dirt::Dirty, .. }));
    assert!(s.volatile.is_empty() && c.dirty() == 1);
    assert_eq!(s.one(&mut c, 2, |c| c.read(2, 4)), Ok(Served::FromGms));
    assert_eq!(s.user[&2], 11);
    assert_eq!(s.one(&mut c, 3, |c| c.flush(3)), Ok(Served::Flushed));
    assert_eq!((s.durable[&4], c.dirty()), (11, 0));
    assert!(matches!(s.gms[&4], Held { data: 11, dirt: Dirt::Clean, .. }), "the dirty copy was superseded");
}

#[test]
fn pressure_cleans_the_oldest_dirty_pages_and_nothing_dirty_is_let_go() {
    let (mut c, mut s) = (cache(WritePolicy::WriteBack), Sim::new(3));
    for b in 0..20u64 {
        s.user.insert(b as u32, 100 + b);
        assert!(s.one(&mut c, b as u32, |c| c.write(b as u32, b)).is_ok());
        assert!(c.dirty() <= 4);
    }
    assert!(c.stats().cleaned > 0 && c.stats().lost == 0);
    assert_eq!(s.one(&mut c, 99, |c| c.flush(99)), Ok(Served::Flushed));
    for b in 0..20u64 {
        assert_eq!(s.durable.get(&b), Some(&(100 + b)), "block {b}");
    }
}

#[test]
fn a_dirty_page_whose_holder_died_is_lost_never_read_stale() {
    let (mut c, mut s) = (cache(WritePolicy::WriteBack), Sim::new(8));
    s.durable.insert(2, 1);
    s.user.insert(1, 2);
    assert_eq!(s.one(&mut c, 1, |c| c.write(1, 2)), Ok(Served::Dirty));
    s.gms.clear();
    assert_eq!(s.one(&mut c, 2, |c| c.read(2, 2)), Err(CachedError::Lost { block: 2 }));
    assert_eq!(s.one(&mut c, 3, |c| c.flush(3)), Err(CachedError::Lost { block: 2 }));
    // Written again: the page is whole again.
    s.user.insert(4, 5);
    assert_eq!(s.one(&mut c, 4, |c| c.write(4, 2)), Ok(Served::Dirty));
    assert_eq!(s.one(&mut c, 5, |c| c.flush(5)), Ok(Served::Flushed));
    assert_eq!(s.durable[&2], 5);
}

#[test]
fn refused_or_failed_dirty_puts_are_written_through() {
    for fail in [false, true] {
        let (mut c, mut s) = (cache(WritePolicy::WriteBack), Sim::new(8));
        (s.refuse_puts, s.fail_puts) = (!fail, fail);
        s.user.insert(1, 8);
        assert_eq!(s.one(&mut c, 1, |c| c.write(1, 6)), Ok(Served::Through));
        assert_eq!(s.volatile[&6], 8);
        // A dirty copy that landed unanswered was covered by the discard.
        assert!(s.gms.get(&6).is_none_or(|h| h.dirt == Dirt::Clean && h.data == 8), "{:?}", s.gms.get(&6));
    }
}

#[test]
fn bad_requests_are_refused() {
    let mut c = cache(WritePolicy::WriteBack);
    assert_eq!(c.read(1, 64), Err(CachedError::PastEnd));
    for b in 0..7 {
        assert_eq!(c.read(b, b as u64), Ok(()));
    }
    assert_eq!(c.read(8, 8), Err(CachedError::Busy));
    let bad = |blocks, clean_at, first_version| C::new(Config { blocks, clean_at, first_version, ..Config::DEFAULT });
    assert!(bad(0, 2, 1).is_err() && bad(8, 0, 1).is_err() && bad(8, 5, 1).is_err() && bad(8, 2, 0).is_err());
}

#[derive(Clone, Debug)]
enum Op {
    Read(u64),
    Write(u64),
    Flush,
}

fn op() -> impl Strategy<Value = Op> {
    prop_oneof![(0..12u64).prop_map(Op::Read), (0..12u64).prop_map(Op::Write), Just(Op::Flush)]
}

proptest! {
    /// Random requests, several in flight, completions in random order, GMS pressure and
    /// transient put and get faults: every read returns the last write acknowledged before
    /// it was accepted (or one in flight with it), every flush that succeeds leaves every
    /// write acknowledged before it on the durable disk, and nothing is ever lost.
    #[test]
    fn reads_and_flushes_see_every_acknowledged_write(
        ops in prop::collection::vec(op(), 1..60),
        picks in prop::collection::vec(any::<u16>(), 200),
        budget in 1..6usize,
        back in any::<bool>(),
        faults in any::<u8>(),
    ) {
        let writes = if back { WritePolicy::WriteBack } else { WritePolicy::WriteThrough };
        let (mut c, mut s) = (cache(writes), Sim::new(budget));
        let mut acked: HashMap<u64, u64> = HashMap::new();
        let mut in_flight: HashMap<u32, (Op, HashMap<u64, u64>)> = HashMap::new();
        let mut pick = picks.iter().cycle();
        for (n, o) in ops.iter().enumerate() {
            let io = n as u32;
            s.fail_puts = faults & 1 << (n % 8) != 0;
            s.user.insert(io, 1000 + n as u64);
            let r = match *o { Op::Read(b) => c.read(io, b), Op::Write(b) => c.write(io, b), Op::Flush => c.flush(io) };
            match r {
                Ok(()) => { in_flight.insert(io, (o.clone(), acked.clone())); }
                Err(CachedError::Busy) => {}
                Err(e) => prop_assert!(false, "{:?} refused: {:?}", o, e),
            }
            s.issue(&mut c);
            // Complete a few commands, in random order.
            for _ in 0..(*pick.next().unwrap() % 4) {
                if s.flying.is_empty() { break; }
                let k = usize::from(*pick.next().unwrap()) % s.flying.len();
                s.complete(&mut c, k);
                s.issue(&mut c);
            }
            check(&mut s, &mut in_flight, &mut acked)?;
        }
        s.fail_puts = false;
        s.run(&mut c);
        check(&mut s, &mut in_flight, &mut acked)?;
        prop_assert!(in_flight.is_empty() && c.is_idle());
        prop_assert_eq!(c.stats().lost, 0);
        s.user.insert(9999, 0);
        prop_assert_eq!(s.one(&mut c, 9999, |c| c.flush(9999)), Ok(Served::Flushed));
        for (b, d) in &acked {
            prop_assert_eq!(s.durable.get(b), Some(d), "block {} after the last flush", b);
        }
    }
}

/// Check the requests that ended against what was acknowledged before each began.
fn check(
    s: &mut Sim,
    in_flight: &mut HashMap<u32, (Op, HashMap<u64, u64>)>,
    acked: &mut HashMap<u64, u64>,
) -> Result<(), TestCaseError> {
    for d in s.done.drain(..) {
        let (o, before) = in_flight.remove(&d.io).expect("a request of ours");
        match (o, d.result) {
            (Op::Write(b), Ok(_)) => {
                acked.insert(b, 1000 + u64::from(d.io));
            }
            (Op::Read(b), Ok(_)) => {
                // Writes carry growing data: the last one acknowledged before the read
                // began, or a later one.
                let got = s.user[&d.io];
                let want = before.get(&b).copied().unwrap_or(0);
                prop_assert!(got >= want, "block {} read {} < {} acknowledged before", b, got, want);
            }
            (Op::Flush, Ok(_)) => {
                for (b, v) in &before {
                    let on_disk = s.durable.get(b).copied().unwrap_or(0);
                    prop_assert!(on_disk >= *v, "flushed block {} holds {} < {}", b, on_disk, v);
                }
            }
            (o, Err(e)) => prop_assert!(false, "{:?} failed: {:?}", o, e),
        }
    }
    Ok(())
}

#[test]
fn a_cleaning_that_fails_is_reported_by_the_flush_and_tried_again() {
    let (mut c, mut s) = (cache(WritePolicy::WriteBack), Sim::new(8));
    s.user.insert(1, 21);
    assert_eq!(s.one(&mut c, 1, |c| c.write(1, 7)), Ok(Served::Dirty));
    s.fail_blocks = true;
    let e = s.one(&mut c, 2, |c| c.flush(2));
    assert_eq!(e, Err(CachedError::Block { block: Some(7), fault: BlockFault::Failed }));
    assert_eq!((c.dirty(), c.stats().clean_failures), (1, 1));
    assert!(matches!(s.gms[&7], Held { data: 21, dirt: Dirt::Dirty, .. }), "the dirty copy stays");
    s.fail_blocks = false;
    assert_eq!(s.one(&mut c, 3, |c| c.flush(3)), Ok(Served::Flushed));
    assert_eq!((s.durable[&7], c.dirty()), (21, 0));
}

#[test]
fn a_dirty_page_that_does_not_answer_is_unreachable_not_read_from_the_block() {
    let (mut c, mut s) = (cache(WritePolicy::WriteBack), Sim::new(8));
    s.durable.insert(3, 1);
    s.user.insert(1, 2);
    assert_eq!(s.one(&mut c, 1, |c| c.write(1, 3)), Ok(Served::Dirty));
    s.fail_gets = true;
    assert_eq!(s.one(&mut c, 2, |c| c.read(2, 3)), Err(CachedError::Unreachable { block: 3 }));
    assert_eq!(c.dirty(), 1, "still dirty, not lost");
    // A clean page whose getpage fails is read from the block server.
    assert_eq!(s.one(&mut c, 3, |c| c.read(3, 5)), Ok(Served::FromBlock));
    s.fail_gets = false;
    assert_eq!(s.one(&mut c, 4, |c| c.read(4, 3)), Ok(Served::FromGms));
    assert_eq!(s.user[&4], 2);
}

#[test]
fn a_write_through_the_block_server_refuses_fails_and_leaves_gms_alone() {
    let (mut c, mut s) = (cache(WritePolicy::WriteThrough), Sim::new(8));
    s.fail_blocks = true;
    s.user.insert(1, 9);
    let e = s.one(&mut c, 1, |c| c.write(1, 2));
    assert_eq!(e, Err(CachedError::Block { block: Some(2), fault: BlockFault::Failed }));
    assert!(s.gms.is_empty() && s.volatile.is_empty());
}

#[test]
fn copies_that_could_not_be_superseded_are_skipped_by_reads_until_a_newer_version_covers_them() {
    let (mut c, mut s) = (cache(WritePolicy::WriteBack), Sim::new(8));
    s.user.insert(1, 5);
    assert_eq!(s.one(&mut c, 1, |c| c.write(1, 4)), Ok(Served::Dirty));
    // The rewrite's dirty put is refused, its clean put too, and so is the discard: the
    // old dirty copy stays in GMS, behind the block server's newer data.
    s.refuse_puts = true;
    s.user.insert(2, 6);
    let mut discards = 0;
    c.write(2, 4).unwrap();
    loop {
        s.issue(&mut c);
        let Some(k) = s.flying.iter().position(|_| true) else { break };
        if let Command::Discard { job, .. } = s.flying[k].0 {
            let _ = s.flying.remove(k);
            discards += 1;
            assert!(c.handle_discard(job, false));
            continue;
        }
        s.complete(&mut c, k);
    }
    assert_eq!((discards, c.stats().stale), (3, 1));
    assert!(matches!(s.gms[&4], Held { data: 5, .. }));
    s.refuse_puts = false;
    // A read skips the stale copy: the block server's data, put back clean.
    assert_eq!(s.one(&mut c, 3, |c| c.read(3, 4)), Ok(Served::FromBlock));
    assert_eq!(s.user[&3], 6);
    assert_eq!(c.records().count(), 0, "the clean put superseded the stale copy");
}

#[test]
fn a_refused_dirty_put_starts_cleaning_below_the_threshold() {
    let mut c = C::new(Config { space: 5, blocks: 64, clean_at: 4, ..Config::DEFAULT }).unwrap();
    let mut s = Sim::new(2);
    for b in 0..2u32 {
        s.user.insert(b, 40 + u64::from(b));
        assert_eq!(s.one(&mut c, b, |c| c.write(b, u64::from(b))), Ok(Served::Dirty));
    }
    assert_eq!((c.dirty(), c.stats().cleaned), (2, 0), "below clean_at: nothing cleaned");
    // GMS is full of dirty pages: this write goes through, and the writer cleans.
    s.user.insert(2, 42);
    assert_eq!(s.one(&mut c, 2, |c| c.write(2, 2)), Ok(Served::Through));
    assert_eq!((c.dirty(), c.stats().cleaned), (0, 2));
    assert_eq!((s.volatile[&0], s.volatile[&1], s.volatile[&2]), (40, 41, 42));
    // Room again: back to dirty puts, and no cleaning below the threshold.
    s.user.insert(3, 43);
    assert_eq!(s.one(&mut c, 3, |c| c.write(3, 3)), Ok(Served::Dirty));
    assert_eq!((c.dirty(), c.stats().cleaned), (1, 2));
}

#[test]
fn a_failed_write_whose_dirty_copy_may_have_landed_is_never_read() {
    let (mut c, mut s) = (cache(WritePolicy::WriteBack), Sim::new(8));
    s.durable.insert(6, 60);
    // The dirty put lands but its answer is lost, and the block server fails the
    // fallback: the write fails.
    (s.fail_puts, s.fail_blocks) = (true, true);
    s.user.insert(1, 61);
    assert!(matches!(s.one(&mut c, 1, |c| c.write(1, 6)), Err(CachedError::Block { .. })));
    assert!(matches!(s.gms[&6], Held { data: 61, dirt: Dirt::Dirty, .. }), "the copy landed");
    (s.fail_puts, s.fail_blocks) = (false, false);
    // A read gets the server's data, not the failed write's copy; its insertion
    // supersedes that copy.
    assert_eq!(s.one(&mut c, 2, |c| c.read(2, 6)), Ok(Served::FromBlock));
    assert_eq!(s.user[&2], 60);
    assert!(matches!(s.gms[&6], Held { data: 60, dirt: Dirt::Clean, .. }));
    assert_eq!(c.records().count(), 0);
}
