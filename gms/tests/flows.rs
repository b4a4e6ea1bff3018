// SPDX-License-Identifier: GPL-2.0-only
//! Scripted message flows on a 3-node cluster over a perfect network: getpage 2-way,
//! 3-way, direct and local; putpage to the directory node and elsewhere; movepage;
//! moving reads; discard; refusals; supersession; a crash with requests in flight; a copy
//! taken back while registering; a copy handed over while its re-registration after a
//! membership change is answered; a dead directory's drop of a copy registering again;
//! a repair with more moved copies than the task table holds; a directory rebuilding
//! after a failure answering "ask again"; `TOPVERSION` over held copies and floors.

use gms::ops::TopScope;
use gms::prelude::*;
use netrpc::prelude::Mode;
use sim::gms::*;

fn cluster(nodes: usize, budget: usize) -> Sim {
    Sim::new(0xf10e, Knobs::quiet(nodes, budget))
}

#[track_caller]
fn hit(s: &Sim, node: u16, op: OpId) -> (Version, Via, bool) {
    match s.result(node, op) {
        Some(OpResult::Get(GetResult::Hit { version, via, held, .. })) => (version, via, held),
        r => panic!("expected a hit, got {r:?}"),
    }
}

#[track_caller]
fn miss(s: &Sim, node: u16, op: OpId) -> MissReason {
    match s.result(node, op) {
        Some(OpResult::Get(GetResult::Miss { reason, .. })) => reason,
        r => panic!("expected a miss, got {r:?}"),
    }
}

#[track_caller]
fn put_result(s: &Sim, node: u16, op: OpId) -> PutResult {
    match s.result(node, op) {
        Some(OpResult::Put(r)) => r,
        r => panic!("expected a put result, got {r:?}"),
    }
}

#[test]
fn getpage_two_way_three_way_direct_and_local() {
    let mut s = cluster(3, 16);
    let p = s.page_with_dir(0, 0, 0);
    // Node 1 puts p into node 2's memory: 1 → 2 (PUTPAGE), 2 → 0 (DIRUPDATE), 0 → 2, 2 → 1 (PUTDONE).
    let put = s.putpage(1, p, 2).unwrap();
    s.run_net();
    assert_eq!(put_result(&s, 1, put), PutResult::Stored { target: 2 });
    assert_eq!(s.nodes[0].directory().lookup(&p), Some((2, Version(1))));
    assert_eq!(s.nodes[2].held(&p).unwrap().state, HeldState::Registered);

    // Node 1 reads it: 1 → 0 (directory) → delegated → 2 → 1: three-way, zero-copy.
    let before = s.rpcs[0].stats().delegated;
    let get = s.getpage(1, p).unwrap();
    s.run_net();
    assert_eq!(hit(&s, 1, get), (Version(1), Via::ThreeWay, false));
    assert_eq!(s.rpcs[0].stats().delegated, before + 1);
    assert_eq!(s.nodes[0].stats().gets_delegated, 1);
    assert_eq!(s.nodes[2].stats().gets_served, 1);

    // The directory node reads it: it asks node 2 directly (two messages).
    let get = s.getpage(0, p).unwrap();
    s.run_net();
    assert_eq!(hit(&s, 0, get), (Version(1), Via::TwoWay, false));

    // Version 2 goes to the directory node itself; node 2's stale copy is dropped.
    let put = s.putpage(1, p, 0).unwrap();
    s.run_net();
    assert_eq!(put_result(&s, 1, put), PutResult::Stored { target: 0 });
    assert!(s.nodes[2].held(&p).is_none(), "superseded copy dropped");
    assert_eq!(s.nodes[0].directory().lookup(&p), Some((0, Version(2))));

    // Now the directory holds it: a two-way hit; and for itself, a local hit (no message).
    let get = s.getpage(2, p).unwrap();
    s.run_net();
    assert_eq!(hit(&s, 2, get), (Version(2), Via::TwoWay, false));
    let get = s.getpage(0, p).unwrap();
    assert!(s.net.is_empty(), "a local hit sends nothing");
    assert_eq!(hit(&s, 0, get), (Version(2), Via::Local, false));

    // A page nobody holds misses.
    let q = s.page_with_dir(0, 1, 0);
    let get = s.getpage(2, q).unwrap();
    s.run_net();
    assert_eq!(miss(&s, 2, get), MissReason::NotCached);

    let total: u64 = (0..3).map(|n| s.nodes[n].stats().hits_3way).sum();
    assert_eq!(total, 1);
    s.settle();
    s.check_converged();
    s.check_quiet();
}

