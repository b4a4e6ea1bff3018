// SPDX-License-Identifier: GPL-2.0-only
//! The history checker's scenarios: GMS on 3–5 simulated nodes under crashes, restarts
//! (new incarnations that rejoin), partitions that heal, and message loss, duplication and
//! reordering; every operation and fault is recorded and the history judged by
//! `sim::gms::history::check` (never stale, never foreign bytes, nothing acknowledged lost
//! unless a cause the one-copy design allows; those losses counted by cause).
//!
//! Each scenario is derived from one seed. A violation prints the rule it broke, where (history
//! index, simulated time, step), the page's history, and a line to rerun exactly that
//! scenario: `GMS_HISTORY_SEED="<seed> <short|long>" cargo test -p trapeze-gms --test
//! history replay -- --ignored --nocapture` (add `GMS_TRACE=1` to print every message).
//! Copies change hands at the same version (movepage, moving reads) in every scenario.
//! `checked_histories` runs a fixed set in every test run; `long_run` (on demand) runs
//! `GMS_HISTORY_SCENARIOS` (10 000 by default) longer ones from `GMS_HISTORY_BASE` (random
//! by default, printed) and reports its scenario count and violations.

use gms::prelude::*;
use sim::gms::history::{self, Cause, Ev, History, Outcome, Report};
use sim::gms::OpKind;
use sim::gms::*;
use sim::rng::Rng;
use std::cell::Cell;
use std::collections::BTreeMap;

/// One scenario's shape, all drawn from its seed.
#[derive(Clone, Copy, Debug)]
struct Plan {
    seed: u64,
    long: bool,
    steps: usize,
    knobs: Knobs,
    /// Per mille per step: a node crashes / a partition starts.
    crash_pm: u64,
    cut_pm: u64,
    /// Percent per step that a node declared failed restarts.
    restart_pct: u32,
    /// Steps before a crashed node is declared failed.
    detect: usize,
    /// Per mille per step: a live node is falsely declared failed; heard again
    /// `hear_after` steps later.
    suspect_pm: u64,
    hear_after: usize,
    /// Copies change hands at the same version: movepage, and reads of the space with
    /// moving reads (every scenario the tests run; `nomoves` in a replay line leaves them
    /// out).
    moves: bool,
}

fn plan(seed: u64, long: bool, moves: bool, suspicion: bool) -> Plan {
    let mut r = Rng::new(seed ^ 0x6d73_6869_7374_6f72, 0);
    // Its own stream: the draws above and the faults drawn from them stay as they were
    // before scenarios had false suspicions.
    let mut sus = Rng::new(seed, SUSPICION_STREAM);
    let nodes = 3 + r.below(3) as usize;
    // A third of the scenarios lose no messages (crashes and partitions only).
    let lossy = r.below(3) != 0;
    let knobs = Knobs {
        nodes,
        pages: 2 + r.below(5),
        drop_pct: if lossy { [1, 2, 5, 10, 20][r.below(5) as usize] } else { 0 },
        dup_pct: if lossy { r.below(15) as u32 } else { 0 },
        reorder: r.pct(70),
        crash: None,
        op_timeout: 50 + r.below(1500),
        max_dt: 1 + r.below(150),
        budget: 2 + r.below(HELD as u64 - 1) as usize,
    };
    Plan {
        seed,
        long,
        steps: if long { 200 + r.below(1300) as usize } else { 100 + r.below(250) as usize },
        knobs,
        crash_pm: r.below(15),
        cut_pm: r.below(15),
        restart_pct: r.below(10) as u32,
        detect: r.below(40) as usize,
        suspect_pm: if suspicion { 1 + sus.below(15) } else { 0 },
        hear_after: 1 + sus.below(60) as usize,
        moves,
    }
}

impl Plan {
    fn replay_line(&self) -> String {
        let len = if self.long { "long" } else { "short" };
        let moves = if self.moves { "moves" } else { "nomoves" };
        let suspicion = if self.suspect_pm > 0 { " suspicion" } else { "" };
        format!(
            "GMS_HISTORY_SEED=\"{:#x} {len} {moves}{suspicion}\" cargo test -p trapeze-gms --test history replay -- --ignored --nocapture",
            self.seed
        )
    }
}

