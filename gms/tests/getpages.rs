// SPDX-License-Identifier: GPL-2.0-only
//! `GETPAGES` on the simulated cluster: up to eight pages of one space from the member
//! that holds them, in one round trip, as one gathered payload scattered into the
//! requester's group frame. A hit carries every page named, in the mask's order, each at
//! the version asked for or newer; anything less is a miss the requester recovers from
//! page by page. Requests that cannot be asked are refused before anything is sent;
//! requests the holder is not entitled to serve are refused and counted; a lost reply or
//! a dead holder ends in a failed miss, never a hang.

use gms::ops::*;
use gms::prelude::*;
use netrpc::prelude::{Message, Mode, ReplyTo, ReplyToken, RpcError};
use netrpc::wire::{Header, Kind, HEADER_BYTES};
use sim::gms::*;

fn cluster(nodes: usize) -> Sim {
    Sim::new(0x6e7a_9a6e, Knobs::quiet(nodes, 16))
}

/// The pages `mask` names from `first`, in order.
fn named(first: PageId, mask: u64) -> Vec<PageId> {
    (0..64).filter(|i| mask >> i & 1 == 1).map(|i| PageId::new(first.space, first.page + i)).collect()
}

/// A `GETPAGES` from `node` to `holder` (`GmsNode::getpages_hinted`) into a fresh group
/// frame of `pieces` page-sized pieces armed under one IPT token. On `Err` nothing may have
/// been sent and the frame must still be the caller's (freed here).
#[allow(clippy::too_many_arguments)]
fn getpages(
    s: &mut Sim,
    node: u16,
    first: PageId,
    mask: u64,
    known: &[u64],
    holder: u16,
    pieces: usize,
    mode: Mode,
) -> Result<OpId, GmsError> {
    let frame = s.w.borrow_mut().group(node, pieces);
    let list = s.w.borrow().groups[&frame].clone();
    s.next_token += 1;
    let token = s.next_token;
    s.w.borrow_mut().ipt[node as usize].insert(token, frame);
    let versions: Vec<Version> = known.iter().map(|&v| Version(v)).collect();
    let reply_to = ReplyTo::Solicited { token, frame };
    let i = node as usize;
    let (sent, gets, slots) = (s.net.len(), s.nodes[i].stats().gets, s.nodes[i].ops_in_use());
    let r = s.nodes[i].getpages_hinted(s.clock.now(), &mut s.rpcs[i], first, mask, &versions, holder, reply_to, mode);
    match r {
        Ok(op) => {
            let known = known.to_vec();
            let rec = PagesRec { first, mask, known, frame, pieces: list, result: None, data: Vec::new() };
            assert!(s.getpages.insert((node, op), rec).is_none(), "op id {op:?} reused while live");
            s.settle_node(node);
        }
        Err(_) => {
            s.settle_node(node);
            assert_eq!(s.net.len(), sent, "a refused getpages sent something");
            assert_eq!(s.w.borrow().frames[&frame].state, FState::Live, "a refused getpages took the frame");
            assert_eq!(s.nodes[i].ops_in_use(), slots, "a refused getpages holds an operation slot");
            assert_eq!(s.nodes[i].stats().gets, gets, "a refused getpages is counted");
            s.w.borrow_mut().free(node, frame);
        }
    }
    r
}

/// How `node`'s getpages `op` ended.
#[track_caller]
fn result(s: &Sim, node: u16, op: OpId) -> GetResult<Frame> {
    s.getpages[&(node, op)].result.unwrap_or_else(|| panic!("getpages {op:?} of node {node} not completed"))
}

/// A hit's version and length, and what its pieces held (one per page named).
#[track_caller]
fn hit(s: &Sim, node: u16, op: OpId) -> (Version, u32, Vec<(PageId, u64)>) {
    let rec = &s.getpages[&(node, op)];
    match result(s, node, op) {
        GetResult::Hit { version, len, .. } => {
            let n = rec.mask.count_ones() as usize;
            (version, len, rec.data[..n].iter().map(|d| d.expect("a piece written")).collect())
        }
        r => panic!("expected a hit, got {r:?}"),
    }
}