#[test]
fn hinted_reads_go_straight_to_the_holder_and_a_wrong_hint_only_misses() {
    let mut s = cluster(4, 16);
    let p = s.page_with_dir(0, 0, 0);
    let put = s.putpage(1, p, 2).unwrap();
    s.run_net();
    assert_eq!(put_result(&s, 1, put), PutResult::Stored { target: 2 });

    // Node 1 reads it at node 2, its holder: 1 → 2 → 1, two-way, the directory not asked.
    let get = s.getpage_hinted(1, p, 2).unwrap();
    s.run_net();
    assert_eq!(hit(&s, 1, get), (Version(1), Via::TwoWay, false));
    assert_eq!(s.nodes[0].stats().gets_delegated, 0);
    assert_eq!(s.nodes[2].stats().gets_served, 1);

    // A hint naming a member without the page is a miss there, nothing more: node 3
    // does not touch the directory's entry, and the plain read then finds node 2's copy.
    let get = s.getpage_hinted(1, p, 3).unwrap();
    s.run_net();
    assert_eq!(miss(&s, 1, get), MissReason::NotCached);
    assert_eq!(s.nodes[0].directory().lookup(&p), Some((2, Version(1))));
    let get = s.getpage(1, p).unwrap();
    s.run_net();
    assert_eq!(hit(&s, 1, get), (Version(1), Via::ThreeWay, false));

    // A hint naming the page's directory node is served from its copy all the same.
    let q = s.page_with_dir(0, 2, 0);
    let put = s.putpage(1, q, 2).unwrap();
    s.run_net();
    assert_eq!(put_result(&s, 1, put), PutResult::Stored { target: 2 });
    let get = s.getpage_hinted(1, q, 2).unwrap();
    s.run_net();
    assert_eq!(hit(&s, 1, get), (Version(1), Via::TwoWay, false));
    s.settle();
    s.check_converged();
    s.check_quiet();
}

#[test]
fn putpage_to_the_requesters_directory_and_local_named_copy() {
    let mut s = cluster(3, 16);
    // The directory names the requester itself: "local" answer, served from its copy.
    let p = s.page_with_dir(0, 0, 1);
    let put = s.putpage(0, p, 1).unwrap();
    s.run_net();
    assert_eq!(put_result(&s, 0, put), PutResult::Stored { target: 1 });
    let get = s.getpage(1, p).unwrap();
    s.run_net();
    assert_eq!(hit(&s, 1, get), (Version(1), Via::Local, false));
    s.settle();
    s.check_converged();
    s.check_quiet();
}

#[test]
fn movepage_leaves_a_single_copy() {
    let mut s = cluster(3, 16);
    let p = s.page_with_dir(0, 0, 2);
    let put = s.putpage(0, p, 2).unwrap();
    s.run_net();
    assert_eq!(put_result(&s, 0, put), PutResult::Stored { target: 2 });
    // Node 2 moves its copy to node 1.
    let mv = s.movepage(2, p, 1).unwrap();
    s.run_net();
    assert_eq!(put_result(&s, 2, mv), PutResult::Stored { target: 1 });
    assert!(s.nodes[2].held(&p).is_none());
    assert_eq!(s.nodes[1].held(&p).map(|h| h.version), Some(Version(1)));
    assert_eq!(s.nodes[0].directory().lookup(&p), Some((1, Version(1))));
    // A page one does not hold cannot be moved.
    assert_eq!(s.nodes[2].movepage(s.clock.now(), &mut s.rpcs[2], p, 0, Mode::NonBlocking), Err(GmsError::NotHeld));
    s.settle();
    s.check_converged();
    s.check_quiet();
}

