// SPDX-License-Identifier: GPL-2.0-only
//! Epoch-based global LRU: plans from random node populations checked against a model
//! that sorts every page in the cluster, the proportionality of `choose_target`, the
//! epoch budget, the coordinator's deadline, and the summary/plan wire formats.

use gms::lru::*;
use proptest::prelude::*;

const NODES: usize = 6;
const K: usize = SUMMARY_MAX_GROUPS;

/// One node's memory: the ages of its resident pages and its free frames.
#[derive(Clone, Debug)]
struct Mem {
    ages: Vec<u32>,
    free: u32,
}

/// The summary a node builds: its pages oldest first until the summary is full.
fn summarize(node: u16, epoch: u32, m: &Mem) -> AgeSummary<K> {
    let mut s = AgeSummary::new(node, epoch, m.ages.len() as u32, m.free);
    let mut ages = m.ages.clone();
    ages.sort_unstable_by(|a, b| b.cmp(a));
    for a in ages {
        if s.add_oldest(a) == Err(AddError::Full) {
            break;
        }
    }
    s
}

/// The model's answer: every page of the reporting nodes, oldest first.
fn all_pages(pop: &[Option<Mem>]) -> Vec<(u32, usize)> {
    let mut v: Vec<(u32, usize)> = Vec::new();
    for (i, m) in pop.iter().enumerate() {
        if let Some(m) = m {
            v.extend(m.ages.iter().map(|&a| (a, i)));
            v.extend((0..m.free).map(|_| (AGE_FREE, i)));
        }
    }
    v.sort_unstable_by_key(|p| std::cmp::Reverse(p.0));
    v
}

fn population(max_age: u32) -> impl Strategy<Value = Vec<Option<Mem>>> {
    let mem = (prop::collection::vec(0..max_age, 0..40), prop_oneof![3 => Just(0u32), 1 => 0..6u32])
        .prop_map(|(ages, free)| Mem { ages, free });
    prop::collection::vec(prop::option::weighted(0.85, mem), NODES)
}