/// The stream of a scenario's seed its false suspicions are drawn from (and the next one).
const SUSPICION_STREAM: u64 = 1;

thread_local! {
    /// The step a scenario was at, for a panic's report.
    static STEP: Cell<usize> = const { Cell::new(0) };
}

/// What one scenario produced: the checker's report, or the harness invariant (or hang)
/// that stopped it, and how much of each fault it saw.
struct Run {
    report: Report,
    history: History,
    panic: Option<String>,
    crashes: u64,
    restarts: u64,
    suspicions: u64,
    cut_drops: u64,
    dropped: u64,
    duplicated: u64,
}

fn drive(p: &Plan, slot: &mut Option<Sim>) {
    let s = slot.insert(Sim::new(p.seed, p.knobs));
    s.strict = false;
    let mut crashed_at: Vec<Option<usize>> = vec![None; p.knobs.nodes];
    let mut heal_at = 0;
    let mut suspicion = Rng::new(p.seed, SUSPICION_STREAM + 1);
    let mut suspected_at: Vec<Option<usize>> = vec![None; p.knobs.nodes];
    for step in 0..p.steps {
        s.step = step;
        STEP.with(|c| c.set(step));
        faults(s, p, step, &mut crashed_at, &mut heal_at);
        suspicions(s, p, step, &mut suspicion, &mut suspected_at);
        workload(s, p);
        s.check_frames();
    }
    // The faults stop: the network heals, every suspected node is heard again, every
    // crash is noticed, some nodes come back.
    s.heal();
    for n in 0..p.knobs.nodes as u16 {
        if !s.crashed[n as usize] && s.failed[n as usize] {
            s.heard_again(n);
        }
    }
    for n in 0..p.knobs.nodes as u16 {
        if s.crashed[n as usize] && !s.failed[n as usize] {
            s.declare_failed(n);
        }
    }
    for n in 0..p.knobs.nodes as u16 {
        if s.crashed[n as usize] && s.rng.pct(50) {
            s.restart(n);
        }
    }
    STEP.with(|c| c.set(usize::MAX));
    s.settle();
    s.check_quiet();
    s.check_converged();
    s.check_frames();
    s.hist.push(s.clock.now(), usize::MAX, Ev::Settled);
    // Read every page back, each from a random live node.
    for q in 0..2 * p.knobs.pages {
        let page = page_of(p, q);
        let live = s.live();
        let mut tries = 0;
        loop {
            let r = live[s.rng.below(live.len() as u64) as usize];
            if s.getpage(r, page).is_some() {
                break;
            }
            tries += 1;
            assert!(tries < 100, "{}: the read-back getpage of {page:?} is never accepted", s.ctx);
            s.settle();
        }
        s.run_to_idle();
    }
    s.settle();
    s.check_quiet();
}

/// Crashes (declared failed `detect` steps later), restarts, partitions that heal.
fn faults(s: &mut Sim, p: &Plan, step: usize, crashed_at: &mut [Option<usize>], heal_at: &mut usize) {
    let n = p.knobs.nodes;
    for (i, at) in crashed_at.iter_mut().enumerate() {
        if at.is_some_and(|at| step >= at + p.detect) {
            *at = None;
            // A node suspected before it crashed was declared failed then.
            if !s.failed[i] {
                s.declare_failed(i as u16);
            }
        }
    }
    if s.rng.below(1000) < p.crash_pm {
        let live = s.live();
        // Keep two nodes up.
        if live.len() > 2 {
            let v = live[s.rng.below(live.len() as u64) as usize];
            s.crash(v);
            crashed_at[v as usize] = Some(step);
        }
    }
    for i in 0..n {
        if s.crashed[i] && s.failed[i] && s.rng.pct(p.restart_pct) {
            s.restart(i as u16);
        }
    }
    if s.net.sides().is_some() && step >= *heal_at {
        s.heal();
    } else if s.net.sides().is_none() && s.rng.below(1000) < p.cut_pm {
        // Two non-empty sides.
        let mut side: Vec<u8> = (0..n).map(|_| s.rng.below(2) as u8).collect();
        let lone = s.rng.below(n as u64) as usize;
        side[lone] = 1 - side[(lone + 1) % n];
        *heal_at = step + 5 + s.rng.below(80) as usize;
        s.partition(side);
    }
}

