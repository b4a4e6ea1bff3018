// SPDX-License-Identifier: GPL-2.0-only
//! Messages from nodes not entitled to send them: crafted GMS messages (with the sender
//! id a NIC stamps) from a node outside the view, and from members that are not the
//! page's directory, target or holder. Each is refused, counted, and changes nothing.

use gms::directory::{ANY_SEQ, VERSION_LEAD, VERSION_STEP};
use gms::heartbeat::{Heartbeat, OP_HEARTBEAT};
use gms::ops::*;
use gms::prelude::*;
use netrpc::prelude::{Message, ReplyToken};
use netrpc::wire::{Header, Kind, HEADER_BYTES};
use sim::gms::*;

fn knobs(nodes: usize) -> Knobs {
    Knobs::quiet(nodes, 16)
}

/// Control bytes of a message `src` sends itself (its own origin, as NetRPC checks).
fn forge<M: Message>(kind: Kind, op: u16, origin: u16, hops: u8, body: &M) -> Vec<u8> {
    let b = netrpc::rpc::encode(body).unwrap();
    let token = ReplyToken { origin, record: 0, generation: 1, payload_kind: 0, payload_token: 0 };
    let h = Header { kind, op, token, hops, body_len: b.len as u16 };
    let mut c = vec![0u8; HEADER_BYTES + b.as_slice().len()];
    h.emit(&mut c);
    c[HEADER_BYTES..].copy_from_slice(b.as_slice());
    c
}

fn send(s: &mut Sim, src: u16, dst: u16, ctrl: Vec<u8>, payload: Option<((PageId, u64), u32)>) {
    s.net.queue_mut().push(Msg::new(src, dst, Body { ctrl, payload, tag: 0 }));
    s.run_net();
}

/// Node 1 puts `p` (directory node 0) into node 2's memory.
fn stored(s: &mut Sim, p: PageId) {
    let put = s.putpage(1, p, 2).unwrap();
    s.run_net();
    assert_eq!(s.result(1, put), Some(OpResult::Put(PutResult::Stored { target: 2 })));
    assert_eq!(s.nodes[0].directory().lookup(&p), Some((2, Version(1))));
}

#[track_caller]
fn still_served(s: &mut Sim, p: PageId) {
    let get = s.getpage(1, p).unwrap();
    s.run_net();
    assert!(matches!(s.result(1, get), Some(OpResult::Get(GetResult::Hit { version: Version(1), .. }))));
}

/// Node 3 is outside the view of nodes 0..3: nothing it sends about pages is acted on.
#[test]
fn a_node_outside_the_view_changes_nothing() {
    let mut s = Sim::new(0xe17, knobs(4));
    for i in 0..3 {
        s.nodes[i].set_members(s.clock.now(), &mut s.rpcs[i], 2, &[0, 1, 2]).unwrap();
    }
    let p = s.page_with_dir(0, 0, 0);
    stored(&mut s, p);
    let view = s.nodes[0].members().view();
    // It names itself the holder of a newer version.
    let up = DirUpdateReq { page: p, version: Version(99), seq: 0, view, site: 3 };
    send(&mut s, 3, 0, forge(Kind::Request, OP_DIRUPDATE, 3, 0, &up), None);
    // It un-names nobody, discards nothing, has no copy moved to it.
    let rm = DirRemoveReq { page: p, version: Version(1), seq: 0, site: 3 };
    send(&mut s, 3, 0, forge(Kind::Request, OP_DIRREMOVE, 3, 0, &rm), None);
    let dc = DiscardReq { page: p, version: Version(1) };
    send(&mut s, 3, 0, forge(Kind::Request, OP_DISCARDPAGE, 3, 0, &dc), None);
    let get = GetReq { page: p, want: Version(0), seq: 0, view, flags: GET_MOVING };
    send(&mut s, 3, 0, forge(Kind::Request, OP_GETPAGE, 3, 0, &get), None);
    // Its page is not stored.
    let q = s.page_with_dir(0, 0, 1);
    let tag = OpId { slot: 0, generation: 1 };
    let put = PutReq { page: q, version: Version(5), seq: 0, view, tag, flags: 0 };
    send(&mut s, 3, 1, forge(Kind::OneWay, OP_PUTPAGE, 3, 0, &put), Some(((q, 5), PAGE_LEN)));
    let g0 = s.nodes[0].stats();
    assert_eq!(
        (g0.rejected_updates, g0.rejected_removes, g0.rejected_discards, g0.rejected_gets),
        (1, 1, 1, 1),
        "{g0:?}"
    );
    assert_eq!(s.nodes[1].stats().rejected_puts, 1);
    assert_eq!(g0.unentitled(), 4);
    assert!(s.nodes[1].held(&q).is_none());
    assert_eq!(s.nodes[0].directory().lookup(&p), Some((2, Version(1))));
    assert!(s.nodes[2].held(&p).is_some());
    still_served(&mut s, p);
    s.check_frames();
}

