// SPDX-License-Identifier: GPL-2.0-only
//! The striper driven by a simulated set of servers: data round trips, per-server depth,
//! read-ahead, a slow or dead server, refusals, and a property test over random layouts,
//! requests, completion orders and transient faults.

extern crate std;

use super::*;
use proptest::prelude::*;
use std::collections::{HashMap, HashSet};
use std::vec;
use std::vec::Vec;

type St = Striper<u32, 8, 8, 64, 32>;

/// Servers as byte arrays, the drivers' buffers, and the calls in flight.
struct Sim {
    layout: Layout,
    servers: Vec<Vec<u8>>,
    ahead: Vec<Vec<u8>>,
    bufs: HashMap<u32, Vec<u8>>,
    flying: Vec<Send<u32>>,
    /// What each read in flight found on its server when it arrived there.
    found: HashMap<ChunkId, Vec<u8>>,
    /// Per request: the byte ranges that arrived (completed sends and copies).
    landed: HashMap<u32, Vec<(u32, u32)>>,
    done: Vec<Done<u32>>,
    abandoned: Vec<ChunkId>,
}

impl Sim {
    fn new(st: &St, server_bytes: usize) -> Sim {
        let n = usize::from(st.layout().servers());
        let servers = (0..n).map(|s| (0..server_bytes).map(|i| (i * 7 + s * 13) as u8).collect()).collect();
        let ahead = vec![vec![0u8; st.piece_bytes() as usize]; 32];
        Sim {
            layout: *st.layout(),
            servers,
            ahead,
            bufs: HashMap::new(),
            flying: Vec::new(),
            found: HashMap::new(),
            landed: HashMap::new(),
            done: Vec::new(),
            abandoned: Vec::new(),
        }
    }

    /// The volume as the servers hold it, by the layout's definition (not `locate`).
    fn volume_byte(&self, v: u64) -> u8 {
        let g = u64::from(self.layout.grain());
        let n = u64::from(self.layout.servers());
        let unit = v / g;
        self.servers[(unit % n) as usize][((unit / n) * g + v % g) as usize]
    }

    /// Run the striper's commands until it has none.
    fn drive(&mut self, st: &mut St, now: u64) {
        while let Some(c) = st.poll_command(now) {
            match c {
                Command::Send(s) => {
                    assert_eq!(self.layout.locate(s.volume_offset), (s.server, s.server_offset));
                    let (srv, at) = (usize::from(s.server), s.server_offset as usize);
                    self.found.insert(s.chunk, self.servers[srv][at..at + s.len as usize].to_vec());
                    self.flying.push(s);
                }
                Command::Abandon(id) => {
                    let i = self.flying.iter().position(|s| s.chunk == id).expect("abandons a call in flight");
                    self.flying.remove(i);
                    self.found.remove(&id);
                    self.abandoned.push(id);
                }
                Command::Copy { slot, slot_at, io, at, len } => {
                    let (a, b) = (slot_at as usize, at as usize);
                    let src = self.ahead[usize::from(slot)][a..a + len as usize].to_vec();
                    self.bufs.get_mut(&io).unwrap()[b..b + len as usize].copy_from_slice(&src);
                    self.landed.entry(io).or_default().push((at, len));
                }
            }
        }
        while let Some(d) = st.poll_done() {
            self.done.push(d);
        }
    }

    /// Answer call `k` in flight with `result` (moving its data when it succeeded).
    fn answer(&mut self, st: &mut St, now: u64, k: usize, result: Result<(), Fault>) {
        let s = self.flying.remove(k);
        let found = self.found.remove(&s.chunk).unwrap();
        if result.is_ok() {
            let (srv, at, len) = (usize::from(s.server), s.server_offset as usize, s.len as usize);
            match (s.dir, s.target) {
                (Dir::Read, Target::Request { io, at: b }) => {
                    let b = b as usize;
                    self.bufs.get_mut(&io).unwrap()[b..b + len].copy_from_slice(&found);
                }
                (Dir::Read, Target::Ahead { slot }) => {
                    self.ahead[usize::from(slot)][..len].copy_from_slice(&found);
                }
                (Dir::Write, Target::Request { io, at: b }) => {
                    let b = b as usize;
                    let src = self.bufs[&io][b..b + len].to_vec();
                    self.servers[srv][at..at + len].copy_from_slice(&src);
                }
                (Dir::Write, Target::Ahead { .. }) => panic!("a write to an ahead slot"),
            }
            if let Target::Request { io, at: b } = s.target {
                self.landed.entry(io).or_default().push((b, s.len));
            }
        }
        assert!(st.handle_complete(now, s.chunk, result), "a current send");
    }

