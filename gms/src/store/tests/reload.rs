// SPDX-License-Identifier: GPL-2.0-only
//! Reloads against members that come and go while the volume's meta pages are read.

use super::*;

/// Drive load `s` to its end, the members playing `net`'s meta pages, except that
/// `away`'s copies are out of reach while it is not a member (declared failed: GMS serves
/// nothing from outside the view, and its directory never took its registration, so a
/// directory asked has nothing either); `event` may change the membership before each
/// getpage is answered. Between rounds the store's next deadline must lie ahead.
fn load_with(s: &mut S, net: &mut Net, away: u16, mut event: impl FnMut(&mut S, &Issue<u32>) -> Option<Event>) {
    let (mut now, mut idle) = (0, false);
    for _ in 0..400 {
        let mut sent = false;
        while let Some(i) = s.poll_issue(now, &mut net.lru, None) {
            sent = true;
            let op = OpId { slot: (net.next % 32) as u16, generation: net.next };
            net.next += 1;
            s.handle_issued(now, &i, Some(op));
            if let Some(e) = event(s, &i) {
                s.handle_member(now, e);
            }
            match i.kind {
                IssueKind::Put { page, target, data: Data::Meta(m), .. } => {
                    let mut b = vec![0u8; 4096];
                    s.fill_meta(m, &mut b);
                    net.meta.insert(page, (target, b));
                    s.handle_put(now, op, page, PutResult::Stored { target }, None);
                }
                IssueKind::Get { page, route, into: Data::Meta(_), .. } => {
                    let copy = net.meta.get(&page).cloned().filter(|(at, _)| match route {
                        Route::Holder { node, .. } => node == *at && (node != away || s.members().contains(away)),
                        Route::Directory => *at != away,
                    });
                    match copy {
                        Some((_, b)) => s.handle_get_bytes(now, op, &hit(0, 1 << record::EPOCH_SHIFT | 16), &b),
                        None => s.handle_get(now, op, &miss()),
                    };
                }
                IssueKind::Top { .. } => s.handle_top(now, op, TopResult::Known { top: Version(0), next: None }),
                _ => panic!("no user operation while loading: {i:?}"),
            }
        }
        if matches!(s.phase(), Phase::Ready | Phase::Refused(_)) {
            return;
        }
        // Everything sent was answered: work due now is done in the next round, and a
        // deadline that stays past would have the runtime spin.
        let next = s.poll_timeout();
        assert!(next.is_none_or(|t| t >= now) && !(idle && next == Some(now)), "at {now}: next deadline {next:?}");
        idle = !sent && next == Some(now);
        now = next.unwrap_or(now + 1);
        s.handle_timeout(now);
    }
}

/// Checker seed 35,005,051 (retry delay 4 ticks): the only live copy of the label was on a
/// member declared failed while the reload read it; the read's last round asked that
/// member, heard again, for the other replica only, and ended `Lost` — the volume was
/// started afresh with its label on a live member.
#[test]
fn a_member_heard_again_during_the_labels_last_pass_is_asked_before_the_volume_is_new() {
    let cfg = StoreConfig { read_passes: 1, ..StoreConfig::default() };
    let mut net = Net::new();
    let a = store_on(&mut net, cfg, 0, &[1, 2, 3]);
    let label0 = a.page_id(a.pages(), 0);
    let away = net.meta[&label0].0;
    // Only replica 0's copy of the label is left, on `away`.
    net.meta.retain(|p, _| p.page != label0.page || *p == label0);
    let mut b: S = Store::new(cfg, 1, 0, 64, &[1, 2, 3]).unwrap();
    let (mut directory_asked, mut back) = (false, false);
    load_with(&mut b, &mut net, away, |s, i| {
        let IssueKind::Get { page, route, .. } = i.kind else { return None };
        if page.page != label0.page {
            return None;
        }
        if s.phase() == Phase::Label && !directory_asked && route == Route::Directory {
            directory_asked = true;
            return None;
        }
        // Before the label is read: `away` suspected.
        if s.phase() == Phase::Label && s.members().contains(away) && !directory_asked {
            return Some(Event::Failed(away));
        }
        // The read's last round (its sweep) asks for replica 1: `away` is heard again.
        let last = directory_asked && s.replica_of(page) == 1 && matches!(route, Route::Holder { .. });
        (last && !back).then(|| {
            back = true;
            Event::Joined(away)
        })
    });
    assert!(back, "the member came back during the label's last round");
    assert_eq!(b.phase(), Phase::Ready);
    assert!(b.label_found(), "the label on a live member is found, not a new volume made");
    assert_eq!(b.epoch(), 2);
}