/// False suspicion, drawn from its own stream: a live member is declared failed while it
/// keeps running with its state, and is heard again `hear_after` steps later (unless it
/// crashed meanwhile: then it is a crashed node declared failed, which may restart).
fn suspicions(s: &mut Sim, p: &Plan, step: usize, r: &mut Rng, suspected_at: &mut [Option<usize>]) {
    for (i, at) in suspected_at.iter_mut().enumerate() {
        if at.is_some_and(|at| step >= at + p.hear_after) {
            *at = None;
            if !s.crashed[i] && s.failed[i] {
                s.heard_again(i as u16);
            }
        }
    }
    if r.below(1000) < p.suspect_pm {
        let up = s.members_up();
        // Keep two members.
        if up.len() > 2 {
            let v = *r.pick(&up).expect("members are up");
            s.suspect(v);
            suspected_at[v as usize] = Some(step);
        }
    }
}

/// The `q`th page of a scenario: both spaces, or only the one with sticky reads when
/// copies may not change hands.
fn page_of(p: &Plan, q: u64) -> PageId {
    if p.moves {
        PageId::new(q % 2, q / 2)
    } else {
        PageId::new(0, q)
    }
}

/// One workload step, as in the model tests: an operation from a random live node, a
/// delivery or time passing.
fn workload(s: &mut Sim, plan: &Plan) {
    let live = s.live();
    let node = live[s.rng.below(live.len() as u64) as usize];
    let others: Vec<u16> = live.iter().copied().filter(|&n| n != node && !s.failed[n as usize]).collect();
    let pick = |s: &mut Sim, v: &[u16]| (!v.is_empty()).then(|| v[s.rng.below(v.len() as u64) as usize]);
    match s.rng.below(100) {
        0..=19 => {
            let p = page_of(plan, s.rng.below(2 * plan.knobs.pages));
            s.getpage(node, p);
        }
        20..=33 => {
            let p = page_of(plan, s.rng.below(2 * plan.knobs.pages));
            if let Some(t) = pick(s, &others) {
                s.putpage(node, p, t);
            }
        }
        34..=37 if plan.moves => {
            let held: Vec<_> = s.nodes[node as usize].holdings().map(|(p, _)| *p).collect();
            if let (false, Some(t)) = (held.is_empty(), pick(s, &others)) {
                let p = held[s.rng.below(held.len() as u64) as usize];
                s.movepage(node, p, t);
            }
        }
        38..=39 => {
            let p = page_of(plan, s.rng.below(2 * plan.knobs.pages));
            s.discard(node, p);
        }
        40 => {
            let p = page_of(plan, s.rng.below(2 * plan.knobs.pages));
            s.hold(node, p);
        }
        41 => {
            let held: Vec<_> = s.nodes[node as usize].holdings().map(|(p, _)| *p).collect();
            if !held.is_empty() {
                let p = held[s.rng.below(held.len() as u64) as usize];
                s.drop_local(node, p);
            }
        }
        42..=87 => s.deliver(true),
        _ => {
            let dt = 1 + s.rng.below(s.k.max_dt);
            s.tick(dt);
        }
    }
}

fn run(p: &Plan) -> Run {
    let mut slot = None;
    let res = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| drive(p, &mut slot)));
    let s = slot.expect("the scenario started");
    let panic = res.err().map(|e| {
        let msg = e
            .downcast_ref::<String>()
            .cloned()
            .or_else(|| e.downcast_ref::<&str>().map(|m| m.to_string()))
            .unwrap_or_default();
        match STEP.with(|c| c.get()) {
            usize::MAX => format!("stopped while settling: {msg}"),
            step => format!("stopped at step {step}: {msg}"),
        }
    });
    let restarts = s.hist.events.iter().filter(|e| matches!(e.1, Ev::Restart(_))).count() as u64;
    Run {
        report: history::check(&s.hist),
        panic,
        crashes: s.cov.crashes,
        restarts,
        suspicions: s.suspicions,
        cut_drops: s.net.stats().cut,
        dropped: s.cov.dropped,
        duplicated: s.cov.duplicated,
        history: s.hist,
    }
}