    fn answer_all(&mut self, st: &mut St, now: u64) {
        self.drive(st, now);
        while !self.flying.is_empty() {
            self.answer(st, now, 0, Ok(()));
            self.drive(st, now);
        }
    }
}

fn cfg(grain_kib: u32, ahead_stripes: u16, depth: u16) -> Config {
    Config { grain_bytes: grain_kib << 10, readahead_stripes: ahead_stripes, depth, ..Config::DEFAULT }
}

#[test]
fn the_layout_is_round_robin_at_the_grain() {
    let l = Layout::new(3, 32 << 10, 4096, (1 << 20) + 5000).unwrap();
    assert_eq!(l.volume_bytes(), 3 << 20, "three servers of 32 whole units");
    assert_eq!(l.locate(0), (0, 0));
    assert_eq!(l.locate(32 << 10), (1, 0));
    assert_eq!(l.locate((96 << 10) + 4096), (0, (32 << 10) + 4096));
    for v in (0..l.volume_bytes()).step_by(4096) {
        let (s, at) = l.locate(v);
        assert_eq!(l.volume_offset(s, at), v);
    }
    assert_eq!(Layout::new(0, 4096, 4096, 1 << 20), Err(ConfigError::Servers));
    assert_eq!(Layout::new(2, 5000, 4096, 1 << 20), Err(ConfigError::Sizes));
    assert_eq!(Layout::new(2, 32 << 10, 4096, 4096), Err(ConfigError::TooSmall));
}

#[test]
fn bad_configurations_and_requests_are_refused() {
    assert_eq!(St::new(Config::DEFAULT, 9, 1 << 20).err(), Some(ConfigError::Servers));
    assert_eq!(St::new(cfg(32, 2, 9), 8, 1 << 20).err(), Some(ConfigError::Depth), "9 x 8 > 64 chunk slots");
    assert_eq!(St::new(cfg(32, 5, 4), 8, 1 << 20).err(), Some(ConfigError::ReadAhead), "40 pieces > 32 slots");
    assert_eq!(St::new(cfg(96, 1, 4), 1, 1 << 20).err(), Some(ConfigError::ReadAhead), "96 KiB is not 64 KiB pieces");
    assert_eq!(St::new(Config { tries: 0, ..Config::DEFAULT }, 2, 1 << 20).err(), Some(ConfigError::Depth));
    let mut st = St::new(Config::DEFAULT, 2, 1 << 20).unwrap();
    assert_eq!(st.read(1, 0, 0), Err(StripeError::BadLength));
    assert_eq!(st.read(1, 0, (1 << 20) + 4096), Err(StripeError::BadLength));
    assert_eq!(st.read(1, 512, 4096), Err(StripeError::Misaligned));
    assert_eq!(st.read(1, (2 << 20) - 4096, 8192), Err(StripeError::PastEnd));
    assert_eq!(st.write(1, u64::MAX - 4095, 4096), Err(StripeError::PastEnd));
    for io in 0..8 {
        st.read(io, 0, 4096).unwrap();
    }
    assert_eq!(st.read(9, 0, 4096), Err(StripeError::Busy));
    assert!(st.poll_command(0).is_some(), "the accepted ones go on");
}

