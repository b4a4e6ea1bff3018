// SPDX-License-Identifier: GPL-2.0-only
//! The epoch a load claims: above what every member knows, within the reach of the
//! volume's own meta pages, and never past the last epoch a version holds.

use super::*;

#[test]
fn a_load_claims_an_epoch_above_the_newest_version_any_member_knows() {
    let mut net = Net::new();
    let a = store_on(&mut net, StoreConfig::default(), 0, &[1, 2, 3]);
    assert_eq!(a.epoch(), 1);
    assert!(a.stats.top_asks >= 4, "every member and itself asked: {}", a.stats.top_asks);
    // A later load's label and map died; member 3 still keeps a floor of its epoch 6.
    net.top.insert(3, Version((6 << record::EPOCH_SHIFT) | 0x70));
    let b = store_on(&mut net, StoreConfig::default(), 0, &[1, 2, 3]);
    assert_eq!(b.phase(), Phase::Ready);
    assert_eq!(b.epoch(), 7, "above what member 3 knows, not the label's 1 + 1");
}

#[test]
fn the_claim_waits_for_a_member_declared_failed_during_the_load() {
    let mut net = Net::new();
    store_on(&mut net, StoreConfig::default(), 0, &[1, 2, 3]);
    net.top.insert(2, Version(9 << record::EPOCH_SHIFT));
    let mut b: S = Store::new(StoreConfig::default(), 1, 0, 64, &[1, 2, 3]).unwrap();
    // Member 2 is declared failed before it was asked: perhaps only suspected.
    b.handle_member(0, Event::Failed(2));
    net.load(&mut b);
    assert_eq!(b.phase(), Phase::Top, "no claim while what member 2 knows is unknown");
    assert_eq!(b.load_waits_for(), NodeSet::one(2));
    b.handle_member(1, Event::Joined(2));
    net.load(&mut b);
    assert_eq!(b.phase(), Phase::Ready);
    assert!(b.load_waits_for().is_empty());
    assert_eq!(b.epoch(), 10);
    // A member that restarted lost what it knew: the claim does not wait for it.
    let mut c: S = Store::new(StoreConfig::default(), 1, 0, 64, &[1, 2, 3]).unwrap();
    c.handle_member(0, Event::Failed(3));
    c.handle_member(1, Event::Restarted(3));
    net.load(&mut c);
    assert_eq!(c.phase(), Phase::Ready);
}

#[test]
fn a_member_naming_the_last_epoch_lifts_the_claim_only_to_the_reach() {
    let mut net = Net::new();
    // A lying member: one answer naming the last epoch a version holds.
    net.top.insert(1, Version(u64::MAX));
    let mut s: S = Store::new(StoreConfig::default(), 1, 0, 64, &[1, 2, 3]).unwrap();
    net.load(&mut s);
    assert_eq!(s.phase(), Phase::Ready, "one answer does not refuse the volume for good");
    assert_eq!(s.epoch(), 1 + claim::EPOCH_REACH, "above a new volume's epoch 0 by the reach");
    assert_eq!(s.stats.epochs_refused, 1);
    // Within the reach, an answer is taken as it is (a later load's label and map died).
    net.top.insert(1, Version(u64::from(s.epoch() + 9) << record::EPOCH_SHIFT));
    let b = store_on(&mut net, StoreConfig::default(), 0, &[1, 2, 3]);
    assert_eq!((b.epoch(), b.stats.epochs_refused), (s.epoch() + 10, 0));
}

#[test]
fn a_label_of_the_last_epoch_has_the_load_refused_not_its_versions_wrapped() {
    let mut net = Net::new();
    let a = store_on(&mut net, StoreConfig::default(), 0, &[1, 2, 3]);
    let label = a.page_id(a.pages(), 0);
    let (_, bytes) = net.meta.get_mut(&label).expect("the label's copy");
    let mut l = volume::Label::decode(bytes).expect("a label");
    l.epoch = record::Clock::MAX_EPOCH;
    l.encode(bytes);
    let mut s: S = Store::new(StoreConfig::default(), 1, 0, 64, &[1, 2, 3]).unwrap();
    net.load(&mut s);
    assert_eq!(s.phase(), Phase::Refused(StoreError::VersionsExhausted));
    assert_eq!(s.write(0, 1, 7), Err((7, StoreError::VersionsExhausted)));
}

#[test]
fn a_new_volume_whose_put_is_superseded_doubles_its_epoch_by_at_most_the_reach() {
    for (lie, want) in [(None, 2), (Some(u64::MAX), 1 + 2 * claim::EPOCH_REACH)] {
        let mut net = Net::new();
        if let Some(v) = lie {
            net.top.insert(1, Version(v));
        }
        let mut s = store_on(&mut net, StoreConfig::default(), 0, &[1, 2, 3]);
        assert!(!s.label_found());
        s.write(0, 5, 7).unwrap();
        let ops = net.issue(&mut s, 0);
        let page = match ops[0].1.kind {
            IssueKind::Put { page, .. } => page,
            _ => panic!("not a put"),
        };
        // A directory holds a newer copy: an earlier load's, or a lying member's word.
        s.handle_put(0, ops[0].0, page, PutResult::Superseded, None);
        net.load(&mut s);
        assert_eq!(s.phase(), Phase::Ready);
        assert_eq!(s.epoch(), want, "lie {lie:?}");
    }
}