/// Members may still not speak for others: only the directory node drops, verifies or
/// has a copy served as the caching site; a node names only itself; a heartbeat speaks
/// for its sender only; a PUTDONE answers only a put in flight to its sender.
#[test]
fn members_act_only_where_the_protocol_entitles_them() {
    let mut s = Sim::new(0xe18, knobs(3));
    let p = s.page_with_dir(0, 0, 0);
    stored(&mut s, p);
    let view = s.nodes[0].members().view();
    // Node 1 (not p's directory) tells holder 2 to drop p, asks whether it holds it, and
    // asks it for a moving read as if delegated.
    let drop = DropReq { page: p, version: Version(1), seq: 0 };
    send(&mut s, 1, 2, forge(Kind::Request, OP_DROPPAGE, 1, 0, &drop), None);
    send(&mut s, 1, 2, forge(Kind::Request, OP_DIRVERIFY, 1, 0, &drop), None);
    let get = GetReq { page: p, want: Version(1), seq: 0, view, flags: GET_MOVING };
    send(&mut s, 1, 2, forge(Kind::Request, OP_GETPAGE, 1, 1, &get), None);
    let direct = GetReq { flags: GET_MOVING | GET_DIRECT, ..get };
    send(&mut s, 1, 2, forge(Kind::Request, OP_GETPAGE, 1, 0, &direct), None);
    let g2 = s.nodes[2].stats();
    assert_eq!((g2.rejected_drops, g2.rejected_gets, g2.gets_served), (2, 2, 0), "{g2:?}");
    assert!(s.nodes[2].held(&p).is_some(), "the copy is kept");
    // Node 1 names node 2 (not itself).
    let up = DirUpdateReq { page: p, version: Version(7), seq: 0, view, site: 2 };
    send(&mut s, 1, 0, forge(Kind::Request, OP_DIRUPDATE, 1, 0, &up), None);
    assert_eq!(s.nodes[0].stats().rejected_updates, 1);
    assert_eq!(s.nodes[0].directory().lookup(&p), Some((2, Version(1))));
    // A heartbeat from node 1 claiming a new incarnation of node 2.
    let hb = Heartbeat { node: 2, incarnation: 77, held: 0, budget: 1 };
    send(&mut s, 1, 0, forge(Kind::OneWay, OP_HEARTBEAT, 1, 0, &hb), None);
    assert_eq!(s.nodes[0].stats().rejected_heartbeats, 1);
    let own = Heartbeat { node: 1, ..hb };
    send(&mut s, 1, 0, forge(Kind::OneWay, OP_HEARTBEAT, 1, 0, &own), None);
    assert_eq!(s.nodes[0].stats().rejected_heartbeats, 1, "its own heartbeat is fine");
    // A discard of u64::MAX would refuse every version: refused.
    let dc = DiscardReq { page: p, version: Version(u64::MAX) };
    send(&mut s, 1, 0, forge(Kind::Request, OP_DISCARDPAGE, 1, 0, &dc), None);
    assert_eq!(s.nodes[0].stats().rejected_discards, 1);
    still_served(&mut s, p);

    // A put from node 1 to node 2 in flight: node 0 (not the target) answers it first.
    let q = s.page_with_dir(0, 0, 1);
    let put = s.putpage(1, q, 2).unwrap();
    let m = s.net.queue().iter().find(|m| m.dst == 2).expect("the PUTPAGE").clone();
    let (_, body) = Header::parse(&m.ctrl).unwrap();
    let req = PutReq::decode(body).unwrap();
    let done =
        PutDone { page: q, version: req.version, tag: req.tag, status: PutStatus::Stored, site: 0, answer: None };
    s.net.queue_mut().push(Msg::new(
        0,
        1,
        Body { ctrl: forge(Kind::OneWay, OP_PUTDONE, 0, 0, &done), payload: None, tag: 0 },
    ));
    // The target claiming another site is no better.
    let other = PutDone { site: 0, ..done };
    s.net.queue_mut().push(Msg::new(
        2,
        1,
        Body { ctrl: forge(Kind::OneWay, OP_PUTDONE, 2, 0, &other), payload: None, tag: 0 },
    ));
    s.net.queue_mut().rotate_right(2);
    s.deliver(false);
    s.deliver(false);
    assert_eq!(s.nodes[1].stats().rejected_putdones, 2);
    assert_eq!(s.result(1, put), None, "a forged PUTDONE completed the put");
    s.run_net();
    assert_eq!(s.result(1, put), Some(OpResult::Put(PutResult::Stored { target: 2 })));
    s.settle();
    s.check_converged();
    s.check_frames();
}