#[test]
fn every_server_is_busy_at_once_within_its_depth() {
    let mut st = St::new(cfg(32, 0, 2), 4, 4 << 20).unwrap();
    st.read(1, 0, 1 << 20).unwrap();
    let mut servers = Vec::new();
    while let Some(Command::Send(s)) = st.poll_command(0) {
        assert_eq!(s.len, 32 << 10);
        servers.push(s.server);
    }
    assert_eq!(servers, [0, 1, 2, 3, 0, 1, 2, 3], "round-robin, two per server");
}

#[test]
fn a_slow_server_holds_up_only_its_own_pieces() {
    let mut st = St::new(cfg(32, 0, 2), 4, 4 << 20).unwrap();
    let mut sim = Sim::new(&st, 4 << 20);
    sim.bufs.insert(1, vec![0; 1 << 20]);
    st.read(1, 0, 1 << 20).unwrap();
    sim.drive(&mut st, 0);
    // Answer everything but server 1: the others finish all their pieces.
    while let Some(k) = sim.flying.iter().position(|s| s.server != 1) {
        sim.answer(&mut st, 0, k, Ok(()));
        sim.drive(&mut st, 0);
    }
    assert!(sim.flying.iter().all(|s| s.server == 1) && sim.flying.len() == 2);
    assert!(sim.done.is_empty());
    sim.answer_all(&mut st, 0);
    assert_eq!(sim.done, [Done { io: 1, result: Ok(()) }]);
    assert!((0..1 << 20).all(|v| sim.bufs[&1][v as usize] == sim.volume_byte(v)));
}

#[test]
fn writes_land_on_their_servers_and_read_back() {
    let mut st = St::new(cfg(32, 2, 8), 3, 1 << 20).unwrap();
    let mut sim = Sim::new(&st, 1 << 20);
    let data: Vec<u8> = (0..(1 << 20) - 8192).map(|i| (i % 251) as u8).collect();
    sim.bufs.insert(1, data.clone());
    st.write(1, 12288, data.len() as u32).unwrap();
    sim.answer_all(&mut st, 0);
    assert_eq!(sim.done.pop(), Some(Done { io: 1, result: Ok(()) }));
    for (i, &b) in data.iter().enumerate() {
        assert_eq!(sim.volume_byte(12288 + i as u64), b);
    }
    sim.bufs.insert(2, vec![0; data.len()]);
    st.read(2, 12288, data.len() as u32).unwrap();
    sim.answer_all(&mut st, 0);
    assert_eq!(sim.done.pop(), Some(Done { io: 2, result: Ok(()) }));
    assert!(sim.bufs[&2] == data);
}

#[test]
fn a_sequential_stream_is_read_ahead_and_a_write_invalidates_it() {
    let mut st = St::new(cfg(32, 2, 8), 4, 4 << 20).unwrap();
    let mut sim = Sim::new(&st, 4 << 20);
    for (io, at) in [(1u32, 0u64), (2, 256 << 10)] {
        sim.bufs.insert(io, vec![0; 256 << 10]);
        st.read(io, at, 256 << 10).unwrap();
        sim.answer_all(&mut st, 0);
    }
    assert_eq!(st.stats().ahead_fetches, 8, "two stripes of four units past 512 KiB");
    // A write over the second ahead unit: its slot no longer serves.
    sim.bufs.insert(3, vec![0xEE; 4096]);
    st.write(3, (512 + 32) << 10, 4096).unwrap();
    sim.answer_all(&mut st, 0);
    sim.bufs.insert(4, vec![0; 256 << 10]);
    st.read(4, 512 << 10, 256 << 10).unwrap();
    sim.answer_all(&mut st, 0);
    assert_eq!(st.stats().ahead_bytes_used, 7 * (32 << 10), "seven of the eight units came from slots");
    assert_eq!(sim.bufs[&4][32 << 10], 0xEE, "the written block reads back new");
    assert!((0..256 << 10).all(|i| sim.bufs[&4][i] == sim.volume_byte((512 << 10) + i as u64)));
    assert!(sim.done.iter().all(|d| d.result.is_ok()) && sim.done.len() == 4);
}