/// Totals over many scenarios.
#[derive(Default, Debug)]
struct Totals {
    scenarios: u64,
    violations: u64,
    failed_scenarios: Vec<u64>,
    lost: BTreeMap<Cause, u64>,
    kept: u64,
    kept_at_risk: u64,
    reads_checked: u64,
    acked_writes: u64,
    stale_after_move: u64,
    crashes: u64,
    restarts: u64,
    suspicions: u64,
    cut_drops: u64,
    dropped: u64,
    duplicated: u64,
}

impl Totals {
    fn add(&mut self, p: &Plan, r: Run) {
        self.scenarios += 1;
        let bad = r.report.violations.len() as u64 + u64::from(r.panic.is_some());
        if bad > 0 {
            self.violations += bad;
            self.failed_scenarios.push(p.seed);
            eprintln!("gms history: VIOLATION in scenario {p:?}");
            if let Some(m) = &r.panic {
                eprintln!("  harness invariant: {m}");
            }
            for v in &r.report.violations {
                eprintln!("  {}: {}", v.at, v.what);
            }
            if let Some(v) = r.report.violations.first() {
                eprintln!("  history of {:?}:\n{}", v.page, r.history.trail(v.page, 40));
            }
            eprintln!("  replay: {}", p.replay_line());
        }
        for (c, n) in &r.report.lost {
            *self.lost.entry(*c).or_default() += n;
        }
        self.kept += r.report.kept;
        self.kept_at_risk += r.report.kept_at_risk;
        self.reads_checked += r.report.reads_checked;
        self.acked_writes += r.report.acked_writes;
        self.stale_after_move += r.report.stale_after_move;
        self.crashes += r.crashes;
        self.restarts += r.restarts;
        self.suspicions += r.suspicions;
        self.cut_drops += r.cut_drops;
        self.dropped += r.dropped;
        self.duplicated += r.duplicated;
    }

    fn summary(&self) -> String {
        format!(
            "{} scenarios, {} violations; {} acknowledged writes, {} reads checked; after the faults {} pages \
             read back at their acknowledged version or newer ({} of them despite a fault that excused a loss), \
             lost for an allowed cause: {:?}; {} reads older than a write the reader did not know of, after \
             the page's directory moved; faults: {} crashes, {} restarts, {} false suspicions, {} messages cut by partitions, \
             {} dropped, {} duplicated",
            self.scenarios,
            self.violations,
            self.acked_writes,
            self.reads_checked,
            self.kept,
            self.kept_at_risk,
            self.lost,
            self.stale_after_move,
            self.crashes,
            self.restarts,
            self.suspicions,
            self.cut_drops,
            self.dropped,
            self.duplicated
        )
    }
}

fn seeds(base: u64, n: u64) -> impl Iterator<Item = u64> {
    let mut r = Rng::new(base, 0);
    (0..n).map(move |_| r.next_u64())
}

/// A fixed set of scenarios in every test run: no violation, and the faults the checker
/// is about all happened (crashes, restarts, partitions, loss, duplication), with pages
/// both kept and legitimately lost.
#[test]
fn checked_histories() {
    let mut t = Totals::default();
    for seed in seeds(0x0006_d5ee_d202_6016, 300) {
        let p = plan(seed, false, true, false);
        t.add(&p, run(&p));
    }
    let sum = t.summary();
    eprintln!("gms history: {sum}");
    assert_eq!(t.violations, 0, "{sum}; failing seeds {:x?}", t.failed_scenarios);
    assert!(t.crashes > 0 && t.restarts > 0 && t.cut_drops > 0 && t.dropped > 0 && t.duplicated > 0, "{sum}");
    assert!(t.kept > 0 && t.reads_checked > 0 && t.acked_writes > 0, "{sum}");
    assert!(t.lost.get(&Cause::HolderCrashed).is_some_and(|&n| n > 0), "{sum}");
    assert!(t.lost.get(&Cause::MovingRead).is_some_and(|&n| n > 0), "{sum}");
}

/// How many scenarios an on-demand run makes: `GMS_HISTORY_SCENARIOS`, else `default`.
fn scenario_count(default: u64) -> u64 {
    std::env::var("GMS_HISTORY_SCENARIOS")
        .map_or(default, |v| v.parse().unwrap_or_else(|_| panic!("GMS_HISTORY_SCENARIOS: not a number: {v:?}")))
}