/// A member that holds nothing names itself the holder of a page at `u64::MAX`, then at a
/// version far beyond every writer's (issue 34): both refused and counted. Accepted, either
/// would have the real holder drop its copy and leave a floor every later put is
/// `Superseded` by. The holder keeps its copy, reads hit, and later puts are stored.
#[test]
fn a_registration_beyond_the_version_lead_blocks_nothing() {
    let mut s = Sim::new(0xe19, knobs(3));
    let p = s.page_with_dir(0, 0, 0);
    stored(&mut s, p);
    let view = s.nodes[0].members().view();
    for (i, v) in [u64::MAX, u64::MAX / 2 + 1].into_iter().enumerate() {
        let up = DirUpdateReq { page: p, version: Version(v), seq: 0, view, site: 1 };
        send(&mut s, 1, 0, forge(Kind::Request, OP_DIRUPDATE, 1, 0, &up), None);
        assert_eq!(s.nodes[0].stats().rejected_updates, i as u64 + 1, "version {v:#x} refused");
    }
    s.settle();
    assert_eq!(s.nodes[0].stats().unentitled(), 2);
    assert_eq!(s.nodes[0].directory().lookup(&p), Some((2, Version(1))), "the entry still names the holder");
    assert!(s.nodes[2].held(&p).is_some(), "the holder keeps its copy");
    assert_eq!(s.nodes[2].stats().pages_dropped, 0);
    still_served(&mut s, p);
    // Later puts are stored, and read back at their version.
    for (v, target) in [(2u64, 0u16), (3, 2)] {
        let put = s.putpage(1, p, target).unwrap();
        s.run_net();
        assert_eq!(s.result(1, put), Some(OpResult::Put(PutResult::Stored { target })), "put of version {v}");
        assert_eq!(s.nodes[0].directory().lookup(&p), Some((target, Version(v))));
        let get = s.getpage(1, p).unwrap();
        s.run_net();
        let hit =
            matches!(s.result(1, get), Some(OpResult::Get(GetResult::Hit { version, .. })) if version == Version(v));
        assert!(hit, "version {v} read back: {:?}", s.result(1, get));
    }
    s.settle();
    s.check_converged();
    s.check_frames();
}

