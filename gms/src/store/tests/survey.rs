// SPDX-License-Identifier: GPL-2.0-only
//! Reads after a reload ([`super::super::survey`]): the copies an earlier load left, and
//! the members that may hold one nobody saw.

use super::*;

/// Write pages 1 and 2 on a fresh volume; then load it again (another load of the same
/// identity on node 0, its pages' holders all gone).
fn reloaded(net: &mut Net) -> S {
    let mut a = store_on(net, StoreConfig::default(), 0, &[1, 2, 3]);
    write_all(&mut a, net, 1, 1);
    write_all(&mut a, net, 2, 2);
    let last = a.entry(2, 0).unwrap().replica.version().unwrap();
    let b = store_on(net, StoreConfig::default(), 0, &[1, 2, 3]);
    assert_eq!(b.phase(), Phase::Ready);
    assert!(b.epoch() > a.epoch());
    let mut c = b;
    let v = c.clock.tick();
    assert!(v > last, "a reload's versions are above every earlier load's");
    c
}

#[test]
fn after_a_reload_a_written_page_with_no_copy_fails_and_an_unwritten_one_is_zeros() {
    let mut net = Net::new();
    let mut s = reloaded(&mut net);
    assert!(s.is_written(1) && s.is_written(2) && !s.is_written(3));
    s.read(0, 3, 30).unwrap();
    assert!(net.issue(&mut s, 0).is_empty());
    assert_eq!(done(&mut s), Some((30, Outcome::Zero)));
    s.read(0, 1, 10).unwrap();
    let floor = s.floor(1);
    assert!(floor > Version(1), "the first load's write set the page's floor");
    let d = until_done(&mut s, &mut net, 0, |_, i| {
        // Each member is asked for an earlier load's copy at the floor or newer, then
        // the directory.
        assert!(matches!(i.kind, IssueKind::Get { at_least, .. } if at_least == floor));
        miss()
    });
    assert_eq!(d, (10, Outcome::Failed(StoreError::Lost)), "never zeros for a written page");
}

/// A user read's getpage hits at `v` when it asks member `node` for `replica`, else misses.
fn only(node: u16, replica: u8, v: Version) -> impl FnMut(&S, &Issue<u32>) -> GetResult<u32> {
    move |s, i| match i.kind {
        IssueKind::Get { page, route: Route::Holder { node: n, .. }, into: Data::Request, .. }
            if n == node && s.replica_of(page) == replica =>
        {
            hit(0, v.0)
        }
        _ => miss(),
    }
}

#[test]
fn a_replica_the_survey_did_not_find_keeps_a_suspected_member_as_its_site() {
    let mut net = Net::new();
    let mut s = reloaded(&mut net);
    let v = s.floor(1);
    // Member 3 is declared failed; it may only be suspected, with replica 1's copy.
    s.handle_member(0, Event::Failed(3));
    s.read(0, 1, 10).unwrap();
    // Member 1 has replica 0's copy; no member asked has replica 1's.
    let d = until_done(&mut s, &mut net, 0, only(1, 0, v));
    assert_eq!(d, (10, Outcome::Read { version: v }));
    let e = s.entry(1, 1).unwrap();
    assert!(matches!(e.replica, record::Replica::Lost { .. }) && e.sites.contains(3), "{e:?}");
    // Replica 0's holder restarts: member 3 may still hold the page, so it is not lost.
    s.handle_member(1, Event::Restarted(1));
    s.read(1, 1, 11).unwrap();
    let d = until_done(&mut s, &mut net, 1, |_, _| miss());
    assert_eq!(d, (11, Outcome::Failed(StoreError::Unreachable)), "member 3 may be heard again");
    // Member 3 is heard again: it is asked for its copy.
    s.handle_member(2, Event::Joined(3));
    s.read(2, 1, 12).unwrap();
    let d = until_done(&mut s, &mut net, 2, only(3, 1, v));
    assert_eq!(d, (12, Outcome::Read { version: v }));
}