/// `GMS_HISTORY_BASE`, else a fresh one (printed, so a run can be repeated).
fn base_seed() -> u64 {
    match std::env::var("GMS_HISTORY_BASE") {
        Ok(v) => parse_u64(&v).unwrap_or_else(|| panic!("GMS_HISTORY_BASE: not a number: {v:?}")),
        Err(_) => std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).unwrap().as_nanos() as u64,
    }
}

fn many(what: &str, n: u64, base: u64, long: bool, suspicion: bool) -> Totals {
    eprintln!("gms history: {what}: {n} scenarios from GMS_HISTORY_BASE={base:#x}");
    let started = std::time::Instant::now();
    let mut t = Totals::default();
    for seed in seeds(base, n) {
        let p = plan(seed, long, true, suspicion);
        t.add(&p, run(&p));
        if t.scenarios % 1000 == 0 {
            eprintln!("  {} scenarios, {} violations ({:.0?})", t.scenarios, t.violations, started.elapsed());
        }
    }
    eprintln!("gms history: {what}: {} (GMS_HISTORY_BASE={base:#x}, {:.1?})", t.summary(), started.elapsed());
    t
}

/// The long run: `GMS_HISTORY_SCENARIOS` (10 000) longer scenarios from
/// `GMS_HISTORY_BASE` (random unless set), in release mode:
/// `cargo test -p trapeze-gms --release --test history long_run -- --ignored --nocapture`.
#[test]
#[ignore = "on demand: a long run (10 000 scenarios; about 11 s in release mode here)"]
fn long_run() {
    let t = many("long run", scenario_count(10_000), base_seed(), true, false);
    assert_eq!(t.violations, 0, "{}; failing seeds {:x?}", t.summary(), t.failed_scenarios);
}

/// The long run with false suspicions besides the other faults (see
/// [`false_suspicion_histories`]):
/// `cargo test -p trapeze-gms --release --test history long_suspicion_run -- --ignored --nocapture`.
///
/// Not yet clean. On 2026-11-28 (`GMS_HISTORY_BASE=0x18ec494e1393ae85`), 81 of 10,000
/// scenarios had 111 violations, each scenario's first a stale read: a reader given a
/// version older than one acknowledged before its read began, after a holder of the
/// newer copy was falsely suspected (GMS assumes fail-stop members; nothing fences a
/// member declared failed). No acknowledged page read as a miss. Before the failure
/// tombstone's fix the same run had 171 violations.
#[test]
#[ignore = "on demand: a long run with false suspicions (10 000 scenarios)"]
fn long_suspicion_run() {
    let t = many("long run with false suspicions", scenario_count(10_000), base_seed(), true, true);
    assert_eq!(t.violations, 0, "{}; failing seeds {:x?}", t.summary(), t.failed_scenarios);
}