/// A member that holds nothing names itself the holder of a page at the newest version the
/// directory knows plus just under [`VERSION_LEAD`] (inside the lead, so the lead alone
/// lets it through): before the step rule, the holder was told to drop its copy, reads
/// missed, and every later put was `Superseded` for good. A leap over a firm named copy is
/// refused and counted: the holder keeps its copy, reads hit, later puts are stored. So
/// are a discard and a movepage (of junk) leaping over it.
#[test]
fn a_leap_inside_the_lead_over_a_named_copy_blocks_nothing() {
    let mut s = Sim::new(0xe1a, knobs(3));
    let p = s.page_with_dir(0, 0, 0);
    stored(&mut s, p);
    let view = s.nodes[0].members().view();
    let up = DirUpdateReq { page: p, version: Version(1 + (VERSION_LEAD - 1)), seq: 0, view, site: 1 };
    send(&mut s, 1, 0, forge(Kind::Request, OP_DIRUPDATE, 1, 0, &up), None);
    s.settle();
    assert_eq!(s.nodes[0].stats().rejected_updates, 1, "the leap is refused and counted");
    assert_eq!(s.nodes[0].directory().lookup(&p), Some((2, Version(1))), "the entry still names the holder");
    assert!(s.nodes[2].held(&p).is_some(), "the holder keeps its copy");
    assert_eq!(s.nodes[2].stats().pages_dropped, 0);
    still_served(&mut s, p);
    // A discard leaping over the named copy, and a movepage of junk at such a version:
    // the discard is refused, the target's registration too (it drops the junk).
    let dc = DiscardReq { page: p, version: Version(1 + 2 * VERSION_STEP) };
    send(&mut s, 1, 0, forge(Kind::Request, OP_DISCARDPAGE, 1, 0, &dc), None);
    assert_eq!(s.nodes[0].stats().rejected_discards, 1);
    let tag = OpId { slot: 0, generation: 1 };
    let mv = PutReq { page: p, version: Version(1 + 2 * VERSION_STEP), seq: 1, view, tag, flags: 0 };
    send(&mut s, 1, 0, forge(Kind::OneWay, OP_MOVEPAGE, 1, 0, &mv), Some(((p, 99), PAGE_LEN)));
    // To the holder itself: refused before its copy is given up for it.
    let refused = s.nodes[2].stats().puts_refused;
    send(&mut s, 1, 2, forge(Kind::OneWay, OP_MOVEPAGE, 1, 0, &mv), Some(((p, 99), PAGE_LEN)));
    assert_eq!(s.nodes[2].stats().puts_refused, refused + 1);
    s.settle();
    assert!(s.nodes[0].held(&p).is_none(), "the target dropped the junk");
    assert_eq!(s.nodes[0].directory().lookup(&p), Some((2, Version(1))));
    assert!(s.nodes[2].held(&p).is_some());
    still_served(&mut s, p);
    for (v, target) in [(2u64, 0u16), (3, 2)] {
        let put = s.putpage(1, p, target).unwrap();
        s.run_net();
        assert_eq!(s.result(1, put), Some(OpResult::Put(PutResult::Stored { target })), "put of version {v}");
        let get = s.getpage(2, p).unwrap();
        s.run_net();
        let hit =
            matches!(s.result(2, get), Some(OpResult::Get(GetResult::Hit { version, .. })) if version == Version(v));
        assert!(hit, "version {v} read back: {:?}", s.result(2, get));
    }
    s.settle();
    s.check_converged();
    s.check_frames();
}

