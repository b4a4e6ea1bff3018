// SPDX-License-Identifier: GPL-2.0-only
//! The Incoming Payload Table protocol (`iface::ipt`) over an `AtomicWords` NIC memory.
//!
//! * `ipt_protocol_matches_model`: a state-machine test. Host operations (arm, cancel,
//!   cancel-poll) and firmware operations (claim with valid, forged, replayed and
//!   out-of-range tokens; complete; release) run against a small reference model of
//!   each entry, and every answer must be the model's. A granted `Claim` is the only
//!   thing that permits a DMA into host memory, so "never causes a DMA" means "never
//!   returns `Ok`" and is checked on every claim.
//! * the scenario tests spell the main rules out one by one;
//! * `cancel_races_claim_on_two_threads`: host cancel and firmware claim race on the
//!   same entry from two threads; the Dekker-style handshake must never let both win.

mod common;

use proptest::prelude::*;
use proptest::strategy::Union;
use proptest_state_machine::{prop_state_machine, ReferenceStateMachine, StateMachineTest};
use std::sync::atomic::{AtomicBool, AtomicI64, AtomicU32, AtomicU64, Ordering};
use trapeze_firmware::iface::entry::Segment;
use trapeze_firmware::iface::ipt::{self, CancelState, Claim, IptEntry, PayloadToken, TokenError, KEY_MASK};
use trapeze_firmware::iface::layout::{IPT_ENTRIES, IPT_ENTRY_BYTES, IPT_OFF, MAX_SEGMENTS};
use trapeze_firmware::iface::mem::{AtomicWords, NicMemory};

/// The IPT entries the state machine works on: a few, so that operations collide, and
/// the last one of the table.
const SLOTS: [u16; 4] = [0, 1, 2, (IPT_ENTRIES - 1) as u16];

// ---- reference model -------------------------------------------------------------

#[derive(Clone, Debug, Default)]
struct EntryModel {
    /// Armed by the host and not cancelled since (arm_seq odd).
    armed: bool,
    /// The latest generation was delivered (consumed).
    delivered: bool,
    /// The firmware holds a claim on the latest generation.
    claimed: bool,
    key: u64,
    segs: Vec<Segment>,
}

impl EntryModel {
    fn cap(&self) -> u64 {
        self.segs.iter().map(|s| s.len as u64).sum()
    }
    /// host_arm may be called: the entry is free, or armed and undelivered (which
    /// must be refused). Re-arming an entry whose cancel is still in flight is the
    /// caller's error (documented precondition), so the model never does it.
    fn arm_allowed(&self) -> bool {
        self.armed || !self.claimed
    }
}

#[derive(Clone, Debug, Default)]
struct Model {
    entries: [EntryModel; SLOTS.len()],
    /// Claims the firmware holds (slot numbers), in the order they were granted.
    claims: Vec<(usize, u32)>,
    /// Every token host_arm ever returned, for replays.
    issued: Vec<PayloadToken>,
}

#[derive(Clone, Debug)]
enum Op {
    Arm {
        slot: usize,
        key: u64,
        segs: Vec<Segment>,
    },
    Cancel {
        slot: usize,
    },
    CancelPoll {
        slot: usize,
    },
    Claim {
        token: PayloadToken,
        len: u32,
    },
    /// Complete the `k`-th held claim (payload delivered).
    Complete {
        k: usize,
    },
    /// Release the `k`-th held claim (packet lost, e.g. bad CRC).
    Release {
        k: usize,
    },
}

fn slot_of(index: u16) -> Option<usize> {
    SLOTS.iter().position(|&i| i == index)
}

impl Model {
    fn expected_arm(&self, slot: usize, key: u64, segs: &[Segment]) -> Option<PayloadToken> {
        let e = &self.entries[slot];
        let key = key & KEY_MASK;
        let free = !e.armed || e.delivered;
        (key != 0 && !segs.is_empty() && segs.len() <= MAX_SEGMENTS as usize && free)
            .then(|| PayloadToken::new(SLOTS[slot], key))
    }

    fn expected_cancel(&self, slot: usize) -> CancelState {
        let e = &self.entries[slot];
        if !e.armed {
            // Already disarmed. If a delivery into the cancelled generation is still
            // running, the frame is not free: the answer must say so.
            if e.claimed {
                CancelState::InFlight
            } else {
                CancelState::Idle
            }
        } else if e.delivered {
            CancelState::Delivered
        } else if e.claimed {
            CancelState::InFlight
        } else {
            CancelState::Cancelled
        }
    }