#[test]
fn a_dead_server_fails_the_request_after_bounded_tries_with_its_calls_cancelled() {
    let c = Config { chunk_timeout_ns: 1000, retry_delay_ns: 10, tries: 3, ..cfg(32, 0, 4) };
    let mut st = St::new(c, 3, 1 << 20).unwrap();
    let mut sim = Sim::new(&st, 1 << 20);
    sim.bufs.insert(1, vec![0; 1 << 20]);
    st.read(1, 0, 1 << 20).unwrap();
    let mut now = 0;
    sim.drive(&mut st, now);
    let mut stale = Vec::new();
    for _ in 0..100 {
        // Servers 0 and 2 answer; server 2's calls vanish.
        while let Some(k) = sim.flying.iter().position(|s| s.server != 2) {
            sim.answer(&mut st, now, k, Ok(()));
            sim.drive(&mut st, now);
        }
        stale.extend(sim.flying.iter().map(|s| s.chunk));
        let Some(t) = st.poll_timeout() else { break };
        now = t;
        st.handle_timeout(now);
        sim.drive(&mut st, now);
    }
    let e = StripeError::GaveUp { server: 2, fault: Fault::Timeout };
    assert_eq!(sim.done, [Done { io: 1, result: Err(e) }]);
    assert!(sim.flying.is_empty() && st.is_idle(), "nothing left in flight");
    assert!(stale.iter().all(|id| sim.abandoned.contains(id)), "every call given up on was cancelled");
    assert!(stale.iter().all(|&id| !st.handle_complete(now, id, Ok(()))), "late answers change nothing");
    assert_eq!(std::format!("{}", e), "stripe server 2 did not answer (gave up after retries)");
}

#[test]
fn a_refusal_fails_the_request_at_once() {
    let mut st = St::new(cfg(32, 0, 4), 2, 1 << 20).unwrap();
    let mut sim = Sim::new(&st, 1 << 20);
    sim.bufs.insert(1, vec![0; 256 << 10]);
    st.read(1, 0, 256 << 10).unwrap();
    sim.drive(&mut st, 0);
    let k = sim.flying.iter().position(|s| s.server == 1).unwrap();
    sim.answer(&mut st, 0, k, Err(Fault::Refused(67)));
    sim.drive(&mut st, 0);
    assert!(sim.flying.is_empty(), "the request's other calls were cancelled");
    assert_eq!(sim.done, [Done { io: 1, result: Err(StripeError::Refused { server: 1, code: 67 }) }]);
    assert_eq!(st.stats().failed, 1);
}

#[test]
fn requests_in_flight_together_finish_on_their_own() {
    let mut st = St::new(cfg(32, 2, 4), 3, 1 << 20).unwrap();
    let mut sim = Sim::new(&st, 1 << 20);
    let data: Vec<u8> = (0..128 << 10).map(|i| (i % 241) as u8).collect();
    sim.bufs.insert(1, vec![0; 256 << 10]);
    sim.bufs.insert(2, data.clone());
    sim.bufs.insert(3, vec![0; 128 << 10]);
    st.read(1, 0, 256 << 10).unwrap();
    st.write(2, 512 << 10, 128 << 10).unwrap();
    st.read(3, 1 << 20, 128 << 10).unwrap();
    sim.drive(&mut st, 0);
    let mut rng = Rng(0x9E37_79B9);
    while !sim.flying.is_empty() {
        let k = rng.below(sim.flying.len());
        sim.answer(&mut st, 0, k, Ok(()));
        sim.drive(&mut st, 0);
    }
    let mut done: Vec<u32> = sim.done.iter().map(|d| d.io).collect();
    done.sort_unstable();
    assert_eq!(done, [1, 2, 3]);
    assert!(sim.done.iter().all(|d| d.result.is_ok()));
    assert!((0..256 << 10).all(|v| sim.bufs[&1][v as usize] == sim.volume_byte(v)));
    assert!((0..128 << 10).all(|i| sim.bufs[&3][i as usize] == sim.volume_byte((1 << 20) + i)));
    assert!(data.iter().enumerate().all(|(i, &b)| sim.volume_byte((512 << 10) + i as u64) == b));
    assert!(st.is_idle());
}