/// Scenarios that lost an acknowledged page before copies had an identity beyond their
/// version (`gms::directory`): a copy that changed hands at the same version (movepage,
/// or a moving read) was lost when a registration of its previous holder at that version
/// reached the directory afterwards (its scrub's re-registration still in flight when the
/// move began, or a duplicated `DIRUPDATE`: NetRPC does not suppress duplicate requests),
/// which named the previous holder again and had the new one drop its copy. The
/// registration now claims the identity its copy descends from, and the directory refuses
/// the stale one.
const SAME_VERSION_HANDOVERS: &[&str] = &[
    "0x9ba743fab6e59db1 short moves",
    "0x5f79c019d9cd8c32 short moves",
    "0xbe5369a98470bad4 short moves",
    "0x11103de8ff0b4ae1 short moves",
    "0x7ea9b374f5d25570 short moves",
    // A page moved away and handed back before the first move's `PUTDONE` arrived: only
    // the copy moved is dropped, not the one handed back.
    "0xe8556196f196fa23 long moves",
    "0xcd4ba4bac5c60398 long moves",
    // A moving read of a copy still registering: the site keeps it, so the reader must
    // not become a second holder.
    "0x4567937e3ecc2bdb long moves",
    // A copy taken back by its runtime while still registering: its removal covered every
    // identity at that version and, delivered late, un-named the same giver's copy handed
    // to that node again afterwards. A copy still registering is now un-named only by the
    // identity its registration's answer names.
    "0x255f1df101182ab8 long moves",
    // (A checker gap.) A page put, moved on by its target before the put's `PUTDONE`
    // arrived, the move ending `Failed` (its outcome unknown) and the move's target taking
    // its copy back: the copy may have been handed over, so that target's taking it back
    // excuses the loss.
    "0xd4b4b98ea95af66e long moves",
    // A copy re-registered with its new directory after a membership change (named under a
    // new identity, the answer still on its way) and moved meanwhile: the target's claim of
    // the identity its holder still knew was refused, and the holder, told `Superseded`,
    // dropped the copy the directory named. A move `Superseded` now keeps the copy, and a
    // moving read hands over only the identity the directory named.
    "0x1e4faffaf077fe7 long moves",
    // (Checker gaps.) A discard acknowledged, its directory node dying before the holder of
    // the discarded version dropped it; the survivors register that copy with a new
    // directory (the discard's floor died with the old one), it is moved on and the move
    // acknowledged; a reader that knows of the discard refuses it: the discard excuses the
    // loss.
    "0x87d1f981ebb6912c long moves",
    "0x280b646a2cc048a6 long moves",
    // A newer put whose request the network duplicated: the first delivery stored it (its
    // registration displacing the acknowledged version) and its runtime took it back; the
    // duplicate was refused and that answer ended the put. A put answered otherwise than
    // `Stored` after a duplicated request may have been stored, so the taking back excuses
    // the loss.
    "0x9a546981088052c9 long moves",
    // A copy moved, the hand-over named by a directory node that died and came back empty
    // before either side heard: the giver's re-registration reached the new incarnation
    // first (the taker's claim refused), and the old incarnation's `DROPPAGE` of the giver's
    // copy, arriving before the new one's answer, dropped the copy the new one named. A
    // copy registering again is now dropped only above the identity it claims.
    "0x13bb55d335c4715a long moves",
];

/// Scenarios with false suspicions besides the other faults: live members declared failed
/// that keep their state and are heard again. Their own stream, so the scenarios are those
/// of `checked_histories` plus the suspicions.
///
/// 5 of these 300 scenarios once read a page back as a miss although its acknowledged
/// copy was held by nodes that never crashed: declaring a node failed tombstoned its
/// directory entries as if it had given its copies up, so when it was heard again its
/// scrub's re-registration was refused and it dropped them (the plainest, with partitions
/// and suspicions only: `0x11103de8ff0b4ae1 short moves suspicion`). A failure's
/// tombstone now lets any copy at its version be named again.
///
/// Longer scenarios still find stale reads under false suspicion (no loss): see
/// [`long_suspicion_run`].
#[test]
fn false_suspicion_histories() {
    let mut t = Totals::default();
    for seed in seeds(0x0006_d5ee_d202_6016, 300) {
        let p = plan(seed, false, true, true);
        t.add(&p, run(&p));
    }
    let sum = t.summary();
    eprintln!("gms history: {sum}");
    assert_eq!(t.violations, 0, "{sum}; failing seeds {:x?}", t.failed_scenarios);
    assert!(t.suspicions > 0 && t.crashes > 0 && t.kept > 0, "{sum}");
}

#[test]
fn same_version_handovers_are_not_lost() {
    let mut t = Totals::default();
    for line in SAME_VERSION_HANDOVERS {
        let mut f = line.split_whitespace();
        let seed = parse_u64(f.next().unwrap()).unwrap();
        let p = plan(seed, f.next() == Some("long"), f.next() != Some("nomoves"), false);
        t.add(&p, run(&p));
    }
    assert_eq!(t.violations, 0, "{}; failing seeds {:x?}", t.summary(), t.failed_scenarios);
    assert!(t.reads_checked > 0 && t.kept > 0, "{}", t.summary());
}

fn parse_u64(s: &str) -> Option<u64> {
    let s = s.trim();
    match s.strip_prefix("0x") {
        Some(h) => u64::from_str_radix(h, 16).ok(),
        None => s.parse().ok(),
    }
}