    fn expected_poll(&self, slot: usize) -> CancelState {
        let e = &self.entries[slot];
        assert!(!e.armed, "poll is only meaningful after a cancel");
        if e.claimed {
            CancelState::InFlight
        } else if e.delivered {
            CancelState::Delivered
        } else {
            CancelState::Cancelled
        }
    }

    /// The slot a claim is granted on, or why it is refused.
    fn expected_claim(&self, token: PayloadToken, len: u32) -> Result<usize, TokenError> {
        if token.key() == 0 || token.index() as u32 >= IPT_ENTRIES {
            return Err(TokenError::Forged);
        }
        // Entries outside SLOTS are never armed.
        let Some(slot) = slot_of(token.index()) else { return Err(TokenError::NotArmed) };
        let e = &self.entries[slot];
        if !e.armed {
            Err(TokenError::NotArmed)
        } else if token.key() != e.key {
            Err(TokenError::WrongKey)
        } else if e.delivered {
            Err(TokenError::Consumed)
        } else if e.claimed {
            Err(TokenError::InFlight)
        } else if len as u64 > e.cap() {
            Err(TokenError::TooSmall)
        } else {
            Ok(slot)
        }
    }
}

// ---- strategies ------------------------------------------------------------------

fn key_strategy() -> BoxedStrategy<u64> {
    prop_oneof![
        // A small pool, so that entries get re-armed under a key used before.
        4 => 1..=4u64,
        6 => any::<u64>(),
        1 => Just(0u64),
        // Zero once truncated to 48 bits.
        1 => Just(1u64 << 48),
        1 => Just(KEY_MASK),
    ]
    .boxed()
}

fn segment_strategy() -> impl Strategy<Value = Segment> {
    (any::<u64>(), prop_oneof![0..=64u32, 0..=5000u32]).prop_map(|(addr, len)| Segment { addr, len })
}

fn segs_strategy() -> BoxedStrategy<Vec<Segment>> {
    prop_oneof![
        10 => prop::collection::vec(segment_strategy(), 1..=MAX_SEGMENTS as usize),
        1 => Just(Vec::new()),
        1 => prop::collection::vec(segment_strategy(), MAX_SEGMENTS as usize + 1..=12),
    ]
    .boxed()
}

/// Payload lengths around a frame capacity: fitting, exactly fitting, one too many.
fn len_strategy(cap: u64) -> BoxedStrategy<u32> {
    let cap = cap.min(u32::MAX as u64 - 10_000) as u32;
    prop_oneof![
        4 => 0..=cap,
        2 => Just(cap),
        2 => Just(cap + 1),
        1 => cap + 1..cap + 10_000,
        1 => any::<u32>(),
    ]
    .boxed()
}

struct IptMachine;

impl ReferenceStateMachine for IptMachine {
    type State = Model;
    type Transition = Op;

    fn init_state() -> BoxedStrategy<Model> {
        Just(Model::default()).boxed()
    }