#[test]
fn moving_reads_hand_the_page_to_the_reader() {
    let mut s = cluster(3, 16);
    let p = s.page_with_dir(MOVING_SPACE, 0, 0);
    let put = s.putpage(0, p, 1).unwrap();
    s.run_net();
    assert_eq!(put_result(&s, 0, put), PutResult::Stored { target: 1 });
    let get = s.getpage(2, p).unwrap();
    s.run_net();
    assert_eq!(hit(&s, 2, get), (Version(1), Via::ThreeWay, true));
    assert!(s.nodes[1].held(&p).is_none(), "the caching site dropped its copy");
    assert_eq!(s.nodes[1].stats().gets_moved, 1);
    s.settle();
    assert_eq!(s.nodes[0].directory().lookup(&p), Some((2, Version(1))), "the reader is the holder now");
    // Reading it again from elsewhere moves it again.
    let get = s.getpage(1, p).unwrap();
    s.run_net();
    assert_eq!(hit(&s, 1, get), (Version(1), Via::ThreeWay, true));
    s.settle();
    assert_eq!(s.nodes[0].directory().lookup(&p), Some((1, Version(1))));
    s.check_converged();
    s.check_quiet();
}

#[test]
fn discard_forgets_the_page_everywhere() {
    let mut s = cluster(3, 16);
    let p = s.page_with_dir(0, 1, 0);
    let put = s.putpage(0, p, 2).unwrap();
    s.run_net();
    assert_eq!(put_result(&s, 0, put), PutResult::Stored { target: 2 });
    let d = s.discard(0, p).unwrap();
    s.run_net();
    assert_eq!(s.result(0, d), Some(OpResult::Discard(DiscardResult::Done)));
    assert!(s.nodes[2].held(&p).is_none(), "the holder dropped it");
    let get = s.getpage(2, p).unwrap();
    s.run_net();
    assert_eq!(miss(&s, 2, get), MissReason::NotCached);
    s.settle();
    s.check_converged();
    s.check_quiet();
}

#[test]
fn budget_refusals_and_superseded_versions() {
    let mut s = cluster(3, 1);
    let (p, q) = (s.page_with_dir(0, 0, 0), s.page_with_dir(0, 0, 1));
    let a = s.putpage(1, p, 2).unwrap();
    s.run_net();
    assert_eq!(put_result(&s, 1, a), PutResult::Stored { target: 2 });
    let b = s.putpage(1, q, 2).unwrap();
    s.run_net();
    assert_eq!(put_result(&s, 1, b), PutResult::Refused, "budget of one page");
    assert_eq!(s.nodes[2].stats().puts_refused, 1);
    // An older version of p than the one stored is superseded; a newer one replaces it.
    let old = s.w.borrow_mut().alloc(1, Some((p, 0)));
    let stale =
        s.nodes[1].putpage(s.clock.now(), &mut s.rpcs[1], p, Version(0), old, PAGE_LEN, 2, false, Mode::NonBlocking);
    let stale = stale.unwrap();
    s.ops.insert(
        (1, stale),
        OpRec {
            node: 1,
            kind: OpKind::Put,
            page: p,
            version: 0,
            floor_at_issue: 0,
            frame: None,
            target: 2,
            result: None,
        },
    );
    s.to_free.push((1, old));
    s.settle_node(1);
    s.run_net();
    assert_eq!(put_result(&s, 1, stale), PutResult::Superseded);
    let c = s.putpage(0, p, 2).unwrap();
    s.run_net();
    assert_eq!(put_result(&s, 0, c), PutResult::Stored { target: 2 });
    assert_eq!(s.nodes[2].held(&p).map(|h| h.version), Some(Version(2)));
    // Write-through spaces take no dirty pages.
    let wt = Policy { reads: ReadPolicy::Sticky, writes: WritePolicy::WriteThrough };
    s.nodes[1].set_policy(9, wt).unwrap();
    let f = s.w.borrow_mut().alloc(1, Some((PageId::new(9, 0), 1)));
    let r = s.nodes[1].putpage(
        s.clock.now(),
        &mut s.rpcs[1],
        PageId::new(9, 0),
        Version(1),
        f,
        PAGE_LEN,
        2,
        true,
        Mode::Wait,
    );
    assert_eq!(r, Err(GmsError::DirtyWriteThrough));
    s.w.borrow_mut().free(1, f);
    s.settle();
    s.check_converged();
    s.check_quiet();
}