/// A member that holds nothing claims the named copy with one registration: a step above
/// it (what its put would register), or a hand-over at the named version claiming the
/// named identity (what a movepage's target registers). Before the directory confirmed
/// displacements (issue 34), the holder was told to drop its copy at once: reads missed
/// and the page was lost until rewritten. Now the directory asks the claimant first; it
/// holds nothing, so the displaced copy is named again and the claim counted.
#[test]
fn a_claimed_copy_its_sender_does_not_hold_displaces_nothing() {
    let mut s = Sim::new(0xe1d, knobs(3));
    let p = s.page_with_dir(0, 0, 0);
    stored(&mut s, p);
    let view = s.nodes[0].members().view();
    let named = |s: &Sim| s.nodes[0].directory().named(&p).unwrap();
    let claims = [(Version(1 + 16), 0), (Version(1), named(&s).2)];
    for (i, (version, seq)) in claims.into_iter().enumerate() {
        let seq = if seq == 0 { 0 } else { named(&s).2 };
        let up = DirUpdateReq { page: p, version, seq, view, site: 1 };
        send(&mut s, 1, 0, forge(Kind::Request, OP_DIRUPDATE, 1, 0, &up), None);
        s.settle();
        assert_eq!(s.nodes[0].stats().rejected_claims, i as u64 + 1, "{version:?}: counted");
        assert_eq!(s.nodes[0].directory().lookup(&p), Some((2, Version(1))), "{version:?}: the holder named again");
        assert!(s.nodes[2].held(&p).is_some(), "{version:?}: the holder keeps its copy");
        assert_eq!(s.nodes[2].stats().pages_dropped, 0);
        for r in 0..3 {
            let get = s.getpage(r, p).unwrap();
            s.run_net();
            let hit = matches!(s.result(r, get), Some(OpResult::Get(GetResult::Hit { version: Version(1), .. })));
            assert!(hit, "{version:?}: read at node {r}: {:?}", s.result(r, get));
        }
    }
    // Honest puts still displace the copy they supersede, and moves hand it over.
    for (v, target) in [(2u64, 1u16), (3, 2)] {
        let put = s.putpage(0, p, target).unwrap();
        s.run_net();
        assert_eq!(s.result(0, put), Some(OpResult::Put(PutResult::Stored { target })), "put of version {v}");
        assert_eq!(s.nodes[0].directory().lookup(&p), Some((target, Version(v))));
    }
    s.settle();
    assert!(s.nodes[1].held(&p).is_none(), "the superseded copy was dropped");
    s.check_converged();
    s.check_frames();
}

/// A member that holds nothing names itself the holder of a page nobody holds, at a leap
/// (far beyond every version the directory knows, inside the lead). Accepted
/// provisionally, it bound the page against lower versions for the ttl: a new page's first
/// put was `Superseded` for 10 s (issue 34). The directory asks the member whether it holds
/// the copy; it does not, so the leap is withdrawn, counted, and the first put is stored.
/// A real writer's leap (its put stored at such a version) is confirmed, and binds for the
/// ttl only.
#[test]
fn a_leap_over_no_named_copy_is_withdrawn_unless_its_site_holds_it() {
    const TTL: u64 = 2_000;
    let mut s = Sim::new(0xe1b, knobs(3));
    let ids = [0u16, 1, 2];
    for i in 0..3 {
        let cfg = GmsConfig { tombstone_ttl: TTL, ..*s.nodes[i].config() };
        s.nodes[i].set_identity(i as u16, cfg);
        s.nodes[i].set_members(s.clock.now(), &mut s.rpcs[i], 1, &ids).unwrap();
    }
    let p = s.page_with_dir(0, 0, 0);
    let view = s.nodes[0].members().view();
    let up = DirUpdateReq { page: p, version: Version(2 * VERSION_STEP), seq: 0, view, site: 1 };
    send(&mut s, 1, 0, forge(Kind::Request, OP_DIRUPDATE, 1, 0, &up), None);
    assert_eq!(s.nodes[0].directory().lookup(&p), None, "withdrawn: node 1 holds nothing");
    assert_eq!(s.nodes[0].stats().rejected_claims, 1);
    let put = s.putpage(2, p, 0).unwrap();
    s.run_net();
    assert_eq!(s.result(2, put), Some(OpResult::Put(PutResult::Stored { target: 0 })), "the first put is stored");
    assert_eq!(s.nodes[0].directory().lookup(&p), Some((0, Version(1))));
    let get = s.getpage(1, p).unwrap();
    s.run_net();
    let hit = matches!(s.result(1, get), Some(OpResult::Get(GetResult::Hit { version: Version(1), .. })));
    assert!(hit, "{:?}", s.result(1, get));

    // A writer's put at a leap, stored at node 1: confirmed, it binds for the ttl.
    let q = s.page_with_dir(0, 0, 1);
    s.issued.insert(q, 2 * VERSION_STEP - 1);
    let put = s.putpage(2, q, 1).unwrap();
    s.run_net();
    assert_eq!(s.result(2, put), Some(OpResult::Put(PutResult::Stored { target: 1 })));
    assert_eq!(s.nodes[0].directory().lookup(&q), Some((1, Version(2 * VERSION_STEP))));
    assert!(s.nodes[0].directory().entry(&q).unwrap().provisional());
    assert_eq!(s.nodes[0].stats().rejected_claims, 1, "confirmed");
    s.issued.insert(q, 0);
    let put = s.putpage(2, q, 0).unwrap();
    s.run_net();
    assert_eq!(s.result(2, put), Some(OpResult::Put(PutResult::Superseded)), "it binds within the ttl");
    s.tick(TTL + 1);
    s.run_net();
    let put = s.putpage(2, q, 0).unwrap();
    s.run_net();
    assert_eq!(s.result(2, put), Some(OpResult::Put(PutResult::Stored { target: 0 })), "lapsed");
    assert_eq!(s.nodes[0].directory().lookup(&q), Some((0, Version(2))));
    s.settle();
    s.check_converged();
    s.check_frames();
}