    fn transitions(m: &Model) -> BoxedStrategy<Op> {
        let n = SLOTS.len();
        let mut choices: Vec<(u32, BoxedStrategy<Op>)> = vec![
            (
                6,
                (0..n, key_strategy(), segs_strategy())
                    .prop_map(|(slot, key, segs)| Op::Arm { slot, key, segs })
                    .boxed(),
            ),
            (3, (0..n).prop_map(|slot| Op::Cancel { slot }).boxed()),
            // Forged tokens: anything at all, out-of-range indices, zero keys, random
            // keys on the entries in use.
            (1, (any::<u64>(), any::<u32>()).prop_map(|(t, len)| Op::Claim { token: PayloadToken(t), len }).boxed()),
            (
                1,
                (IPT_ENTRIES as u16..=u16::MAX, any::<u64>(), 0..10_000u32)
                    .prop_map(|(i, k, len)| Op::Claim { token: PayloadToken::new(i, k), len })
                    .boxed(),
            ),
            (
                1,
                (0..n, 0..10_000u32)
                    .prop_map(|(s, len)| Op::Claim { token: PayloadToken::new(SLOTS[s], 0), len })
                    .boxed(),
            ),
            (
                1,
                (0..n, any::<u64>(), 0..10_000u32)
                    .prop_map(|(s, k, len)| Op::Claim { token: PayloadToken::new(SLOTS[s], k), len })
                    .boxed(),
            ),
        ];
        // Valid tokens for the entries' current keys (armed, consumed or cancelled).
        for (slot, e) in m.entries.iter().enumerate() {
            if e.key != 0 {
                let token = PayloadToken::new(SLOTS[slot], e.key);
                let w = if e.armed && !e.delivered { 8 } else { 2 };
                choices.push((w, len_strategy(e.cap()).prop_map(move |len| Op::Claim { token, len }).boxed()));
            }
            if !e.armed {
                choices.push((2, Just(Op::CancelPoll { slot }).boxed()));
            }
        }
        // Replays of any token ever issued.
        if !m.issued.is_empty() {
            let issued = m.issued.clone();
            choices.push((
                3,
                (prop::sample::select(issued), 0..=20_000u32).prop_map(|(token, len)| Op::Claim { token, len }).boxed(),
            ));
        }
        if !m.claims.is_empty() {
            let c = m.claims.len();
            choices.push((5, (0..c).prop_map(|k| Op::Complete { k }).boxed()));
            choices.push((3, (0..c).prop_map(|k| Op::Release { k }).boxed()));
        }
        Union::new_weighted(choices).boxed()
    }

    fn preconditions(m: &Model, op: &Op) -> bool {
        match op {
            Op::Arm { slot, .. } => m.entries[*slot].arm_allowed(),
            Op::CancelPoll { slot } => !m.entries[*slot].armed,
            Op::Complete { k } | Op::Release { k } => *k < m.claims.len(),
            Op::Cancel { .. } | Op::Claim { .. } => true,
        }
    }

    fn apply(mut m: Model, op: &Op) -> Model {
        match op {
            Op::Arm { slot, key, segs } => {
                if let Some(token) = m.expected_arm(*slot, *key, segs) {
                    m.entries[*slot] = EntryModel {
                        armed: true,
                        delivered: false,
                        claimed: false,
                        key: key & KEY_MASK,
                        segs: segs.clone(),
                    };
                    m.issued.push(token);
                }
            }
            Op::Cancel { slot } => m.entries[*slot].armed = false,
            Op::CancelPoll { .. } => {}
            Op::Claim { token, len } => {
                if let Ok(slot) = m.expected_claim(*token, *len) {
                    m.entries[slot].claimed = true;
                    m.claims.push((slot, *len));
                }
            }
            Op::Complete { k } => {
                let (slot, _) = m.claims.remove(*k);
                m.entries[slot].claimed = false;
                m.entries[slot].delivered = true;
            }
            Op::Release { k } => {
                let (slot, _) = m.claims.remove(*k);
                m.entries[slot].claimed = false;
            }
        }
        m
    }
}

// ---- system under test -----------------------------------------------------------

struct Sut {
    words: Vec<AtomicU32>,
    /// Claims granted and not yet completed or released, in model order.
    claims: Vec<Claim>,
    /// The model state *before* the transition being applied (the framework hands
    /// `apply` the state after it).
    model: Model,
}

impl StateMachineTest for IptMachine {
    type SystemUnderTest = Sut;
    type Reference = IptMachine;

    fn init_test(m: &Model) -> Sut {
        Sut { words: common::nic_memory(), claims: Vec::new(), model: m.clone() }
    }