/// Checks a plan against the model: `m` pages considered, threshold = age of the m-th
/// oldest, each node's weight between its pages strictly older and its pages as old as
/// the threshold, tie slots shared in proportion (within one page).
fn check_plan(plan: &EpochPlan<NODES>, pages: &[(u32, usize)], m: usize) -> Result<(), TestCaseError> {
    prop_assert_eq!(plan.total_weight(), m as u64);
    if m == 0 {
        prop_assert_eq!(plan.weights(), &[0; NODES]);
        prop_assert_eq!(plan.threshold(), AGE_FREE);
        return Ok(());
    }
    let t = pages[m - 1].0;
    prop_assert_eq!(plan.threshold(), t);
    let above_all = pages.iter().filter(|p| p.0 > t).count();
    let tied_all = pages.iter().filter(|p| p.0 == t).count();
    prop_assert!(above_all < m && m <= above_all + tied_all);
    for i in 0..NODES {
        let above = pages.iter().filter(|p| p.0 > t && p.1 == i).count() as f64;
        let tied = pages.iter().filter(|p| p.0 == t && p.1 == i).count() as f64;
        let w = plan.weights()[i] as f64;
        prop_assert!(above <= w && w <= above + tied, "node {i}: w {w} above {above} tied {tied}");
        let fair = (m - above_all) as f64 * tied / tied_all as f64;
        prop_assert!((w - above - fair).abs() < 1.0, "node {i}: tie share {} vs {fair}", w - above);
        if above + tied == 0.0 {
            prop_assert_eq!(w, 0.0); // holds none of the oldest
        }
    }
    Ok(())
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 400, ..ProptestConfig::default() })]

    /// Coarse ages (≤ K distinct per node): every summary is complete, the plan is exact.
    #[test]
    fn plan_matches_model_complete(pop in population(K as u32), oldest in 0..120u32, me in 0..NODES as u16) {
        let sums: Vec<_> = pop.iter().enumerate()
            .filter_map(|(i, m)| m.as_ref().map(|m| summarize(i as u16, 3, m))).collect();
        prop_assert!(sums.iter().all(|s| s.is_complete()));
        let plan = EpochPlan::<NODES>::from_summaries(me, 3, oldest, &sums);
        let pages = all_pages(&pop);
        check_plan(&plan, &pages, (oldest as usize).min(pages.len()))?;
        prop_assert_eq!(plan.epoch(), 3);
        prop_assert_eq!(plan.me(), me);
    }

    /// Fine ages: summaries are cut at K groups. The plan only considers pages whose rank
    /// is certain, and those are the true globally oldest.
    #[test]
    fn plan_matches_model_truncated(pop in population(1000), oldest in 0..40u32) {
        let sums: Vec<_> = pop.iter().enumerate()
            .filter_map(|(i, m)| m.as_ref().map(|m| summarize(i as u16, 1, m))).collect();
        let plan = EpochPlan::<NODES>::from_summaries(0, 1, oldest, &sums);
        let pages = all_pages(&pop);
        let floor = sums.iter().filter_map(|s| s.floor()).max().unwrap_or(0);
        let known = pages.iter().filter(|p| p.0 >= floor).count();
        // A summary is cut only when its K groups are full, so M ≤ K is always exact.
        prop_assert!(known >= (oldest as usize).min(K).min(pages.len()));
        check_plan(&plan, &pages, (oldest as usize).min(known))?;
    }

    /// Putpage targets follow the weights: exactly, over evenly spaced random numbers, and
    /// statistically over a seeded generator; never the evicting node or a weight-0 node.
    #[test]
    fn choose_target_is_proportional(
        weights in prop::array::uniform6(prop_oneof![1 => Just(0u32), 3 => 0..50u32]),
        me in 0..NODES as u16,
        seed in any::<u64>(),
    ) {
        let plan = EpochPlan::<NODES>::new(me, 0, 10, weights);
        let total: u64 = (0..NODES).filter(|&i| i != me as usize).map(|i| weights[i] as u64).sum();
        if total == 0 {
            prop_assert_eq!(plan.choose_target(seed), None);
            prop_assert_eq!(plan.choose_target(u64::MAX), None);
            return Ok(());
        }
        // r = ceil(x · 2^64 / total) for x in 0..total hits each node exactly `weight` times.
        let mut exact = [0u64; NODES];
        for x in 0..total {
            let r = ((x as u128) << 64).div_ceil(total as u128) as u64;
            exact[plan.choose_target(r).unwrap() as usize] += 1;
        }
        for i in 0..NODES {
            prop_assert_eq!(exact[i], if i == me as usize { 0 } else { weights[i] as u64 });
        }
        let draws = 20_000u32;
        let mut seen = [0u32; NODES];
        let mut rng = SplitMix(seed);
        for _ in 0..draws {
            let t = plan.choose_target(rng.next()).unwrap() as usize;
            prop_assert!(t != me as usize && weights[t] > 0);
            seen[t] += 1;
        }
        for i in 0..NODES {
            let p = if i == me as usize { 0.0 } else { weights[i] as f64 / total as f64 };
            // σ ≤ 0.0036 at 20 000 draws: 0.025 is ≥ 7σ.
            let got = seen[i] as f64 / draws as f64;
            prop_assert!((got - p).abs() < 0.025, "node {i}: {got} vs {p}");
        }
    }

    /// Placing pages by `choose_target` and `note_put` spends exactly the other nodes'
    /// weights, then the epoch ends; absorbing its own weight ends it too.
    #[test]
    fn budget_ends_epoch(weights in prop::array::uniform6(0..20u32), me in 0..NODES as u16, seed in any::<u64>()) {
        let mut plan = EpochPlan::<NODES>::new(me, 5, 7, weights);
        let others: u64 = (0..NODES).filter(|&i| i != me as usize).map(|i| weights[i] as u64).sum();
        let mut rng = SplitMix(seed);
        let mut placed = [0u32; NODES];
        for n in 0..others {
            prop_assert!(!plan.should_end_epoch(), "ended after {} of {} puts", n, others);
            let t = plan.choose_target(rng.next()).unwrap();
            placed[t as usize] += 1;
            plan.note_put(t);
        }
        prop_assert_eq!(plan.choose_target(rng.next()), None);
        let mut expect = weights;
        expect[me as usize] = 0;
        prop_assert_eq!(placed, expect);
        prop_assert_eq!(plan.should_end_epoch(), others > 0);

        let mut plan = EpochPlan::<NODES>::new(me, 5, 7, weights);
        for _ in 0..weights[me as usize] {
            prop_assert!(!plan.should_end_epoch());
            plan.note_received();
        }
        prop_assert_eq!(plan.should_end_epoch(), weights[me as usize] > 0);
    }

    #[test]
    fn discard_is_older_than_threshold(t in any::<u32>(), age in any::<u32>()) {
        let plan = EpochPlan::<NODES>::new(0, 0, t, [1; NODES]);
        prop_assert_eq!(plan.should_discard(age), age > t);
        prop_assert!(!plan.should_discard(t) && plan.should_discard(t.saturating_add(1)) == (t < u32::MAX));
        prop_assert!(!EpochPlan::<NODES>::empty(0, 0).should_discard(age));
    }

    #[test]
    fn summary_round_trip(m in (prop::collection::vec(any::<u32>(), 0..30), any::<u32>())
                              .prop_map(|(ages, free)| Mem { ages, free }),
                          node in any::<u16>(), epoch in any::<u32>()) {
        let s = summarize(node, epoch, &m);
        let mut buf = [0u8; 128];
        let n = s.encode(&mut buf).unwrap();
        prop_assert!(n <= SUMMARY_MAX_BYTES);
        prop_assert_eq!(n, s.encoded_len());
        prop_assert_eq!(AgeSummary::<K>::decode(&buf[..n]), Ok(s));
        prop_assert_eq!(AgeSummary::<K>::decode(&buf[..n - 1]), Err(WireError));
        prop_assert_eq!(s.encode(&mut buf[..n - 1]), Err(WireError));
        prop_assert!(AgeSummary::<2>::decode(&buf[..n]).is_ok() == (s.groups().len() <= 2));
    }

    #[test]
    fn plan_round_trip(weights in prop::array::uniform6(any::<u32>()), t in any::<u32>(),
                       epoch in any::<u32>(), me in any::<u16>()) {
        let plan = EpochPlan::<NODES>::new(me, epoch, t, weights);
        let mut buf = [0u8; 100];
        let n = plan.encode(&mut buf).unwrap();
        prop_assert_eq!(EpochPlan::<NODES>::decode(&buf[..n], me), Ok(plan));
        prop_assert_eq!(EpochPlan::<NODES>::decode(&buf[..n - 1], me), Err(WireError));
        prop_assert_eq!(EpochPlan::<4>::decode(&buf[..n], me), Err(WireError)); // too many nodes
        let wider = EpochPlan::<8>::decode(&buf[..n], me).unwrap();
        prop_assert_eq!(&wider.weights()[..NODES], &weights[..]);
    }

    /// Arbitrary and mutated bytes never panic; whatever decodes re-encodes to the same bytes.
    #[test]
    fn decode_never_panics(bytes in prop::collection::vec(any::<u8>(), 0..120),
                           flips in prop::collection::vec((0..120usize, any::<u8>()), 0..4)) {
        let mut valid = [0u8; 100];
        let mut s = AgeSummary::<K>::new(1, 2, 50, 3);
        for a in [90, 80, 80, 70] { s.add_oldest(a).unwrap(); }
        let n = s.encode(&mut valid).unwrap();
        let mut mutated = valid[..n].to_vec();
        for (i, x) in flips { if let Some(b) = mutated.get_mut(i) { *b ^= x; } }
        for input in [&bytes[..], &mutated[..]] {
            if let Ok(d) = AgeSummary::<K>::decode(input) {
                let mut out = [0u8; 100];
                let len = d.encode(&mut out).unwrap();
                prop_assert_eq!(&out[..len], &input[..len]);
            }
            if let Ok(p) = EpochPlan::<NODES>::decode(input, 0) {
                let mut out = [0u8; 100];
                let len = p.encode(&mut out).unwrap();
                let sent = input[1] as usize * 4 + PLAN_HEADER_BYTES;
                prop_assert_eq!(&out[PLAN_HEADER_BYTES..sent], &input[PLAN_HEADER_BYTES..sent]);
                prop_assert!(out[sent..len].iter().all(|&b| b == 0));
            }
        }
    }
}

