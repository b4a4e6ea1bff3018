// SPDX-License-Identifier: GPL-2.0-only
//! The store driven by hand: each test plays the network, answering the operations
//! [`Store::poll_issue`] asks for, and checks the policy's decisions.

extern crate std;

use super::super::epochs::{Lru, LruConfig};
use super::super::net::prelude::RpcError;
use super::super::net::storage::Heap;
use super::super::ops::TopScope;
use super::super::page::Version;
use super::super::types::{GetResult, MissReason, OpId, PutResult, TopResult, Via};
use super::liveness::Event;
use super::*;
use std::collections::HashMap;
use std::vec;
use std::vec::Vec;

type S = Store<u32, u32, Heap, 8, 16, 32>;
/// A store whose node has `OPS` operation slots.
type SOps<const OPS: usize> = Store<u32, u32, Heap, 8, 16, OPS>;

/// The cluster as the tests play it: meta pages are stored and served at once (their
/// bytes and the member they were put to kept by page id); the user's operations are
/// handed to the test.
struct Net {
    lru: Lru,
    next: u32,
    meta: HashMap<PageId, (u16, Vec<u8>)>,
    /// The newest version each member says it knows of the volume (`TOPVERSION`), and of
    /// one page number.
    top: HashMap<u16, Version>,
    page_top: HashMap<(u16, u64), Version>,
}

impl Net {
    fn new() -> Self {
        Net {
            lru: Lru::new(0, LruConfig::default()),
            next: 0,
            meta: HashMap::new(),
            top: HashMap::new(),
            page_top: HashMap::new(),
        }
    }

    /// Member `node` lost its memory: the meta pages put to it are gone.
    fn lose(&mut self, node: u16) {
        self.meta.retain(|_, (at, _)| *at != node);
    }

    /// Everything the store wants sent now of the user's requests, each given an
    /// operation id (meta pages answered on the way).
    fn issue<const OPS: usize>(&mut self, s: &mut SOps<OPS>, now: u64) -> Vec<(OpId, Issue<u32>)> {
        let mut out = Vec::new();
        while let Some(i) = s.poll_issue(now, &mut self.lru, None) {
            let op = OpId { slot: (self.next % OPS as u32) as u16, generation: self.next };
            self.next += 1;
            s.handle_issued(now, &i, Some(op));
            match i.kind {
                IssueKind::Put { page, target, data: Data::Meta(m), .. } => {
                    let mut b = vec![0u8; 4096];
                    s.fill_meta(m, &mut b);
                    self.meta.insert(page, (target, b));
                    s.handle_put(now, op, page, PutResult::Stored { target }, None);
                }
                IssueKind::Get { page, into: Data::Meta(_), .. } => match self.meta.get(&page).cloned() {
                    Some((_, b)) => {
                        s.handle_get_bytes(now, op, &hit(0, 1), &b);
                    }
                    None => {
                        s.handle_get(now, op, &miss());
                    }
                },
                IssueKind::Top { node, scope, .. } => {
                    let top = match scope {
                        TopScope::Tables { .. } => self.top.get(&node),
                        TopScope::Page(p) => self.page_top.get(&(node, p)),
                    };
                    let top = top.copied().unwrap_or(Version(0));
                    s.handle_top(now, op, TopResult::Known { top, next: None });
                }
                _ => out.push((op, i)),
            }
        }
        out
    }

    /// Run the store's loading until it is ready (or refused, or 100 steps went by).
    fn load<const OPS: usize>(&mut self, s: &mut SOps<OPS>) {
        let mut now = 0;
        for _ in 0..100 {
            assert!(self.issue(s, now).is_empty(), "no user operation while loading");
            if matches!(s.phase(), Phase::Ready | Phase::Refused(_)) {
                return;
            }
            now = s.poll_timeout().unwrap_or(now).max(now + 1);
            s.handle_timeout(now);
        }
    }
}

fn store_on(net: &mut Net, cfg: StoreConfig, me: u16, members: &[u16]) -> S {
    let mut s = Store::new(cfg, 1, me, 64, members).unwrap();
    net.load(&mut s);
    s
}

fn store(cfg: StoreConfig, members: &[u16]) -> S {
    store_on(&mut Net::new(), cfg, 0, members)
}

fn put_target(i: &Issue<u32>) -> u16 {
    match i.kind {
        IssueKind::Put { target, .. } => target,
        _ => panic!("not a put: {i:?}"),
    }
}