    fn apply(mut sut: Sut, after: &Model, op: Op) -> Sut {
        let mem = AtomicWords::new(&sut.words);
        let pre = &sut.model;
        let entry = |slot: usize| IptEntry::new(&mem, SLOTS[slot]).expect("index in table");
        match &op {
            Op::Arm { slot, key, segs } => {
                let got = entry(*slot).host_arm(*key, segs);
                let want = pre.expected_arm(*slot, *key, segs);
                assert_eq!(got, want, "host_arm({slot}, {key:#x}, {} segs)", segs.len());
                if let Some(t) = got {
                    assert_eq!(t.index(), SLOTS[*slot]);
                    assert_eq!(t.key(), key & KEY_MASK);
                    assert!(!t.is_none());
                }
            }
            Op::Cancel { slot } => {
                assert_eq!(entry(*slot).host_cancel(), pre.expected_cancel(*slot), "host_cancel({slot})");
            }
            Op::CancelPoll { slot } => {
                assert_eq!(entry(*slot).host_cancel_poll(), pre.expected_poll(*slot), "host_cancel_poll({slot})");
            }
            Op::Claim { token, len } => {
                let got = ipt::fw_claim(&mem, *token, *len);
                let want = pre.expected_claim(*token, *len);
                match (got, want) {
                    (Ok(claim), Ok(slot)) => {
                        let e = &pre.entries[slot];
                        let n = e.segs.len();
                        assert_eq!(claim.index, token.index());
                        assert_eq!(claim.nseg as usize, n);
                        assert_eq!(&claim.segs[..n], &e.segs[..], "claim carries the armed frame");
                        assert!(claim.segs[n..].iter().all(|s| *s == Segment::default()));
                        assert_eq!(claim.seq & 1, 1, "claims name an armed (odd) generation");
                        assert_eq!(claim.seq, entry(slot).arm_seq());
                        sut.claims.push(claim);
                    }
                    (got, want) => assert_eq!(
                        got.map(|c| c.index),
                        want.map(|s| SLOTS[s]),
                        "fw_claim({token:?} = index {}, key {:#x}; len {len})",
                        token.index(),
                        token.key()
                    ),
                }
            }
            Op::Complete { k } => {
                let (slot, len) = pre.claims[*k];
                let claim = sut.claims.remove(*k);
                assert_eq!(claim.index, SLOTS[slot]);
                let e = entry(slot);
                e.fw_complete(&claim, len);
                assert_eq!(e.done_seq(), claim.seq);
                assert_eq!(e.done_len(), len);
            }
            Op::Release { k } => {
                let (slot, _) = pre.claims[*k];
                let claim = sut.claims.remove(*k);
                assert_eq!(claim.index, SLOTS[slot]);
                entry(slot).fw_release(&claim);
            }
        }
        sut.model = after.clone();
        sut
    }

    fn check_invariants(sut: &Sut, m: &Model) {
        let mem = AtomicWords::new(&sut.words);
        assert_eq!(sut.claims.len(), m.claims.len());
        for (slot, e) in m.entries.iter().enumerate() {
            let view = IptEntry::new(&mem, SLOTS[slot]).unwrap();
            assert_eq!(view.arm_seq() & 1 == 1, e.armed, "arm_seq parity of slot {slot}");
            assert_eq!(view.is_armed(), e.armed && !e.delivered, "is_armed of slot {slot}");
        }
    }

    fn teardown(sut: Sut, _: Model) {
        // Nothing outside the entries in use was ever written.
        let mem = AtomicWords::new(&sut.words);
        let used = |off: u32| {
            SLOTS.iter().any(|&i| {
                let base = IPT_OFF + i as u32 * IPT_ENTRY_BYTES;
                (base..base + IPT_ENTRY_BYTES).contains(&off)
            })
        };
        assert_eq!(mem.len_bytes() as usize, 4 * sut.words.len());
        for (i, w) in sut.words.iter().enumerate() {
            let off = 4 * i as u32;
            if w.load(Ordering::Relaxed) != 0 {
                assert!(used(off), "stray write at {off:#x}");
            }
        }
    }
}

prop_state_machine! {
    #![proptest_config(common::config(256))]
    #[test]
    fn ipt_protocol_matches_model(sequential 1..60 => IptMachine);
}

// ---- scenarios -------------------------------------------------------------------

fn seg(len: u32) -> Segment {
    Segment { addr: 0x1_0000_0000, len }
}

