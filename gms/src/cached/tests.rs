// SPDX-License-Identifier: GPL-2.0-only
//! The cached volume driven by a simulated GMS (lenders that each hold one copy of a GMS
//! page, versions, a budget per lender whose room-making lets only clean copies go,
//! lenders that may die) and a simulated block server (acknowledged writes volatile until
//! a flush): reads, both write policies, dirty copies on distinct lenders, cleaning under
//! pressure, flushes, lost pages, and a property test over random request mixes,
//! completion orders, faults and a lender's death.

extern crate std;

use super::*;
use proptest::prelude::*;
use std::collections::HashMap;
use std::vec;
use std::vec::Vec;

type C = Cache<u32, 8, 4>;

#[derive(Clone, Copy, Debug)]
struct Held {
    version: Version,
    data: u64,
    dirt: Dirt,
    lender: u16,
}

/// The volume's GMS space in these tests.
const SPACE: u64 = 5;

/// GMS, the block server, the buffers, and the commands in flight (each with the bytes a
/// put or block write took when it was issued).
#[derive(Default)]
struct Sim {
    gms: HashMap<PageId, Held>,
    /// Whether lender `n + 1` is alive.
    alive: Vec<bool>,
    /// A lender holds at most this many pages; a put beyond it first lets its oldest
    /// clean copy go (the holder's rule), and is refused if every copy there is dirty.
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
    /// The runtime puts a copy where it likes, ignoring `apart`.
    ignore_apart: bool,
}

impl Sim {
    /// Two lenders of `budget` pages each.
    fn new(budget: usize) -> Sim {
        Sim::lenders(2, budget)
    }

    fn lenders(n: usize, budget: usize) -> Sim {
        Sim { budget, alive: vec![true; n], ..Sim::default() }
    }

    /// Copy `k` of block `b`, if GMS holds it.
    fn copy(&self, b: u64, k: u8) -> Option<Held> {
        self.gms.get(&replica(PageId::new(SPACE, b), k)).copied()
    }

    /// Lender `n` dies: its copies are gone.
    fn kill(&mut self, n: u16) {
        self.alive[usize::from(n) - 1] = false;
        self.gms.retain(|_, h| h.lender != n);
    }

    /// The live lender a put goes to: the one with the fewest copies that is none of
    /// `apart`.
    fn target(&self, apart: &Holders) -> Option<u16> {
        let live = (1..=self.alive.len() as u16).filter(|&n| self.alive[usize::from(n) - 1]);
        let held = |n: u16| self.gms.values().filter(|h| h.lender == n).count();
        live.filter(|&n| self.ignore_apart || !apart.contains(n)).min_by_key(|&n| (held(n), n))
    }

    fn buf(&mut self, b: Buf<u32>) -> &mut u64 {
        match b {
            Buf::User(io) => self.user.entry(io).or_insert(0),
            Buf::Scratch(j) => self.scratch.entry(j).or_insert(0),
        }
    }