#[track_caller]
fn miss(s: &Sim, node: u16, op: OpId) -> MissReason {
    match result(s, node, op) {
        GetResult::Miss { reason, .. } => reason,
        r => panic!("expected a miss, got {r:?}"),
    }
}

/// `from` puts each page into `to`'s memory; each is stored.
fn put_all(s: &mut Sim, from: u16, pages: &[PageId], to: u16) {
    for &p in pages {
        let op = s.putpage(from, p, to).unwrap();
        s.run_net();
        assert_eq!(s.result(from, op), Some(OpResult::Put(PutResult::Stored { target: to })), "{p:?}");
    }
}

/// The directory's entry for each page (in node 0's view).
fn entries(s: &Sim, pages: &[PageId]) -> Vec<Option<(u16, Version)>> {
    pages
        .iter()
        .map(|p| s.nodes[s.nodes[0].members().directory_of(p).unwrap() as usize].directory().lookup(p))
        .collect()
}

fn done(s: &mut Sim) {
    s.settle();
    s.check_converged();
    s.check_quiet();
}

#[test]
fn eight_pages_come_from_their_holder_in_one_round_trip() {
    let mut s = cluster(3);
    let first = PageId::new(0, 100);
    let pages = named(first, 0xff);
    put_all(&mut s, 1, &pages, 2);
    let dir = entries(&s, &pages);
    let (c1, c2) = (s.nodes[1].stats(), s.nodes[2].stats());
    s.nodes[2].set_epoch(7);

    let op = getpages(&mut s, 1, first, 0xff, &[1; 8], 2, 8, Mode::NonBlocking).unwrap();
    // One request straight to the holder, one reply carrying the eight pages as one payload.
    assert_eq!(s.net.queue().iter().map(|m| (m.src, m.dst, m.payload.is_some())).collect::<Vec<_>>(), [(1, 2, false)]);
    s.deliver(false);
    assert_eq!(s.net.len(), 1);
    assert_eq!((s.net.queue()[0].src, s.net.queue()[0].dst), (2, 1));
    assert_eq!(s.net.queue()[0].payload.map(|p| p.1), Some(8 * PAGE_LEN));
    assert_ne!(s.net.queue()[0].tag, 0, "the payload is tagged with the requester's IPT token");
    s.run_net();
    let want: Vec<(PageId, u64)> = pages.iter().map(|&p| (p, 1)).collect();
    assert_eq!(hit(&s, 1, op), (Version(1), 8 * PAGE_LEN, want.clone()));
    assert!(matches!(result(&s, 1, op), GetResult::Hit { via: Via::TwoWay, held: false, .. }));

    // Counted per page; the holder's copies were touched in its current epoch; neither the
    // directory nor any other node took part.
    let (d1, d2) = (s.nodes[1].stats(), s.nodes[2].stats());
    assert_eq!((d1.gets - c1.gets, d1.hits_2way - c1.hits_2way), (8, 8));
    assert_eq!(d2.gets_served - c2.gets_served, 8);
    assert!(pages.iter().all(|p| s.nodes[2].held(p).unwrap().last_access == 7));
    assert_eq!(entries(&s, &pages), dir);
    assert_eq!(s.nodes[0].stats().gets_delegated, 0);
    assert_eq!(s.nodes[0].stats().gets_served, 0);

    // The same in wait mode, completed through `take`.
    let op = getpages(&mut s, 1, first, 0xff, &[1; 8], 2, 8, Mode::Wait).unwrap();
    s.run_net();
    assert_eq!(hit(&s, 1, op), (Version(1), 8 * PAGE_LEN, want));
    assert_eq!(s.nodes[1].ops_in_use(), 0);
    done(&mut s);
}