fn stored<const OPS: usize>(s: &mut SOps<OPS>, now: u64, op: OpId, i: &Issue<u32>) {
    let IssueKind::Put { page, target, .. } = i.kind else { panic!() };
    s.handle_put(now, op, page, PutResult::Stored { target }, None);
}

fn hit(frame: u32, v: u64) -> GetResult<u32> {
    GetResult::Hit { version: Version(v), frame, len: 4096, via: Via::TwoWay, held: false }
}

fn miss() -> GetResult<u32> {
    GetResult::Miss { reason: MissReason::NotCached, frame: None }
}

fn done<const OPS: usize>(s: &mut SOps<OPS>) -> Option<(u32, Outcome)> {
    match s.poll_done()? {
        Finished::Request { io, outcome } => Some((io, outcome)),
        Finished::Scratch(f) => panic!("scratch {f}"),
        Finished::Copy { io, frame, .. } => panic!("copy {frame} for {io}"),
    }
}

/// Write `page` (request `io`) and store every put; returns the targets.
fn write_all(s: &mut S, net: &mut Net, page: u64, io: u32) -> Vec<u16> {
    s.write(0, page, io).unwrap();
    let ops = net.issue(s, 0);
    for (op, i) in &ops {
        stored(s, 0, *op, i);
    }
    assert_eq!(done(s), Some((io, Outcome::Written { copies: 2 })));
    ops.iter().map(|(_, i)| put_target(i)).collect()
}

#[test]
fn a_write_puts_every_replica_on_its_own_member_and_is_acknowledged_when_all_are_stored() {
    let mut s = store(StoreConfig::default(), &[1, 2, 3]);
    let mut net = Net::new();
    s.write(0, 5, 77).unwrap();
    let ops = net.issue(&mut s, 0);
    assert_eq!(ops.len(), 2);
    assert_ne!(put_target(&ops[0].1), put_target(&ops[1].1));
    stored(&mut s, 0, ops[0].0, &ops[0].1);
    assert_eq!(s.poll_done(), None, "one copy is not an acknowledged write");
    stored(&mut s, 0, ops[1].0, &ops[1].1);
    assert_eq!(done(&mut s), Some((77, Outcome::Written { copies: 2 })));
    assert!(s.entry(5, 0).unwrap().replica.holder().is_some());
}

#[test]
fn fewer_members_than_replicas_refuses_the_write_unless_degraded_writes_are_asked_for() {
    let mut net = Net::new();
    let mut s = store(StoreConfig::default(), &[1]);
    assert_eq!(s.phase(), Phase::Claim, "the label cannot be stored twice either");
    s.write(0, 0, 1).unwrap();
    let now = s.poll_timeout().unwrap();
    s.handle_timeout(now);
    assert!(net.issue(&mut s, now).is_empty());
    assert_eq!(done(&mut s), Some((1, Outcome::Failed(StoreError::TooFewMembers))));

    let mut s = store(StoreConfig { degraded_writes: true, ..StoreConfig::default() }, &[1]);
    s.write(0, 0, 2).unwrap();
    let ops = net.issue(&mut s, 0);
    assert_eq!(ops.len(), 1);
    stored(&mut s, 0, ops[0].0, &ops[0].1);
    assert!(net.issue(&mut s, 0).is_empty());
    assert_eq!(done(&mut s), Some((2, Outcome::Written { copies: 1 })));
    // The label, the floor map's page (made with the volume, it went out with the page's
    // floor: the write was taken before it was sent) and the user's page: each with one
    // copy.
    assert_eq!(s.stats.under_replicated, 3);
    // The replica left out must never be read as current: it is recorded lost.
    assert!(matches!(s.entry(0, 1).unwrap().replica, record::Replica::Lost { .. }));
}

#[test]
fn an_unanswered_put_is_put_again_and_the_other_replica_keeps_clear_of_where_it_may_be() {
    let mut s = store(StoreConfig::default(), &[1, 2, 3, 4]);
    let mut net = Net::new();
    let before = write_all(&mut s, &mut net, 3, 1);
    // Rewrite: replica 0's put goes unanswered at its target.
    s.write(10, 3, 2).unwrap();
    let ops = net.issue(&mut s, 10);
    let (op0, i0) = ops.iter().find(|(_, i)| s.replica_of(page_of(i)) == 0).copied().unwrap();
    let lost_at = put_target(&i0);
    s.handle_put(10, op0, page_of(&i0), PutResult::Failed, None);
    assert!(s.entry(3, 0).unwrap().sites.contains(lost_at));
    let again = net.issue(&mut s, 10);
    assert_eq!(again.len(), 1, "put again at once after no answer");
    assert_eq!(s.stats.retries, 1);
    // Replica 1's put (in flight still) and its sites are kept clear of.
    let (_, i1) = ops.iter().find(|(_, i)| s.replica_of(page_of(i)) == 1).copied().unwrap();
    assert_ne!(put_target(&again[0].1), put_target(&i1));
    assert!(!before.is_empty());
}

