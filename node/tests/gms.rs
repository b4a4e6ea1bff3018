// SPDX-License-Identifier: GPL-2.0-only
//! The GMS runtime on virtual NICs: a small in-process cluster (3 nodes, one thread) with
//! memory pressure, read-ahead and a node failure. Every byte is checked: page contents are
//! a function of (page id, version).

use gms::prelude::*;
use std::collections::HashMap;
use trapeze_node::gms::lru::LruConfig;
use trapeze_node::gms::page_pattern as content;
use trapeze_node::gms::{Cluster, Got, Source};

const SPACE: u64 = 7;
const PAGES: u64 = 300;
const BUDGET: usize = 120;

/// What the client knows: per page, the newest version attempted, the newest stored and
/// where it was stored.
#[derive(Default)]
struct Model {
    attempted: HashMap<PageId, Version>,
    stored: HashMap<PageId, (Version, u16)>,
}

impl Model {
    /// A get must be a miss or the exact bytes of a version no older than the newest
    /// stored one and no newer than the newest put.
    fn check(&self, page: PageId, got: &Got) {
        if let Got::Hit { version, data, .. } = got {
            let top = self.attempted.get(&page).copied().unwrap_or(Version(0));
            assert!(*version <= top, "{page:?}: version {version:?} never put (newest {top:?})");
            if let Some((v, _)) = self.stored.get(&page) {
                assert!(version >= v, "{page:?}: stale {version:?} < stored {v:?}");
            }
            assert!(*data == content(page, *version), "{page:?} {version:?}: wrong bytes");
        }
    }
}

fn put_all(c: &mut Cluster, m: &mut Model, pages: impl Iterator<Item = u64>, v: Version) {
    let log0 = c.ports[0].put_log.len();
    for n in pages {
        let page = PageId::new(SPACE, n);
        while c.ports[0].in_flight() >= 16 {
            c.poll();
        }
        m.attempted.insert(page, v);
        c.ports[0].put(page, v, &content(page, v), None).expect("put");
    }
    c.settle(0).expect("puts finish");
    for &(page, version, r) in &c.ports[0].put_log[log0..] {
        if let PutResult::Stored { target } = r {
            if m.stored.get(&page).is_none_or(|s| s.0 <= version) {
                m.stored.insert(page, (version, target));
            }
        }
    }
}

fn run() {
    let cfg = GmsConfig { op_timeout: 500_000_000, ..GmsConfig::default() };
    let mut c = Cluster::new(3, BUDGET, cfg).expect("cluster");
    // No headroom: full nodes refuse instead of discarding their oldest pages (this test
    // checks refusals and exact read-back; tests/gms_lru.rs checks the LRU's discards).
    for p in c.ports.iter_mut() {
        p.set_lru_config(LruConfig { headroom: 0, ..LruConfig::default() });
    }
    let mut m = Model::default();

    // Load more than the cluster can hold (2 × 120 pages of remote memory): some refused.
    put_all(&mut c, &mut m, 0..PAGES, Version(1));
    let s = c.ports[0].stats;
    assert_eq!(s.puts, PAGES);
    assert_eq!(s.puts_stored + s.puts_refused + s.puts_other, PAGES, "{s:?}");
    assert!(s.puts_refused > 0, "pressure: some puts refused ({s:?})");
    assert!(s.puts_stored <= 2 * BUDGET as u64);
    for k in 1..3 {
        assert!(c.ports[k].node.held_count() <= BUDGET);
    }
    // Rewrite a few pages: version 2 replaces version 1.
    put_all(&mut c, &mut m, 0..40, Version(2));

    // Plain getpages from every node: exact bytes or a miss, counts add up.
    let mut hits = 0;
    let mut via = HashMap::new();
    for n in 0..PAGES {
        let page = PageId::new(SPACE, n);
        let from = (n % 3) as usize;
        let g = c.get_wait(from, page).expect("get");
        m.check(page, &g);
        if let Got::Hit { source, .. } = g {
            hits += 1;
            *via.entry(source).or_insert(0) += 1;
        } else if from == 0 {
            assert!(
                !m.stored.contains_key(&page) || m.attempted[&page] > m.stored[&page].0,
                "{page:?} stored but missed"
            );
        }
    }
    let (h, miss): (u64, u64) =
        c.ports.iter().map(|p| (p.stats.gets_hit, p.stats.gets_miss)).fold((0, 0), |a, b| (a.0 + b.0, a.1 + b.1));
    assert_eq!(h, hits);
    assert_eq!(h + miss, PAGES);
    assert!(via.contains_key(&Source::TwoWay) && via.contains_key(&Source::ThreeWay), "{via:?}");

    // Sequential scan with read-ahead 16 from node 0 (cache emptied first): prefetches go
    // out, readers wait for pending ones, and no page is fetched twice.
    let p0 = &mut c.ports[0];
    p0.set_cache_pages(0);
    p0.set_cache_pages(512);
    p0.set_readahead(16);
    let before = p0.stats;
    for n in 0..PAGES {
        let page = PageId::new(SPACE, n);
        let g = c.read(0, page).expect("read");
        m.check(page, &g);
    }
    c.settle(0).expect("prefetches finish");
    let s = c.ports[0].stats;
    let fetched = (s.demand_fetches - before.demand_fetches) + (s.prefetches - before.prefetches);
    assert!(s.prefetches - before.prefetches > PAGES / 2, "read-ahead prefetched: {s:?}");
    assert!(s.waited_pending > before.waited_pending, "readers waited for pending prefetches: {s:?}");
    assert!(
        fetched <= PAGES + 16,
        "each page fetched at most once: {fetched} fetches for {PAGES} pages: {s:?} before {before:?}"
    );
    // A second scan is served from the local cache.
    let before = c.ports[0].stats;
    for n in 0..PAGES {
        let page = PageId::new(SPACE, n);
        m.check(page, &c.read(0, page).expect("read"));
    }
    let s = c.ports[0].stats;
    assert!(s.cache_hits - before.cache_hits >= PAGES / 2, "{s:?}");

    // Node 2 dies: its pages miss cleanly, node 1's pages (whose directory survived) hit.
    c.kill(2);
    let (mut hits, mut dead_hits, mut misses) = (0, 0, 0);
    for n in 0..PAGES {
        let page = PageId::new(SPACE, n);
        let g = c.get_wait(0, page).expect("get after failure");
        m.check(page, &g);
        match g {
            Got::Hit { .. } => {
                hits += 1;
                if m.stored.get(&page).is_some_and(|s| s.1 == 2) {
                    dead_hits += 1;
                }
            }
            Got::Miss => misses += 1,
        }
    }
    assert_eq!(dead_hits, 0, "pages held by the dead node must miss");
    assert!(hits > 0 && misses > 0, "hits {hits} misses {misses}");
    // No frame leaked on the survivors.
    for _ in 0..1000 {
        c.poll();
    }
    for k in 0..2 {
        let a = c.ports[k].frame_audit();
        assert!(a.balanced() && a.limbo == 0 && a.armed == 0 && a.in_flight == 0, "node {k}: {a:?}");
    }
    // Clean misses: answered "not cached", not timed out.
    assert_eq!(c.ports[0].node.stats().op_timeouts, 0);
}

#[test]
fn gms_cluster_small() {
    // GMS nodes are large const-generic tables: give the cluster a big stack.
    std::thread::Builder::new().stack_size(256 << 20).spawn(run).unwrap().join().unwrap();
}