#[test]
fn one_shot_delivery_and_replays() {
    let words = common::nic_memory();
    let mem = AtomicWords::new(&words);
    let e = IptEntry::new(&mem, 7).unwrap();
    let t = e.host_arm(0xABCD, &[seg(100), seg(28)]).unwrap();
    assert_eq!(e.host_arm(0x1234, &[seg(8)]), None, "armed and undelivered");
    assert_eq!(ipt::fw_claim(&mem, t, 129), Err(TokenError::TooSmall));
    let c = ipt::fw_claim(&mem, t, 128).unwrap();
    assert_eq!(ipt::fw_claim(&mem, t, 128), Err(TokenError::InFlight));
    e.fw_complete(&c, 128);
    assert_eq!(ipt::fw_claim(&mem, t, 1), Err(TokenError::Consumed));
    assert!(!e.is_armed());
    // Consumed: the host may re-arm without cancelling; the old token is now stale.
    let t2 = e.host_arm(0x5678, &[seg(64)]).unwrap();
    assert_eq!(ipt::fw_claim(&mem, t, 1), Err(TokenError::WrongKey));
    assert_eq!(e.host_cancel(), CancelState::Cancelled);
    assert_eq!(ipt::fw_claim(&mem, t2, 1), Err(TokenError::NotArmed));
    assert_eq!(ipt::fw_claim(&mem, t, 1), Err(TokenError::NotArmed));
    assert_eq!(e.host_cancel(), CancelState::Idle);
    // Forged tokens.
    assert_eq!(ipt::fw_claim(&mem, PayloadToken::new(7, 0), 1), Err(TokenError::Forged));
    assert_eq!(ipt::fw_claim(&mem, PayloadToken::NONE, 0), Err(TokenError::Forged));
    assert_eq!(ipt::fw_claim(&mem, PayloadToken::new(IPT_ENTRIES as u16, 0xABCD), 1), Err(TokenError::Forged));
    assert!(IptEntry::new(&mem, IPT_ENTRIES as u16).is_none());
}

/// An entry whose segment runs past the top of the address space is never claimed: the
/// payload would be written from address 0 on.
#[test]
fn wrapping_segment_is_refused() {
    let words = common::nic_memory();
    let mem = AtomicWords::new(&words);
    let e = IptEntry::new(&mem, 5).unwrap();
    let t = e.host_arm(0x77, &[Segment { addr: u64::MAX - 15, len: 64 }]).unwrap();
    assert_eq!(ipt::fw_claim(&mem, t, 1), Err(TokenError::TooSmall));
    assert_eq!(e.host_cancel(), CancelState::Cancelled);
    let t = e.host_arm(0x78, &[Segment { addr: u64::MAX - 63, len: 63 }]).unwrap();
    assert!(ipt::fw_claim(&mem, t, 63).is_ok(), "a range ending just below the top is fine");
}

#[test]
fn released_claim_can_be_claimed_again() {
    let words = common::nic_memory();
    let mem = AtomicWords::new(&words);
    let e = IptEntry::new(&mem, 3).unwrap();
    let t = e.host_arm(99, &[seg(4096)]).unwrap();
    let c = ipt::fw_claim(&mem, t, 4096).unwrap();
    e.fw_release(&c);
    assert!(e.is_armed());
    let c2 = ipt::fw_claim(&mem, t, 4096).unwrap();
    assert_eq!(c2.seq, c.seq, "same generation");
    e.fw_complete(&c2, 4096);
    assert_eq!(e.host_cancel(), CancelState::Delivered);
}

#[test]
fn cancel_during_delivery_waits_for_the_firmware() {
    let words = common::nic_memory();
    let mem = AtomicWords::new(&words);
    let e = IptEntry::new(&mem, 0).unwrap();
    for complete in [true, false] {
        let t = e.host_arm(5, &[seg(10)]).unwrap();
        let c = ipt::fw_claim(&mem, t, 10).unwrap();
        assert_eq!(e.host_cancel(), CancelState::InFlight);
        assert_eq!(e.host_cancel_poll(), CancelState::InFlight);
        // A second cancel must not report the frame free while the DMA runs.
        assert_eq!(e.host_cancel(), CancelState::InFlight);
        assert_eq!(ipt::fw_claim(&mem, t, 10), Err(TokenError::NotArmed));
        if complete {
            e.fw_complete(&c, 10);
            assert_eq!(e.host_cancel_poll(), CancelState::Delivered);
        } else {
            e.fw_release(&c);
            assert_eq!(e.host_cancel_poll(), CancelState::Cancelled);
            assert_eq!(ipt::fw_claim(&mem, t, 10), Err(TokenError::NotArmed), "no retransmission after cancel");
        }
        assert_eq!(e.host_cancel(), CancelState::Idle);
    }
}

// ---- the race ----------------------------------------------------------------------

#[derive(Clone, Copy, Debug, Default)]
struct HostSide {
    cancel: Option<CancelState>,
    settled: Option<CancelState>,
    frame_overwritten: bool,
    /// host_cancel_poll still said InFlight long after the firmware finished.
    stuck: bool,
    /// Ticket taken right after host_cancel returned.
    cancel_done: u64,
}