/// A worked example: three nodes, ten oldest pages per epoch, ties at the threshold.
#[test]
fn worked_example() {
    // Node 0: 1 free frame, pages aged 50, 40, 40, 10.  Node 1: pages aged 40, 40, 30, 20,
    // 20, 5.  Node 2: 2 free frames, pages aged 60, 30, 30, 30, 1.
    let nodes: [(u32, &[u32]); 3] = [(1, &[50, 40, 40, 10]), (0, &[40, 40, 30, 20, 20, 5]), (2, &[60, 30, 30, 30, 1])];
    let sums: Vec<AgeSummary<K>> = nodes
        .iter()
        .enumerate()
        .map(|(i, (free, ages))| summarize(i as u16, 9, &Mem { ages: ages.to_vec(), free: *free }))
        .collect();
    let plan = EpochPlan::<3>::from_summaries(2, 9, 10, &sums);
    // Oldest first: 3 free frames (0: 1, 2: 2), 60 (2), 50 (0), 40 ×4 (0: 2, 1: 2) → 9
    // pages; the 10th is one of the four aged 30 (1: 1, 2: 3): threshold 30, and the tie
    // slot goes to node 2 (3/4 of a slot against node 1's 1/4).
    assert_eq!(plan.threshold(), 30);
    assert_eq!(plan.weights(), &[4, 2, 4]);
    assert!(plan.should_discard(31) && !plan.should_discard(30));
    // Node 2 evicts: targets 0 and 1 with probability 4/6 and 2/6.
    assert_eq!(plan.choose_target(0), Some(0));
    assert_eq!(plan.choose_target(u64::MAX / 3 * 2 - 1), Some(0));
    assert_eq!(plan.choose_target(u64::MAX / 3 * 2 + 1), Some(1));
    assert_eq!(plan.choose_target(u64::MAX), Some(1));

    // Only the three free frames: all-free threshold, nothing is discarded.
    let plan = EpochPlan::<3>::from_summaries(0, 9, 3, &sums);
    assert_eq!((plan.threshold(), plan.weights()), (AGE_FREE, &[1, 0, 2]));
    assert!(!plan.should_discard(AGE_FREE - 1));
}

