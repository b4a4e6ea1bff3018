// SPDX-License-Identifier: GPL-2.0-only
//! The store's own cost per request, for instruction counts: node 0 of a quiet simulated
//! cluster (`sim`, three nodes) runs a [`gms::store::Store`] with the kernel disk's shape
//! (one copy, 49,152 pages (the simulator's 8 KiB): a 48 MiB disk read as a 192 MiB one), writes
//! `WRITES` pages once, then reads `READS` random written pages one at a time, each pump
//! calling what the kernel's adapter calls per batch (`handle_timeout`, `issue`,
//! `complete`, `poll_done`).
//!
//! `valgrind --tool=callgrind target/release/examples/store_cost 2000 N`, N = 1,000 and
//! 3,000: the difference of the store's inclusive counts (`callgrind_annotate
//! --inclusive=yes`, functions under `gms::store`) over 2,000 is its instructions per
//! read, the simulator's own work excluded. A third argument writes the pages again that
//! many times (`store_cost 2000 0 0` against `store_cost 4000 0 0`: per first write;
//! `store_cost 2000 0 1` against `store_cost 2000 0 0`: per write again).

use gms::prelude::*;
use gms::store::drive::{Frames, FramesIn};
use gms::store::{Finished, Phase, StoreConfig};
use netrpc::prelude::ReplyTo;
use netrpc::storage::Heap;
use sim::gms::*;
use std::cell::RefCell;
use std::collections::HashMap;
use std::rc::Rc;

const ME: u16 = 0;
const PAGES: u64 = 49_152;
type Store = gms::store::Store<u32, Frame, Heap, 8, 36, OPS>;

/// Frames named by what they carry, meta pages' bytes kept by name.
struct SimFrames {
    w: Rc<RefCell<World>>,
    next_token: u64,
    bytes: HashMap<(PageId, u64), Vec<u8>>,
}

impl SimFrames {
    fn armed(&mut self) -> ReplyTo<Frame> {
        let f = self.w.borrow_mut().alloc(ME, None);
        self.next_token += 1;
        self.w.borrow_mut().ipt[ME as usize].insert(self.next_token, f);
        ReplyTo::Solicited { token: self.next_token, frame: f }
    }
}

impl FramesIn<u32, Frame, TestHost> for SimFrames {
    fn frames<'a>(&'a mut self, _host: &'a mut TestHost) -> impl Frames<u32, Frame> + 'a {
        self
    }
}

impl Frames<u32, Frame> for SimFrames {
    const PAGE_BYTES: u32 = PAGE_LEN;
    fn lend(&mut self, _io: &u32, page: PageId, version: Version) -> Option<Frame> {
        Some(self.w.borrow_mut().alloc(ME, Some((page, version.0))))
    }
    fn arm(&mut self, _io: &u32) -> Option<ReplyTo<Frame>> {
        Some(self.armed())
    }
    fn scratch(&mut self) -> Option<ReplyTo<Frame>> {
        Some(self.armed())
    }
    fn give_back(&mut self, frame: Frame) {
        let mut w = self.w.borrow_mut();
        if w.frames.get(&frame).is_some_and(|i| i.state == FState::Live && i.node == ME) {
            w.free(ME, frame);
        }
    }
    fn fill(&mut self, page: PageId, version: Version, write: impl FnOnce(&mut [u8])) -> Option<Frame> {
        let mut b = vec![0u8; Self::PAGE_BYTES as usize];
        write(&mut b);
        self.bytes.insert((page, version.0), b);
        Some(self.w.borrow_mut().alloc(ME, Some((page, version.0))))
    }
    fn bytes(&mut self, frame: &Frame, read: impl FnOnce(&[u8])) {
        let c = self.w.borrow().frames.get(frame).and_then(|i| i.contents);
        let b = c.and_then(|c| self.bytes.get(&c).cloned()).unwrap_or_default();
        read(&b);
    }
}

struct Run {
    sim: Sim,
    store: Store,
    frames: SimFrames,
    lru: gms::epochs::Lru,
    open: usize,
}

