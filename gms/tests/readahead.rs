// SPDX-License-Identifier: GPL-2.0-only
//! Read-ahead: random access traces against a model of the local cache and the fetches in
//! flight, sequential scans, random traces, and the detector's edge cases.

use gms::readahead::*;
use proptest::prelude::*;
use std::collections::{HashMap, HashSet};

const STREAMS: usize = 4;
const PENDING: usize = 24;
type Ra = ReadAhead<STREAMS, PENDING>;

#[derive(Clone, Debug)]
enum Step {
    /// A reader touches a page (small page numbers, so runs and repeats are common).
    Access { space: u64, page: u64 },
    /// The `i`-th pending fetch (modulo their number) ends.
    Complete { i: usize, ok: bool },
    /// The local cache drops the `i`-th cached page.
    Evict { i: usize },
}

fn step() -> impl Strategy<Value = Step> {
    prop_oneof![
        6 => (0..6u64, 0..40u64).prop_map(|(space, page)| Step::Access { space, page }),
        // Mostly sequential: the next page of a small set of spaces.
        6 => (0..3u64).prop_map(|space| Step::Access { space, page: u64::MAX }),
        5 => (any::<usize>(), prop::bool::weighted(0.85)).prop_map(|(i, ok)| Step::Complete { i, ok }),
        1 => any::<usize>().prop_map(|i| Step::Evict { i }),
    ]
}

/// The model: what is cached and what is pending, as the runtime would know it.
#[derive(Default)]
struct Model {
    cached: HashSet<(u64, u64)>,
    /// (space, page) → (id, prefetch?)
    pending: HashMap<(u64, u64), (PendingId, bool)>,
    last: HashMap<u64, u64>,
    prefetches: usize,
}

impl Model {
    fn in_flight(&self, space: u64) -> usize {
        self.pending.iter().filter(|(k, v)| k.0 == space && v.1).count()
    }