#[test]
fn a_crashed_node_costs_clean_misses_and_its_entries() {
    let mut s = cluster(4, 16);
    // Node 3 holds a page whose directory is node 0, and is the directory of another page
    // held by node 1.
    let p = s.page_with_dir(0, 0, 0);
    let q = s.page_with_dir(0, 3, 0);
    let a = s.putpage(0, p, 3).unwrap();
    let b = s.putpage(0, q, 1).unwrap();
    s.run_net();
    assert_eq!(put_result(&s, 0, a), PutResult::Stored { target: 3 });
    assert_eq!(put_result(&s, 0, b), PutResult::Stored { target: 1 });

    s.crash(3);
    // Before anyone knows: the request to the dead caching site times out into a miss.
    let g1 = s.getpage(1, p).unwrap();
    s.run_net();
    s.tick(s.k.op_timeout + 1);
    assert_eq!(miss(&s, 1, g1), MissReason::Failed(netrpc::prelude::RpcError::Timeout));
    // A request to the dead directory is cancelled when the failure is declared.
    let g2 = s.getpage(2, q).unwrap();
    s.run_net();
    assert!(s.result(2, g2).is_none());
    s.declare_failed(3);
    assert_eq!(miss(&s, 2, g2), MissReason::Failed(netrpc::prelude::RpcError::Cancelled));

    // The entry naming node 3 is gone; q's directory record died with node 3, so node 1
    // registered its copy with q's new directory node (repair), which serves it.
    assert_eq!(s.nodes[0].directory().lookup(&p), None);
    assert!(s.nodes[1].held(&q).is_some());
    assert_eq!(s.nodes[1].stats().reregistered, 1);
    let g3 = s.getpage(1, p).unwrap();
    let g4 = s.getpage(2, q).unwrap();
    s.run_net();
    assert_eq!(miss(&s, 1, g3), MissReason::NotCached);
    assert_eq!(hit(&s, 2, g4).0, Version(1));
    let dir = s.nodes[0].members().directory_of(&q).unwrap();
    assert_eq!(s.nodes[dir as usize].directory().lookup(&q), Some((1, Version(1))));
    // Life goes on without node 3.
    let c = s.putpage(2, q, 1).unwrap();
    s.run_net();
    assert_eq!(put_result(&s, 2, c), PutResult::Stored { target: 1 });
    let g5 = s.getpage(0, q).unwrap();
    s.run_net();
    assert_eq!(hit(&s, 0, g5).0, Version(2));
    s.settle();
    s.check_converged();
    s.check_quiet();
}