#[test]
fn a_mask_with_gaps_names_its_pages_in_order_at_their_own_versions() {
    let mut s = cluster(3);
    let first = PageId::new(0, 40);
    let mask = 1 | 1 << 3 | 1 << 9 | 1 << 40;
    let pages = named(first, mask);
    assert_eq!(pages.iter().map(|p| p.page).collect::<Vec<_>>(), [40, 43, 49, 80]);
    put_all(&mut s, 1, &pages, 2);
    // Newer versions of two of them (the first page not the oldest), and a page in a gap
    // the reply must leave out.
    put_all(&mut s, 1, &[pages[0], pages[2], pages[2]], 2);
    put_all(&mut s, 1, &[PageId::new(0, 41)], 2);

    let want = vec![(pages[0], 2), (pages[1], 1), (pages[2], 3), (pages[3], 1)];
    let op = getpages(&mut s, 1, first, mask, &[2, 1, 3, 1], 2, 8, Mode::NonBlocking).unwrap();
    s.run_net();
    // The version is the oldest page's; the length is the whole payload; the four
    // pieces past the pages stay empty (the sim checks).
    assert_eq!(hit(&s, 1, op), (Version(1), 4 * PAGE_LEN, want.clone()));

    // Knowing older versions is no obstacle: a copy at least that new is served.
    let op = getpages(&mut s, 0, first, mask, &[1, 0, 2, 1], 2, 4, Mode::NonBlocking).unwrap();
    s.run_net();
    assert_eq!(hit(&s, 0, op), (Version(1), 4 * PAGE_LEN, want));

    // The last page of the span, 63 above the first.
    let last = PageId::new(0, 40 + 63);
    put_all(&mut s, 0, &[last], 2);
    let op = getpages(&mut s, 1, first, 1 | 1 << 63, &[2, 1], 2, 2, Mode::NonBlocking).unwrap();
    s.run_net();
    assert_eq!(hit(&s, 1, op), (Version(1), 2 * PAGE_LEN, vec![(first, 2), (last, 1)]));
    done(&mut s);
}

#[test]
fn one_page_missing_at_the_holder_is_a_miss_then_read_page_by_page() {
    let mut s = cluster(3);
    let first = PageId::new(0, 200);
    let pages = named(first, 0x1f);
    let away = pages[2];
    let at2: Vec<PageId> = pages.iter().copied().filter(|&p| p != away).collect();
    put_all(&mut s, 1, &at2, 2);
    put_all(&mut s, 1, &[away], 0);
    let (c1, c2) = (s.nodes[1].stats(), s.nodes[2].stats());

    let op = getpages(&mut s, 1, first, 0x1f, &[1; 5], 2, 5, Mode::NonBlocking).unwrap();
    s.run_net();
    assert_eq!(miss(&s, 1, op), MissReason::NotCached);
    assert!(matches!(result(&s, 1, op), GetResult::Miss { frame: Some(_), .. }), "the frame comes back");
    assert_eq!(s.nodes[1].stats().misses - c1.misses, 5);
    assert_eq!(s.nodes[2].stats().gets_served, c2.gets_served, "nothing served");

    // Page by page: the holder's four hit; the fifth misses there and is found through
    // its directory.
    for &p in &at2 {
        let g = s.getpage_hinted(1, p, 2).unwrap();
        s.run_net();
        assert!(matches!(s.result(1, g), Some(OpResult::Get(GetResult::Hit { version: Version(1), .. }))));
    }
    let g = s.getpage_hinted(1, away, 2).unwrap();
    s.run_net();
    assert!(matches!(s.result(1, g), Some(OpResult::Get(GetResult::Miss { reason: MissReason::NotCached, .. }))));
    let g = s.getpage(1, away).unwrap();
    s.run_net();
    assert!(matches!(s.result(1, g), Some(OpResult::Get(GetResult::Hit { version: Version(1), .. }))));
    done(&mut s);
}