    /// Issue what read-ahead asks for, checking every prefetch against the model.
    fn drain(&mut self, ra: &mut Ra, depth: u32) -> Result<(), TestCaseError> {
        let cached = self.cached.clone();
        let issued: Vec<Prefetch> = ra.prefetches(|s, p| cached.contains(&(s, p))).collect();
        for p in issued {
            let key = (p.space, p.page);
            prop_assert!(!self.cached.contains(&key), "prefetch of cached page {:?}", key);
            prop_assert!(!self.pending.contains_key(&key), "prefetch of pending page {:?}", key);
            prop_assert!(self.pending.values().all(|v| v.0 != p.id), "id {:?} reused", p.id);
            self.pending.insert(key, (p.id, true));
            self.prefetches += 1;
            prop_assert!(self.in_flight(p.space) <= depth as usize, "more than N in flight");
        }
        Ok(())
    }
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 300, ..ProptestConfig::default() })]

    #[test]
    fn random_traces_keep_invariants(trigger in 0..4u32, depth in 0..8u32,
                                     steps in prop::collection::vec(step(), 1..300)) {
        let mut ra = Ra::new(Config { trigger, depth });
        let mut m = Model::default();
        for st in steps {
            match st {
                Step::Access { space, page } => {
                    let page = if page == u64::MAX { m.last.get(&space).map_or(0, |l| l + 1) } else { page };
                    m.last.insert(space, page);
                    let key = (space, page);
                    let d = ra.on_access(space, page, m.cached.contains(&key));
                    match (m.cached.contains(&key), m.pending.get(&key)) {
                        (true, _) => prop_assert_eq!(d, Decision::Hit),
                        (false, Some(&(id, _))) => prop_assert_eq!(d, Decision::WaitFor(id)),
                        (false, None) => match d {
                            Decision::Fetch(Some(id)) => {
                                prop_assert!(m.pending.values().all(|v| v.0 != id));
                                m.pending.insert(key, (id, false));
                            }
                            Decision::Fetch(None) => prop_assert_eq!(m.pending.len(), PENDING),
                            d => prop_assert!(false, "{:?} for an uncached page not pending", d),
                        },
                    }
                }
                Step::Complete { i, ok } => {
                    if m.pending.is_empty() { continue; }
                    let mut keys: Vec<_> = m.pending.keys().copied().collect();
                    keys.sort_unstable();
                    let key = keys[i % keys.len()];
                    let (id, prefetch) = m.pending.remove(&key).unwrap();
                    prop_assert_eq!(ra.complete(key.0, key.1, ok), Some(Completed { id, prefetch }));
                    prop_assert_eq!(ra.complete(key.0, key.1, ok), None); // a duplicate
                    if ok { m.cached.insert(key); }
                }
                Step::Evict { i } => {
                    let mut keys: Vec<_> = m.cached.iter().copied().collect();
                    keys.sort_unstable();
                    if let Some(&k) = keys.get(i % keys.len().max(1)) { m.cached.remove(&k); }
                }
            }
            m.drain(&mut ra, depth)?;
            prop_assert_eq!(ra.pending_len(), m.pending.len());
            for s in 0..6 { prop_assert_eq!(ra.in_flight(s), m.in_flight(s)); }
        }
        if depth == 0 { prop_assert_eq!(m.prefetches, 0); }
    }

    /// A scan of L pages: every page after the first K + 1 is prefetched before the reader
    /// gets to it (≥ L − K − N is the bound asked for), whatever the prefetch latency; a
    /// reader that catches up waits and never fetches a pending page again.
    #[test]
    fn sequential_scan_reads_ahead(len in 1..300u64, trigger in 0..5u32, depth in 1..17u32,
                                   lag in 0..20usize, space in any::<u64>(), start in 0..1000u64) {
        let mut ra = Ra::new(Config { trigger, depth });
        let mut cached = HashSet::new();
        let mut in_flight: Vec<(u64, usize)> = Vec::new(); // (page, issued at step)
        let mut ahead = 0u64;
        let (mut waits, mut fetches) = (0, 0);
        for (t, page) in (start..start + len).enumerate() {
            match ra.on_access(space, page, cached.contains(&page)) {
                Decision::Hit => {}
                Decision::WaitFor(id) => {
                    // The reader sleeps until the prefetch lands.
                    let at = in_flight.iter().position(|f| f.0 == page).expect("waits on a prefetch");
                    in_flight.remove(at);
                    prop_assert_eq!(ra.complete(space, page, true), Some(Completed { id, prefetch: true }));
                    cached.insert(page);
                    waits += 1;
                }
                Decision::Fetch(Some(_)) => {
                    prop_assert!(in_flight.iter().all(|f| f.0 != page), "second fetch of {}", page);
                    prop_assert!(ra.complete(space, page, true).is_some());
                    cached.insert(page);
                    fetches += 1;
                }
                Decision::Fetch(None) => prop_assert!(false, "pending table full"),
            }
            // Prefetches issued `lag` steps ago land now.
            in_flight.retain(|&(p, at)| {
                let done = t >= at + lag;
                if done { ra.complete(space, p, true); cached.insert(p); }
                !done
            });
            for p in ra.prefetches(|_, p| cached.contains(&p)).collect::<Vec<_>>() {
                prop_assert!(p.page > page && p.page <= page + depth as u64);
                if p.page < start + len { ahead += 1; }
                in_flight.push((p.page, t));
            }
            prop_assert!(in_flight.len() <= depth as usize);
        }
        let want = len.saturating_sub(trigger as u64 + 1);
        prop_assert!(ahead >= want, "{} prefetched ahead of {} pages (K {}, N {})", ahead, len, trigger, depth);
        prop_assert!(ahead >= len.saturating_sub(trigger as u64 + depth as u64));
        prop_assert!(fetches <= trigger as u64 + 1);
        prop_assert!(waits <= ahead);
    }

    /// Random accesses trigger read-ahead only after a genuine sequential run, and over a
    /// large file practically never.
    #[test]
    fn random_traces_prefetch_little(trigger in 1..4u32, depth in 1..9u32,
                                     trace in prop::collection::vec((0..3u64, 0..1u64 << 20), 1..400)) {
        let mut ra = Ra::new(Config { trigger, depth });
        let mut issued = 0usize;
        let mut active = 0usize; // accesses that end a run of `trigger` sequential ones
        let mut run: HashMap<u64, (u64, u32)> = HashMap::new();
        for (space, page) in trace {
            let r = match run.get(&space) {
                Some(&(last, n)) if page == last + 1 => n + 1,
                Some(&(last, n)) if page == last => n,
                _ => 0,
            };
            run.insert(space, (page, r));
            if r >= trigger { active += 1; }
            match ra.on_access(space, page, false) {
                Decision::Fetch(Some(_)) => { ra.complete(space, page, true); }
                Decision::WaitFor(_) => {}
                d => prop_assert!(false, "{:?}", d),
            }
            for p in ra.prefetches(|_, _| false).collect::<Vec<_>>() {
                issued += 1;
                ra.complete(p.space, p.page, true);
            }
        }
        prop_assert!(issued <= active * depth as usize, "{} prefetches for {} sequential accesses", issued, active);
    }
}