#[test]
fn coordinator_deadline_and_rejections() {
    let mem = |free, ages: &[u32]| Mem { ages: ages.to_vec(), free };
    let s0 = summarize(0, 4, &mem(0, &[10, 9]));
    let s1 = summarize(1, 4, &mem(0, &[100, 99, 98]));
    let s2 = summarize(2, 4, &mem(2, &[50]));
    let mut c = Coordinator::<NODES, K>::new(0, 4);
    assert_eq!(c.handle_summary(0, &s0), Err(Rejected::NotCollecting));
    assert_eq!(c.poll_plan(0), None);
    assert_eq!(c.start_epoch(4, &[0, 1, 2, 99], 100), 3);
    assert_eq!(c.poll_timeout(), Some(100));
    assert_eq!(c.handle_summary(1, &summarize(0, 3, &mem(0, &[1]))), Err(Rejected::WrongEpoch));
    assert_eq!(c.handle_summary(1, &summarize(4, 4, &mem(0, &[1]))), Err(Rejected::NotMember));
    assert_eq!(c.handle_summary(1, &summarize(77, 4, &mem(0, &[1]))), Err(Rejected::NotMember));
    c.handle_summary(5, &s0).unwrap();
    c.handle_summary(6, &s0).unwrap(); // a duplicate is harmless
    c.handle_summary(99, &s2).unwrap();
    assert!(!c.is_complete());
    assert_eq!(c.poll_plan(99), None);
    // Node 1 (holding the oldest pages) has never reported by the deadline: weight 0.
    let plan = c.poll_plan(100).unwrap();
    assert_eq!(plan, EpochPlan::from_summaries(0, 4, 4, &[s0, s2]));
    assert_eq!(plan.weights()[..3], [1, 0, 3]);
    assert_eq!(plan.threshold(), 10);
    assert_eq!(c.poll_plan(200), None); // once
    assert_eq!(c.poll_timeout(), None);
    // Its summary after the plan is not used in it, but kept.
    assert_eq!(c.handle_summary(101, &s1), Err(Rejected::Late));
    // Next epoch node 1 is silent: planned by the summary it sent last.
    c.start_epoch(5, &[0, 1, 2], 300);
    c.handle_summary(301, &summarize(0, 5, &mem(0, &[10, 9]))).unwrap();
    c.handle_summary(302, &summarize(2, 5, &mem(2, &[50]))).unwrap();
    assert!(!c.is_complete());
    let plan = c.poll_plan(300).unwrap();
    assert_eq!((plan.epoch(), plan.threshold(), &plan.weights()[..3]), (5, 99, &[0, 2, 2][..]));
    // A summary the runtime handles after the deadline but before the plan still counts.
    c.start_epoch(6, &[0, 2], 400);
    c.handle_summary(450, &summarize(2, 6, &mem(2, &[50]))).unwrap();
    c.handle_summary(451, &summarize(0, 6, &mem(0, &[10, 9]))).unwrap();
    assert!(c.is_complete());
    assert_eq!(c.poll_plan(452).unwrap().weights()[..3], [1, 0, 3]);

    // Everyone reports before the deadline: the plan is ready at once.
    c.start_epoch(7, &[1, 2], 1_000);
    c.handle_summary(10, &summarize(1, 7, &mem(0, &[100, 99, 98]))).unwrap();
    assert_eq!(c.poll_plan(11), None);
    c.handle_summary(12, &summarize(2, 7, &mem(2, &[50]))).unwrap();
    let plan = c.poll_plan(13).unwrap();
    assert_eq!((plan.epoch(), plan.threshold(), &plan.weights()[..3]), (7, 99, &[0, 2, 2][..]));
}

