// SPDX-License-Identifier: GPL-2.0-only
//! `GETPAGES` groups of reads ([`super::super::group`]) driven by hand.

use super::*;

/// One copy of each page, all on member 1 (the only one), pages `written` written.
fn one_holder(written: &[u64]) -> (S, Net) {
    let mut s = store(StoreConfig { replicas: 1, ..StoreConfig::default() }, &[1]);
    let mut net = Net::new();
    for &p in written {
        s.write(0, p, 1000 + p as u32).unwrap();
        for (op, i) in net.issue(&mut s, 0) {
            stored(&mut s, 0, op, &i);
        }
        assert_eq!(done(&mut s), Some((1000 + p as u32, Outcome::Written { copies: 1 })));
    }
    (s, net)
}

fn version(s: &S, page: u64) -> Version {
    s.entry(page, 0).unwrap().replica.version().unwrap()
}

fn all_done(s: &mut S) -> Vec<(u32, Outcome)> {
    let mut d: Vec<_> = core::iter::from_fn(|| done(s)).collect();
    d.sort_by_key(|x| x.0);
    d
}

#[test]
fn reads_of_nearby_pages_one_member_holds_go_as_one_getpages_and_a_hit_ends_them_all() {
    let (mut s, mut net) = one_holder(&[0, 1, 2, 5, 9]);
    // Page 3 was never written (zeros, no network); page 63 is too far from page 0.
    for (io, p) in [(10, 0), (11, 1), (12, 2), (13, 3), (15, 5), (19, 9)] {
        s.read(1, p, io).unwrap();
    }
    let sent = net.issue(&mut s, 1);
    assert_eq!(sent.len(), 1, "one operation: {sent:?}");
    let (op, i) = sent[0];
    let IssueKind::Gets(g) = i.kind else { panic!("not a group: {i:?}") };
    assert_eq!((g.first, g.mask, g.holder), (s.page_id(0, 0), 0b10_0010_0111, 1));
    assert_eq!(g.reads().len(), 5);
    let known: Vec<Version> = [0, 1, 2, 5, 9].iter().map(|&p| Clock::generation_start(version(&s, p))).collect();
    assert_eq!(g.known(), &known[..]);
    s.handle_get(1, op, &GetResult::Hit { version: known[0], frame: 7, len: 5 * 4096, via: Via::TwoWay, held: false });
    let d = all_done(&mut s);
    let want: Vec<(u32, Outcome)> = [(10, 0), (11, 1), (12, 2), (15, 5), (19, 9)]
        .iter()
        .map(|&(io, p)| (io, Outcome::Read { version: version(&s, p) }))
        .chain([(13, Outcome::Zero)])
        .collect();
    let mut want = want;
    want.sort_by_key(|x| x.0);
    assert_eq!(d, want);
    assert_eq!((s.stats.group_gets, s.stats.group_reads, s.stats.group_misses), (1, 5, 0));
    assert!(net.issue(&mut s, 2).is_empty());
}

#[test]
fn a_group_without_a_hit_reads_each_page_alone_and_every_read_ends_right() {
    let (mut s, mut net) = one_holder(&[4, 5, 6]);
    for p in 4..7 {
        s.read(1, p, p as u32).unwrap();
    }
    let sent = net.issue(&mut s, 1);
    let [(op, Issue { kind: IssueKind::Gets(g), .. })] = sent[..] else { panic!("{sent:?}") };
    assert_eq!(g.len(), 3);
    // The holder lacks one of them.
    s.handle_get(1, op, &miss());
    assert_eq!(s.stats.group_misses, 1);
    let alone = net.issue(&mut s, 1);
    assert_eq!(alone.len(), 3, "each read on its own: {alone:?}");
    for (op, i) in alone {
        let IssueKind::Get { page, route: Route::Holder { node: 1, .. }, into: Data::Request, .. } = i.kind else {
            panic!("{i:?}")
        };
        let p = (4..7).find(|&p| s.page_id(p, 0) == page).unwrap();
        // Page 5's copy is gone from its holder: its read goes on (the directory).
        let r = if p == 5 { miss() } else { hit(0, version(&s, p).0) };
        s.handle_get(1, op, &r);
    }
    let d = all_done(&mut s);
    assert_eq!(d, [(4, Outcome::Read { version: version(&s, 4) }), (6, Outcome::Read { version: version(&s, 6) })]);
    let next = net.issue(&mut s, 1);
    let [(op, Issue { kind: IssueKind::Get { route: Route::Directory, .. }, .. })] = next[..] else {
        panic!("{next:?}")
    };
    s.handle_get(1, op, &hit(0, version(&s, 5).0));
    assert_eq!(done(&mut s), Some((5, Outcome::Read { version: version(&s, 5) })));
    assert_eq!(s.stats.group_gets, 1, "never grouped again");
}

#[test]
fn a_short_reply_or_a_group_that_could_not_go_falls_back_page_by_page() {
    let (mut s, mut net) = one_holder(&[0, 1]);
    s.read(1, 0, 0).unwrap();
    s.read(1, 1, 1).unwrap();
    // The runtime could not arm the group: the reads go alone at once.
    let i = s.poll_issue(1, &mut net.lru, None).unwrap();
    assert!(matches!(i.kind, IssueKind::Gets(_)), "{i:?}");
    s.handle_issued(1, &i, None);
    let alone = net.issue(&mut s, 1);
    assert!(alone.iter().all(|(_, i)| matches!(i.kind, IssueKind::Get { .. })) && alone.len() == 2, "{alone:?}");
    for (op, i) in alone {
        let p = if i.kind == net_page_kind(&s, 0, &i) { 0 } else { 1 };
        s.handle_get(1, op, &hit(0, version(&s, p).0));
    }
    assert_eq!(all_done(&mut s).len(), 2);
    // A hit one page short is no hit.
    s.read(2, 0, 0).unwrap();
    s.read(2, 1, 1).unwrap();
    let sent = net.issue(&mut s, 2);
    let [(op, Issue { kind: IssueKind::Gets(_), .. })] = sent[..] else { panic!("{sent:?}") };
    s.handle_get(2, op, &hit(0, version(&s, 0).0));
    assert!(done(&mut s).is_none(), "nothing ended on a short reply");
    assert_eq!(net.issue(&mut s, 2).len(), 2);
}

/// `i`'s kind if it were the getpage of page `p` (to tell the reads apart).
fn net_page_kind(s: &S, p: u64, i: &Issue<u32>) -> IssueKind<u32> {
    match i.kind {
        IssueKind::Get { at_least, route, into, .. } => IssueKind::Get { page: s.page_id(p, 0), at_least, route, into },
        k => k,
    }
}
