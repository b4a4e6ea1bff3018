// SPDX-License-Identifier: GPL-2.0-only
//! Tests of the GMS port: short pages, reads into a buffer, a client NIC on the servers' thread.

use super::*;

/// `len` bytes of a pattern that differs per `seed` (no zero byte, so padding shows).
fn bytes(len: usize, seed: u8) -> Vec<u8> {
    (0..len).map(|i| (i as u8).wrapping_mul(31).wrapping_add(seed) | 1).collect()
}

/// A page shorter than a frame reads back with exactly its stored bytes, through every
/// path (plain getpage from each node, a reader's fetch, then the local cache), even
/// when its frames last held a longer page.
#[test]
fn short_pages_read_back_with_their_length() {
    // GMS nodes are large const-generic tables: give the cluster a big stack.
    super::on_big_stack(short_pages).unwrap();
}

fn short_pages() {
    let mut c = Cluster::new(3, 64, GmsConfig::default()).expect("cluster");
    let page = PageId::new(5, 1);
    // A full page first, so frames are dirty past 4 KiB when the short one reuses them.
    let full = bytes(FRAME_BYTES as usize, 3);
    c.ports[0].put(page, Version(1), &full, Some(1)).expect("put");
    c.settle(0).expect("put finishes");
    match c.get_wait(2, page).expect("get") {
        Got::Hit { data, .. } => assert!(data == full, "full page: wrong bytes"),
        Got::Miss => panic!("full page missed"),
    }
    for (v, len) in [(2u64, 4096usize), (3, 100), (4, 1)] {
        let short = bytes(len, v as u8);
        c.ports[0].put(page, Version(v), &short, Some(1)).expect("put");
        c.settle(0).expect("put finishes");
        let last = c.ports[0].put_log.last();
        assert!(
            matches!(last, Some((_, vv, PutResult::Stored { target: 1 })) if *vv == Version(v)),
            "{len} B page stored: {last:?}"
        );
        for from in 0..3 {
            match c.get_wait(from, page).expect("get") {
                Got::Hit { version, data, .. } => {
                    assert_eq!(version, Version(v));
                    assert_eq!(data.len(), len, "node {from}: length");
                    assert!(data == short, "node {from}: wrong bytes");
                }
                Got::Miss => panic!("node {from}: {len} B page missed"),
            }
        }
        // Through the cache: the reader's fetch, then a cache hit.
        let mut sources = Vec::new();
        for _ in 0..2 {
            match c.read(2, page).expect("read") {
                Got::Hit { data, source, .. } => {
                    assert_eq!(data.len(), len, "read: length");
                    assert!(data == short, "read: wrong bytes");
                    sources.push(source);
                }
                Got::Miss => panic!("read of the {len} B page missed"),
            }
        }
        assert_eq!(sources[1], Source::Cache, "second read from the cache ({sources:?})");
        c.ports[2].cache_remove(&page);
    }
}

/// Reads into the reader's buffer give the same bytes as reads into a `Vec`, through
/// the fetch, read-ahead and cache paths; a short buffer gets the page's start and the
/// page's full length; a page never stored is a miss.
#[test]
fn read_into_matches_read() {
    super::on_big_stack(read_into_pages).unwrap();
}

fn read_into_pages() {
    let mut c = Cluster::new(3, 256, GmsConfig::default()).expect("cluster");
    let pages: Vec<Vec<u8>> = (0..64u64).map(|n| bytes(FRAME_BYTES as usize - n as usize * 7, n as u8)).collect();
    for (n, d) in pages.iter().enumerate() {
        c.ports[0].put(PageId::new(7, n as u64), Version(1), d, Some(1 + n as u16 % 2)).expect("put");
        c.settle(0).expect("put finishes");
    }
    c.ports[2].set_readahead(8);
    let mut buf = vec![0u8; FRAME_BYTES as usize];
    for (n, d) in pages.iter().enumerate() {
        buf.fill(0);
        match c.read_into(2, PageId::new(7, n as u64), &mut buf).expect("read") {
            ReadInto::Hit { version, len, .. } => {
                assert_eq!((version, len), (Version(1), d.len()), "page {n}");
                assert!(buf[..len] == d[..], "page {n}: wrong bytes");
                assert!(buf[len..].iter().all(|&b| b == 0), "page {n}: bytes past its end");
            }
            ReadInto::Miss => panic!("page {n} missed"),
        }
    }
    assert!(c.ports[2].stats.prefetches > 0, "a sequential scan reads ahead");
    c.settle(2).expect("prefetches finish");
    // From the cache: the same bytes as a read into a Vec; a short buffer gets the start.
    let page = PageId::new(7, 63);
    let mut short = [0u8; 100];
    match c.read_into(2, page, &mut short).expect("read") {
        ReadInto::Hit { len, source, .. } => {
            assert_eq!((len, source), (pages[63].len(), Source::Cache));
            assert!(short[..] == pages[63][..100]);
        }
        ReadInto::Miss => panic!("cached page missed"),
    }
    match c.read(2, page).expect("read") {
        Got::Hit { data, .. } => assert!(data == pages[63]),
        Got::Miss => panic!("cached page missed"),
    }
    assert_eq!(c.read_into(2, PageId::new(7, 1000), &mut buf).expect("read"), ReadInto::Miss);
    assert!(c.ports[2].frame_audit().balanced(), "{:?}", c.ports[2].frame_audit());
}