/// 10 000 uniformly random pages of a 2^20-page file (seeded): no read-ahead at all.
#[test]
fn random_file_access_reads_nothing_ahead() {
    let mut ra = Ra::new(Config { trigger: 2, depth: 16 });
    let mut x = 0x5eed_u64;
    let mut issued = 0;
    for _ in 0..10_000 {
        // SplitMix64.
        x = x.wrapping_add(0x9e37_79b9_7f4a_7c15);
        let mut z = x;
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        let page = (z ^ (z >> 31)) >> 44;
        if let Decision::Fetch(Some(_)) = ra.on_access(4, page, false) {
            ra.complete(4, page, true);
        }
        issued += ra.prefetches(|_, _| false).count();
    }
    assert_eq!(issued, 0);
}

#[test]
fn detector_edges() {
    let none = |_: u64, _: u64| false;
    let issue = |ra: &mut Ra| ra.prefetches(none).map(|p| p.page).collect::<Vec<u64>>();
    let mut ra = Ra::new(Config { trigger: 2, depth: 2 });
    let _ = ra.on_access(1, 10, true);
    let _ = ra.on_access(1, 10, true); // a repeat neither counts nor resets
    let _ = ra.on_access(1, 11, true);
    assert_eq!(issue(&mut ra), []);
    let _ = ra.on_access(1, 12, true);
    assert_eq!(issue(&mut ra), [13, 14]);
    // At depth 2 with 13 and 14 in flight, page 13's access does not add page 15 yet.
    assert!(matches!(ra.on_access(1, 13, false), Decision::WaitFor(_)));
    assert_eq!(issue(&mut ra), []);
    assert!(ra.complete(1, 13, true).unwrap().prefetch);
    assert_eq!(issue(&mut ra), [15]);

    // A failed prefetch (not in network memory) stops read-ahead until a new run.
    assert!(ra.complete(1, 14, false).is_some());
    assert!(matches!(ra.on_access(1, 14, false), Decision::Fetch(Some(_))));
    assert!(ra.complete(1, 14, true).is_some());
    assert_eq!(issue(&mut ra), [], "run reset by the miss");
    assert!(matches!(ra.on_access(1, 15, false), Decision::WaitFor(_)));
    assert_eq!(issue(&mut ra), [16]); // 15 and 16 in flight

    // A jump back resets the detector and forgets the window.
    ra.complete(1, 15, true);
    ra.complete(1, 16, true);
    let _ = ra.on_access(1, 3, true);
    let _ = ra.on_access(1, 4, true);
    assert_eq!(issue(&mut ra), []);
    let _ = ra.on_access(1, 5, true);
    assert_eq!(issue(&mut ra), [6, 7]);

    // Streams are independent: interleaving two scans keeps both detectors.
    let mut ra = Ra::new(Config { trigger: 1, depth: 1 });
    for p in 0..3 {
        let _ = ra.on_access(1, p, true);
        let _ = ra.on_access(2, 100 + p, true);
    }
    let got: Vec<(u64, u64)> = ra.prefetches(none).map(|p| (p.space, p.page)).collect();
    assert_eq!(got, [(1, 3), (2, 103)]);

    // Cached pages are skipped, not counted against the depth.
    let mut ra = Ra::new(Config { trigger: 0, depth: 3 });
    let _ = ra.on_access(2, 0, true);
    let got: Vec<u64> = ra.prefetches(|_, p| p % 2 == 1).map(|p| p.page).collect();
    assert_eq!(got, [2]);

    // Depth 0 disables read-ahead.
    let mut ra = Ra::new(Config { trigger: 0, depth: 0 });
    for p in 0..50 {
        let _ = ra.on_access(0, p, true);
        assert_eq!(ra.prefetches(none).count(), 0);
    }
}

#[test]
fn capacity_limits() {
    let none = |_: u64, _: u64| false;
    // Three pending slots shared by a reader's fetch and the prefetches.
    let mut ra = ReadAhead::<2, 3>::new(Config { trigger: 0, depth: 8 });
    let Decision::Fetch(Some(a)) = ra.on_access(7, 100, false) else { panic!() };
    let got: Vec<u64> = ra.prefetches(none).map(|p| p.page).collect();
    assert_eq!(got, [101, 102]);
    assert_eq!(ra.on_access(8, 5, false), Decision::Fetch(None)); // table full
    assert_eq!(ra.complete(7, 100, true), Some(Completed { id: a, prefetch: false }));
    assert_eq!(ra.prefetches(none).map(|p| p.page).collect::<Vec<_>>(), [103]);
    // More streams than slots: the least recently used one is replaced.
    let _ = ra.on_access(9, 0, true);
    let _ = ra.on_access(10, 0, true);
    ra.forget_stream(10);
    assert_eq!(ra.pending_len(), 3);

    // No stream slots: reads still work, nothing is read ahead.
    let mut ra = ReadAhead::<0, 4>::new(Config { trigger: 0, depth: 4 });
    assert!(matches!(ra.on_access(1, 1, false), Decision::Fetch(Some(_))));
    assert_eq!(ra.prefetches(none).count(), 0);
}
