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
            ReadInto::Miss(_) => panic!("page {n} missed"),
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
        ReadInto::Miss(_) => panic!("cached page missed"),
    }
    match c.read(2, page).expect("read") {
        Got::Hit { data, .. } => assert!(data == pages[63]),
        Got::Miss => panic!("cached page missed"),
    }
    assert_eq!(
        c.read_into(2, PageId::new(7, 1000), &mut buf).expect("read"),
        ReadInto::Miss(gms::reader::Heard::NotFound)
    );
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
            ReadInto::Miss(_) => panic!("page {n} missed"),
        }
    }
    c.rejoin(s).expect("rejoin");
    assert!(c.ports[0].cpu.is_some(), "the client's NIC is back");
    assert!(matches!(c.get_wait(0, PageId::new(3, 5)).expect("get"), Got::Hit { .. }));
}

/// A completion of an operation the port did not start, in a port that drives no store,
/// is no one's: its frame goes back at once, and nothing is left that would make
/// `poll_timeout` say "now" for ever.
#[test]
fn a_completion_no_one_claims_gives_its_frame_back() {
    super::on_big_stack(unclaimed).unwrap();
}

fn unclaimed() {
    let mut c = Cluster::new(2, 16, GmsConfig::default()).expect("cluster");
    c.settle(0).expect("settled");
    let p = &mut c.ports[0];
    let free = p.free_frames();
    let frame = p.node.host.frames.alloc().expect("a frame");
    let miss = GetResult::Miss { reason: gms::types::MissReason::NotCached, frame: Some(frame) };
    let op = gms::types::OpId { slot: 0, generation: u32::MAX };
    p.node.host.done.push(Completion { op, page: PageId::new(9, 9), result: OpResult::Get(miss), answer: None });
    p.handle_completions();
    assert_eq!(p.free_frames(), free, "the frame went back");
    assert!(p.store_done.is_none() && p.node.host.done.is_empty());
}