#[derive(Clone, Copy, Debug, Default)]
struct FwSide {
    claim: Option<Result<(), TokenError>>,
    completed: bool,
    /// Ticket taken right before fw_release was called.
    releasing: u64,
}

/// Cheap deterministic per-thread randomness for spin delays.
fn xorshift(s: &mut u64) -> u64 {
    *s ^= *s << 13;
    *s ^= *s >> 7;
    *s ^= *s << 17;
    *s
}

fn spin(n: u64) {
    for _ in 0..n {
        std::hint::spin_loop();
    }
}

/// A two-party rendezvous by spinning, so that both threads leave it within about a
/// cache-line transfer of each other (a futex barrier wakes them microseconds apart and
/// the race would rarely happen). Yields when spinning takes long (oversubscribed CPU).
/// Rounds are in lockstep, so a side can never be a whole round ahead. Returns false,
/// without waiting, once `stop` is set (the other side gave up or panicked).
struct SpinMeet(AtomicU64);

impl SpinMeet {
    fn meet(&self, round: usize, stop: &AtomicBool) -> bool {
        let target = 2 * (round as u64 + 1);
        self.0.fetch_add(1, Ordering::SeqCst);
        let mut n = 0u32;
        while self.0.load(Ordering::SeqCst) < target {
            if stop.load(Ordering::SeqCst) {
                return false;
            }
            n += 1;
            if n < 200 {
                std::hint::spin_loop();
            } else {
                std::thread::yield_now();
            }
        }
        true
    }
}

/// Sets the flag if the thread holding it panics, so that the other side stops waiting.
struct StopOnPanic<'a>(&'a AtomicBool);

impl Drop for StopOnPanic<'_> {
    fn drop(&mut self) {
        if std::thread::panicking() {
            self.0.store(true, Ordering::SeqCst);
        }
    }
}

