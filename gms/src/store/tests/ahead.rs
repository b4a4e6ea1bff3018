// SPDX-License-Identifier: GPL-2.0-only
//! Read-ahead ([`super::super::ahead`]) driven by hand.

use super::*;

fn ahead_cfg(pages: u8) -> StoreConfig {
    StoreConfig { read_ahead: pages, ..StoreConfig::default() }
}

/// Pages 0..n written, then read in order: each read's getpages answered with a hit whose
/// frame is `100 + page` (user reads land in their request's frame, which the test names
/// by the request: `io`).
fn written(cfg: StoreConfig, n: u64) -> (S, Net) {
    let mut s = store(cfg, &[1, 2, 3]);
    let mut net = Net::new();
    for p in 0..n {
        write_all(&mut s, &mut net, p, 1000 + p as u32);
    }
    (s, net)
}

/// Answer every getpage the store wants now with a hit of its replica's version; the
/// pages the read-aheads among them were for.
fn answer_all(s: &mut S, net: &mut Net, now: u64) -> Vec<u64> {
    let mut ahead = Vec::new();
    for (op, i) in net.issue(s, now) {
        let IssueKind::Get { page, into, .. } = i.kind else { panic!("not a get: {i:?}") };
        let k = s.replica_of(page);
        let p = (0..64).find(|&p| s.page_id(p, k) == page).unwrap();
        let v = s.entry(p, k).unwrap().replica.version().unwrap();
        if into == Data::Scratch {
            ahead.push(p);
        }
        s.handle_get(now, op, &hit(100 + p as u32, v.0));
    }
    ahead
}

/// Write `page` again (request `io`), every put stored; everything that finished.
fn rewrite(s: &mut S, net: &mut Net, page: u64, io: u32) -> Vec<Finished<u32, u32>> {
    s.write(0, page, io).unwrap();
    for (op, i) in net.issue(s, 0) {
        stored(s, 0, op, &i);
    }
    let ended: Vec<_> = core::iter::from_fn(|| s.poll_done()).collect();
    assert!(ended.contains(&Finished::Request { io, outcome: Outcome::Written { copies: 2 } }), "{ended:?}");
    ended
}

#[test]
fn sequential_reads_are_read_ahead_and_served_from_the_copies() {
    let (mut s, mut net) = written(ahead_cfg(4), 12);
    // Two reads one after the other start nothing; the third (a run of two) does.
    for p in 0..3 {
        s.read(1, p, p as u32).unwrap();
        let ahead = answer_all(&mut s, &mut net, 1);
        assert_eq!(done(&mut s).map(|d| d.0), Some(p as u32));
        assert_eq!(ahead.is_empty(), p < 2, "read {p}: read ahead {ahead:?}");
    }
    // Pages 3..=6 were read ahead: reading them needs no getpage, each comes as a copy.
    assert_eq!(s.stats.ahead_reads, 4);
    for p in 3..7u64 {
        s.read(2, p, p as u32).unwrap();
        match s.poll_done() {
            Some(Finished::Copy { io, frame, version }) => {
                assert_eq!((io, frame), (p as u32, 100 + p as u32));
                assert_eq!(Some(version), s.entry(p, 0).unwrap().replica.version());
            }
            other => panic!("read {p}: {other:?}"),
        }
        // The window moves on: the next page is read ahead.
        let ahead = answer_all(&mut s, &mut net, 2);
        assert_eq!(ahead, [p + 4], "after reading {p}");
    }
    assert_eq!(s.stats.ahead_hits, 4);
}

#[test]
fn a_write_drops_the_copy_read_ahead_and_the_read_after_it_goes_to_the_network() {
    let (mut s, mut net) = written(ahead_cfg(2), 8);
    for p in 0..3 {
        s.read(1, p, p as u32).unwrap();
        answer_all(&mut s, &mut net, 1);
        done(&mut s).unwrap();
    }
    // Pages 3 and 4 are held; page 3 is written again.
    let ended = rewrite(&mut s, &mut net, 3, 50);
    assert!(ended.contains(&Finished::Scratch(103)), "the overwritten copy is handed back: {ended:?}");
    s.read(2, 3, 3).unwrap();
    let ahead = answer_all(&mut s, &mut net, 2);
    assert!(!ahead.contains(&3));
    let v = s.entry(3, 0).unwrap().replica.version().unwrap();
    assert_eq!(done(&mut s), Some((3, Outcome::Read { version: v })), "read from the network, the new version");
}