fn page_of(i: &Issue<u32>) -> PageId {
    match i.kind {
        IssueKind::Put { page, .. } | IssueKind::Get { page, .. } => page,
        IssueKind::Top { .. } => panic!("the test network answers TOPVERSION itself"),
        IssueKind::Gets(g) => g.first,
    }
}

#[test]
fn every_target_refusing_for_full_after_rounds_is_no_space() {
    let mut s = store(StoreConfig { replicas: 1, ..StoreConfig::default() }, &[1, 2]);
    let mut net = Net::new();
    s.write(0, 0, 9).unwrap();
    let (d, _) = answer_puts(&mut s, &mut net, 0, 20, |_| PutResult::Refused);
    assert_eq!(d, Some((9, Outcome::Failed(StoreError::NoSpace))), "a full cluster ends the write");
}

/// Answer every put the store issues with `result` (given the put's target) for at most
/// `rounds` timeouts from `now`, or until a request ends: what ended, and the time reached.
fn answer_puts(
    s: &mut S,
    net: &mut Net,
    mut now: u64,
    rounds: usize,
    result: impl Fn(u16) -> PutResult,
) -> (Option<(u32, Outcome)>, u64) {
    for _ in 0..rounds {
        for (op, i) in net.issue(s, now) {
            s.handle_put(now, op, page_of(&i), result(put_target(&i)), None);
        }
        if let Some(d) = done(s) {
            return (Some(d), now);
        }
        now = s.poll_timeout().unwrap();
        s.handle_timeout(now);
    }
    (None, now)
}

#[test]
fn a_target_busy_with_the_page_is_asked_again_and_never_taken_for_a_full_cluster() {
    // Seed 18,006,729: the label's holders were busy registering its old copy for a long
    // while, and the store, counting that as no room, failed the reads waiting for its load.
    let mut s = store(StoreConfig { replicas: 1, ..StoreConfig::default() }, &[1, 2]);
    let mut net = Net::new();
    s.write(0, 0, 9).unwrap();
    let (d, now) = answer_puts(&mut s, &mut net, 0, 20, |_| PutResult::Busy);
    assert_eq!(d, None, "a busy target neither failed the write nor was taken for a full cluster");
    // Then the target takes it.
    let (d, _) = answer_puts(&mut s, &mut net, now, 20, |t| PutResult::Stored { target: t });
    assert!(matches!(d, Some((9, Outcome::Written { .. }))), "{d:?}");
}

#[test]
fn a_page_never_written_reads_as_zeros_without_the_network() {
    let mut s = store(StoreConfig::default(), &[1, 2, 3]);
    let mut net = Net::new();
    s.read(0, 4, 1).unwrap();
    assert!(net.issue(&mut s, 0).is_empty());
    assert_eq!(done(&mut s), Some((1, Outcome::Zero)));
}

#[test]
fn a_read_asks_the_holder_then_its_directory_then_the_next_replica() {
    let mut s = store(StoreConfig::default(), &[1, 2, 3]);
    let mut net = Net::new();
    let targets = write_all(&mut s, &mut net, 7, 1);
    s.read(1, 7, 2).unwrap();
    let g = net.issue(&mut s, 1);
    let IssueKind::Get { route, at_least, .. } = g[0].1.kind else { panic!() };
    assert_eq!(route, Route::Holder { node: targets[0], answer: None });
    assert_eq!(Some(at_least), s.entry(7, 0).unwrap().replica.version());
    s.handle_get(1, g[0].0, &miss());
    let g = net.issue(&mut s, 1);
    assert!(matches!(g[0].1.kind, IssueKind::Get { route: Route::Directory, .. }));
    s.handle_get(1, g[0].0, &miss());
    let g = net.issue(&mut s, 1);
    assert_eq!(s.replica_of(page_of(&g[0].1)), 1);
    let v = s.entry(7, 1).unwrap().replica.version().unwrap();
    s.handle_get(1, g[0].0, &hit(2, v.0));
    assert_eq!(done(&mut s), Some((2, Outcome::Read { version: v })));
}