/// A member asks the directory for a moving read of a page whose space does not move
/// (its reply goes to a call its GMS never made, so nobody would adopt the copy): the
/// holder serves it as a plain read and keeps its copy.
#[test]
fn a_moving_read_of_a_space_that_does_not_move_hands_nothing_over() {
    let mut s = Sim::new(0xe1c, knobs(3));
    let p = s.page_with_dir(0, 0, 0);
    stored(&mut s, p);
    let view = s.nodes[0].members().view();
    let get = GetReq { page: p, want: Version(0), seq: 0, view, flags: GET_MOVING };
    send(&mut s, 1, 0, forge(Kind::Request, OP_GETPAGE, 1, 0, &get), None);
    s.settle();
    let g2 = s.nodes[2].stats();
    assert_eq!((g2.gets_served, g2.gets_moved), (1, 0), "{g2:?}");
    assert!(s.nodes[2].held(&p).is_some(), "the holder keeps its copy");
    assert_eq!(s.nodes[0].directory().lookup(&p), Some((2, Version(1))));
    still_served(&mut s, p);
    s.check_converged();
    s.check_frames();
}

/// Random rounds of honest puts and reads among members 0..3, and of messages from member
/// 3 (its own GMS honest, its host crafting packets) that the rules refuse or bound: leaps
/// inside the lead over a firm copy and registrations beyond the lead, discards leaping over the named copy,
/// drops, verifies and removals it is not entitled to, moving reads of a space that does
/// not move, movepages of junk at a leap, heartbeats alternating between two of its
/// incarnations. Every honest put is stored and every honest read hits the last version
/// put: no page is blocked and no holder gives its copy up.
#[test]
fn a_hostile_member_blocks_no_page_and_takes_no_copy() {
    use sim::rng::Rng;
    for seed in 0..24u64 {
        let mut s = Sim::new(0xe200 + seed, knobs(4));
        let mut rng = Rng::new(0x4057_11e0 + seed, 0);
        let pages: Vec<PageId> = (0..6).map(|i| s.page_with_dir(0, (i % 3) as u16, i / 3)).collect();
        let mut last = vec![0u64; pages.len()];
        let view = s.nodes[0].members().view();
        for round in 0..120u64 {
            let k = rng.below(pages.len() as u64) as usize;
            let p = pages[k];
            let dir = s.nodes[0].members().directory_of(&p).unwrap();
            let ctx = format!("seed {seed} round {round} {p:?}");
            match rng.below(4) {
                0 => {
                    let w = rng.below(3) as u16;
                    let t = (w + 1 + rng.below(2) as u16) % 3;
                    let put = s.putpage(w, p, t).unwrap();
                    s.run_net();
                    last[k] += 1;
                    assert_eq!(s.result(w, put), Some(OpResult::Put(PutResult::Stored { target: t })), "{ctx}");
                }
                1 if last[k] > 0 => {
                    let r = rng.below(3) as u16;
                    let get = s.getpage(r, p).unwrap();
                    s.run_net();
                    let got = s.result(r, get);
                    let hit = matches!(got, Some(OpResult::Get(GetResult::Hit { version, .. })) if version == Version(last[k]));
                    assert!(hit, "{ctx}: read at node {r}: {got:?}, {} put", last[k]);
                }
                _ => hostile(&mut s, &mut rng, p, dir, last[k], view, round),
            }
        }
        s.settle();
        s.check_converged();
        s.check_frames();
        assert!(s.nodes.iter().take(3).map(|n| n.stats().unentitled()).sum::<u64>() > 0);
    }
}