#[test]
fn cancel_races_claim_on_two_threads() {
    const ITERS: usize = 20_000;
    const INDEX: u16 = 42;
    const LEN: u32 = 1000;
    const FREE: u64 = 1 << 63;
    let words = common::nic_memory();
    let mem = AtomicWords::new(&words);
    let token = AtomicU64::new(0);
    // The host frame, reduced to one word: who wrote it last.
    let frame = AtomicU64::new(0);
    // A global order of events on both threads (SeqCst read-modify-writes).
    let tickets = AtomicU64::new(1);
    let start = SpinMeet(AtomicU64::new(0));
    let end = SpinMeet(AtomicU64::new(0));
    // Extra spins before the host's cancel (> 0) or the firmware's claim (< 0), steered
    // each round towards the point where the two overlap, whatever the start skew.
    let bias = AtomicI64::new(0);
    let fw_claimed = AtomicBool::new(false);
    // Set when a side gives up (a cancel never settles, or a panic): both stop.
    let stop = AtomicBool::new(false);

    let (host, fw) = std::thread::scope(|sc| {
        let host = sc.spawn(|| {
            let _guard = StopOnPanic(&stop);
            let e = IptEntry::new(&mem, INDEX).unwrap();
            let mut rng = 0x9E37_79B9_7F4A_7C15u64;
            let mut out = vec![HostSide::default(); ITERS];
            for (i, o) in out.iter_mut().enumerate() {
                let t = e
                    .host_arm(i as u64 + 1, &[Segment { addr: 0x8000_0000, len: LEN }])
                    .expect("entry is free: the previous round ended with a settled cancel");
                token.store(t.0, Ordering::Relaxed);
                if !start.meet(i, &stop) {
                    break;
                }
                spin(xorshift(&mut rng) % 64 + bias.load(Ordering::Relaxed).max(0) as u64);
                let c = e.host_cancel();
                o.cancel_done = tickets.fetch_add(1, Ordering::SeqCst);
                let mut settled = c;
                let deadline = std::time::Instant::now() + std::time::Duration::from_secs(5);
                while settled == CancelState::InFlight {
                    if std::time::Instant::now() > deadline {
                        // The firmware is long done: the entry is stuck. Stop both sides.
                        o.stuck = true;
                        break;
                    }
                    std::thread::yield_now();
                    settled = e.host_cancel_poll();
                }
                if o.stuck {
                    (o.cancel, o.settled) = (Some(c), Some(settled));
                    stop.store(true, Ordering::SeqCst);
                    break;
                }
                // The frame is ours again: reuse it.
                frame.store(FREE | i as u64, Ordering::SeqCst);
                if !end.meet(i, &stop) {
                    break;
                }
                // Who was ahead? Overlap (InFlight) keeps the bias.
                let step = match (c, fw_claimed.load(Ordering::Relaxed)) {
                    (CancelState::InFlight, _) => 0,
                    (CancelState::Cancelled, false) => 8,
                    _ => -8,
                };
                let b = (bias.load(Ordering::Relaxed) + step).clamp(-1024, 1024);
                bias.store(b, Ordering::Relaxed);
                o.cancel = Some(c);
                o.settled = Some(settled);
                o.frame_overwritten = frame.load(Ordering::SeqCst) != FREE | i as u64;
            }
            out
        });
        let fw = sc.spawn(|| {
            let _guard = StopOnPanic(&stop);
            let mut rng = 0x2545_F491_4F6C_DD1Du64;
            let mut out = vec![FwSide::default(); ITERS];
            for (i, o) in out.iter_mut().enumerate() {
                if !start.meet(i, &stop) {
                    break;
                }
                let t = PayloadToken(token.load(Ordering::Relaxed));
                spin(xorshift(&mut rng) % 64 + (-bias.load(Ordering::Relaxed)).max(0) as u64);
                let r = ipt::fw_claim(&mem, t, LEN);
                if let Ok(c) = &r {
                    // The "DMA" into the frame, taking a little while.
                    frame.store(i as u64, Ordering::SeqCst);
                    spin(xorshift(&mut rng) % 128);
                    let e = IptEntry::new(&mem, INDEX).unwrap();
                    // Every fourth packet is lost on the link.
                    o.completed = i % 4 != 3;
                    if o.completed {
                        e.fw_complete(c, LEN);
                    } else {
                        o.releasing = tickets.fetch_add(1, Ordering::SeqCst);
                        e.fw_release(c);
                    }
                }
                o.claim = Some(r.map(|_| ()));
                fw_claimed.store(r.is_ok(), Ordering::Relaxed);
                if !end.meet(i, &stop) {
                    break;
                }
            }
            out
        });
        (host.join().unwrap(), fw.join().unwrap())
    });

    let mut stats = std::collections::BTreeMap::<String, usize>::new();
    let rounds = host.iter().zip(&fw).take_while(|(h, _)| h.cancel.is_some());
    for (i, (h, f)) in rounds.enumerate() {
        let (cancel, settled, claim) = (h.cancel.unwrap(), h.settled.unwrap(), f.claim.unwrap());
        *stats.entry(format!("{cancel:?}/{settled:?}/{claim:?}")).or_default() += 1;
        let ctx = format!("round {i}: cancel {cancel:?}, settled {settled:?}, claim {claim:?}");
        assert!(!h.stuck, "{ctx}: the cancel never settled after the firmware finished");
        assert_ne!(cancel, CancelState::Idle, "{ctx}: the entry was armed");
        assert!(!h.frame_overwritten, "{ctx}: DMA into the frame after the host got it back");
        match claim {
            Ok(()) => {
                // A claim the host never saw is allowed only if the firmware had already
                // released it (lost packet) when the cancel looked: then it was done with
                // the frame before cancel answered.
                if cancel == CancelState::Cancelled {
                    assert!(!f.completed, "{ctx}: cancel missed a delivered claim");
                    assert!(
                        f.releasing < h.cancel_done,
                        "{ctx}: cancel reported the frame free while the firmware held its claim"
                    );
                }
                let want = if f.completed { CancelState::Delivered } else { CancelState::Cancelled };
                assert_eq!(settled, want, "{ctx}");
            }
            Err(e) => {
                // Key right, never consumed, nothing in flight, frame large enough: the
                // only reason left is the cancel.
                assert_eq!(e, TokenError::NotArmed, "{ctx}");
                assert_ne!(cancel, CancelState::Delivered, "{ctx}");
                assert_eq!(settled, CancelState::Cancelled, "{ctx}");
            }
        }
    }
    eprintln!("outcomes (cancel/settled/claim): {stats:#?}; final bias {}", bias.into_inner());
}