#[test]
fn a_failed_holders_replica_is_made_again_from_the_other() {
    let mut s = store(StoreConfig::default(), &[1, 2, 3]);
    let mut net = Net::new();
    let targets = write_all(&mut s, &mut net, 2, 1);
    s.handle_member(5, Event::Failed(targets[0]));
    let g = net.issue(&mut s, 5);
    assert_eq!(g.len(), 1);
    let IssueKind::Get { into: Data::Scratch, route: Route::Holder { node, .. }, at_least, .. } = g[0].1.kind else {
        panic!("{:?}", g[0].1)
    };
    assert_eq!(node, targets[1]);
    assert!(s.handle_get(5, g[0].0, &hit(900, at_least.0)), "the store keeps the fetched copy");
    let p = net.issue(&mut s, 5);
    let IssueKind::Put { target, data: Data::Frame(900), .. } = p[0].1.kind else { panic!("{:?}", p[0].1) };
    assert!(target != targets[0] && target != targets[1]);
    stored(&mut s, 5, p[0].0, &p[0].1);
    assert_eq!(s.poll_done(), Some(Finished::Scratch(900)));
    assert_eq!(s.entry(2, 0).unwrap().replica.holder(), Some(target));
    assert_eq!(s.stats.repaired, 1);
}

#[test]
fn a_written_page_with_no_copy_left_fails_never_reads_as_zeros() {
    let mut s = store(StoreConfig::default(), &[1, 2, 3]);
    let mut net = Net::new();
    let targets = write_all(&mut s, &mut net, 2, 1);
    for &t in &targets {
        s.handle_member(5, Event::Failed(t));
    }
    assert!(net.issue(&mut s, 5).iter().all(|(_, i)| !matches!(i.kind, IssueKind::Put { .. })));
    // Declared failed, they may only be suspected: a read now cannot call the page lost.
    // Back as new runs (their memory gone), it is.
    for &t in &targets {
        s.handle_member(5, Event::Restarted(t));
    }
    // The members, asked before the page is called lost, have nothing; its directory
    // does not answer.
    s.read(6, 2, 3).unwrap();
    let d = until_done(&mut s, &mut net, 6, |_, i| match i.kind {
        IssueKind::Get { route: Route::Holder { .. }, .. } => miss(),
        _ => GetResult::Miss { reason: MissReason::Failed(RpcError::Timeout), frame: None },
    });
    assert_eq!(d, (3, Outcome::Failed(StoreError::Lost)));
}

/// Run the store from `now` until a request ends, `answer` giving each getpage's result;
/// that request and its outcome.
fn until_done(
    s: &mut S,
    net: &mut Net,
    mut now: u64,
    mut answer: impl FnMut(&S, &Issue<u32>) -> GetResult<u32>,
) -> (u32, Outcome) {
    for _ in 0..200 {
        for (op, i) in net.issue(s, now) {
            assert!(matches!(i.kind, IssueKind::Get { .. }), "only getpages here: {i:?}");
            let r = answer(s, &i);
            s.handle_get(now, op, &r);
        }
        if let Some(d) = done(s) {
            return d;
        }
        now = s.poll_timeout().unwrap_or(now + 1).max(now + 1);
        s.handle_timeout(now);
    }
    panic!("the request never ended (now {now}, next {:?}, {:?})", s.poll_timeout(), s.phase());
}

#[test]
fn a_second_request_on_a_page_being_written_waits() {
    let mut s = store(StoreConfig::default(), &[1, 2, 3]);
    s.write(0, 1, 1).unwrap();
    assert_eq!(s.read(0, 1, 2), Err((2, StoreError::Busy)));
    assert_eq!(s.write(0, 64, 3), Err((3, StoreError::OutOfRange)));
    assert!(s.read(0, 2, 4).is_ok());
}

#[test]
fn a_second_load_of_an_identity_a_live_member_owns_is_refused() {
    let mut net = Net::new();
    let mut a = store_on(&mut net, StoreConfig::default(), 0, &[1, 2, 3]);
    write_all(&mut a, &mut net, 1, 1);
    // Node 1 loads the same identity while node 0 is a member.
    let mut b = store_on(&mut net, StoreConfig::default(), 1, &[0, 2, 3]);
    assert_eq!(b.phase(), Phase::Refused(StoreError::IdentityInUse { owner: 0 }));
    assert_eq!(b.write(0, 1, 5), Err((5, StoreError::IdentityInUse { owner: 0 })));
    // With node 0 gone, node 1 may take the volume over.
    let c = store_on(&mut net, StoreConfig::default(), 1, &[2, 3]);
    assert_eq!(c.phase(), Phase::Ready);
    assert!(c.is_written(1));
}

