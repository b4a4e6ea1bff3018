// SPDX-License-Identifier: GPL-2.0-only
//! Seeded fault injection on the send side of a link: drop, duplicate, reorder or
//! corrupt frames, each with a probability per million frames. No unsafe.
//!
//! Decisions come from a small xorshift64* generator seeded from [`FaultConfig::seed`],
//! drawn in a fixed order per frame, so a given configuration, seed and frame sequence
//! always produces the same faults.
//!
//! Per frame, in this order:
//! 1. **drop** — the frame is not sent.
//! 2. **corrupt** — one bit, anywhere in the frame (header included), is flipped.
//! 3. **duplicate** — the frame is sent twice (both copies carry the same corruption).
//! 4. **reorder** — one copy is held back and sent right after the *next* frame that goes
//!    through the injector (whatever happens to that one). At most one frame is held: a
//!    frame picked for reordering while another is held is sent normally and not
//!    counted. A held frame is never held for long: [`FaultInjector::release_due`] sends
//!    it once it has waited [`REORDER_HOLD_MAX`] (the link calls that from `poll_packet`
//!    and `poll_timers`, and its `poll_deadline` includes it), and
//!    [`FaultInjector::flush`] sends it at once. Sending does not look at the clock, so a
//!    link that only sends injects the same faults in the same order on every run.
//!
//! Besides faults, a **delay** (`delay=20us`) models the wire's propagation time, as
//! netem's delay does: every frame that leaves the injector waits in a FIFO delay line
//! until `delay` after the send that produced it, then goes to the backend, so order is
//! kept and the sender's NIC is not held up. The line is released by the same
//! `release_due` calls, and its next due time is part of the link's `poll_deadline` (a
//! NIC that sleeps wakes for it; one that spins delivers within a pass). The decisions
//! above never depend on it.

use std::collections::VecDeque;
use std::fmt;
use std::io;
use std::str::FromStr;
use std::time::{Duration, Instant};

use super::backend::{LinkBackend, SpecError};
use super::LinkStats;

/// The longest a reordered frame is held when no further frame is sent.
pub const REORDER_HOLD_MAX: Duration = Duration::from_millis(1);

const PPM: u32 = 1_000_000;

/// The longest wire delay accepted (a delay line this long holds every frame a NIC sends
/// in that time).
pub const DELAY_MAX: Duration = Duration::from_secs(1);

/// Fault probabilities, in frames per million, the generator seed, and the wire delay.
///
/// Parses from `drop=0.01,dup=0.01,reorder=0.02,corrupt=0.001,seed=7,delay=20us`:
/// probabilities as fractions (`0.01`), percentages (`1%`) or parts per million
/// (`10000ppm`); a delay in `ns`, `us` or `ms` up to [`DELAY_MAX`]; keys may be omitted
/// (0); `none` or an empty string is no faults. Prints the settings that are not zero in
/// that form (`none` if none is), which parses back to the same value for any config
/// within those ranges (probabilities at most 1, a delay at most [`DELAY_MAX`]).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct FaultConfig {
    pub drop_ppm: u32,
    pub duplicate_ppm: u32,
    pub reorder_ppm: u32,
    pub corrupt_ppm: u32,
    pub seed: u64,
    /// One-way wire delay of every frame, in ns (0: none).
    pub delay_ns: u64,
}

impl FaultConfig {
    /// No faults.
    pub const NONE: FaultConfig =
        FaultConfig { drop_ppm: 0, duplicate_ppm: 0, reorder_ppm: 0, corrupt_ppm: 0, seed: 0, delay_ns: 0 };

    /// Whether frames pass untouched: no fault can ever be injected and there is no delay.
    pub fn is_none(&self) -> bool {
        self.drop_ppm == 0
            && self.duplicate_ppm == 0
            && self.reorder_ppm == 0
            && self.corrupt_ppm == 0
            && self.delay_ns == 0
    }
}

