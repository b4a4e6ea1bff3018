// SPDX-License-Identifier: GPL-2.0-only
//! The epoch-based global LRU on a 3-node in-process cluster: the coordinator's plan
//! reaches every node, putpage targets follow the plan's weights (the node holding the
//! cluster's oldest pages receives proportionally more), targets discard their oldest
//! pages to make room, and an evicted page older than the threshold is discarded instead
//! of put. Every byte read back is checked.

use gms::prelude::*;
use std::time::{Duration, Instant};
use trapeze_node::gms::lru::LruConfig;
use trapeze_node::gms::{page_pattern, Cluster, Got};

const SPACE: u64 = 3;
const BUDGET: usize = 200;

/// Page `n`'s contents (version 0 of the shared pattern).
fn content(n: u64) -> Vec<u8> {
    page_pattern(PageId::new(SPACE, n), Version(0))
}

/// Put pages `pages` from node 0 (to `target`, or by the LRU); the targets that stored them.
fn put_all(c: &mut Cluster, pages: std::ops::Range<u64>, target: Option<u16>) -> Vec<(u64, u16)> {
    let log0 = c.ports[0].put_log.len();
    for n in pages {
        while c.ports[0].in_flight() >= 16 {
            c.poll();
        }
        c.ports[0].put(PageId::new(SPACE, n), Version(1), &content(n), target).expect("put");
    }
    c.settle(0).expect("puts finish");
    c.ports[0].put_log[log0..]
        .iter()
        .filter_map(|&(p, _, r)| match r {
            PutResult::Stored { target } => Some((p.page, target)),
            _ => None,
        })
        .collect()
}

fn poll_for(c: &mut Cluster, d: Duration) {
    let t = Instant::now();
    while t.elapsed() < d {
        c.poll();
    }
}

/// Start an epoch at the coordinator (node 0) and wait until every node has its plan.
fn new_plan(c: &mut Cluster) -> gms::lru::EpochPlan<16> {
    let before = c.ports[0].lru.plan().map_or(0, |p| p.epoch());
    c.ports[0].lru.start_next_epoch();
    c.poll_until(|c| c.ports.iter().all(|p| p.lru.plan().is_some_and(|pl| pl.epoch() > before))).expect("a plan");
    *c.ports[0].lru.plan().unwrap()
}

fn run() {
    let cfg = GmsConfig { op_timeout: 500_000_000, ..GmsConfig::default() };
    let mut c = Cluster::new(3, BUDGET, cfg).expect("cluster");
    // Node 0 is the client: it lends no memory. Epochs start only when asked (a long
    // timer), so one plan holds for a whole phase.
    c.ports[0].node.set_budget(0);
    for p in c.ports.iter_mut() {
        p.set_lru_config(LruConfig {
            epoch_ns: 3_600_000_000_000,
            min_epoch_ns: 3_600_000_000_000,
            // Every member reports well within this (the plan is made as soon as all have):
            // a busy machine must not make a member miss the deadline.
            deadline_ns: 5_000_000_000,
            ..LruConfig::default()
        });
    }

    // The first plan: only free frames, 200 on each lender.
    let plan = new_plan(&mut c);
    assert_eq!(&plan.weights()[..3], &[0, 128, 128], "free frames split M = 256 evenly");

    // Old pages on node 1, then (40 ms later) young ones on node 2.
    let old = put_all(&mut c, 0..150, Some(1));
    assert_eq!(old.len(), 150);
    poll_for(&mut c, Duration::from_millis(40));
    let young = put_all(&mut c, 150..300, Some(2));
    assert_eq!(young.len(), 150);
    poll_for(&mut c, Duration::from_millis(3));

    // M = 256: both lenders' 50 free frames, then node 1's 150 older pages, then 6 of
    // node 2's: node 1 holds most of the cluster's oldest pages.
    let plan = new_plan(&mut c);
    let w = *plan.weights();
    assert_eq!(w[0], 0);
    assert_eq!(w[1] + w[2], 256, "{w:?}");
    assert!(w[1] >= 3 * w[2], "the node with the oldest pages weighs most: {w:?}");
    for p in &c.ports {
        assert_eq!(p.lru.plan().unwrap().weights(), &w, "node {} has the coordinator's plan", p.id());
    }

    // Eviction pressure: exactly the plan's budget of putpages, targets by the LRU. The
    // targets follow the weights exactly (the draw counts the budget down), and the
    // lenders discard their globally oldest pages to make room.
    let stats0 = c.ports[0].lru.stats;
    let fresh = put_all(&mut c, 1000..1256, None);
    let s = c.ports[0].lru.stats;
    assert_eq!(s.puts_by_plan - stats0.puts_by_plan, 256, "{s:?}");
    assert_eq!(fresh.len(), 256, "nothing refused: the targets made room");
    let to1 = fresh.iter().filter(|f| f.1 == 1).count() as u32;
    let to2 = fresh.iter().filter(|f| f.1 == 2).count() as u32;
    assert_eq!((to1, to2), (w[1], w[2]), "targets follow the weights");
    for k in 1..3 {
        assert!(c.ports[k].node.held_count() <= BUDGET);
    }
    let d1 = c.ports[1].lru.stats.held_discarded;
    assert!(d1 > 0, "node 1 discarded old pages to make room");
    // The live table's view of a lender agrees with its node.
    let v = c.ports[1].view();
    assert_eq!((v.held, v.budget, v.discarded), (c.ports[1].node.held_count(), BUDGET, d1));
    assert_eq!(v.puts_received, 150 + u64::from(w[1]));

    // Every page reads back exactly or misses; only the old ones are gone, and the
    // pressure pages all hit.
    let mut missed_old = 0;
    for n in (0..300).chain(1000..1256) {
        match c.get_wait(0, PageId::new(SPACE, n)).expect("get") {
            Got::Hit { data, .. } => assert!(data == content(n), "page {n}: wrong bytes"),
            Got::Miss => {
                assert!(n < 300, "pressure page {n} must not be discarded");
                if n < 150 {
                    missed_old += 1;
                }
            }
        }
    }
    assert_eq!(missed_old, d1, "node 1's discards are exactly its missing old pages");

    // An evicted page older than the threshold is discarded instead of put; a young one
    // is put.
    let plan = new_plan(&mut c);
    assert!(plan.threshold() < gms::lru::AGE_FREE, "the cluster is full: the threshold is a page age");
    let before = c.ports[0].stats.puts;
    let page = PageId::new(SPACE, 2000);
    assert_eq!(c.ports[0].evict(page, Version(1), &content(2000), 0).expect("evict"), None, "an old page is discarded");
    let now = c.ports[0].now();
    assert!(c.ports[0].evict(page, Version(1), &content(2000), now).expect("evict").is_some(), "a young page is put");
    c.settle(0).expect("put");
    assert_eq!(c.ports[0].stats.puts, before + 1);
    assert_eq!(c.ports[0].lru.stats.evictions_discarded, 1);
    assert!(c.ports[0].pages_discarded() >= 1);

    for _ in 0..1000 {
        c.poll();
    }
    for p in &c.ports {
        let a = p.frame_audit();
        assert!(a.balanced() && a.in_flight == 0, "node {}: {a:?}", p.id());
    }
}

#[test]
fn global_lru_places_and_discards() {
    // GMS nodes are large const-generic tables: give the cluster a big stack.
    std::thread::Builder::new().stack_size(256 << 20).spawn(run).unwrap().join().unwrap();
}