#[test]
fn a_store_built_in_place_loads_like_a_new_one() {
    let cfg = StoreConfig::default();
    let mut s = S::unloaded(
        cfg,
        Heap::buf(0, record::Entry::NEW).unwrap(),
        Heap::buf(0, 0).unwrap(),
        Heap::buf(0, volume::MapPage::default()).unwrap(),
    );
    assert_eq!(s.write(0, 0, 1).map_err(|e| e.1), Err(StoreError::OutOfRange), "no volume yet");
    s.load(cfg, 1, 0, 64, &[1, 2, 3]).unwrap();
    let mut net = Net::new();
    net.load(&mut s);
    assert_eq!(s.phase(), Phase::Ready);
    write_all(&mut s, &mut net, 3, 9);
    assert_eq!(s.load(StoreConfig { replicas: 0, ..cfg }, 1, 0, 64, &[1]), Err(ConfigError::Replicas));
}

#[test]
fn a_repair_pass_counts_the_lost_replicas_it_could_not_make_again() {
    let mut s = store(StoreConfig::default(), &[1, 2, 3]);
    let mut net = Net::new();
    let targets = write_all(&mut s, &mut net, 2, 1);
    // Both holders fail: nothing to copy page 2 from.
    s.handle_member(5, Event::Failed(targets[0]));
    s.handle_member(5, Event::Failed(targets[1]));
    let mut now = 5;
    for _ in 0..10 {
        // The volume's meta pages may be made again from a surviving copy; page 2 not.
        for (op, i) in net.issue(&mut s, now) {
            match i.kind {
                IssueKind::Get { .. } | IssueKind::Gets(_) => {
                    s.handle_get(now, op, &miss());
                }
                IssueKind::Put { .. } => stored(&mut s, now, op, &i),
                IssueKind::Top { .. } => panic!("the test network answers TOPVERSION itself"),
            }
        }
        while s.poll_done().is_some() {}
        now = s.poll_timeout().unwrap_or(now + 1).max(now + 1);
        s.handle_timeout(now);
    }
    assert!(s.stats.repair_passes >= 1);
    assert!(s.stats.repair_short >= 1);
}

#[test]
fn a_shut_store_fails_what_it_holds_and_refuses_more() {
    let mut s = store(StoreConfig::default(), &[1, 2, 3]);
    let mut net = Net::new();
    s.write(0, 4, 11).unwrap();
    let ops = net.issue(&mut s, 0);
    s.shut(StoreError::NotSent);
    assert_eq!(done(&mut s), Some((11, Outcome::Failed(StoreError::NotSent))));
    assert_eq!(s.read(0, 4, 12).map_err(|e| e.1), Err(StoreError::NotSent));
    stored(&mut s, 0, ops[0].0, &ops[0].1);
    assert_eq!(s.poll_done(), None, "a late completion finds nothing to finish");
}

#[test]
fn a_disk_identity_keeps_its_page_space_across_releases() {
    // A volume's pages stay in the cluster across reloads of newer code: the identity's
    // space is pinned (here: node 0's default kernel disk, which the gmsd guest test reads).
    let s = space_of(0x6d73_6730_0000_0000);
    assert_eq!(s, 0x04ce_2d5d_1c46_b974);
    assert_eq!(s >> 60, 0, "the replica bits are clear");
}

#[test]
fn a_volume_loaded_larger_keeps_what_it_knew_and_its_new_pages_are_zeros() {
    let mut net = Net::new();
    let mut a = store_on(&mut net, StoreConfig::default(), 0, &[1, 2, 3]);
    write_all(&mut a, &mut net, 1, 1);
    let mut b: S = Store::new(StoreConfig::default(), 1, 0, 40_000, &[1, 2, 3]).unwrap();
    net.load(&mut b);
    assert_eq!(b.phase(), Phase::Ready);
    assert!(b.is_written(1) && !b.is_written(39_999));
    b.read(0, 39_999, 2).unwrap();
    assert!(net.issue(&mut b, 0).is_empty());
    assert_eq!(done(&mut b), Some((2, Outcome::Zero)));
    // Smaller than it was: refused, naming why.
    let mut c: S = Store::new(StoreConfig::default(), 1, 0, 10, &[1, 2, 3]).unwrap();
    net.load(&mut c);
    assert_eq!(c.phase(), Phase::Refused(StoreError::NotThisVolume));
}