#[test]
fn summary_builder_contract() {
    let mut s = AgeSummary::<2>::new(3, 1, 5, 0);
    assert_eq!(s.floor(), Some(AGE_FREE));
    assert_eq!(s.add_oldest(AGE_FREE), Err(AddError::OutOfOrder));
    s.add_oldest(9).unwrap();
    s.add_oldest(9).unwrap();
    assert_eq!(s.add_oldest(10), Err(AddError::OutOfOrder));
    s.add_pages(4, 2).unwrap();
    assert_eq!(s.add_oldest(3), Err(AddError::Full));
    assert_eq!(s.add_pages(4, 2), Err(AddError::BadCount)); // 6 > 5 pages
    assert_eq!(s.add_pages(4, 0), Err(AddError::BadCount));
    assert_eq!(s.groups(), &[AgeGroup { age: 9, count: 2 }, AgeGroup { age: 4, count: 2 }]);
    assert_eq!((s.covered(), s.is_complete(), s.floor()), (4, false, Some(4)));
    s.add_oldest(4).unwrap();
    assert_eq!((s.is_complete(), s.floor()), (true, None));
}

/// SplitMix64: a seeded generator for the statistical test.
struct SplitMix(u64);

impl SplitMix {
    fn next(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9e37_79b9_7f4a_7c15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        z ^ (z >> 31)
    }
}