fn parse_delay(v: &str) -> Result<u64, SpecError> {
    let bad = |why: &str| {
        SpecError(format!(
            "bad delay {v:?}: {why} (expected a duration like 20us, 1.5ms or 800ns, at most {DELAY_MAX:?})"
        ))
    };
    let (num, scale) = if let Some(n) = v.strip_suffix("ns") {
        (n, 1.0)
    } else if let Some(n) = v.strip_suffix("us").or_else(|| v.strip_suffix("µs")) {
        (n, 1e3)
    } else if let Some(n) = v.strip_suffix("ms") {
        (n, 1e6)
    } else {
        return Err(bad("no unit"));
    };
    let x: f64 = num.trim().parse().map_err(|_| bad("not a number"))?;
    let ns = (x * scale).round();
    if !ns.is_finite() || x < 0.0 || ns > DELAY_MAX.as_nanos() as f64 {
        return Err(bad("out of range"));
    }
    Ok(ns as u64)
}

fn parse_probability(key: &str, v: &str) -> Result<u32, SpecError> {
    let bad = |why: &str| {
        SpecError(format!("bad fault value {key}={v:?}: {why} (expected a probability like 0.01, 1% or 10000ppm)"))
    };
    let (num, scale) = if let Some(n) = v.strip_suffix("ppm") {
        (n, 1.0)
    } else if let Some(n) = v.strip_suffix('%') {
        (n, 10_000.0)
    } else {
        (v, PPM as f64)
    };
    let x: f64 = num.trim().parse().map_err(|_| bad("not a number"))?;
    let ppm = (x * scale).round();
    if !ppm.is_finite() || !(0.0..=PPM as f64).contains(&ppm) || x < 0.0 {
        return Err(bad("out of range 0..=1"));
    }
    Ok(ppm as u32)
}

impl FromStr for FaultConfig {
    type Err = SpecError;

    fn from_str(s: &str) -> Result<Self, SpecError> {
        let mut c = FaultConfig::NONE;
        let s = s.trim();
        if s.is_empty() || s == "none" {
            return Ok(c);
        }
        let mut seen: Vec<&str> = Vec::new();
        for item in s.split(',') {
            let Some((k, v)) = item.split_once('=') else {
                return Err(SpecError(format!(
                    "bad fault setting {item:?}: expected KEY=VALUE with KEY one of drop, dup, \
                     reorder, corrupt, seed, delay"
                )));
            };
            let (k, v) = (k.trim(), v.trim());
            let key = match k {
                "duplicate" => "dup",
                k => k,
            };
            if seen.contains(&key) {
                return Err(SpecError(format!("fault setting {k:?} given twice")));
            }
            seen.push(key);
            match key {
                "drop" => c.drop_ppm = parse_probability(k, v)?,
                "dup" => c.duplicate_ppm = parse_probability(k, v)?,
                "reorder" => c.reorder_ppm = parse_probability(k, v)?,
                "corrupt" => c.corrupt_ppm = parse_probability(k, v)?,
                "delay" => c.delay_ns = parse_delay(v)?,
                "seed" => {
                    c.seed = v
                        .parse()
                        .map_err(|_| SpecError(format!("bad fault seed {v:?}: expected an integer 0-{}", u64::MAX)))?
                }
                _ => {
                    return Err(SpecError(format!(
                        "unknown fault {k:?}: expected drop, dup, reorder, corrupt, seed or delay"
                    )))
                }
            }
        }
        Ok(c)
    }
}

/// Prints the settings that are not zero (`none` if none is), in the form `FromStr`
/// reads back: `drop=0.01,seed=7,delay=20us`.
impl fmt::Display for FaultConfig {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let p = |ppm: u32| ppm as f64 / PPM as f64;
        let mut items: Vec<String> = [
            ("drop", self.drop_ppm),
            ("dup", self.duplicate_ppm),
            ("reorder", self.reorder_ppm),
            ("corrupt", self.corrupt_ppm),
        ]
        .iter()
        .filter(|(_, ppm)| *ppm != 0)
        .map(|(k, ppm)| format!("{k}={}", p(*ppm)))
        .collect();
        if self.seed != 0 {
            items.push(format!("seed={}", self.seed));
        }
        match self.delay_ns {
            0 => {}
            ns if ns.is_multiple_of(1000) => items.push(format!("delay={}us", ns / 1000)),
            ns => items.push(format!("delay={ns}ns")),
        }
        if items.is_empty() {
            return f.write_str("none");
        }
        f.write_str(&items.join(","))
    }
}