#[test]
fn an_operation_whose_slot_the_node_reused_before_its_completion_came_is_not_forgotten() {
    let mut net = Net::new();
    let mut s: SOps<4> = Store::new(StoreConfig::default(), 1, 0, 64, &[1, 2, 3]).unwrap();
    net.load(&mut s);
    assert_eq!(s.phase(), Phase::Ready);
    for page in 0..8 {
        s.write(0, page, page as u32).unwrap();
    }
    // A node that reuses slot 0 for every operation, the completions all waiting in
    // the host: the store keeps a record of each, and stops issuing when it has no room
    // for another.
    let mut sent = Vec::new();
    while let Some(i) = s.poll_issue(0, &mut net.lru, None) {
        let op = OpId { slot: 0, generation: sent.len() as u32 };
        s.handle_issued(0, &i, Some(op));
        sent.push((op, i));
    }
    assert_eq!(sent.len(), 5, "the slot's own record and 4 kept aside");
    // Completions handed in make room: every write is acknowledged in the end.
    let mut written = 0;
    while !sent.is_empty() {
        for (op, i) in sent.drain(..) {
            stored(&mut s, 0, op, &i);
        }
        while let Some((_, outcome)) = done(&mut s) {
            assert_eq!(outcome, Outcome::Written { copies: 2 });
            written += 1;
        }
        while let Some(i) = s.poll_issue(0, &mut net.lru, None) {
            let op = OpId { slot: 0, generation: 100 + written as u32 * 10 + sent.len() as u32 };
            s.handle_issued(0, &i, Some(op));
            sent.push((op, i));
        }
    }
    assert_eq!(written, 8);
}

#[test]
fn a_read_asks_where_an_unanswered_put_of_the_same_write_may_have_left_a_copy() {
    let mut s = store(StoreConfig::default(), &[1, 2, 3, 4]);
    let mut net = Net::new();
    s.write(0, 3, 1).unwrap();
    let ops = net.issue(&mut s, 0);
    let (op0, i0) = ops.iter().find(|(_, i)| s.replica_of(page_of(i)) == 0).copied().unwrap();
    let (op1, i1) = ops.iter().find(|(_, i)| s.replica_of(page_of(i)) == 1).copied().unwrap();
    // Replica 0's put goes unanswered (its copy was stored, nobody said), then is put
    // again and stored: the write is acknowledged.
    let maybe = put_target(&i0);
    s.handle_put(0, op0, page_of(&i0), PutResult::Failed, None);
    // Its target is suspected meanwhile, so the put goes elsewhere; it is heard again.
    s.handle_member(0, Event::Failed(maybe));
    let again = net.issue(&mut s, 0);
    let again = again.iter().filter(|(_, i)| matches!(i.kind, IssueKind::Put { .. })).collect::<Vec<_>>();
    assert_ne!(put_target(&again[0].1), maybe, "put again elsewhere");
    stored(&mut s, 0, again[0].0, &again[0].1);
    s.handle_member(0, Event::Joined(maybe));
    stored(&mut s, 0, op1, &i1);
    assert_eq!(done(&mut s), Some((1, Outcome::Written { copies: 2 })));
    let IssueKind::Put { version: first, .. } = i0.kind else { panic!() };
    // Both holders restart: the copy the unanswered put left is the write's last.
    s.handle_member(1, Event::Restarted(put_target(&again[0].1)));
    s.handle_member(1, Event::Restarted(put_target(&i1)));
    s.read(2, 3, 9).unwrap();
    let g = net.issue(&mut s, 2);
    let (op, get) = g.iter().find(|(_, i)| matches!(i.kind, IssueKind::Get { into: Data::Request, .. })).unwrap();
    let IssueKind::Get { route: Route::Holder { node, .. }, at_least, .. } = get.kind else { panic!("{get:?}") };
    assert_eq!(node, maybe);
    assert!(at_least <= first, "any copy of the write will do");
    s.handle_get(2, *op, &hit(0, first.0));
    assert_eq!(done(&mut s), Some((9, Outcome::Read { version: first })));
}

#[test]
fn a_page_its_live_holders_say_they_do_not_have_is_lost_after_the_passes() {
    let mut s = store(StoreConfig::default(), &[1, 2, 3]);
    let mut net = Net::new();
    write_all(&mut s, &mut net, 2, 1);
    // The holders stay members (their restart went unnoticed) but have no copy.
    s.read(6, 2, 3).unwrap();
    let d = until_done(&mut s, &mut net, 6, |_, _| miss());
    assert_eq!(d, (3, Outcome::Failed(StoreError::Lost)), "every one asked answered");
}