/// A directory node that took pages over in a membership change names none of them until
/// their holders register their copies with it: meanwhile a getpage of such a page is
/// answered "rebuilding" (ask again), not "nobody has it"; once the window
/// (`rebuild_window`) is over, a page nobody registered is a plain miss.
#[test]
fn a_rebuilding_directory_says_ask_again_not_that_nobody_has_the_page() {
    let mut s = cluster(4, 16);
    let mut after = *s.nodes[0].members();
    after.remove(3);
    // Two pages whose directory moves from node 3 to the same node `d`, which is not
    // node 1, the holder of the first; the second is never put.
    let moved_to = |p: &PageId| after.directory_of(p);
    let q = (0..).map(|i| s.page_with_dir(0, 3, i)).find(|p| moved_to(p) != Some(1)).unwrap();
    let d = moved_to(&q).unwrap();
    let r = (0..).map(|i| s.page_with_dir(0, 3, i)).find(|p| *p != q && moved_to(p) == Some(d)).unwrap();
    let asker = [0u16, 2].into_iter().find(|&n| n != d).unwrap();
    let a = s.putpage(0, q, 1).unwrap();
    s.run_net();
    assert_eq!(put_result(&s, 0, a), PutResult::Stored { target: 1 });

    s.crash(3);
    s.declare_failed(3);
    // Node 1's registration of q with `d` is on its way: `d` names no copy yet.
    let g = s.getpage(d, q).unwrap();
    assert_eq!(miss(&s, d, g), MissReason::Rebuilding);
    let g = s.getpage(asker, r).unwrap();
    s.run_net();
    assert_eq!(miss(&s, asker, g), MissReason::Rebuilding);
    assert!(s.nodes[d as usize].directory().lookup(&q).is_some(), "node 1 registered q with its new directory");
    let g = s.getpage(asker, q).unwrap();
    s.run_net();
    assert_eq!(hit(&s, asker, g).0, Version(1));
    // The window over, a page nobody registered is one nobody has.
    s.tick(s.k.op_timeout + 1);
    let g = s.getpage(asker, r).unwrap();
    s.run_net();
    assert_eq!(miss(&s, asker, g), MissReason::NotCached);
    s.settle();
    s.check_converged();
    s.check_quiet();
}

#[test]
fn wait_mode_operations_complete_through_take() {
    let mut s = cluster(3, 16);
    let p = s.page_with_dir(0, 1, 0);
    let put = s.putpage(0, p, 2).unwrap();
    s.run_net();
    assert!(matches!(put_result(&s, 0, put), PutResult::Stored { .. }));
    // `Sim` takes wait-mode results as soon as `poll_event` names them; a getpage in wait
    // mode issued by hand shows the same path.
    let f = s.w.borrow_mut().alloc(0, None);
    s.w.borrow_mut().ipt[0].insert(7, f);
    let op = s.nodes[0]
        .getpage(
            s.clock.now(),
            &mut s.rpcs[0],
            p,
            netrpc::prelude::ReplyTo::Solicited { token: 7, frame: f },
            Mode::Wait,
        )
        .unwrap();
    assert!(s.nodes[0].take(op).is_none(), "not before the reply");
    s.ops.insert(
        (0, op),
        OpRec {
            node: 0,
            kind: OpKind::Get,
            page: p,
            version: 0,
            floor_at_issue: 1,
            frame: Some(f),
            target: 0,
            result: None,
        },
    );
    s.drain(0);
    s.run_net();
    assert_eq!(hit(&s, 0, op), (Version(1), Via::ThreeWay, false));
    s.settle();
    s.check_quiet();
}

/// A copy taken back by its runtime while its registration was on its way, then the same
/// version (the same giver's copy) handed to the same node again: nothing the node sent
/// about its first copy, however late it arrives, un-names the second. (A removal that
/// covered every identity at that version, sent for the first copy and delivered after
/// the second was named, lost it: history seed `0x255f1df101182ab8 long moves`.)
#[test]
fn a_copy_taken_back_while_registering_does_not_unname_a_later_one() {
    let mut s = cluster(3, 16);
    let p = s.page_with_dir(0, 0, 0);
    let put = s.putpage(0, p, 2).unwrap();
    s.run_net();
    assert_eq!(put_result(&s, 0, put), PutResult::Stored { target: 2 });
    // Node 2 moves it to node 1; node 1 stores it and asks the directory (node 0) to name
    // it, and its runtime takes the copy back before any answer.
    let first = s.movepage(2, p, 1).unwrap();
    s.deliver(false);
    assert_eq!(s.nodes[1].held(&p).map(|h| h.state), Some(HeldState::Registering));
    s.drop_local(1, p);
    // Everything node 1 has said to the directory so far arrives only at the end.
    let to_dir = |m: &Msg| m.src == 1 && m.dst == 0;
    let late: Vec<Msg> = s.net.queue().iter().filter(|m| to_dir(m)).cloned().collect();
    s.net.queue_mut().retain(|m| !to_dir(m));
    assert!(!late.is_empty());
    s.run_net();
    s.tick(s.k.op_timeout + 1);
    s.settle();
    assert_eq!(put_result(&s, 2, first), PutResult::Failed);
    assert_eq!(s.nodes[2].held(&p).map(|h| h.state), Some(HeldState::Registered), "the mover kept its copy");
    // The same copy moves to node 1 again, and is named there.
    let second = s.movepage(2, p, 1).unwrap();
    s.run_net();
    assert_eq!(put_result(&s, 2, second), PutResult::Stored { target: 1 });
    assert_eq!(s.nodes[0].directory().lookup(&p), Some((1, Version(1))));
    // The first copy's messages arrive now (and once more: duplicates).
    s.net.queue_mut().extend(late.iter().cloned());
    s.net.queue_mut().extend(late);
    s.run_net();
    s.settle();
    assert_eq!(s.nodes[0].directory().lookup(&p), Some((1, Version(1))), "the second copy is still named");
    let get = s.getpage(0, p).unwrap();
    s.run_net();
    assert_eq!(hit(&s, 0, get).0, Version(1));
    s.check_converged();
    s.check_quiet();
}