#[test]
fn a_copy_older_than_known_or_of_another_length_is_a_miss() {
    let mut s = cluster(3);
    let first = PageId::new(0, 300);
    let pages = named(first, 0b111);
    put_all(&mut s, 1, &pages, 2);
    let served = s.nodes[2].stats().gets_served;
    let op = getpages(&mut s, 1, first, 0b111, &[1, 2, 1], 2, 3, Mode::NonBlocking).unwrap();
    s.run_net();
    assert_eq!(miss(&s, 1, op), MissReason::NotCached);
    assert_eq!(s.nodes[2].stats().gets_served, served);
    let op = getpages(&mut s, 1, first, 0b111, &[1, 1, 1], 2, 3, Mode::NonBlocking).unwrap();
    s.run_net();
    assert_eq!(hit(&s, 1, op).0, Version(1));

    // A page held at half a page's length next to whole ones: the payload could not be
    // split evenly, so the holder answers a miss.
    let half = PageId::new(0, 303);
    s.issued.insert(half, 1);
    let f = s.w.borrow_mut().alloc(2, Some((half, 1)));
    s.nodes[2].hold(s.clock.now(), half, Version(1), f, PAGE_LEN / 2, false).unwrap();
    s.settle_node(2);
    s.run_net();
    let op = getpages(&mut s, 1, first, 0b1001, &[1, 1], 2, 2, Mode::NonBlocking).unwrap();
    s.run_net();
    assert_eq!(miss(&s, 1, op), MissReason::NotCached);

    // Copies more than u32::MAX versions apart, though the versions asked for are close:
    // the reply could not name them, so the holder answers a miss.
    let far = PageId::new(0, 304);
    let v = u64::from(u32::MAX) + 2;
    s.issued.insert(far, v);
    let f = s.w.borrow_mut().alloc(2, Some((far, v)));
    s.nodes[2].hold(s.clock.now(), far, Version(v), f, PAGE_LEN, false).unwrap();
    s.settle_node(2);
    s.run_net();
    let op = getpages(&mut s, 1, first, 0b10001, &[1, 1], 2, 2, Mode::NonBlocking).unwrap();
    s.run_net();
    assert_eq!(miss(&s, 1, op), MissReason::NotCached);
    assert_eq!(s.nodes[2].stats().gets_served, served + 3, "only the one hit above served");
    done(&mut s);
}

#[test]
fn requests_that_cannot_be_asked_are_refused_before_anything_is_sent() {
    let mut s = cluster(4);
    let first = PageId::new(0, 500);
    let ask = |s: &mut Sim, first: PageId, mask: u64, known: &[u64], holder: u16| {
        getpages(s, 1, first, mask, known, holder, 8, Mode::NonBlocking)
    };
    let bad = Err(GmsError::BadPages);
    assert_eq!(ask(&mut s, first, 0, &[], 2), bad, "no page");
    assert_eq!(ask(&mut s, first, 0x1ff, &[1; 9], 2), bad, "nine pages");
    assert_eq!(ask(&mut s, first, 0b111, &[1, 1], 2), bad, "a version missing");
    assert_eq!(ask(&mut s, first, 0b111, &[1; 4], 2), bad, "a version too many");
    let span = u64::from(u32::MAX);
    assert_eq!(ask(&mut s, first, 0b11, &[5, 6 + span], 2), bad, "versions too far apart");
    assert_eq!(ask(&mut s, PageId::new(0, u64::MAX - 1), 0b101, &[1, 1], 2), bad, "past the end of the space");
    assert_eq!(ask(&mut s, PageId::new(MOVING_SPACE, 0), 0b11, &[1, 1], 2), bad, "a space with moving reads");
    // A bad request is BadPages whoever it names.
    assert_eq!(ask(&mut s, first, 0, &[], 1), bad);

    assert_eq!(ask(&mut s, first, 0b11, &[1, 1], 1), Err(GmsError::BadTarget), "itself");
    assert_eq!(ask(&mut s, first, 0b11, &[1, 1], 9), Err(GmsError::BadTarget), "no such node");
    s.crash(3);
    s.declare_failed(3);
    assert_eq!(ask(&mut s, first, 0b11, &[1, 1], 3), Err(GmsError::BadTarget), "a node gone from the view");

    // No operation slot free: refused, the frame still the caller's.
    let slots: Vec<OpId> = (0..OPS).map(|_| ask(&mut s, first, 1, &[0], 2).unwrap()).collect();
    assert_eq!(ask(&mut s, first, 1, &[0], 2), Err(GmsError::OpsFull));
    s.run_net();
    assert!(slots.iter().all(|&op| miss(&s, 1, op) == MissReason::NotCached));

    // The limits themselves are fine: eight pages, versions exactly u32::MAX apart.
    let op = ask(&mut s, first, 0xff00_0000_0000_0000, &[1; 8], 2).unwrap();
    s.run_net();
    assert_eq!(miss(&s, 1, op), MissReason::NotCached);
    let op = ask(&mut s, first, 0b11, &[5, 5 + span], 2).unwrap();
    s.run_net();
    assert_eq!(miss(&s, 1, op), MissReason::NotCached);
    done(&mut s);
}