impl Run {
    /// The kernel adapter's calls for one batch (its ticker's, `poll_timeout` and
    /// `meta_lost`, are not per batch).
    fn pump(&mut self) {
        let now = self.sim.clock.now();
        self.store.handle_timeout(now);
        let i = ME as usize;
        self.store.issue(now, &mut self.sim.nodes[i], &mut self.sim.rpcs[i], &mut self.lru, &mut self.frames);
        self.sim.settle_node(ME);
        for c in std::mem::take(&mut self.sim.client_done) {
            self.store.complete(now, &c, &mut self.frames);
        }
        while let Some(f) = self.store.poll_done() {
            match f {
                Finished::Request { outcome, .. } => {
                    assert!(!matches!(outcome, gms::store::Outcome::Failed(_)), "{outcome:?}");
                    self.open -= 1;
                }
                Finished::Scratch(frame) | Finished::Copy { frame, .. } => self.frames.give_back(frame),
            }
        }
    }

    /// Pump and move the network until nothing is open.
    fn settle(&mut self) {
        for _ in 0..100_000 {
            if self.open == 0 && self.store.phase() == Phase::Ready {
                return;
            }
            self.step();
        }
        panic!("requests never ended: {} open, t={} stats {:?}", self.open, self.sim.clock.now(), self.store.stats);
    }

    /// One message delivered, or time moved on to the next deadline.
    fn step(&mut self) {
        self.pump();
        if self.sim.net.is_empty() {
            // Straight to the store's next deadline (a load's steps wait for it).
            let now = self.sim.clock.now();
            let due = self.store.poll_timeout().filter(|&t| t > now).map_or(1, |t| t - now);
            self.sim.tick(due);
        } else {
            self.sim.deliver(false);
        }
    }
}

fn main() {
    let mut args = std::env::args().skip(1).map(|a| a.parse::<u64>().expect("a count"));
    let (writes, reads) = (args.next().unwrap_or(2000), args.next().unwrap_or(1000));
    // Times the pages are written again after their first write.
    let again = args.next().unwrap_or(0);
    let knobs = Knobs { op_timeout: 1 << 40, budget: 1 << 16, pages: PAGES, ..Knobs::quiet(3, 1 << 16) };
    let mut sim = Sim::new(1, knobs);
    sim.client = Some(ME);
    // Nodes whose directories and budgets hold the volume (the simulator's are sized for
    // its checkers' few pages).
    let cfg = gms_config(&knobs);
    let ids: Vec<u16> = (0..3).collect();
    for id in 0..3u16 {
        let host = TestHost { id, w: sim.w.clone() };
        let i = usize::from(id);
        sim.nodes[i] = Node::with_capacity(id, cfg, host, 1 << 16, 1 << 17).expect("a node");
        sim.nodes[i].set_members(sim.clock.now(), &mut sim.rpcs[i], 1, &ids).expect("members");
    }
    let frames = SimFrames { w: sim.w.clone(), next_token: 1 << 40, bytes: HashMap::new() };
    let cfg = StoreConfig { replicas: 1, page_bytes: PAGE_LEN, ..StoreConfig::default() };
    let store = Store::new(cfg, 0x5707e, ME, PAGES, &[1, 2]).expect("a store");
    let lru = gms::epochs::Lru::new(ME, gms::epochs::LruConfig::default());
    let mut run = Run { sim, store, frames, lru, open: 0 };
    run.settle();
    let mut io = 0u32;
    for p in (0..=again).flat_map(|_| 0..writes) {
        io += 1;
        // Writes go 16 at a time (the table keeps slots for the store's own pages).
        // The volume's own first map writes may fill the table for a while.
        while let Err((_, e)) = run.store.write(run.sim.clock.now(), p, io) {
            assert_eq!(e, gms::store::StoreError::Busy, "write {io} of page {p}");
            run.step();
        }
        run.open += 1;
        if run.open >= 16 {
            run.settle();
        }
    }
    run.settle();
    let mut x = 0x9e37_79b9_7f4a_7c15u64;
    for _ in 0..reads {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        io += 1;
        run.store.read(run.sim.clock.now(), x % writes, io).expect("the read is taken");
        run.open += 1;
        run.settle();
    }
    println!("{writes} writes, {reads} reads at t={}: {:?}", run.sim.clock.now(), run.store.stats);
}