/// A copy handed over (movepage, or a moving read) while its holder's re-registration with
/// the page's new directory node is answered but the answer not yet back: the new directory
/// named the copy under a new identity, so the taker's claim of the identity the holder
/// still knows is refused. The holder keeps its copy (the page stays readable) instead of
/// dropping it as superseded, and a moving read is served without handing it over. (The
/// movepage lost the page: history seed `0x1e4faffaf077fe7 long moves`.)
#[test]
fn a_hand_over_while_a_re_registration_is_answered_keeps_the_page() {
    for space in [0, MOVING_SPACE] {
        let mut s = cluster(4, 16);
        // A page whose directory is node 3, and node 0 once node 3 is gone.
        let after = {
            let mut m = gms::members::Members::<16>::new();
            m.set(1, &[0, 1, 2]).unwrap();
            m
        };
        let p = (0..).map(|i| s.page_with_dir(space, 3, i)).find(|p| after.directory_of(p) == Some(0)).unwrap();
        let put = s.putpage(2, p, 1).unwrap();
        s.run_net();
        assert_eq!(put_result(&s, 2, put), PutResult::Stored { target: 1 });
        let old = s.nodes[1].held(&p).unwrap().seq;
        // Node 3 dies: node 1 registers its copy with node 0, which names it under a new
        // identity; the answer stays on its way.
        s.crash(3);
        s.declare_failed(3);
        assert_eq!(s.nodes[1].stats().reregistered, 1);
        assert!(s.net.len() == 1 && s.net.queue()[0].src == 1 && s.net.queue()[0].dst == 0, "only the re-registration");
        s.deliver(false);
        let answer: Vec<Msg> = s.net.queue_mut().drain(..).collect();
        assert_eq!(answer.len(), 1);
        assert_eq!(s.nodes[0].directory().lookup(&p), Some((1, Version(1))));
        assert!(s.nodes[0].directory().named(&p).unwrap().2 > old, "a new identity");
        assert_eq!(s.nodes[1].held(&p).unwrap().seq, old, "not learnt yet");
        // The hand-over claims the identity node 1 knows.
        if space == MOVING_SPACE {
            let get = s.getpage(2, p).unwrap();
            s.run_net();
            assert_eq!(hit(&s, 2, get), (Version(1), Via::ThreeWay, false), "served, not handed over");
        } else {
            let mv = s.movepage(1, p, 2).unwrap();
            s.run_net();
            assert_eq!(put_result(&s, 1, mv), PutResult::Superseded, "the directory refused the old identity");
        }
        assert!(s.nodes[2].held(&p).is_none());
        assert!(s.nodes[1].held(&p).is_some(), "the holder kept its copy");
        s.net.queue_mut().extend(answer);
        s.run_net();
        assert_eq!(s.nodes[1].held(&p).map(|h| h.seq), s.nodes[0].directory().named(&p).map(|n| n.2));
        s.settle();
        let get = s.getpage(0, p).unwrap();
        s.run_net();
        assert_eq!(hit(&s, 0, get).0, Version(1));
        s.check_converged();
        s.check_quiet();
    }
}