/// With the servers' thread running the client's NIC too, reads and puts still
/// complete with the right bytes, and the client drives its NIC again after rejoin.
#[test]
fn servers_thread_can_run_the_client_nic() {
    super::on_big_stack(client_nic_on_servers).unwrap();
}

fn client_nic_on_servers() {
    let mut c = Cluster::new(3, 64, GmsConfig::default()).expect("cluster");
    let s = c.spawn_servers_with(1, true).expect("servers");
    assert!(c.ports[0].cpu.is_none(), "the client's NIC moved to the servers' thread");
    let mut buf = vec![0u8; FRAME_BYTES as usize];
    for n in 0..16u64 {
        let d = bytes(FRAME_BYTES as usize, n as u8);
        c.ports[0].put(PageId::new(3, n), Version(1), &d, None).expect("put");
        c.settle(0).expect("put finishes");
        c.ports[0].cache_remove(&PageId::new(3, n));
        match c.read_into(0, PageId::new(3, n), &mut buf).expect("read") {
            ReadInto::Hit { len, .. } => assert!(len == d.len() && buf == d, "page {n}: wrong bytes"),
            ReadInto::Miss => panic!("page {n} missed"),
        }
    }
    c.rejoin(s).expect("rejoin");
    assert!(c.ports[0].cpu.is_some(), "the client's NIC is back");
    assert!(matches!(c.get_wait(0, PageId::new(3, 5)).expect("get"), Got::Hit { .. }));
}

/// A replicated write: the first put of each replica at the write's version, a put again
/// at a newer one; another replica's target is avoided; done when every replica is stored;
/// an answer to an older put of a replica changes nothing.
#[test]
fn a_replicated_write_keeps_its_replicas_apart() {
    let mut w = ReplicaWrite::new(2, Version(10));
    assert_eq!(w.version_for(0, || Version(11)), Version(10));
    w.issued(0, 1, Version(10));
    assert_eq!(w.avoid(1, &[1, 2, 3]), vec![1], "replica 1 avoids replica 0's target");
    assert_eq!(w.version_for(1, || Version(11)), Version(10));
    w.issued(1, 2, Version(10));
    assert!(w.done(0, Version(10), &PutResult::Stored { target: 1 }));
    assert!(!w.complete());
    assert!(w.done(1, Version(10), &PutResult::Refused));
    assert_eq!(w.slot(1), Slot::Todo);
    assert_eq!(w.avoid(1, &[1, 2, 3]), vec![1]);
    assert_eq!(w.version_for(1, || Version(12)), Version(12), "a replica put again takes a newer version");
    w.issued(1, 3, Version(12));
    assert!(!w.done(1, Version(10), &PutResult::Stored { target: 2 }), "a late answer to the refused put");
    assert!(w.done(1, Version(12), &PutResult::Stored { target: 3 }));
    assert!(w.complete());
    assert_eq!(w.holders(), vec![1, 3]);
    assert_eq!(w.version(), Version(10));
}

/// A write over earlier copies: a replica avoids every node that may hold another
/// replica's newest data, the earlier write's holders included, while this write has not
/// stored that replica; a put with no answer may have stored its copy, a refused one not.
#[test]
fn a_write_keeps_clear_of_the_other_replicas_last_data() {
    // Acknowledged before: replica 0 on node 1, replica 1 on node 3.
    let mut w = ReplicaWrite::new(2, Version(20)).over(Sites::stored(&[1, 3]));
    let m = [1, 2, 3];
    assert_eq!(w.avoid(0, &m), vec![3]);
    assert_eq!(w.avoid(1, &m), vec![1]);
    w.issued(0, 1, Version(20));
    assert!(w.done(0, Version(20), &PutResult::Refused));
    // Replica 0's newest data is still on node 1: replica 1 keeps off it, even though
    // no put of this write is on its way there.
    assert_eq!(w.avoid(1, &m), vec![1], "the acknowledged replica 0 is on node 1");
    w.issued(1, 3, Version(20));
    assert!(w.done(1, Version(20), &PutResult::Stored { target: 3 }));
    assert_eq!(w.avoid(0, &m), vec![3]);
    // Replica 0 again, to node 2 this time, with no answer: node 2 may hold it.
    w.issued(0, 2, Version(21));
    assert!(w.done(0, Version(21), &PutResult::Failed));
    let s = w.sites();
    assert_eq!((s.of(0).collect::<Vec<_>>(), s.of(1).collect::<Vec<_>>()), (vec![1, 2], vec![3]));
    // A later write over these sites keeps replica 1 off both nodes 1 and 2.
    let next = ReplicaWrite::new(2, Version(30)).over(s);
    assert_eq!(next.avoid(1, &m), vec![1, 2]);
    assert_eq!(next.avoid(0, &m), vec![3]);
    // With nodes 1 and 2 the only members, replica 1 would have nowhere to go: it avoids
    // only this write's own target of replica 0 (none yet), so the write goes on.
    assert_eq!(next.avoid(1, &[1, 2]), Vec::<u16>::new());
}