/// One message from member 3 about `p` (directory `dir`, last put at `known`).
fn hostile(s: &mut Sim, rng: &mut sim::rng::Rng, p: PageId, dir: u16, known: u64, view: u64, round: u64) {
    let leap = Version(known + 2 * VERSION_STEP + rng.below(VERSION_LEAD - 2 * VERSION_STEP));
    let victim = rng.below(3) as u16;
    // Leaps (refused over a firm copy, withdrawn over none: member 3 holds nothing), or
    // beyond the lead.
    let (ctrl, to, payload) = match rng.below(11) {
        // A step, or a hand-over claiming the named copy's identity: confirmed with member
        // 3 first, which holds nothing, so the holder keeps its copy.
        9 | 10 if known > 0 => {
            let Some((_, v, seq)) = s.nodes[dir as usize].directory().named(&p) else { return };
            let (version, seq) = if rng.pct(50) { (Version(v.0 + 1 + rng.below(VERSION_STEP)), 0) } else { (v, seq) };
            let up = DirUpdateReq { page: p, version, seq, view, site: 3 };
            (forge(Kind::Request, OP_DIRUPDATE, 3, 0, &up), dir, None)
        }
        0 => (
            forge(Kind::Request, OP_DIRUPDATE, 3, 0, &DirUpdateReq { page: p, version: leap, seq: 0, view, site: 3 }),
            dir,
            None,
        ),
        1 => {
            // Beyond the lead above the horizon too, which steps move (120 rounds < 2^8 steps).
            let beyond = known + VERSION_LEAD + (VERSION_STEP << 8) + 1;
            let v = Version(if rng.pct(50) { u64::MAX } else { beyond + rng.below(1 << 40) });
            (
                forge(Kind::Request, OP_DIRUPDATE, 3, 0, &DirUpdateReq { page: p, version: v, seq: 0, view, site: 3 }),
                dir,
                None,
            )
        }
        2 if known > 0 => {
            (forge(Kind::Request, OP_DISCARDPAGE, 3, 0, &DiscardReq { page: p, version: leap }), dir, None)
        }
        3 => (forge(Kind::Request, OP_DROPPAGE, 3, 0, &DropReq { page: p, version: leap, seq: ANY_SEQ }), victim, None),
        4 => (
            forge(Kind::Request, OP_DIRVERIFY, 3, 0, &DropReq { page: p, version: Version(known), seq: 0 }),
            victim,
            None,
        ),
        5 => {
            let rm = DirRemoveReq { page: p, version: leap, seq: ANY_SEQ, site: victim };
            (forge(Kind::Request, OP_DIRREMOVE, 3, 0, &rm), dir, None)
        }
        6 => {
            let get = GetReq { page: p, want: Version(0), seq: 0, view, flags: GET_MOVING };
            (forge(Kind::Request, OP_GETPAGE, 3, 0, &get), dir, None)
        }
        7 if known > 0 => {
            let tag = OpId { slot: 0, generation: 1 };
            let mv = PutReq { page: p, version: leap, seq: rng.below(4), view, tag, flags: 0 };
            (forge(Kind::OneWay, OP_MOVEPAGE, 3, 0, &mv), victim, Some(((p, 999_999), PAGE_LEN)))
        }
        _ => {
            let hb = Heartbeat { node: 3, incarnation: 1 + round % 2, held: 0, budget: 1 };
            (forge(Kind::OneWay, OP_HEARTBEAT, 3, 0, &hb), victim, None)
        }
    };
    send(s, 3, to, ctrl, payload);
}