/// xorshift64* (Marsaglia / Vigna), seeded through splitmix64 so any seed, 0 included,
/// gives a non-zero state.
#[derive(Clone, Debug)]
struct Rng(u64);

impl Rng {
    fn new(seed: u64) -> Self {
        let mut z = seed.wrapping_add(0x9E37_79B9_7F4A_7C15);
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^= z >> 31;
        Rng(if z == 0 { 1 } else { z })
    }

    fn next_u64(&mut self) -> u64 {
        let mut x = self.0;
        x ^= x >> 12;
        x ^= x << 25;
        x ^= x >> 27;
        self.0 = x;
        x.wrapping_mul(0x2545_F491_4F6C_DD1D)
    }

    /// True with probability `ppm` per million; draws nothing when `ppm` is 0.
    fn chance(&mut self, ppm: u32) -> bool {
        ppm != 0 && self.next_u64() % (PPM as u64) < (ppm as u64)
    }

    /// Uniform in `0..n` (n > 0; bias below 2^-40 for the sizes used).
    fn below(&mut self, n: u64) -> u64 {
        self.next_u64() % n.max(1)
    }
}

#[derive(Clone, Copy, Debug)]
struct Held {
    dst: u16,
    len: usize,
    since: Instant,
}

/// A frame on the wire (in the delay line) until `due`.
#[derive(Debug)]
struct InFlight {
    due: Instant,
    dst: u16,
    frame: Vec<u8>,
}

/// Most spare buffers the delay line keeps for reuse.
const DELAY_SPARES: usize = 64;

/// Most frames on a link's delay line (netem's default limit is 1000 packets): a sender
/// that outruns its modelled wire loses frames, counted in `delay_line_drops`, rather
/// than growing the line without bound (up to 64 KiB a frame).
pub const DELAY_LINE_FRAMES: usize = 4096;

/// Applies a [`FaultConfig`] to frames on their way to a backend. See the module doc for
/// the rules; every injected fault is counted in [`LinkStats`].
#[derive(Debug)]
pub struct FaultInjector {
    config: FaultConfig,
    rng: Rng,
    held: Option<Held>,
    held_buf: Vec<u8>,
    /// The delay line (oldest first; due times never decrease).
    line: VecDeque<InFlight>,
    spare: Vec<Vec<u8>>,
}

/// Send one frame, counting it or the error.
fn put(backend: &mut dyn LinkBackend, dst: u16, frame: &[u8], stats: &mut LinkStats) -> io::Result<()> {
    match backend.send_frame(dst, frame) {
        Ok(()) => {
            stats.frames_sent += 1;
            Ok(())
        }
        Err(e) => {
            stats.send_errors += 1;
            Err(e)
        }
    }
}

impl FaultInjector {
    pub fn new(config: FaultConfig) -> Self {
        FaultInjector {
            config,
            rng: Rng::new(config.seed),
            held: None,
            held_buf: Vec::new(),
            line: VecDeque::new(),
            spare: Vec::new(),
        }
    }

    fn delay(&self) -> Duration {
        Duration::from_nanos(self.config.delay_ns)
    }

    /// Send a frame now, or put it on the delay line until `delay` after `now`.
    fn emit(
        &mut self,
        backend: &mut dyn LinkBackend,
        dst: u16,
        frame: &[u8],
        now: Instant,
        stats: &mut LinkStats,
    ) -> io::Result<()> {
        if self.config.delay_ns == 0 {
            return put(backend, dst, frame, stats);
        }
        self.enqueue(dst, frame.len(), now, stats, &mut |b| b.copy_from_slice(frame));
        Ok(())
    }