#[test]
fn before_a_page_is_called_lost_every_member_is_asked_for_it() {
    let mut s = store(StoreConfig::default(), &[1, 2, 3, 4]);
    let mut net = Net::new();
    let targets = write_all(&mut s, &mut net, 2, 1);
    let v = s.entry(2, 0).unwrap().replica.version().unwrap();
    // GMS moved replica 0's copy to a member the store never heard of; then both
    // recorded holders restarted.
    let moved_to = (1..=4).find(|n| !targets.contains(n)).unwrap();
    for &t in &targets {
        s.handle_member(1, Event::Restarted(t));
    }
    s.read(2, 2, 3).unwrap();
    let d = until_done(&mut s, &mut net, 2, |s, i| {
        let IssueKind::Get { page, route, at_least, into: Data::Request } = i.kind else { return miss() };
        let has = route == (Route::Holder { node: moved_to, answer: None }) && s.replica_of(page) == 0;
        assert!(!has || at_least <= v);
        if has {
            hit(0, v.0)
        } else {
            miss()
        }
    });
    assert_eq!(d, (3, Outcome::Read { version: v }));
    assert_eq!(s.entry(2, 0).unwrap().replica.holder(), Some(moved_to), "the store knows where it is now");
}

#[test]
fn a_meta_page_whose_every_copy_died_is_written_again_from_the_loaded_volume() {
    // One copy of each page on two members: the label and the floor map live on one
    // of them each. Whichever holds the label dies (its memory with it) while the volume
    // is loaded; the load knows both pages and writes them again on the survivor, so a
    // reload there still finds the volume: its written pages are not taken for zeros,
    // its unwritten ones are.
    let cfg = StoreConfig { replicas: 1, ..StoreConfig::default() };
    let mut net = Net::new();
    let mut a = store_on(&mut net, cfg, 0, &[1, 2]);
    for page in 0..6 {
        a.write(0, page, page as u32).unwrap();
        for (op, i) in net.issue(&mut a, 0) {
            stored(&mut a, 0, op, &i);
        }
        assert_eq!(done(&mut a), Some((page as u32, Outcome::Written { copies: 1 })));
    }
    let label = a.pages();
    let dead = a.entry(label, 0).unwrap().replica.holder().unwrap();
    let live = 3 - dead;
    a.handle_member(5, Event::Failed(dead));
    net.lose(dead);
    assert_eq!(a.meta_lost(), 1 + u64::from(a.entry(label + 1, 0).unwrap().replica.holder().is_none()));
    let mut now = 5;
    for _ in 0..20 {
        assert!(net.issue(&mut a, now).is_empty(), "no copy of a user page is left to make again");
        now = a.poll_timeout().unwrap_or(now + 1).max(now + 1);
        a.handle_timeout(now);
    }
    for m in [label, label + 1] {
        assert_eq!(a.entry(m, 0).unwrap().replica.holder(), Some(live), "meta page {m} written again");
    }
    assert_eq!(a.meta_lost(), 0);
    assert!(a.stats.repair_passes >= 1);
    let b = store_on(&mut net, cfg, 0, &[live]);
    assert_eq!(b.phase(), Phase::Ready);
    assert!(b.label_found() && b.epoch() > a.epoch(), "the reload found the volume");
    assert!((0..6).all(|p| b.is_written(p)) && !b.is_written(6));
}

#[test]
fn a_rewrite_keeps_each_replica_on_its_holder_and_a_moved_one_raises_the_floor_first() {
    let mut s = store(StoreConfig::default(), &[1, 2, 3, 4]);
    let mut net = Net::new();
    let first = write_all(&mut s, &mut net, 3, 1);
    let floor = s.floor(3);
    // A rewrite replaces the copies in place: no strays, no map write.
    let again = write_all(&mut s, &mut net, 3, 2);
    assert_eq!(first, again, "each replica put again on its holder");
    assert_eq!(s.floor(3), floor);
    // Replica 0's holder does not answer: it moves, and its old copy is a stray.
    s.write(20, 3, 3).unwrap();
    let ops = net.issue(&mut s, 20);
    for (op, i) in &ops {
        if s.replica_of(page_of(i)) == 0 {
            s.handle_put(20, *op, page_of(i), PutResult::Failed, None);
        } else {
            stored(&mut s, 20, *op, i);
        }
    }
    let moved = net.issue(&mut s, 20);
    assert_eq!(moved.len(), 1);
    let (op, i) = moved[0];
    assert_ne!(put_target(&i), first[0], "not the holder that did not answer");
    stored(&mut s, 20, op, &i);
    assert_eq!(s.poll_done(), None, "the ack waits for the map page with the raised floor");
    net.issue(&mut s, 20);
    assert_eq!(done(&mut s), Some((3, Outcome::Written { copies: 2 })));
    let IssueKind::Put { version, .. } = i.kind else { panic!() };
    assert_eq!(s.floor(3), record::Clock::generation_start(version), "floor at the moving write");
    assert!(s.entry(3, 0).unwrap().strays.is_empty(), "strays below the floor are forgotten");
}