/// Rerun one scenario: `GMS_HISTORY_SEED="<seed> <short|long>"`, as a violation printed it.
#[test]
#[ignore = "on demand: replays the scenario in GMS_HISTORY_SEED"]
fn replay() {
    let line = std::env::var("GMS_HISTORY_SEED").expect("set GMS_HISTORY_SEED to the line a violation printed");
    let mut f = line.split_whitespace();
    let seed = f.next().and_then(parse_u64).unwrap_or_else(|| panic!("GMS_HISTORY_SEED: no seed in {line:?}"));
    let long = match f.next() {
        None | Some("short") => false,
        Some("long") => true,
        Some(x) => panic!("GMS_HISTORY_SEED: {x:?} is neither short nor long"),
    };
    let moves = match f.next() {
        None | Some("moves") => true,
        Some("nomoves") => false,
        Some(x) => panic!("GMS_HISTORY_SEED: {x:?} is neither moves nor nomoves"),
    };
    let suspicion = match f.next() {
        None => false,
        Some("suspicion") => true,
        Some(x) => panic!("GMS_HISTORY_SEED: {x:?} is not suspicion"),
    };
    let p = plan(seed, long, moves, suspicion);
    let mut t = Totals::default();
    t.add(&p, run(&p));
    eprintln!("gms history: {p:?}: {}", t.summary());
    assert_eq!(t.violations, 0);
}

// ---- the checker itself, on histories made by hand -----------------------------------------

/// A history builder: ops end in the order given.
struct Hand(History, u16);
impl Hand {
    fn new(ids: &[u16]) -> Hand {
        let mut h = History::default();
        h.push(1, 0, Ev::View(ids.to_vec()));
        Hand(h, 0)
    }
    fn op(&mut self, node: u16, kind: OpKind, page: PageId, version: u64, target: u16, out: Option<Outcome>) {
        self.1 += 1;
        let id = OpId { slot: self.1, generation: 1 };
        self.0.issue(2, 1, node, id, kind, page, version, target);
        if let Some(o) = out {
            self.0.end(3, 1, node, id, o);
        }
    }
    fn put(&mut self, page: PageId, v: u64, target: u16) {
        self.op(0, OpKind::Put, page, v, target, Some(Outcome::Stored));
    }
    fn hit(&mut self, page: PageId, v: u64, data: (PageId, u64)) {
        self.op(2, OpKind::Get, page, 0, 0, Some(Outcome::Hit { version: v, data: Some(data), held: false }));
    }
    fn miss(&mut self, page: PageId) {
        self.op(2, OpKind::Get, page, 0, 0, Some(Outcome::Miss(MissReason::NotCached)));
    }
    fn ev(&mut self, e: Ev) {
        self.0.push(4, 1, e);
    }
}

#[test]
fn checker_flags_stale_and_foreign_reads() {
    let (a, b) = (PageId::new(0, 1), PageId::new(0, 2));
    let mut h = Hand::new(&[0, 1, 2]);
    h.put(a, 1, 1);
    h.put(a, 2, 1);
    h.hit(a, 2, (a, 2));
    h.hit(a, 1, (a, 1));
    h.hit(a, 2, (b, 2));
    h.hit(a, 3, (a, 3));
    let r = history::check(&h.0);
    let what: Vec<&str> = r.violations.iter().map(|v| v.what.as_str()).collect();
    assert_eq!(r.violations.len(), 3, "{what:#?}");
    assert!(what[0].starts_with("STALE"), "{what:#?}");
    assert!(what[1].contains("the bytes are"), "{what:#?}");
    assert!(what[2].contains("never written"), "{what:#?}");
    // A read issued before the put was acknowledged may return the older version.
    let mut h = Hand::new(&[0, 1, 2]);
    h.put(a, 1, 1);
    let id = OpId { slot: 99, generation: 1 };
    h.0.issue(2, 1, 2, id, OpKind::Get, a, 0, 0);
    h.put(a, 2, 1);
    h.0.end(3, 1, 2, id, Outcome::Hit { version: 1, data: Some((a, 1)), held: false });
    assert!(history::check(&h.0).violations.is_empty());
}