    /// Send the held (reordered) frame `h` now, or put it on the delay line.
    fn emit_held(
        &mut self,
        h: Held,
        backend: &mut dyn LinkBackend,
        now: Instant,
        stats: &mut LinkStats,
    ) -> io::Result<()> {
        let held = std::mem::take(&mut self.held_buf);
        let result = self.emit(backend, h.dst, &held[..h.len], now, stats);
        self.held_buf = held;
        result
    }

    /// Put a frame of `len` bytes that `fill` writes on the delay line, due `delay` after
    /// `now`, or drop and count it if the line is full ([`DELAY_LINE_FRAMES`]).
    fn enqueue(&mut self, dst: u16, len: usize, now: Instant, stats: &mut LinkStats, fill: &mut dyn FnMut(&mut [u8])) {
        if self.line.len() >= DELAY_LINE_FRAMES {
            stats.delay_line_drops += 1;
            return;
        }
        let mut buf = self.spare.pop().unwrap_or_default();
        buf.resize(len, 0);
        fill(&mut buf);
        let due = now + self.delay();
        self.line.push_back(InFlight { due, dst, frame: buf });
    }

    /// Send the frames of the delay line due by `now` (all of them with `None`).
    fn release_line(
        &mut self,
        backend: &mut dyn LinkBackend,
        now: Option<Instant>,
        stats: &mut LinkStats,
    ) -> io::Result<()> {
        let mut result = Ok(());
        while let Some(f) = self.line.front() {
            if now.is_some_and(|t| f.due > t) {
                break;
            }
            let Some(f) = self.line.pop_front() else { break };
            result = result.and(put(backend, f.dst, &f.frame, stats));
            if self.spare.len() < DELAY_SPARES {
                self.spare.push(f.frame);
            }
        }
        result
    }

    pub fn config(&self) -> &FaultConfig {
        &self.config
    }

    /// Whether frames pass untouched: no faults or delay configured and none held back
    /// (then the link may hand frames to the backend directly).
    pub fn is_passthrough(&self) -> bool {
        self.config.is_none() && self.held.is_none() && self.line.is_empty()
    }

    /// Whether no fault can be injected and no reordered frame is held (a delay may be
    /// configured): every frame arrives once, intact and in order.
    pub fn faultless(&self) -> bool {
        FaultConfig { delay_ns: 0, ..self.config }.is_none() && self.held.is_none()
    }

    /// With [`Self::faultless`] and a delay configured: put a frame of `len` bytes that
    /// `fill` writes on the delay line, filled in place (no copy through a scratch frame),
    /// or drop it if the line is full ([`DELAY_LINE_FRAMES`]), and return `true`.
    /// Returns `false` (and does nothing) otherwise.
    pub fn delay_with(
        &mut self,
        dst: u16,
        len: usize,
        now: Instant,
        stats: &mut LinkStats,
        fill: &mut dyn FnMut(&mut [u8]),
    ) -> bool {
        if !self.faultless() || self.config.delay_ns == 0 {
            return false;
        }
        self.enqueue(dst, len, now, stats, fill);
        true
    }

    /// Whether a reordered frame, or a frame on the delay line, is waiting.
    pub fn holding(&self) -> bool {
        self.held.is_some() || !self.line.is_empty()
    }

    /// When the next waiting frame (held for reordering, or due off the delay line) must
    /// be sent.
    pub fn deadline(&self) -> Option<Instant> {
        let held = self.held.map(|h| h.since + REORDER_HOLD_MAX);
        let line = self.line.front().map(|f| f.due);
        match (held, line) {
            (Some(a), Some(b)) => Some(a.min(b)),
            (a, b) => a.or(b),
        }
    }

