// SPDX-License-Identifier: GPL-2.0-only
//! The client core (`gms::store`) on user-space ports over real virtual NICs: a volume is
//! written with two copies of each page and read back byte for byte (reads of nearby pages
//! one member holds go together, as `GETPAGES` into the requests' frames); a reload of the
//! volume finds what was written (and reads a page never written as zeros); a second
//! load of the same identity on another node while the first is live is refused, naming
//! the owner.

use gms::prelude::*;
use gms::store::{Outcome, Phase, StoreConfig, StoreError};
use std::time::{Duration, Instant};
use trapeze_node::gms::{page_pattern, Cluster, StoreIo, UserStore, GROUP_PAGES};
use trapeze_node::rpc::FRAME_BYTES;

const IDENTITY: u64 = 0x7e57_0001;
const PAGES: u64 = 48;

struct Req {
    key: u64,
    data: Vec<u8>,
}

impl StoreIo for Req {
    fn key(&self) -> u64 {
        self.key
    }
    fn data(&self) -> &[u8] {
        &self.data
    }
}

/// A store on node `at` of the cluster.
struct Client {
    at: usize,
    store: UserStore<Req>,
}

impl Client {
    fn load(cl: &Cluster, at: usize) -> Client {
        let cfg =
            StoreConfig { replicas: 2, page_bytes: FRAME_BYTES, group_pages: GROUP_PAGES, ..StoreConfig::DEFAULT };
        let others: Vec<u16> = (0..cl.ports.len() as u16).filter(|&n| n != at as u16).collect();
        let store = UserStore::new(cfg, IDENTITY, at as u16, PAGES, &others).expect("a store");
        Client { at, store }
    }

    /// One pass; the requests that finished (a read's bytes, else empty).
    fn step(&mut self, cl: &mut Cluster, out: &mut Vec<(u64, Outcome, Vec<u8>)>) {
        let mut done = Vec::new();
        cl.store_step(self.at, &mut self.store, &mut done);
        out.extend(done.into_iter().map(|(io, o, b)| (io.key, o, b.unwrap_or_default())));
    }

    fn until_loaded(&mut self, cl: &mut Cluster) -> Phase {
        let t0 = Instant::now();
        let mut out = Vec::new();
        while self.store.phase().loading() {
            self.step(cl, &mut out);
            assert!(t0.elapsed() < Duration::from_secs(60), "still loading: {:?}", self.store.phase());
        }
        self.store.phase()
    }
}

fn content(page: u64) -> Vec<u8> {
    page_pattern(PageId::new(IDENTITY, page), Version(3))
}

/// Submit every request of `pages` (writes when `write`), as slots free up; the outcomes
/// by page.
fn all(c: &mut Client, cl: &mut Cluster, pages: &[u64], write: bool) -> Vec<(u64, Outcome, Vec<u8>)> {
    let mut todo: Vec<u64> = pages.iter().rev().copied().collect();
    let mut out = Vec::new();
    let t0 = Instant::now();
    while out.len() < pages.len() {
        while let Some(&p) = todo.last() {
            let now = cl.ports[c.at].now();
            let req = Req { key: p, data: if write { content(p) } else { Vec::new() } };
            let r = if write { c.store.write(now, p, req) } else { c.store.read(now, p, req) };
            match r {
                Ok(_) => {
                    todo.pop();
                }
                Err((_, StoreError::Busy)) => break,
                Err((_, e)) => panic!("page {p}: refused {e:?}"),
            }
        }
        c.step(cl, &mut out);
        assert!(t0.elapsed() < Duration::from_secs(120), "{} of {} finished", out.len(), pages.len());
    }
    out
}

#[test]
fn a_volume_on_user_space_ports_writes_reads_and_reloads() {
    let mut cl = Cluster::new(3, 512, GmsConfig::default()).expect("cluster");
    let mut c = Client::load(&cl, 0);
    assert_eq!(c.until_loaded(&mut cl), Phase::Ready);
    let written: Vec<u64> = (0..PAGES).filter(|p| p % 4 != 3).collect();
    for (p, o, _) in all(&mut c, &mut cl, &written, true) {
        assert_eq!(o, Outcome::Written { copies: 2 }, "page {p}");
    }
    let every: Vec<u64> = (0..PAGES).collect();
    let check = |out: Vec<(u64, Outcome, Vec<u8>)>| {
        for (p, o, bytes) in out {
            if p % 4 == 3 {
                assert_eq!(o, Outcome::Zero, "page {p} was never written");
            } else {
                assert!(matches!(o, Outcome::Read { .. }), "page {p}: {o:?}");
                assert!(bytes == content(p), "page {p}: wrong bytes");
            }
        }
    };
    check(all(&mut c, &mut cl, &every, false));
    assert_eq!(c.store.stats.lost, 0);
    // Reads of nearby pages one member holds went together, into the requests' frames.
    let st = c.store.stats;
    assert!(st.group_gets > 0 && st.group_reads > st.group_gets, "no GETPAGES: {st:?}");
    eprintln!("GETPAGES: {} carrying {} reads, {} without a hit", st.group_gets, st.group_reads, st.group_misses);

    // Another node loading the same identity while node 0's load is live is refused.
    let mut other = Client::load(&cl, 1);
    assert_eq!(other.until_loaded(&mut cl), Phase::Refused(StoreError::IdentityInUse { owner: 0 }));
    let refused = other.store.read(cl.ports[1].now(), 0, Req { key: 0, data: Vec::new() });
    assert!(matches!(refused, Err((_, StoreError::IdentityInUse { owner: 0 }))));

    // The volume loaded again on node 0 (a restarted runtime): its floor map and
    // versions come from the cluster.
    let epoch = c.store.epoch();
    let mut again = Client::load(&cl, 0);
    assert_eq!(again.until_loaded(&mut cl), Phase::Ready);
    assert!(again.store.epoch() > epoch, "a reload writes above every earlier version");
    check(all(&mut again, &mut cl, &every, false));
    let frames = cl.ports[0].frame_audit();
    assert_eq!(cl.ports[0].landing_frames(), 0, "every landing frame was handed back");
    assert!(frames.balanced(), "{frames:?}");
}