    /// Room for one more page on `lender`: its oldest clean copy goes; `false`: all of
    /// them are dirty.
    fn room(&mut self, lender: u16, page: PageId) -> bool {
        let on = |h: &Held| h.lender == lender;
        let here = self.gms.values().filter(|h| on(h)).count();
        if self.gms.get(&page).is_some_and(on) || here < self.budget {
            return true;
        }
        let clean = self.gms.iter().filter(|(_, h)| h.dirt == Dirt::Clean && on(h));
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
                let got = match self.gms.get(&page).copied() {
                    _ if self.fail_gets => Got::Failed,
                    Some(h) if h.version >= at_least => {
                        *self.buf(buf) = h.data;
                        Got::Hit { version: h.version }
                    }
                    _ => Got::Miss,
                };
                c.handle_get(job, got)
            }
            Command::Put { job, page, version, dirt, apart, .. } => {
                c.handle_put(job, self.put(page, version, dirt, bytes, &apart))
            }
            Command::Discard { job, page, version } => {
                if self.gms.get(&page).is_some_and(|h| h.version <= version) {
                    self.gms.remove(&page);
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

    fn put(&mut self, page: PageId, version: Version, dirt: Dirt, data: u64, apart: &Holders) -> PutResult {
        // No lender to take it: the runtime could not start the put.
        let Some(lender) = self.target(apart) else { return PutResult::Failed };
        if self.refuse_puts {
            return PutResult::Refused;
        }
        if self.gms.get(&page).is_some_and(|h| h.version > version) {
            return PutResult::Superseded;
        }
        if !self.room(lender, page) {
            return PutResult::Refused;
        }
        self.gms.insert(page, Held { version, data, dirt, lender });
        if self.fail_puts {
            // Stored, but the answer is lost.
            return PutResult::Failed;
        }
        PutResult::Stored { target: lender }
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
    C::new(Config { space: SPACE, blocks: 64, writes, clean_at: 3, ..Config::DEFAULT }).unwrap()
}

#[test]
fn a_miss_reads_the_block_and_puts_it_clean() {
    let (mut c, mut s) = (cache(WritePolicy::WriteBack), Sim::new(8));
    s.durable.insert(3, 33);
    assert_eq!(s.one(&mut c, 1, |c| c.read(1, 3)), Ok(Served::FromBlock));
    assert_eq!(s.user[&1], 33);
    assert!(matches!(s.copy(3, 0).unwrap(), Held { data: 33, dirt: Dirt::Clean, .. }));
    assert_eq!(s.one(&mut c, 2, |c| c.read(2, 3)), Ok(Served::FromGms));
    assert_eq!(s.user[&2], 33);
}

#[test]
fn write_through_reaches_the_block_server_first() {
    let (mut c, mut s) = (cache(WritePolicy::WriteThrough), Sim::new(8));
    s.user.insert(1, 77);
    assert_eq!(s.one(&mut c, 1, |c| c.write(1, 9)), Ok(Served::Through));
    assert_eq!(s.volatile[&9], 77);
    assert!(matches!(s.copy(9, 0).unwrap(), Held { data: 77, dirt: Dirt::Clean, .. }));
    assert_eq!(c.dirty(), 0);
}

#[test]
fn write_back_stays_dirty_until_a_flush_makes_it_durable() {
    let (mut c, mut s) = (cache(WritePolicy::WriteBack), Sim::new(8));
    s.user.insert(1, 11);
    assert_eq!(s.one(&mut c, 1, |c| c.write(1, 4)), Ok(Served::Dirty));
    let (c0, c1) = (s.copy(4, 0).unwrap(), s.copy(4, 1).unwrap());
    assert!(matches!((c0, c1), (Held { data: 11, dirt: Dirt::Dirty, .. }, Held { data: 11, dirt: Dirt::Dirty, .. })));
    assert_ne!(c0.lender, c1.lender, "the copies are on distinct lenders");
    assert!(s.volatile.is_empty() && c.dirty() == 1);
    assert_eq!(s.one(&mut c, 2, |c| c.read(2, 4)), Ok(Served::FromGms));
    assert_eq!(s.user[&2], 11);
    assert_eq!(s.one(&mut c, 3, |c| c.flush(3)), Ok(Served::Flushed));
    assert_eq!((s.durable[&4], c.dirty()), (11, 0));
    assert!(matches!(s.copy(4, 0).unwrap(), Held { data: 11, dirt: Dirt::Clean, .. }), "the dirty copy was superseded");
    assert!(s.copy(4, 1).is_none(), "the second copy was discarded");
    assert_eq!(c.stats().copies_dropped, 1);
}

#[test]
fn a_lender_holding_dirty_pages_dies_after_the_ack_and_nothing_acknowledged_is_lost() {
    // Cleaning waits for the flush: every record is dirty when the lender dies.
    let mut c = C::new(Config { space: SPACE, blocks: 64, clean_at: 4, ..Config::DEFAULT }).unwrap();
    let mut s = Sim::new(8);
    for b in 0..3u64 {
        s.durable.insert(b, 1);
        s.user.insert(b as u32, 50 + b);
        assert_eq!(s.one(&mut c, b as u32, |c| c.write(b as u32, b)), Ok(Served::Dirty));
    }
    assert!(s.volatile.is_empty() && c.dirty() == 3, "acknowledged before the block server has any");
    let first_on_1 = (0..3).filter(|&b| s.copy(b, 0).unwrap().lender == 1).count() as u64;
    assert!(first_on_1 > 0, "lender 1 holds some first copies");
    s.kill(1);
    // Reads return the written data, from the copies lender 2 holds.
    for b in 0..3u64 {
        assert_eq!(s.one(&mut c, 10 + b as u32, |c| c.read(10 + b as u32, b)), Ok(Served::FromGms));
        assert_eq!(s.user[&(10 + b as u32)], 50 + b, "block {b}");
    }
    assert_eq!(s.one(&mut c, 20, |c| c.flush(20)), Ok(Served::Flushed));
    for b in 0..3u64 {
        assert_eq!(s.durable[&b], 50 + b, "block {b} on the durable disk");
    }
    let st = c.stats();
    assert_eq!((st.lost, st.cleaned, c.dirty()), (0, 3, 0));
    assert!(st.from_spare >= first_on_1, "{st:?}");
    assert!(s.gms.values().all(|h| h.dirt == Dirt::Clean), "no dirty copy left behind");
}

#[test]
fn a_lender_lost_starts_the_cleaning_of_every_page_dirty_then() {
    let mut c = C::new(Config { space: SPACE, blocks: 64, clean_at: 4, ..Config::DEFAULT }).unwrap();
    let mut s = Sim::lenders(3, 8);
    for b in 0..3u64 {
        s.user.insert(b as u32, 70 + b);
        assert_eq!(s.one(&mut c, b as u32, |c| c.write(b as u32, b)), Ok(Served::Dirty));
    }
    s.kill(2);
    c.handle_lender_lost();
    s.run(&mut c);
    assert_eq!((c.dirty(), c.stats().cleaned, c.stats().lost), (0, 3, 0), "cleaned without a flush");
    assert_eq!((s.volatile[&0], s.volatile[&1], s.volatile[&2]), (70, 71, 72));
    // A page written after the death has its two copies on the lenders left: it stays.
    s.user.insert(9, 79);
    assert_eq!(s.one(&mut c, 9, |c| c.write(9, 9)), Ok(Served::Dirty));
    assert_eq!((c.dirty(), c.stats().cleaned), (1, 3));
}

#[test]
fn with_fewer_live_lenders_than_copies_a_write_goes_through_never_acknowledged_with_one_copy() {
    let (mut c, mut s) = (cache(WritePolicy::WriteBack), Sim::new(8));
    s.kill(2);
    s.user.insert(1, 31);
    assert_eq!(s.one(&mut c, 1, |c| c.write(1, 3)), Ok(Served::Through));
    assert_eq!(s.volatile[&3], 31);
    let st = c.stats();
    assert_eq!((st.writes_dirty, st.fallbacks, st.short_copies, c.dirty()), (0, 1, 1, 0));
    assert!(matches!(s.copy(3, 0).unwrap(), Held { data: 31, dirt: Dirt::Clean, .. }), "covered by the clean put");
    // One copy was the user's choice: acknowledged dirty on the one lender.
    let one = Config { space: SPACE, blocks: 64, clean_at: 3, copies: 1, ..Config::DEFAULT };
    let mut c = C::new(one).unwrap();
    s.user.insert(2, 32);
    assert_eq!(s.one(&mut c, 2, |c| c.write(2, 4)), Ok(Served::Dirty));
    assert!(s.copy(4, 1).is_none());
}

#[test]
fn a_copy_put_beside_another_is_no_second_copy() {
    let (mut c, mut s) = (cache(WritePolicy::WriteBack), Sim::new(8));
    s.ignore_apart = true;
    s.kill(2);
    s.user.insert(1, 41);
    assert_eq!(s.one(&mut c, 1, |c| c.write(1, 5)), Ok(Served::Through));
    assert_eq!((c.stats().short_copies, c.dirty()), (1, 0));
    assert_eq!(s.volatile[&5], 41);
    assert!(s.copy(5, 1).is_none(), "the copy beside the first was discarded");
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
        assert!(s.copy(6, 0).is_none_or(|h| h.dirt == Dirt::Clean && h.data == 8), "{:?}", s.copy(6, 0));
        assert!(s.copy(6, 1).is_none(), "the second copy was discarded");
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
    assert_eq!(c.flush(9), Err(CachedError::Busy));
    assert_eq!((c.stats().reads, c.stats().flushes), (7, 0), "refused requests are not counted");
    let bad = |blocks, clean_at, first_version| C::new(Config { blocks, clean_at, first_version, ..Config::DEFAULT });
    assert!(bad(0, 2, 1).is_err() && bad(8, 0, 1).is_err() && bad(8, 5, 1).is_err() && bad(8, 2, 0).is_err());
    let copies = |copies| C::new(Config { blocks: 8, clean_at: 2, copies, ..Config::DEFAULT }).err();
    assert_eq!(
        (copies(0), copies(MAX_REPLICAS + 1), copies(MAX_REPLICAS)),
        (Some(ConfigError::Sizes), Some(ConfigError::Sizes), None)
    );
    let space = C::new(Config { blocks: 8, clean_at: 2, space: 1 << 60, ..Config::DEFAULT });
    assert_eq!(space.err(), Some(ConfigError::Space));
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
    /// Random requests, several in flight, completions in random order, GMS pressure,
    /// transient put faults and the death of one of three lenders at a random point: every
    /// read returns the last write acknowledged before it was accepted (or one in flight
    /// with it), every flush that succeeds leaves every write acknowledged before it on the
    /// durable disk, nothing is ever lost, and no dirty copy is left behind.
    #[test]
    fn reads_and_flushes_see_every_acknowledged_write(
        ops in prop::collection::vec(op(), 1..60),
        picks in prop::collection::vec(any::<u16>(), 200),
        budget in 1..6usize,
        back in any::<bool>(),
        faults in any::<u8>(),
        death in prop::option::of((0..60usize, 1..=3u16)),
    ) {
        let writes = if back { WritePolicy::WriteBack } else { WritePolicy::WriteThrough };
        let (mut c, mut s) = (cache(writes), Sim::lenders(3, budget));
        let mut acked: HashMap<u64, u64> = HashMap::new();
        let mut in_flight: HashMap<u32, (Op, HashMap<u64, u64>)> = HashMap::new();
        let mut pick = picks.iter().cycle();
        for (n, o) in ops.iter().enumerate() {
            let io = n as u32;
            s.fail_puts = faults & 1 << (n % 8) != 0;
            if let Some((_, lender)) = death.filter(|d| d.0 == n) {
                s.kill(lender);
                c.handle_lender_lost();
            }
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
        prop_assert!(s.gms.values().all(|h| h.dirt == Dirt::Clean), "dirty copies left: {:?}", s.gms);
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
    assert!(matches!(s.copy(7, 0).unwrap(), Held { data: 21, dirt: Dirt::Dirty, .. }), "the dirty copy stays");
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
    // The rewrite's dirty put is refused, its clean put too, and so are the discards (of
    // copy 0, then of copy 1): the old dirty copies stay in GMS, behind the block server's
    // newer data.
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
    assert_eq!((discards, c.stats().stale), (6, 2));
    assert!(matches!((s.copy(4, 0).unwrap(), s.copy(4, 1).unwrap()), (Held { data: 5, .. }, Held { data: 5, .. })));
    s.refuse_puts = false;
    // A read skips the stale copy: the block server's data, put back clean.
    assert_eq!(s.one(&mut c, 3, |c| c.read(3, 4)), Ok(Served::FromBlock));
    assert_eq!(s.user[&3], 6);
    assert_eq!(c.records().count(), 0, "the clean put superseded the stale copy");
    assert!(s.copy(4, 1).is_none(), "and the other copy was discarded");
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
    assert!(matches!(s.copy(6, 0).unwrap(), Held { data: 61, dirt: Dirt::Dirty, .. }), "the copy landed");
    (s.fail_puts, s.fail_blocks) = (false, false);
    // A read gets the server's data, not the failed write's copy; its insertion
    // supersedes that copy.
    assert_eq!(s.one(&mut c, 2, |c| c.read(2, 6)), Ok(Served::FromBlock));
    assert_eq!(s.user[&2], 60);
    assert!(matches!(s.copy(6, 0).unwrap(), Held { data: 60, dirt: Dirt::Clean, .. }));
    assert_eq!(c.records().count(), 0);
}