    /// Pass one frame to `backend`, injecting faults (`frame` may be modified). Sends a
    /// previously held frame after this one. Returns the first send error, after still
    /// attempting every other send.
    pub fn transmit(
        &mut self,
        backend: &mut dyn LinkBackend,
        dst: u16,
        frame: &mut [u8],
        now: Instant,
        stats: &mut LinkStats,
    ) -> io::Result<()> {
        if self.is_passthrough() {
            return put(backend, dst, frame, stats);
        }
        let prev = self.held.take();
        let mut result = Ok(());
        if self.rng.chance(self.config.drop_ppm) {
            stats.injected_drops += 1;
        } else {
            if self.rng.chance(self.config.corrupt_ppm) && !frame.is_empty() {
                let bit = self.rng.below(frame.len() as u64 * 8);
                frame[(bit / 8) as usize] ^= 1 << (bit % 8);
                stats.injected_corruptions += 1;
            }
            let mut copies = 1;
            if self.rng.chance(self.config.duplicate_ppm) {
                stats.injected_duplicates += 1;
                copies = 2;
            }
            if self.rng.chance(self.config.reorder_ppm) && prev.is_none() {
                stats.injected_reorders += 1;
                copies -= 1;
                self.held_buf.clear();
                self.held_buf.extend_from_slice(frame);
                self.held = Some(Held { dst, len: frame.len(), since: now });
            }
            for _ in 0..copies {
                result = result.and(self.emit(backend, dst, frame, now, stats));
            }
        }
        if let Some(h) = prev {
            result = result.and(self.emit_held(h, backend, now, stats));
        }
        result
    }

    /// Send the frames of the delay line due by `now`, then the held frame if it has
    /// waited [`REORDER_HOLD_MAX`] (it goes on the delay line like any other).
    pub fn release_due(
        &mut self,
        backend: &mut dyn LinkBackend,
        now: Instant,
        stats: &mut LinkStats,
    ) -> io::Result<()> {
        let mut result = self.release_line(backend, Some(now), stats);
        if let Some(h) = self.held {
            if now >= h.since + REORDER_HOLD_MAX {
                self.held = None;
                result = result.and(self.emit_held(h, backend, now, stats));
                result = result.and(self.release_line(backend, Some(now), stats));
            }
        }
        result
    }

    /// Send everything waiting now: the delay line, then the held frame.
    pub fn flush(&mut self, backend: &mut dyn LinkBackend, stats: &mut LinkStats) -> io::Result<()> {
        let mut result = self.release_line(backend, None, stats);
        if let Some(h) = self.held.take() {
            result = result.and(put(backend, h.dst, &self.held_buf[..h.len], stats));
        }
        result
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::fd::BorrowedFd;

    #[test]
    fn parse_and_print() {
        let c: FaultConfig = "drop=0.01,dup=0.01,reorder=0.02,corrupt=0.001,seed=7".parse().unwrap();
        assert_eq!(
            c,
            FaultConfig {
                drop_ppm: 10_000,
                duplicate_ppm: 10_000,
                reorder_ppm: 20_000,
                corrupt_ppm: 1_000,
                seed: 7,
                delay_ns: 0
            }
        );
        let d: FaultConfig = "delay=20us,drop=1%".parse().unwrap();
        assert_eq!((d.delay_ns, d.drop_ppm), (20_000, 10_000));
        assert_eq!(d.to_string().parse::<FaultConfig>(), Ok(d));
        assert_eq!("delay=1.5ms".parse::<FaultConfig>().unwrap().delay_ns, 1_500_000);
        assert_eq!("delay=800ns".parse::<FaultConfig>().unwrap().delay_ns, 800);
        assert!(!"delay=1ns".parse::<FaultConfig>().unwrap().is_none());
        assert_eq!(c.to_string().parse::<FaultConfig>(), Ok(c));
        assert_eq!(FaultConfig::NONE.to_string(), "none");
        assert_eq!(FaultConfig { delay_ns: 10_000, ..FaultConfig::NONE }.to_string(), "delay=10us");
        let odd = FaultConfig { delay_ns: 1_500, seed: 3, reorder_ppm: 5, ..FaultConfig::NONE };
        assert_eq!(odd.to_string(), "reorder=0.000005,seed=3,delay=1500ns");
        assert_eq!(odd.to_string().parse::<FaultConfig>(), Ok(odd));
        assert_eq!("drop=20%, duplicate=5ppm".parse::<FaultConfig>().unwrap().drop_ppm, 200_000);
        assert_eq!("drop=20%,duplicate=5ppm".parse::<FaultConfig>().unwrap().duplicate_ppm, 5);
        assert_eq!("none".parse::<FaultConfig>(), Ok(FaultConfig::NONE));
        assert_eq!("".parse::<FaultConfig>(), Ok(FaultConfig::NONE));
        assert!(FaultConfig::NONE.is_none());
        for (bad, msg) in [
            ("lose=0.1", "unknown fault \"lose\""),
            ("drop", "expected KEY=VALUE"),
            ("drop=x", "not a number"),
            ("drop=1.5", "out of range"),
            ("drop=-0.1", "out of range"),
            ("drop=NaN", "out of range"),
            ("drop=0.1,drop=0.2", "given twice"),
            ("seed=-1", "bad fault seed"),
            ("delay=20", "no unit"),
            ("delay=xus", "not a number"),
            ("delay=-1us", "out of range"),
            ("delay=2000ms", "out of range"),
        ] {
            let e = bad.parse::<FaultConfig>().unwrap_err();
            assert!(e.0.contains(msg), "{bad}: {e}");
        }
    }

    /// Records frames instead of sending them.
    #[derive(Default)]
    struct Tape(Vec<Vec<u8>>);

    impl LinkBackend for Tape {
        fn send_frame(&mut self, _dst: u16, frame: &[u8]) -> io::Result<()> {
            self.0.push(frame.to_vec());
            Ok(())
        }
        fn try_recv_frame(&mut self, _buf: &mut [u8]) -> io::Result<Option<usize>> {
            Ok(None)
        }
        fn readable_fd(&self) -> Option<BorrowedFd<'_>> {
            None
        }
        fn max_frame_bytes(&self) -> usize {
            1500
        }
        fn routes_to(&self, _dst: u16) -> bool {
            true
        }
        fn describe(&self) -> String {
            "tape".into()
        }
    }