/// A tiny deterministic generator for completion orders.
struct Rng(u64);
impl Rng {
    fn below(&mut self, n: usize) -> usize {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        (self.0 % n as u64) as usize
    }
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(128))]

    /// Random layouts and requests (writes, reads, reads that continue the last one),
    /// answered in random orders with transient faults, fetches ahead left in flight
    /// across requests: every request's landed ranges tile it exactly once, reads return
    /// what the servers hold, writes change exactly their range.
    #[test]
    fn splits_tile_requests_and_reassemble_in_any_order(
        servers in 1u16..=8,
        grain_blocks in 1u32..=32,
        ahead in prop_oneof![Just(0u16), 1u16..=2, 1u16..=2],
        depth in 1u16..=8,
        ops in proptest::collection::vec((0u8..5, 0u64..1024, 1u32..=128), 1..10),
        seed in 1u64..u64::MAX,
    ) {
        let grain = grain_blocks * 4096;
        let piece = grain.min(64 << 10);
        let pieces = u64::from(ahead) * u64::from(servers) * u64::from(grain / piece);
        let c = Config { grain_bytes: grain, readahead_stripes: ahead, depth, ..Config::DEFAULT };
        let st = St::new(c, servers, 512 << 10);
        if pieces > 32 || (ahead > 0 && grain % piece != 0) {
            prop_assert_eq!(st.err(), Some(ConfigError::ReadAhead));
            return Ok(());
        }
        let mut st = st.unwrap();
        let mut sim = Sim::new(&st, 512 << 10);
        let mut rng = Rng(seed);
        let size = st.layout().volume_bytes();
        let mut faulted = HashSet::new();
        let mut model: Vec<u8> = (0..size).map(|v| sim.volume_byte(v)).collect();
        let mut end = 0;
        for (io, &(kind, block, blocks)) in ops.iter().enumerate() {
            let (io, write) = (io as u32, kind == 0);
            let start = if kind >= 2 && end < size { end } else { block * 4096 };
            let (offset, len) = (start.min(size - 4096), blocks * 4096);
            let len = len.min((size - offset) as u32);
            let data: Vec<u8> = (0..len).map(|i| (i as u64 ^ seed ^ u64::from(io)) as u8).collect();
            sim.bufs.insert(io, if write { data.clone() } else { vec![0; len as usize] });
            if write { st.write(io, offset, len).unwrap() } else { st.read(io, offset, len).unwrap() }
            end = offset + u64::from(len);
            sim.drive(&mut st, 0);
            while sim.done.is_empty() {
                let k = rng.below(sim.flying.len());
                let key = (sim.flying[k].volume_offset, sim.flying[k].dir == Dir::Write, io);
                let fault = rng.below(4) == 0 && faulted.insert(key);
                sim.answer(&mut st, 0, k, if fault { Err(Fault::Busy) } else { Ok(()) });
                sim.drive(&mut st, 2_000_000 * (1 + rng.below(3) as u64));
            }
            prop_assert_eq!(sim.done.pop(), Some(Done { io, result: Ok(()) }));
            let mut landed = sim.landed.remove(&io).unwrap_or_default();
            landed.sort_unstable();
            let mut at = 0;
            for (a, l) in landed {
                prop_assert_eq!(a, at, "no gap, no overlap");
                at += l;
            }
            prop_assert_eq!(at, len, "the whole request, once");
            let range = offset as usize..(offset + u64::from(len)) as usize;
            if write {
                model[range].copy_from_slice(&data);
            } else {
                prop_assert!(sim.bufs[&io][..] == model[range], "read back what the servers hold");
            }
            prop_assert!((0..size).all(|v| sim.volume_byte(v) == model[v as usize]), "writes touch only their range");
        }
        sim.answer_all(&mut st, 0);
        prop_assert!(st.is_idle() && sim.done.is_empty());
    }
}