/// A copy moved, the hand-over named by the directory node, which dies and comes back
/// empty before either side hears of it: both the giver (its copy still registered) and
/// the taker register with the new incarnation, the giver first, so the taker's claim is
/// refused and the giver is named under a new identity. The old incarnation's `DROPPAGE` of
/// the giver's copy arrives before that answer: it must not drop the copy the new one names
/// (it did: history seed `0x13bb55d335c4715a long moves`).
#[test]
fn a_dead_directorys_drop_spares_a_copy_registering_again() {
    let mut s = cluster(4, 16);
    // A page whose directory is node 2, and node 3 while node 2 is gone.
    let without = {
        let mut m = gms::members::Members::<16>::new();
        m.set(1, &[0, 1, 3]).unwrap();
        m
    };
    let p = (0..).map(|i| s.page_with_dir(0, 2, i)).find(|p| without.directory_of(p) == Some(3)).unwrap();
    let put = s.putpage(0, p, 1).unwrap();
    s.run_net();
    assert_eq!(put_result(&s, 0, put), PutResult::Stored { target: 1 });
    let op = |m: &Msg| netrpc::wire::Header::parse(&m.ctrl).unwrap().0.op;
    let take = |s: &mut Sim, src: u16, dst: u16, code: u16| {
        let i = s.net.queue().iter().position(|m| m.src == src && m.dst == dst && op(m) == code).expect("the message");
        s.net.queue_mut().remove(i)
    };
    let send = |s: &mut Sim, src: u16, dst: u16, code: u16| {
        let m = take(s, src, dst, code);
        s.net.queue_mut().insert(0, m);
        s.deliver(false);
    };
    // Node 1 moves its copy to node 0, whose registration node 2 applies: node 2 names node 0,
    // and once node 0 confirms it holds the copy, asks node 1 to drop its own. Neither that
    // nor the answer to node 0 arrives yet.
    let mv = s.movepage(1, p, 0).unwrap();
    s.deliver(false);
    assert_eq!(s.net.len(), 1);
    s.deliver(false);
    assert_eq!(s.nodes[2].directory().lookup(&p), Some((0, Version(1))));
    let answer = take(&mut s, 2, 0, gms::ops::OP_DIRUPDATE);
    send(&mut s, 2, 0, gms::ops::OP_DIRVERIFY);
    send(&mut s, 0, 2, gms::ops::OP_DIRVERIFY);
    let drop = take(&mut s, 2, 1, gms::ops::OP_DROPPAGE);
    // Node 2 dies and comes back empty; node 1 registers its copy with it first.
    s.crash(2);
    s.declare_failed(2);
    s.restart(2);
    send(&mut s, 1, 2, gms::ops::OP_DIRUPDATE);
    assert_eq!(s.nodes[2].directory().lookup(&p), Some((1, Version(1))));
    let named = take(&mut s, 2, 1, gms::ops::OP_DIRUPDATE);
    // Node 0's registration (claiming node 1's old identity) is refused: node 0 drops its
    // copy and tells node 1, which keeps its own.
    send(&mut s, 0, 2, gms::ops::OP_DIRUPDATE);
    send(&mut s, 2, 0, gms::ops::OP_DIRUPDATE);
    send(&mut s, 0, 1, gms::ops::OP_PUTDONE);
    assert!(s.nodes[0].held(&p).is_none());
    assert_eq!(put_result(&s, 1, mv), PutResult::Superseded);
    // The dead incarnation's drop arrives, then the new one's answer.
    s.net.queue_mut().insert(0, drop);
    s.deliver(false);
    assert!(s.nodes[1].held(&p).is_some(), "the copy the new directory names is kept");
    s.net.queue_mut().extend([named, answer]);
    s.run_net();
    s.settle();
    let get = s.getpage(3, p).unwrap();
    s.run_net();
    assert_eq!(hit(&s, 3, get).0, Version(1));
    s.check_converged();
    s.check_quiet();
}