/// A host that keeps `Host::gather`'s default.
struct Plain;
impl Host<u32> for Plain {
    fn copy_payload(&mut self, _: &u32, _: &u32, _: u32) -> bool {
        false
    }
    fn release(&mut self, _: u32) {}
    fn dropped(&mut self, _: PageId, _: u32, _: bool) {}
}

#[test]
fn a_holder_whose_host_does_not_gather_answers_a_miss() {
    assert_eq!(Plain.gather(&[1, 2, 3], 4096), None, "the default does not gather");
    let mut s = cluster(3);
    s.w.borrow_mut().no_gather.insert(2);
    let first = PageId::new(0, 600);
    let pages = named(first, 0b1011);
    put_all(&mut s, 1, &pages, 2);
    let served = s.nodes[2].stats().gets_served;
    let op = getpages(&mut s, 1, first, 0b1011, &[1; 3], 2, 3, Mode::NonBlocking).unwrap();
    s.deliver(false);
    assert_eq!(s.net.queue()[0].payload, None, "a miss carries no payload");
    s.run_net();
    assert_eq!(miss(&s, 1, op), MissReason::NotCached);
    assert_eq!(s.nodes[2].stats().gets_served, served);
    // Page by page they are served.
    for &p in &pages {
        let g = s.getpage_hinted(1, p, 2).unwrap();
        s.run_net();
        assert!(matches!(s.result(1, g), Some(OpResult::Get(GetResult::Hit { via: Via::TwoWay, .. }))));
    }
    done(&mut s);
}

/// Control bytes of a request `src` sends itself (its own origin, as NetRPC checks).
fn forge<M: Message>(op: u16, origin: u16, hops: u8, body: &M) -> Vec<u8> {
    let b = netrpc::rpc::encode(body).unwrap();
    let token = ReplyToken { origin, record: 0, generation: 1, payload_kind: 0, payload_token: 0 };
    let h = Header { kind: Kind::Request, op, token, hops, body_len: b.len as u16 };
    let mut c = vec![0u8; HEADER_BYTES + b.as_slice().len()];
    h.emit(&mut c);
    c[HEADER_BYTES..].copy_from_slice(b.as_slice());
    c
}

#[test]
fn only_a_member_asking_straight_is_served() {
    let mut s = cluster(4);
    // Node 3 is outside the view of nodes 0..3 (it still counts them all as members).
    for i in 0..3 {
        s.nodes[i].set_members(s.clock.now(), &mut s.rpcs[i], 2, &[0, 1, 2]).unwrap();
    }
    let first = PageId::new(0, 700);
    let pages = named(first, 0b11);
    put_all(&mut s, 1, &pages, 2);
    let c2 = s.nodes[2].stats();
    let op = getpages(&mut s, 3, first, 0b11, &[1, 1], 2, 2, Mode::NonBlocking).unwrap();
    s.run_net();
    assert_eq!(miss(&s, 3, op), MissReason::Refused, "a non-member is told it is refused, not that nothing is there");
    let d2 = s.nodes[2].stats();
    assert_eq!((d2.rejected_gets - c2.rejected_gets, d2.gets_served - c2.gets_served), (1, 0));

    // A member's request that says it was delegated: refused too.
    let view = s.nodes[1].members().view();
    let want = Versions::pack(&[Version(1), Version(1)]).unwrap();
    let req = GetPagesReq { first, mask: 0b11, want, view };
    s.net.queue_mut().push(Msg::new(1, 2, Body { ctrl: forge(OP_GETPAGES, 1, 1, &req), payload: None, tag: 0 }));
    s.run_net();
    let d2 = s.nodes[2].stats();
    assert_eq!((d2.rejected_gets - c2.rejected_gets, d2.gets_served - c2.gets_served), (2, 0));
    // The same straight from the member is served (its answer matches no call of node 1's
    // and is dropped there, its payload buffer released).
    s.net.queue_mut().push(Msg::new(1, 2, Body { ctrl: forge(OP_GETPAGES, 1, 0, &req), payload: None, tag: 0 }));
    s.run_net();
    let d2 = s.nodes[2].stats();
    assert_eq!((d2.rejected_gets - c2.rejected_gets, d2.gets_served - c2.gets_served), (2, 2));
    assert!(pages.iter().all(|p| s.nodes[2].held(p).is_some()), "the copies are kept");
    s.check_frames();
}