/// A read takes a replica at the known version or newer; a miss or an older copy goes on
/// to the next replica; past the last, a miss.
#[test]
fn a_read_goes_on_past_missing_and_stale_replicas() {
    let v = Some(Version(10));
    assert_eq!(read_step(2, 0, Some(Version(10)), v), ReadStep::Take);
    assert_eq!(read_step(2, 0, Some(Version(11)), v), ReadStep::Take);
    assert_eq!(read_step(2, 0, Some(Version(9)), v), ReadStep::Next(1), "stale");
    assert_eq!(read_step(2, 0, None, v), ReadStep::Next(1));
    assert_eq!(read_step(2, 1, None, v), ReadStep::Miss);
    assert_eq!(read_step(2, 1, Some(Version(9)), v), ReadStep::Miss, "stale everywhere is a miss");
    assert_eq!(read_step(2, 1, Some(Version(1)), None), ReadStep::Take, "no known version: any copy");
    assert_eq!(read_step(1, 0, None, None), ReadStep::Miss);
}

/// Pages written as two replicas from node 0 of four land on two distinct other nodes;
/// after one holder dies, every page still reads back right through the replica chain.
#[test]
fn replicated_pages_survive_a_holder() {
    super::on_big_stack(replicated_pages).unwrap();
}

fn read_replicated(c: &mut Cluster, from: usize, page: PageId, r: u8, floor: Version) -> (Got, u8) {
    let mut k = 0;
    loop {
        let g = c.get_wait(from, replica(page, k)).expect("get");
        let hit = match &g {
            Got::Hit { version, .. } => Some(*version),
            Got::Miss => None,
        };
        match read_step(r, k, hit, Some(floor)) {
            ReadStep::Take => return (g, k),
            ReadStep::Next(n) => k = n,
            ReadStep::Miss => return (Got::Miss, k),
        }
    }
}

fn replicated_pages() {
    let mut c = Cluster::new(4, 256, GmsConfig::default()).expect("cluster");
    let r = 2;
    let mut holders = Vec::new();
    for n in 0..32u64 {
        let page = PageId::new(11, n);
        let d = bytes(FRAME_BYTES as usize, n as u8);
        let mut w = ReplicaWrite::new(r, Version(5));
        for k in 0..r {
            c.ports[0].put_replica(&mut w, page, k, &d, || Version(6)).expect("put a replica");
        }
        c.settle(0).expect("puts finish");
        let log: Vec<_> = c.ports[0].put_log.drain(..).collect();
        for (p, v, res) in log {
            let k = (0..r).find(|&k| replica(page, k) == p).expect("a replica of the page");
            assert!(w.done(k, v, &res), "page {n}: the answer of replica {k}'s put");
        }
        assert!(w.complete(), "page {n}: {w:?}");
        let h = w.holders();
        assert!(h[0] != h[1] && !h.contains(&0), "page {n}: replicas on {h:?}");
        holders.push(h);
    }
    // A newer write of page 0 that stored only replica 1: replica 0 is left one version
    // behind, and a read that knows the newer write skips it.
    let t = holders[0][1];
    c.ports[0].put(replica(PageId::new(11, 0), 1), Version(7), &bytes(100, 7), Some(t)).expect("newer replica 1");
    c.settle(0).expect("put");
    let (g, k) = read_replicated(&mut c, 3, PageId::new(11, 0), r, Version(7));
    assert!(
        matches!(&g, Got::Hit { version: Version(7), data, .. } if *data == bytes(100, 7)) && k == 1,
        "{g:?} from replica {k}"
    );
    let dead = holders[1][0];
    c.kill(dead as usize);
    let reader = (1..4).find(|&n| n != dead as usize).unwrap();
    let mut fallbacks = 0;
    for n in 1..32u64 {
        let page = PageId::new(11, n);
        let (g, k) = read_replicated(&mut c, reader, page, r, Version(5));
        match g {
            Got::Hit { data, .. } => assert!(data == bytes(FRAME_BYTES as usize, n as u8), "page {n}: wrong bytes"),
            Got::Miss => panic!("page {n} (holders {:?}, node {dead} dead) missed", holders[n as usize]),
        }
        assert_eq!(k > 0, holders[n as usize][0] == dead, "page {n}: read from replica {k}");
        fallbacks += u32::from(k > 0);
    }
    assert!(fallbacks > 0, "node {dead} held replica 0 of some page");
    // Replica 0 at version 5, replica 1 at 7: a reader knowing only version 5 takes either.
    let (g, _) = read_replicated(&mut c, reader, PageId::new(11, 0), r, Version(5));
    assert!(matches!(g, Got::Hit { .. }), "{g:?}");
}