#[test]
fn a_read_takes_over_a_read_ahead_under_way_and_an_overwritten_one_is_dropped() {
    // Read-aheads still in flight when the user reads.
    let (mut s, mut net) = written(ahead_cfg(2), 8);
    for p in 0..2 {
        s.read(1, p, p as u32).unwrap();
        answer_all(&mut s, &mut net, 1);
        done(&mut s).unwrap();
    }
    s.read(1, 2, 2).unwrap();
    let gets = net.issue(&mut s, 1);
    assert_eq!(gets.len(), 3, "the read of 2 and read-aheads of 3 and 4: {gets:?}");
    // The user reads 3 while its read-ahead runs (taken over), and 4 is written (dropped).
    s.read(1, 3, 33).unwrap();
    s.write(1, 4, 44).unwrap();
    for (op, i) in gets {
        let IssueKind::Get { page, .. } = i.kind else { panic!() };
        let k = s.replica_of(page);
        let p = (0..8).find(|&p| s.page_id(p, k) == page).unwrap();
        let v = s.entry(p, k).unwrap().replica.version().unwrap();
        let kept = s.handle_get(1, op, &hit(100 + p as u32, v.0));
        assert_eq!(kept, p == 3, "page {p}: the store keeps the taken-over read's frame only");
    }
    // The write's puts (and new read-aheads, left unanswered).
    for (op, i) in net.issue(&mut s, 1) {
        if matches!(i.kind, IssueKind::Put { .. }) {
            stored(&mut s, 1, op, &i);
        }
    }
    let mut ended = Vec::new();
    while let Some(f) = s.poll_done() {
        ended.push(f);
    }
    assert!(ended.contains(&Finished::Copy {
        io: 33,
        frame: 103,
        version: s.entry(3, 0).unwrap().replica.version().unwrap()
    }));
    assert!(ended.iter().any(|f| matches!(f, Finished::Request { io: 2, .. })));
    assert_eq!(s.stats.ahead_hits, 1);
}

#[test]
fn random_reads_read_nothing_ahead_and_read_ahead_off_costs_nothing() {
    for cfg in [ahead_cfg(8), ahead_cfg(0)] {
        let (mut s, mut net) = written(cfg, 16);
        for p in [5u64, 1, 9, 2, 14, 7, 0, 11] {
            s.read(1, p, p as u32).unwrap();
            assert!(answer_all(&mut s, &mut net, 1).is_empty());
            done(&mut s).unwrap();
        }
        assert_eq!(s.stats.ahead_reads, 0);
    }
    // Sequential reads with read-ahead off: nothing read ahead either.
    let (mut s, mut net) = written(ahead_cfg(0), 8);
    for p in 0..8 {
        s.read(1, p, p as u32).unwrap();
        assert!(answer_all(&mut s, &mut net, 1).is_empty());
        done(&mut s).unwrap();
    }
    assert_eq!(s.stats.ahead_reads, 0);
}

#[test]
fn a_runtime_that_hands_in_batches_leaves_read_ahead_its_half_of_the_table() {
    // Sequential reads handed in while the store takes them: it stops below half its 16
    // slots, and read-ahead starts in the rest. (Each read asked alone: no `GETPAGES`.)
    let cfg = StoreConfig { group_pages: 1, ..ahead_cfg(4) };
    let (mut s, mut net) = written(cfg, 16);
    let mut p = 0;
    while s.takes_user_request() {
        s.read(1, p, p as u32).unwrap();
        p += 1;
    }
    assert_eq!(p, 7);
    answer_all(&mut s, &mut net, 1);
    assert!(s.stats.ahead_reads > 0, "{:?}", s.stats);
    // Handed in until the store is busy, the same reads fill the table: no read-ahead.
    let (mut s, mut net) = written(cfg, 16);
    let mut p = 0;
    while s.read(1, p, p as u32).is_ok() {
        p += 1;
    }
    answer_all(&mut s, &mut net, 1);
    assert_eq!(s.stats.ahead_reads, 0);
    // With read-ahead off, a runtime may fill the table.
    let (s, _) = written(StoreConfig::default(), 1);
    assert!(s.takes_user_request());
}