#[test]
fn checker_flags_lost_pages_and_counts_allowed_losses() {
    let ids = [0u16, 1, 2, 3];
    let dir = |p: &PageId, ids: &[u16]| {
        let mut m = gms::members::Members::<16>::new();
        m.set(1, ids).unwrap();
        m.directory_of(p).unwrap()
    };
    // Pages whose directory is not node 3 (so node 3 failing moves none of them) and one
    // whose directory is node 3.
    let stay: Vec<PageId> = (0..).map(|i| PageId::new(0, i)).filter(|p| dir(p, &ids) != 3).take(3).collect();
    let moved = (0..).map(|i| PageId::new(0, i)).find(|p| dir(p, &ids) == 3).unwrap();
    let mut h = Hand::new(&ids);
    h.put(stay[0], 1, 1); // its holder never crashes: must read back
    h.put(stay[1], 1, 2); // its holder crashes
    h.put(stay[2], 1, 1); // read back newer
    h.put(moved, 1, 1); // its directory moves
    h.op(0, OpKind::Put, stay[2], 2, 1, None); // unacknowledged, yet stored
    h.ev(Ev::Crash(2));
    h.ev(Ev::Declared(2));
    h.ev(Ev::View(vec![0, 1, 3]));
    h.ev(Ev::Crash(3));
    h.ev(Ev::Declared(3));
    h.ev(Ev::View(vec![0, 1]));
    h.ev(Ev::Settled);
    h.miss(stay[0]);
    h.miss(stay[1]);
    h.hit(stay[2], 2, (stay[2], 2));
    h.miss(moved);
    let r = history::check(&h.0);
    // A directory moving is no excuse: its survivors register their copies again.
    assert_eq!(r.violations.len(), 2, "{r:?}");
    assert!(r.violations.iter().all(|v| v.what.starts_with("LOST")), "{r:?}");
    assert_eq!((r.violations[0].page, r.violations[1].page), (stay[0], moved));
    assert_eq!(r.kept, 1);
    assert_eq!(r.lost.get(&Cause::HolderCrashed), Some(&1), "{r:?}");
    // An acknowledged page never read back is a violation too.
    let mut h = Hand::new(&ids);
    h.put(stay[0], 1, 1);
    h.ev(Ev::Settled);
    assert_eq!(history::check(&h.0).violations.len(), 1);
}

#[test]
fn checker_excuses_discarded_versions_and_duplicated_puts() {
    let a = PageId::new(0, 1);
    // A version moved on after a discard of it was acknowledged (it came back through a
    // directory that never heard of the discard): a reader knowing the discard misses it.
    let mut h = Hand::new(&[0, 1, 2]);
    h.put(a, 5, 1);
    h.op(0, OpKind::Discard, a, 5, 0, Some(Outcome::Discard(DiscardResult::Done)));
    h.op(1, OpKind::Move, a, 5, 2, Some(Outcome::Stored));
    h.ev(Ev::Settled);
    h.miss(a);
    let r = history::check(&h.0);
    assert!(r.violations.is_empty(), "{r:?}");
    assert_eq!(r.lost.get(&Cause::Discarded), Some(&1), "{r:?}");
    // A newer put refused by a duplicate of its request, the copy an earlier delivery stored
    // taken back by its runtime: the older acknowledged version is superseded and gone.
    let put = |h: &mut Hand, slot: u16, v: u64, target: u16| {
        let id = OpId { slot, generation: 1 };
        h.0.issue(2, 1, 0, id, OpKind::Put, a, v, target);
        id
    };
    for dup in [true, false] {
        let mut h = Hand::new(&[0, 1, 2]);
        let old = put(&mut h, 90, 1, 1);
        let new = put(&mut h, 91, 2, 2);
        if dup {
            h.0.duplicated(0, new);
        }
        h.0.end(3, 1, 0, new, Outcome::NotStored(PutResult::Refused));
        h.ev(Ev::DropLocal { node: 2, page: a });
        h.0.end(3, 1, 0, old, Outcome::Stored);
        h.ev(Ev::Settled);
        h.miss(a);
        let r = history::check(&h.0);
        if dup {
            assert!(r.violations.is_empty(), "{r:?}");
            assert_eq!(r.lost.get(&Cause::TakenBack), Some(&1), "{r:?}");
        } else {
            assert_eq!(r.violations.len(), 1, "a refused put stored nothing: {r:?}");
        }
    }
}