    fn run(config: FaultConfig, n: u8) -> (Vec<Vec<u8>>, LinkStats) {
        let mut inj = FaultInjector::new(config);
        let mut tape = Tape::default();
        let mut stats = LinkStats::default();
        let now = Instant::now();
        for i in 0..n {
            inj.transmit(&mut tape, 1, &mut [i, 0, 0, 0], now, &mut stats).unwrap();
        }
        assert!(inj.deadline().is_none() || inj.holding());
        inj.release_due(&mut tape, now + REORDER_HOLD_MAX, &mut stats).unwrap();
        assert!(!inj.holding());
        (tape.0, stats)
    }

    #[test]
    fn deterministic_and_counted() {
        let c = FaultConfig {
            drop_ppm: 200_000,
            duplicate_ppm: 200_000,
            reorder_ppm: 200_000,
            corrupt_ppm: 200_000,
            seed: 42,
            delay_ns: 0,
        };
        let (a, sa) = run(c, 200);
        let (b, sb) = run(c, 200);
        assert_eq!(a, b);
        assert_eq!(sa, sb);
        assert_eq!(sa.frames_sent as usize, a.len());
        assert_eq!(a.len() as u64, 200 - sa.injected_drops + sa.injected_duplicates);
        for s in [sa.injected_drops, sa.injected_duplicates, sa.injected_reorders, sa.injected_corruptions] {
            assert!((20..=60).contains(&s), "{sa:?}");
        }
        let corrupted = a.iter().filter(|f| f[1..] != [0, 0, 0]).count();
        assert!(corrupted > 0);
        let (c2, _) = run(FaultConfig { seed: 43, ..c }, 200);
        assert_ne!(a, c2);
    }

    #[test]
    fn reorder_sends_after_next() {
        let c = FaultConfig { reorder_ppm: PPM, ..FaultConfig::NONE };
        let (tape, stats) = run(c, 5);
        // 0 held, 1 sent then 0; 2 held, 3 sent then 2; 4 held, released by the timer.
        let order: Vec<u8> = tape.iter().map(|f| f[0]).collect();
        assert_eq!(order, [1, 0, 3, 2, 4]);
        assert_eq!(stats.injected_reorders, 3);
        let (tape, _) = run(FaultConfig::NONE, 3);
        assert_eq!(tape.iter().map(|f| f[0]).collect::<Vec<_>>(), [0, 1, 2]);
    }

