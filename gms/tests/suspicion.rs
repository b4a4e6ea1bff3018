// SPDX-License-Identifier: GPL-2.0-only
//! Faults of the shared simulation that reach GMS itself: a message the network
//! duplicates is handled twice, and a live node falsely declared failed keeps its state.

use gms::prelude::*;
use sim::gms::*;

/// A PUTPAGE delivered twice (the network's duplicate reaches the receiver's NetRPC and
/// GMS as a second message) stores the page once and ends the put once, as stored.
#[test]
fn a_duplicated_putpage_is_stored_and_answered_once() {
    let mut s = Sim::new(1, Knobs::quiet(3, 8));
    let page = PageId::new(0, 5);
    let op = s.putpage(0, page, 1).expect("issued");
    let q = s.net.queue_mut();
    let put = q.iter().position(|m| (m.src, m.dst) == (0, 1)).expect("the PUTPAGE in flight");
    let copy = q[put].clone();
    q.push(copy);
    s.run_to_idle();
    assert!(matches!(s.result(0, op), Some(OpResult::Put(PutResult::Stored { target: 1 }))));
    assert_eq!(s.nodes[1].held(&page).map(|h| h.version), Some(Version(1)));
    s.settle();
    s.check_quiet();
    s.check_converged();
}

/// The others drop a suspected node from their view; it keeps running with its copies
/// and its view until it is heard again, and then shares theirs.
#[test]
fn a_falsely_suspected_node_keeps_its_state() {
    let mut s = Sim::new(2, Knobs::quiet(3, 8));
    let page = PageId::new(0, 3);
    let op = s.putpage(0, page, 2).expect("issued");
    s.run_to_idle();
    assert!(matches!(s.result(0, op), Some(OpResult::Put(PutResult::Stored { target: 2 }))));
    s.suspect(2);
    assert_eq!(s.members_up(), [0, 1]);
    assert_eq!(s.nodes[0].members().ids(), [0, 1]);
    assert_eq!(s.nodes[1].members().ids(), [0, 1]);
    assert_eq!(s.nodes[2].members().ids(), [0, 1, 2], "nobody told the suspect");
    assert_eq!(s.nodes[2].held(&page).map(|h| h.version), Some(Version(1)), "its copy stays");
    s.heard_again(2);
    for n in 0..3 {
        assert_eq!(s.nodes[n].members().ids(), [0, 1, 2], "node {n}");
    }
    assert_eq!(s.members_up(), [0, 1, 2]);
}