#[test]
fn repair_registers_more_moved_copies_than_the_task_table_holds_and_leaves_room_for_puts() {
    let mut s = cluster(4, 64);
    // Node 1 holds 40 pages whose directory is node 3: far more than its 16 tasks.
    let pages: Vec<PageId> = (0..40).map(|k| s.page_with_dir(0, 3, k)).collect();
    for &p in &pages {
        let op = s.putpage(0, p, 1).unwrap();
        s.run_net();
        assert_eq!(put_result(&s, 0, op), PutResult::Stored { target: 1 });
    }
    s.crash(3);
    s.declare_failed(3);
    assert_eq!(s.nodes[1].stats().reregistered, 40);
    // The sweep keeps a quarter of the task table free: a put to node 1 during the repair
    // still registers its copy.
    let fresh = (0..).map(|k| s.page_with_dir(1, 0, k)).find(|p| !pages.contains(p)).unwrap();
    let put = s.putpage(0, fresh, 1).unwrap();
    // No clock tick (the scrub never runs): every copy is named again by the sweep alone.
    s.run_net();
    assert_eq!(put_result(&s, 0, put), PutResult::Stored { target: 1 });
    for &p in &pages {
        let g = s.getpage(2, p).unwrap();
        s.run_net();
        assert_eq!(hit(&s, 2, g).0, Version(1), "page {p:?}");
    }
    s.settle();
    s.check_converged();
    s.check_quiet();
}

/// Node `from` asks `node` for the newest version it knows in `family` (a client core's
/// operation: its completion goes to `client_done`).
fn top(s: &mut Sim, from: u16, node: u16, family: u64) -> TopResult {
    top_of(s, from, node, family, TopScope::Tables { from: 0 })
}

fn top_of(s: &mut Sim, from: u16, node: u16, family: u64, scope: TopScope) -> TopResult {
    s.client = Some(from);
    let i = usize::from(from);
    let op = s.nodes[i].top_version(s.clock.now(), &mut s.rpcs[i], node, family, scope, Mode::NonBlocking).unwrap();
    s.drain(from);
    s.run_net();
    let at = s.client_done.iter().position(|c| c.op == op).expect("the TOPVERSION completed");
    match s.client_done.remove(at).result {
        OpResult::Top(r) => r,
        r => panic!("expected a TOPVERSION answer, got {r:?}"),
    }
}

#[test]
fn top_version_names_the_newest_copy_or_floor_a_member_keeps_of_a_family() {
    let mut s = cluster(3, 16);
    // Replica 1 of a page of space 5: the family is the space without its top bits.
    let p = s.page_with_dir(5 | 1 << 60, 1, 0);
    let a = s.putpage(0, p, 2).unwrap();
    s.run_net();
    assert_eq!(put_result(&s, 0, a), PutResult::Stored { target: 2 });
    let v = s.nodes[2].held(&p).unwrap().version;
    let known = |top| TopResult::Known { top, next: None };
    assert_eq!(top(&mut s, 0, 2, 5), known(v), "the holder's copy");
    assert_eq!(top(&mut s, 0, 1, 5), known(v), "the directory's entry");
    assert_eq!(top(&mut s, 1, 1, 5), known(v), "a node asking itself");
    assert_eq!(top(&mut s, 0, 0, 5), known(Version(0)), "a node that knows nothing of it");
    assert_eq!(top(&mut s, 0, 2, 6), known(Version(0)), "another family");
    assert_eq!(top_of(&mut s, 0, 2, 5, TopScope::Page(p.page)), known(v), "the page, every replica of it");
    assert_eq!(top_of(&mut s, 0, 1, 5, TopScope::Page(p.page + 1)), known(Version(0)), "another page");
    // Discarded: the copy is gone, the directory's floor stays.
    s.client = None;
    let d = s.discard(0, p).unwrap();
    s.run_net();
    assert_eq!(s.result(0, d), Some(OpResult::Discard(DiscardResult::Done)));
    s.settle();
    assert_eq!(top(&mut s, 0, 2, 5), known(Version(0)), "the holder dropped it");
    assert!(matches!(top(&mut s, 0, 1, 5), TopResult::Known { top, next: None } if top >= v), "the floor");
}