    #[test]
    fn delay_line_holds_every_frame_for_the_delay_in_order() {
        let delay = Duration::from_micros(50);
        let c = FaultConfig { delay_ns: delay.as_nanos() as u64, ..FaultConfig::NONE };
        let mut inj = FaultInjector::new(c);
        let (mut tape, mut stats) = (Tape::default(), LinkStats::default());
        let t0 = Instant::now();
        let step = Duration::from_micros(10);
        for i in 0..4u8 {
            inj.transmit(&mut tape, 1, &mut [i], t0 + step * i as u32, &mut stats).unwrap();
        }
        // Nothing is on the wire's far end yet; the next due time is the first frame's.
        assert!(tape.0.is_empty() && inj.holding() && !inj.is_passthrough());
        assert_eq!(inj.deadline(), Some(t0 + delay));
        inj.release_due(&mut tape, t0 + delay - Duration::from_nanos(1), &mut stats).unwrap();
        assert!(tape.0.is_empty());
        // Due times pass one by one: frames leave in the order they were sent.
        inj.release_due(&mut tape, t0 + delay + step, &mut stats).unwrap();
        assert_eq!(tape.0, [vec![0], vec![1]]);
        assert_eq!(inj.deadline(), Some(t0 + delay + step * 2));
        assert_eq!(stats.frames_sent, 2);
        inj.flush(&mut tape, &mut stats).unwrap();
        assert_eq!(tape.0, [vec![0], vec![1], vec![2], vec![3]]);
        assert!(!inj.holding() && inj.deadline().is_none() && !inj.is_passthrough());
        assert_eq!(stats.frames_sent, 4);
    }

    #[test]
    fn delay_keeps_fault_decisions_and_reorders_on_the_line() {
        let faults = FaultConfig { reorder_ppm: PPM, drop_ppm: 300_000, seed: 9, ..FaultConfig::NONE };
        let (plain, plain_stats) = run(faults, 40);
        let delayed = FaultConfig { delay_ns: 1_000, ..faults };
        let mut inj = FaultInjector::new(delayed);
        let (mut tape, mut stats) = (Tape::default(), LinkStats::default());
        let now = Instant::now();
        for i in 0..40u8 {
            inj.transmit(&mut tape, 1, &mut [i, 0, 0, 0], now, &mut stats).unwrap();
        }
        assert!(tape.0.is_empty());
        let late = now + REORDER_HOLD_MAX + Duration::from_nanos(1_000);
        inj.release_due(&mut tape, late, &mut stats).unwrap();
        inj.release_due(&mut tape, late + Duration::from_nanos(1_000), &mut stats).unwrap();
        assert!(!inj.holding());
        // The same frames, faults and order as without the delay: the delay only shifts
        // when they arrive.
        assert_eq!(tape.0, plain);
        assert_eq!(stats, plain_stats);
    }

    #[test]
    fn a_full_delay_line_drops_and_counts() {
        let c = FaultConfig { delay_ns: 1_000_000, ..FaultConfig::NONE };
        let mut inj = FaultInjector::new(c);
        let (mut tape, mut stats) = (Tape::default(), LinkStats::default());
        let now = Instant::now();
        for i in 0..DELAY_LINE_FRAMES + 5 {
            inj.transmit(&mut tape, 1, &mut (i as u32).to_le_bytes(), now, &mut stats).unwrap();
        }
        // The in-place path drops past the limit too.
        assert!(inj.delay_with(1, 4, now, &mut stats, &mut |b| b.fill(0xEE)));
        assert_eq!(stats.delay_line_drops, 6);
        inj.flush(&mut tape, &mut stats).unwrap();
        assert_eq!(tape.0.len(), DELAY_LINE_FRAMES);
        assert!(tape.0.iter().enumerate().all(|(i, f)| f[..] == (i as u32).to_le_bytes()));
        assert_eq!(stats.frames_sent, DELAY_LINE_FRAMES as u64);
    }
}
