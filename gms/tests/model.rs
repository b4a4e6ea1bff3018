// SPDX-License-Identifier: GPL-2.0-only
//! Property tests: GMS on 3–5 nodes over a simulated network with loss, duplication and
//! reordering, and a node crash, against a simple model (see `sim`).
//!
//! A random workload (getpage from any node, putpage of a new version to another node,
//! movepage of a held page, discard, the runtime registering a page it read from disk or
//! taking one back) runs interleaved with message deliveries and clock ticks. Checked as
//! it runs: a getpage returns the page's own data at a version no older than the newest
//! version stored (or discarded) before it was issued — or a miss; a movepage that
//! completed left no copy at the sender; every frame GMS holds is live and holds what GMS
//! says. Then the network heals and time passes: every operation completed exactly once
//! (no hang), nothing leaked, the directory converged (every entry names a live node
//! holding that page at that version, and every held copy is named), and every page reads
//! back as the directory says.
//!
//! A failure prints the scenario and a `GMS_REPLAY="…"` line to rerun exactly that case
//! with `cargo test -p trapeze-gms --test model replay -- --ignored` (add `GMS_TRACE=1`
//! to print every message, action and completion). The scenario stream is fixed (set
//! `PROPTEST_RNG_SEED` to explore others); `stress` (ignored) runs 20 000 longer, random
//! scenarios.

use proptest::prelude::*;
use sim::gms::*;
use sim::rng::Rng;

#[derive(Clone, Copy, Debug)]
struct Scenario {
    seed: u64,
    steps: usize,
    knobs: Knobs,
}

fn run(sc: Scenario) -> Cov {
    let mut s = Sim::new(sc.seed, sc.knobs);
    let k = sc.knobs;
    for step in 0..sc.steps {
        s.step = step;
        if let Some((node, at, delay)) = k.crash {
            if step == at {
                s.crash(node);
            }
            if step == at + delay {
                s.declare_failed(node);
            }
        }
        let live = s.live();
        let node = live[s.rng.below(live.len() as u64) as usize];
        let others: Vec<u16> = live.iter().copied().filter(|&n| n != node && !s.failed[n as usize]).collect();
        match s.rng.below(100) {
            0..=17 => {
                let p = s.page();
                s.getpage(node, p);
            }
            18..=29 => {
                let p = s.page();
                if let Some(&t) = others.get(s.rng.below(others.len().max(1) as u64) as usize) {
                    s.putpage(node, p, t);
                }
            }
            30..=34 => {
                let held: Vec<_> = s.nodes[node as usize].holdings().map(|(p, _)| *p).collect();
                if let (Some(&p), Some(&t)) = (
                    held.get(s.rng.below(held.len().max(1) as u64) as usize),
                    others.get(s.rng.below(others.len().max(1) as u64) as usize),
                ) {
                    s.movepage(node, p, t);
                }
            }
            35..=36 => {
                let p = s.page();
                s.discard(node, p);
            }
            37 => {
                let p = s.page();
                s.hold(node, p);
            }
            38 => {
                let held: Vec<_> = s.nodes[node as usize].holdings().map(|(p, _)| *p).collect();
                if let Some(&p) = held.get(s.rng.below(held.len().max(1) as u64) as usize) {
                    s.drop_local(node, p);
                }
            }
            39..=87 => s.deliver(true),
            _ => {
                let dt = 1 + s.rng.below(k.max_dt);
                s.tick(dt);
            }
        }
        s.check_frames();
    }
    // The membership service notices a crash eventually.
    if let Some((node, _, _)) = k.crash {
        if s.crashed[node as usize] && !s.failed[node as usize] {
            s.declare_failed(node);
        }
    }
    s.settle();
    s.check_quiet();
    s.check_converged();
    s.check_frames();
    s.read_back();
    s.check_quiet();
    s.check_converged();
    s.gather_stats();
    s.cov
}

fn run_scenario(sc: Scenario) -> Cov {
    match std::panic::catch_unwind(|| run(sc)) {
        Ok(c) => c,
        Err(e) => {
            let k = sc.knobs;
            let (cn, cs, cd) = k.crash.map_or(("-".to_string(), 0, 0), |(n, s, d)| (n.to_string(), s, d));
            eprintln!(
                "gms model failed: {sc:?}\n  replay: GMS_REPLAY=\"{} {} {} {} {} {} {} {cn} {cs} {cd} {} {} {}\" \
                 cargo test -p trapeze-gms --test model replay -- --ignored",
                sc.seed, sc.steps, k.nodes, k.pages, k.drop_pct, k.dup_pct, k.reorder, k.op_timeout, k.max_dt, k.budget
            );
            std::panic::resume_unwind(e);
        }
    }
}

fn faulty_knobs() -> impl Strategy<Value = Knobs> {
    (
        3usize..=5,
        2u64..6,
        (0u32..30, 0u32..20, any::<bool>()),
        prop::option::weighted(0.5, (0u16..5, 0usize..300, 0usize..60)),
        (50u64..2000, 1u64..200),
        2usize..=HELD,
    )
        .prop_map(|(nodes, pages, (drop_pct, dup_pct, reorder), crash, (op_timeout, max_dt), budget)| Knobs {
            nodes,
            pages,
            drop_pct,
            dup_pct,
            reorder,
            crash: crash.map(|(n, s, d)| (n % nodes as u16, s, d)),
            op_timeout,
            max_dt,
            budget,
        })
}