/// Checker seed 35,002,170 (busy delay 4 ticks): a write moved replica 0 of page 2 away
/// from a member only suspected, leaving its old copy there as a stray below the floor it
/// raised; every copy of the floor map and of the page's newest write then died with
/// their members' memory. The reload counted the page written at floor 1 (any copy) and
/// read the stray: an acknowledged write rolled back, silently.
#[test]
fn a_reload_that_lost_the_floor_map_takes_no_copy_for_a_page_until_it_is_written() {
    let mut net = Net::new();
    let mut a = store_on(&mut net, StoreConfig::default(), 0, &[1, 2, 3, 4]);
    write_all(&mut a, &mut net, 2, 1);
    let stray = record::Clock::generation_start(a.entry(2, 0).unwrap().replica.version().unwrap());
    // Replica 0's holder is declared failed (only suspected: it keeps its copy); the
    // second write puts replica 0 elsewhere, and the first write's copy is a stray below
    // the floor the second write raises.
    let suspected = a.entry(2, 0).unwrap().replica.holder().unwrap();
    a.handle_member(10, Event::Failed(suspected));
    a.write(20, 2, 2).unwrap();
    // (Re-replication's fetches find nothing.)
    let answer = |a: &mut S, net: &mut Net| {
        for (op, i) in net.issue(a, 20) {
            match i.kind {
                IssueKind::Put { target, .. } => {
                    assert_ne!(target, suspected);
                    stored(a, 20, op, &i);
                }
                _ => _ = a.handle_get(20, op, &miss()),
            }
        }
    };
    answer(&mut a, &mut net);
    answer(&mut a, &mut net);
    assert_eq!(done(&mut a), Some((2, Outcome::Written { copies: 2 })));
    assert!(a.floor(2) > stray);
    a.handle_member(30, Event::Joined(suspected));
    // Every copy of the floor map dies (the label lives on).
    let map: Vec<PageId> = (0..2).map(|k| a.page_id(a.pages() + 1, k)).collect();
    net.meta.retain(|p, _| !map.contains(p));
    let mut b: S = Store::new(StoreConfig::default(), 1, 0, 64, &[1, 2, 3, 4]).unwrap();
    net.load(&mut b);
    assert_eq!(b.phase(), Phase::Ready);
    assert!(b.label_found());
    assert_eq!(b.stats.lost_maps, 1);
    assert!(b.floor_lost(2) && b.floor_lost(9), "every page the map page covers");
    // The only copy of page 2 left is the stray on the first write's replica-0 holder: it
    // is not asked for, and the read fails.
    b.read(30, 2, 7).unwrap();
    assert!(net.issue(&mut b, 30).is_empty(), "no copy asked for: member {suspected} holds a stray");
    assert_eq!(done(&mut b), Some((7, Outcome::Failed(StoreError::Lost))));
    // The map page was written again as the load knows it: a reload reads the loss.
    assert!(map.iter().all(|p| net.meta.contains_key(p)));
    let mut again: S = Store::new(StoreConfig::default(), 1, 0, 64, &[1, 2, 3, 4]).unwrap();
    net.load(&mut again);
    assert_eq!((again.stats.lost_maps, again.floor_lost(2)), (0, true));
    // Written again, the page has a floor, kept in the map page written with it (the other
    // pages' floors stay lost there, for the next reload too).
    b.write(40, 2, 8).unwrap();
    for (op, i) in net.issue(&mut b, 40) {
        stored(&mut b, 40, op, &i);
    }
    assert_eq!(b.poll_done(), None, "the write waits for its floor in the map");
    net.issue(&mut b, 40);
    assert_eq!(done(&mut b), Some((8, Outcome::Written { copies: 2 })));
    assert!(!b.floor_lost(2) && b.floor_lost(9));
    let mut c: S = Store::new(StoreConfig::default(), 1, 0, 64, &[1, 2, 3, 4]).unwrap();
    net.load(&mut c);
    assert_eq!((c.floor(2), c.floor_lost(9)), (b.floor(2), true));
    assert_eq!(c.stats.lost_maps, 0, "the map page was read");
}