#[test]
fn a_page_whose_only_holder_was_declared_failed_is_unreachable_and_the_store_does_not_spin() {
    let mut s = store(StoreConfig { replicas: 1, ..StoreConfig::default() }, &[1]);
    let mut net = Net::new();
    s.write(0, 2, 1).unwrap();
    for (op, i) in net.issue(&mut s, 0) {
        stored(&mut s, 0, op, &i);
    }
    net.issue(&mut s, 0);
    assert_eq!(done(&mut s), Some((1, Outcome::Written { copies: 1 })));
    s.handle_member(5, Event::Failed(1));
    s.read(6, 2, 3).unwrap();
    let d = until_done(&mut s, &mut net, 6, |_, _| GetResult::Miss {
        reason: MissReason::Failed(RpcError::Timeout),
        frame: None,
    });
    assert_eq!(d, (3, Outcome::Failed(StoreError::Unreachable)), "node 1 may only be suspected");
    // The label, with no copy on a live member and no member to take one, is tried again
    // later: the store's next deadline is ahead, never one already past.
    let now = 1_000_000_000;
    s.handle_timeout(now);
    assert!(net.issue(&mut s, now).is_empty());
    assert!(s.poll_timeout().is_some_and(|t| t > now), "{:?}", s.poll_timeout());
}

#[test]
fn a_replica_left_out_of_a_degraded_write_leaves_its_old_copy_as_a_stray_below_a_new_floor() {
    let mut net = Net::new();
    let mut s = store(StoreConfig { degraded_writes: true, ..StoreConfig::default() }, &[1, 2]);
    let first = write_all(&mut s, &mut net, 4, 1);
    let floor = s.floor(4);
    // One member left: the rewrite keeps one copy; the other replica's old copy stays.
    let gone = first[1];
    s.handle_member(10, Event::Failed(gone));
    s.write(20, 4, 2).unwrap();
    // The map page may have to wait out its site rounds too (its other copy was there).
    let mut now = 20;
    for _ in 0..8 {
        for (op, i) in net.issue(&mut s, now) {
            stored(&mut s, now, op, &i);
        }
        now = s.poll_timeout().map_or(now + 1, |t| t.max(now + 1));
        s.handle_timeout(now);
    }
    assert_eq!(done(&mut s), Some((2, Outcome::Written { copies: 1 })));
    assert!(s.floor(4) > floor, "the left-out replica's old copy is below the page's floor");
}

mod ahead;
mod group;
mod survey;

#[test]
fn a_map_page_older_than_a_write_a_member_knows_of_is_not_taken_for_the_floors() {
    let mut net = Net::new();
    let mut a = store_on(&mut net, StoreConfig::default(), 0, &[1, 2, 3]);
    write_all(&mut a, &mut net, 5, 1);
    // Checked and current, a map page says what it says: page 7 was never written.
    let mut c = store_on(&mut net, StoreConfig::default(), 0, &[1, 2, 3]);
    assert_eq!(c.stats.stale_maps, 0);
    c.read(0, 7, 9).unwrap();
    assert!(net.issue(&mut c, 0).is_empty());
    assert_eq!(done(&mut c), Some((9, Outcome::Zero)));
    // The map page's newest copies died; member 2's directory keeps a floor of a later
    // write of it than the copy the reload will find.
    let map = a.page_id(a.pages() + 1, 0).page;
    net.page_top.insert((2, map), Version((3 << record::EPOCH_SHIFT) | 0x40));
    let mut b = store_on(&mut net, StoreConfig::default(), 0, &[1, 2, 3]);
    assert_eq!(b.phase(), Phase::Ready);
    assert_eq!((b.stats.stale_maps, b.stats.lost_maps), (2, 1), "read again once before it is lost");
    assert!(b.epoch() > 3);
    // A page the old map says was never written is not read as zeros, nor any copy of it
    // taken: its floor is lost.
    assert!(b.floor_lost(7) && b.floor_lost(5));
    b.read(0, 7, 9).unwrap();
    assert!(net.issue(&mut b, 0).is_empty());
    assert_eq!(done(&mut b), Some((9, Outcome::Failed(StoreError::Lost))));
}

mod epoch;
mod reload;