fn clean_knobs() -> impl Strategy<Value = Knobs> {
    (3usize..=5, 2u64..6, any::<bool>(), 1u64..100, 2usize..=HELD).prop_map(
        |(nodes, pages, reorder, max_dt, budget)| Knobs {
            nodes,
            pages,
            drop_pct: 0,
            dup_pct: 0,
            reorder,
            crash: None,
            op_timeout: 1 << 40,
            max_dt,
            budget,
        },
    )
}

/// Deterministic by default (the same scenarios every run); `PROPTEST_RNG_SEED=<u64>`
/// explores others.
fn config(cases: u32) -> ProptestConfig {
    let base = ProptestConfig::default();
    let rng_seed = match std::env::var_os("PROPTEST_RNG_SEED") {
        Some(_) => base.rng_seed,
        None => proptest::test_runner::RngSeed::Fixed(0x0006_d5ee_d202_6000),
    };
    ProptestConfig { cases, failure_persistence: None, max_shrink_iters: 500, rng_seed, ..base }
}

proptest! {
    #![proptest_config(config(256))]

    /// Loss, duplication, reordering and a crash: never stale, never another page's data,
    /// single copy after a move, convergence, no hang.
    #[test]
    fn faulty_network(seed in any::<u64>(), steps in 50usize..400, knobs in faulty_knobs()) {
        run_scenario(Scenario { seed, steps, knobs });
    }
}

proptest! {
    #![proptest_config(config(64))]

    /// No faults (reordering only): no operation fails.
    #[test]
    fn perfect_network(seed in any::<u64>(), steps in 50usize..400, knobs in clean_knobs()) {
        run_scenario(Scenario { seed, steps, knobs });
    }
}

/// Many more, and longer, faulty scenarios (about a minute in release mode):
/// `cargo test --release -p trapeze-gms --test model stress -- --ignored`.
#[test]
#[ignore = "on demand: a long run (about a minute in release mode)"]
fn stress() {
    let cfg = ProptestConfig { rng_seed: proptest::test_runner::RngSeed::Random, ..config(20_000) };
    let mut runner = proptest::test_runner::TestRunner::new(cfg);
    let strategy = (any::<u64>(), 50usize..1500, faulty_knobs());
    runner
        .run(&strategy, |(seed, steps, knobs)| {
            run_scenario(Scenario { seed, steps, knobs });
            Ok(())
        })
        .unwrap();
}

/// Rerun one failing scenario with the line its failure printed:
/// `GMS_REPLAY="seed steps nodes pages drop dup reorder crash_node crash_step crash_delay op_timeout max_dt budget"`
/// (`crash_node` is `-` for none).
#[test]
#[ignore = "on demand: replays the scenario in GMS_REPLAY"]
fn replay() {
    let line = std::env::var("GMS_REPLAY").expect("set GMS_REPLAY to the line a failure printed");
    let v: Vec<&str> = line.split_whitespace().collect();
    assert_eq!(v.len(), 13, "GMS_REPLAY: 13 fields");
    let num = |i: usize| -> u64 { v[i].parse().unwrap_or_else(|_| panic!("field {i}: {:?}", v[i])) };
    let knobs = Knobs {
        nodes: num(2) as usize,
        pages: num(3),
        drop_pct: num(4) as u32,
        dup_pct: num(5) as u32,
        reorder: v[6] == "true",
        crash: if v[7] == "-" { None } else { Some((num(7) as u16, num(8) as usize, num(9) as usize)) },
        op_timeout: num(10),
        max_dt: num(11),
        budget: num(12) as usize,
    };
    let cov = run_scenario(Scenario { seed: num(0), steps: num(1) as usize, knobs });
    eprintln!("coverage: {cov:?}");
}

/// The scenarios reach every interesting path: sum the coverage of a fixed stream of
/// faulty scenarios and require every counter to be non-zero.
#[test]
fn model_covers_the_interesting_paths() {
    use proptest::strategy::ValueTree;
    use proptest::test_runner::{Config, RngAlgorithm, TestRng, TestRunner};
    let mut runner = TestRunner::new_with_rng(Config::default(), TestRng::from_seed(RngAlgorithm::ChaCha, &[9; 32]));
    let mut total = Cov::default();
    let mut rng = Rng::new(7, 0);
    for _ in 0..60 {
        let knobs = faulty_knobs().new_tree(&mut runner).unwrap().current();
        let c = run_scenario(Scenario { seed: rng.next_u64(), steps: 300, knobs });
        macro_rules! add { ($($f:ident)*) => { $(total.$f += c.$f;)* } }
        add!(dropped duplicated to_crashed ipt_refused hits_2way hits_3way hits_local hits_moved misses failed_gets
             stored refused superseded moves_stored discards_done dir_rejects pages_dropped scrub_removed
             op_timeouts crashes);
    }
    let dbg = format!("{total:?}");
    eprintln!("coverage: {dbg}");
    for field in dbg.trim_start_matches("Cov { ").trim_end_matches(" }").split(", ") {
        assert!(!field.ends_with(": 0"), "the model never exercised {field}: {dbg}");
    }
}