#[test]
fn a_lost_reply_is_a_failed_miss_after_the_op_timeout_and_a_late_one_changes_nothing() {
    let mut s = cluster(3);
    let first = PageId::new(0, 800);
    let pages = named(first, 0xff);
    put_all(&mut s, 1, &pages, 2);
    let c1 = s.nodes[1].stats();
    let op = getpages(&mut s, 1, first, 0xff, &[1; 8], 2, 8, Mode::NonBlocking).unwrap();
    s.deliver(false);
    let lost = s.net.queue_mut().remove(0);
    assert_eq!((lost.src, lost.dst, lost.payload.map(|p| p.1)), (2, 1, Some(8 * PAGE_LEN)));
    assert!(s.net.is_empty());

    s.tick(s.k.op_timeout / 2);
    assert!(s.getpages[&(1, op)].result.is_none(), "no answer before the timeout");
    s.tick(s.k.op_timeout / 2 + 1);
    assert_eq!(miss(&s, 1, op), MissReason::Failed(RpcError::Timeout));
    let d1 = s.nodes[1].stats();
    assert_eq!((d1.op_timeouts - c1.op_timeouts, d1.get_failures - c1.get_failures), (1, 8), "{d1:?}");
    assert_eq!(d1.gets - c1.gets, 8);

    // The reply arrives after all: its token is disarmed, nothing changes.
    s.net.queue_mut().push(lost);
    s.run_net();
    assert_eq!(miss(&s, 1, op), MissReason::Failed(RpcError::Timeout));
    done(&mut s);
}

#[test]
fn a_dead_holder_times_out_and_a_declared_one_cancels() {
    let mut s = cluster(4);
    let first = PageId::new(0, 900);
    let pages = named(first, 0b111);
    put_all(&mut s, 1, &pages, 3);
    s.crash(3);
    let op = getpages(&mut s, 1, first, 0b111, &[1; 3], 3, 3, Mode::NonBlocking).unwrap();
    s.run_net();
    s.tick(s.k.op_timeout + 1);
    assert_eq!(miss(&s, 1, op), MissReason::Failed(RpcError::Timeout));

    let op = getpages(&mut s, 2, first, 0b111, &[1; 3], 3, 3, Mode::Wait).unwrap();
    s.run_net();
    assert!(s.getpages[&(2, op)].result.is_none());
    s.declare_failed(3);
    assert_eq!(miss(&s, 2, op), MissReason::Failed(RpcError::Cancelled));
    assert_eq!(s.nodes[2].stats().get_failures, 3);
    assert_eq!(getpages(&mut s, 1, first, 0b111, &[1; 3], 3, 3, Mode::NonBlocking), Err(GmsError::BadTarget));
    done(&mut s);
}

#[test]
fn a_group_frame_with_too_few_pieces_refuses_the_payload() {
    let mut s = cluster(3);
    let first = PageId::new(0, 1000);
    let pages = named(first, 0b1111);
    put_all(&mut s, 1, &pages, 2);
    let c1 = s.nodes[1].stats();
    let op = getpages(&mut s, 1, first, 0b1111, &[1; 4], 2, 2, Mode::NonBlocking).unwrap();
    s.run_net();
    assert_eq!(miss(&s, 1, op), MissReason::Failed(RpcError::PayloadRefused));
    assert_eq!(s.nodes[1].stats().get_failures - c1.get_failures, 4);
    done(&mut s);
}
