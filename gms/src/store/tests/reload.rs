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
