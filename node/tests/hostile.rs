// SPDX-License-Identifier: GPL-2.0-only
//! A hostile node on the link: three honest GMS nodes (members 0, 1, 2) and node 3, whose
//! host crafts packets through its own virtual NIC — forged getpage replies with guessed
//! tokens and generations, bodies speaking for honest nodes (sites, heartbeats with a new
//! incarnation), forged PUTDONE / DISCARD / DIRUPDATE / DROPPAGE / getpages / putpages,
//! floods of garbage and of valid-looking packets, and packets sent after its host gave
//! its endpoint another node's id — while honest clients put and read
//! pages. Every read returns the bytes last put, every forgery is rejected and counted,
//! and every honest operation completes. Then a member turns hostile (its host crafts
//! packets a keyed link would authenticate): registrations beyond and inside the version
//! lead, a discard, drop and dir-verify it is not entitled to, a movepage of junk at a
//! leap, a moving read, heartbeats alternating between two of its incarnations, and claims of
//! a copy it does not hold (a step, a same-version hand-over); no page is blocked or loses
//! its copy.
//!
//! On a keyed link (every frame recorded as it went on the wire): an outsider without the key
//! replays the captured frames, as they were and altered; after a node dies a keyed member
//! replays its packets; the member alternates an old and a new incarnation in its
//! heartbeats (fed to the liveness table every runtime uses); after the whole cluster
//! restarts, the old run's packets are replayed into the new one. Each is refused and
//! counted by name (`replayed`, `mac_rejected`, `replay_stale_epoch`, `stale_incarnations`),
//! no replayed put is stored, and every page reads back at its version with its bytes.

use gms::directory::{ANY_SEQ, VERSION_LEAD};
use gms::heartbeat::{Heartbeat, OP_HEARTBEAT};
use gms::ops::*;
use gms::prelude::*;
use gms::store::liveness::{Event, Liveness, LivenessConfig};
use netrpc::prelude::{Message, ReplyToken};
use netrpc::wire::{Header, Kind, HEADER_BYTES};
use sim::rng::Rng;
use std::sync::{Arc, Mutex};
use std::time::Duration;
use trapeze_host::endpoint::{EndpointConfig, SendError, SendMsg};
use trapeze_host::iface::entry::Segment;
use trapeze_host::iface::ipt::PayloadToken;
use trapeze_node::gms::page_pattern as content;
use trapeze_node::gms::{Cluster, Got};
use trapeze_runtime::FrameMem;
use trapeze_vnic::key::ClusterKey;
use trapeze_vnic::link::backend::{InProcPort, InProcSwitch, LinkBackend};
use trapeze_vnic::link::testing::{Hooks, Wrap};
use trapeze_vnic::link::{FaultConfig, Link};

const SPACE: u64 = 11;
const PAGES: u64 = 240;
const BUDGET: usize = 400;
const HOSTILE: usize = 3;
const HONEST: [u16; 3] = [0, 1, 2];

fn ctrl<M: Message>(kind: Kind, op: u16, token: ReplyToken, hops: u8, body: &M) -> Vec<u8> {
    let b = netrpc::rpc::encode(body).expect("body");
    let h = Header { kind, op, token, hops, body_len: b.len as u16 };
    let mut c = vec![0u8; HEADER_BYTES + b.as_slice().len()];
    h.emit(&mut c);
    c[HEADER_BYTES..].copy_from_slice(b.as_slice());
    c
}

/// The hostile node's own request token (its NIC stamps its id 3 on every packet anyway).
fn own(origin: u16) -> ReplyToken {
    ReplyToken { origin, record: 0, generation: 1, payload_kind: 0, payload_token: 0 }
}

/// Post one crafted packet from the hostile node's NIC (with `junk` bytes of payload,
/// tagged with `tag`), polling the cluster while its send ring is full.
fn inject(c: &mut Cluster, peer: u16, ctrl: &[u8], junk: Option<(u64, PayloadToken)>) {
    inject_from(c, HOSTILE, peer, ctrl, junk)
}

/// [`inject`] from node `from`'s NIC.
fn inject_from(c: &mut Cluster, from: usize, peer: u16, ctrl: &[u8], junk: Option<(u64, PayloadToken)>) {
    let mut seg = Vec::new();
    let mut token = PayloadToken::NONE;
    let mut frame = None;
    if let Some((fill, tag)) = junk {
        let frames = &mut c.ports[from].node.host.frames;
        let f = frames.alloc().expect("a frame for the forged payload");
        let page = vec![fill as u8; 8192];
        assert!(frames.write(f, &page));
        let addr = frames.frames().dma(f).expect("frame address");
        seg.push(Segment { addr, len: 8192 });
        token = tag;
        frame = Some(f);
    }
    let msg = SendMsg { peer, ctrl, payload_len: if frame.is_some() { 8192 } else { 0 }, segments: &seg, token };
    for _ in 0..10_000 {
        match c.ports[from].node.host.frames.post_raw(&msg, 0) {
            Ok(()) => break,
            Err(SendError::RingFull) => {
                c.poll();
            }
            Err(e) => panic!("posting a crafted packet: {e:?}"),
        }
    }
    // The frame is not reused: forged payloads are few, and the hostile node's frames
    // are its own business.
    let _ = frame;
}

/// What the hostile node sends in one round, aimed at the honest nodes and their pages.
fn attack(c: &mut Cluster, rng: &mut Rng, round: u64) {
    let view = c.ports[0].node.members().view();
    let page = PageId::new(SPACE, round % PAGES);
    for &victim in &HONEST {
        let other = HONEST[(victim as usize + 1) % 3];
        // A forged getpage reply, "hit" at a huge version, with a payload tagged by a
        // guessed IPT token, for a guessed call record and generation.
        let token = ReplyToken {
            origin: victim,
            record: (rng.next_u64() % 64) as u16,
            generation: rng.next_u64() as u32,
            payload_kind: 1,
            payload_token: rng.next_u64(),
        };
        let rep = GetReply { status: GetStatus::Hit, page, version: Version(1 << 40), seq: 0, server: other, flags: 0 };
        let tag = PayloadToken(token.payload_token);
        inject(
            c,
            victim,
            &ctrl(Kind::Reply, OP_GETPAGE, token, 0, &rep),
            round.is_multiple_of(4).then_some((0xEE, tag)),
        );
        // Bodies speaking for an honest node: a directory update naming it, one naming
        // the hostile node, a heartbeat with a new incarnation of it.
        let up = DirUpdateReq { page, version: Version(1 << 40), seq: 0, view, site: other };
        inject(c, victim, &ctrl(Kind::Request, OP_DIRUPDATE, own(3), 0, &up), None);
        let up = DirUpdateReq { site: 3, ..up };
        inject(c, victim, &ctrl(Kind::Request, OP_DIRUPDATE, own(3), 0, &up), None);
        let hb = Heartbeat { node: other, incarnation: rng.next_u64() | 1, held: 0, budget: 1 };
        inject(c, victim, &ctrl(Kind::OneWay, OP_HEARTBEAT, own(3), 0, &hb), None);
        // A request naming an honest node as its origin (the reply would go there).
        let get = GetReq { page, want: Version(0), seq: 0, view, flags: 0 };
        inject(c, victim, &ctrl(Kind::Request, OP_GETPAGE, own(other), 0, &get), None);
        // Discards (one of u64::MAX), drops, a moving getpage "delegated" to the holder.
        let dc = DiscardReq { page, version: Version(u64::MAX) };
        inject(c, victim, &ctrl(Kind::Request, OP_DISCARDPAGE, own(3), 0, &dc), None);
        let dc = DiscardReq { page, version: Version(1) };
        inject(c, victim, &ctrl(Kind::Request, OP_DISCARDPAGE, own(3), 0, &dc), None);
        let drop = DropReq { page, version: Version(u64::MAX), seq: 0 };
        inject(c, victim, &ctrl(Kind::Request, OP_DROPPAGE, own(3), 0, &drop), None);
        let get = GetReq { page, want: Version(0), seq: 0, view, flags: GET_MOVING | GET_DIRECT };
        inject(c, victim, &ctrl(Kind::Request, OP_GETPAGE, own(victim), 1, &get), None);
        // PUTDONEs for guessed operation tags, and a putpage of junk at a huge version.
        let tag = OpId { slot: (rng.next_u64() % 64) as u16, generation: (rng.next_u64() % 8) as u32 + 1 };
        let done = PutDone { page, version: Version(1), tag, status: PutStatus::Stored, site: other, answer: None };
        inject(c, victim, &ctrl(Kind::OneWay, OP_PUTDONE, own(3), 0, &done), None);
        if round.is_multiple_of(8) {
            let put = PutReq { page, version: Version(1 << 40), seq: 0, view, tag, flags: 0 };
            inject(c, victim, &ctrl(Kind::OneWay, OP_PUTPAGE, own(3), 0, &put), Some((0xAB, PayloadToken::NONE)));
        }
        // Garbage.
        let len = (rng.next_u64() % 128) as usize;
        let junk: Vec<u8> = (0..len).map(|_| rng.next_u64() as u8).collect();
        inject(c, victim, &junk, None);
    }
}

#[test]
fn a_hostile_node_changes_no_byte_and_the_cluster_keeps_serving() {
    // Four GMS nodes live on this thread's stack (large in debug builds).
    std::thread::Builder::new().stack_size(256 << 20).spawn(run).unwrap().join().unwrap();
}

fn run() {
    let cfg = GmsConfig { op_timeout: 500_000_000, ..GmsConfig::default() };
    let mut c = Cluster::new(4, BUDGET, cfg).expect("cluster");
    // The honest nodes' view leaves the hostile node out; it still shares their link.
    for i in 0..3 {
        c.ports[i].set_members(2, &HONEST).expect("members");
    }
    let mut rng = Rng::new(0x5eed_1234_abcd_0001, 0);
    let mut version = vec![Version(0); PAGES as usize];

    // Honest puts (two versions of a third of the pages), each round under attack.
    for round in 0..2u64 {
        for n in 0..PAGES {
            if round == 1 && !n.is_multiple_of(3) {
                continue;
            }
            let page = PageId::new(SPACE, n);
            let v = Version(round + 1);
            let from = (n % 3) as usize;
            c.put_wait(from, page, v, &content(page, v)).expect("put");
            version[n as usize] = v;
            if n.is_multiple_of(4) {
                attack(&mut c, &mut rng, n + round * PAGES);
            }
        }
    }
    let stored: u64 = HONEST.iter().map(|&i| c.ports[i as usize].stats.puts_stored).sum();
    let puts: u64 = HONEST.iter().map(|&i| c.ports[i as usize].stats.puts).sum();
    assert_eq!(stored, puts, "every honest put is stored (room for all)");

    // Honest reads from every node, interleaved with more attacks and a flood.
    let mut reads = 0;
    for pass in 0..2u64 {
        for n in 0..PAGES {
            let page = PageId::new(SPACE, n);
            let from = ((n + pass) % 3) as usize;
            let v = version[n as usize];
            match c.get_wait(from, page).expect("get") {
                Got::Hit { version: got, data, .. } => {
                    assert_eq!(got, v, "{page:?} from node {from}: version");
                    assert!(data == content(page, v), "{page:?} {v:?} from node {from}: wrong bytes");
                }
                Got::Miss => panic!("{page:?} {v:?} from node {from}: missed under attack"),
            }
            reads += 1;
            if n.is_multiple_of(5) {
                attack(&mut c, &mut rng, n + 7 * pass);
            }
        }
        // A flood of valid-looking requests the directory cannot tell from real ones
        // but for the sender: moving getpages and updates for every page.
        let view = c.ports[0].node.members().view();
        for n in 0..PAGES {
            let page = PageId::new(SPACE, n);
            let dst = HONEST[(n % 3) as usize];
            let get = GetReq { page, want: Version(0), seq: 0, view, flags: GET_MOVING };
            inject(&mut c, dst, &ctrl(Kind::Request, OP_GETPAGE, own(3), 0, &get), None);
        }
    }
    assert_eq!(reads, 2 * PAGES);
    for _ in 0..2000 {
        c.poll();
    }

    // Every forgery was rejected and counted at the honest nodes.
    let sum = |f: &dyn Fn(&GmsStats) -> u64| HONEST.iter().map(|&i| f(&c.ports[i as usize].node.stats())).sum::<u64>();
    let rpc = |f: &dyn Fn(&netrpc::prelude::Stats) -> u64| {
        HONEST.iter().map(|&i| f(&c.ports[i as usize].rpc.stats())).sum::<u64>()
    };
    let g = HONEST.map(|i| c.ports[i as usize].node.stats());
    assert!(sum(&|s| s.rejected_updates) > 0, "{g:?}");
    assert!(sum(&|s| s.rejected_discards) > 0, "{g:?}");
    assert!(sum(&|s| s.rejected_drops) > 0, "{g:?}");
    assert!(sum(&|s| s.rejected_gets) >= 2 * PAGES, "the flood: {g:?}");
    assert!(sum(&|s| s.rejected_putdones) > 0, "{g:?}");
    assert!(sum(&|s| s.rejected_puts) > 0, "{g:?}");
    assert!(sum(&|s| s.rejected_heartbeats) > 0, "{g:?}");
    assert_eq!(sum(&|s| s.gets_moved), 0, "no copy was handed to the hostile node");
    assert_eq!(sum(&|s| s.dir_discards), 0, "no page was discarded");
    assert!(rpc(&|s| s.foreign_requests) > 0, "requests naming another origin");
    assert!(rpc(&|s| s.stale_replies) > 0, "forged replies with guessed generations");
    assert!(rpc(&|s| s.malformed) > 0, "garbage");
    // No heartbeat claiming an honest node reached the honest runtimes' liveness.
    for &i in &HONEST {
        assert!(
            c.ports[i as usize].node.host.heartbeats.iter().all(|(src, hb)| hb.node == *src),
            "node {i} took a heartbeat for another node"
        );
    }
    // The hostile host rewrites its endpoint's node id to 1: its firmware now writes 1 as
    // the sender of every packet, and the honest nodes' NICs stamp the true sender (3)
    // back, so a directory update and a heartbeat sent as node 1 (their tokens naming node
    // 1 as origin, as node 1's own would) arrive from node 3 and are refused.
    let foreign = rpc(&|s| s.foreign_requests);
    let ep = &c.ports[HOSTILE].node.host.frames.ep;
    ep.configure(&EndpointConfig { node_id: 1, ..EndpointConfig::default() });
    for _ in 0..100_000 {
        if c.ports[HOSTILE].node.host.frames.ep.config_applied() {
            break;
        }
        c.poll();
    }
    assert!(c.ports[HOSTILE].node.host.frames.ep.config_applied(), "the hostile NIC took its new id");
    let view = c.ports[0].node.members().view();
    let page = PageId::new(SPACE, 5);
    for victim in [0u16, 2] {
        let up = DirUpdateReq { page, version: Version(1 << 40), seq: 0, view, site: 1 };
        inject(&mut c, victim, &ctrl(Kind::Request, OP_DIRUPDATE, own(1), 0, &up), None);
        let hb = Heartbeat { node: 1, incarnation: 0x5151, held: 0, budget: 1 };
        inject(&mut c, victim, &ctrl(Kind::OneWay, OP_HEARTBEAT, own(1), 0, &hb), None);
    }
    for _ in 0..2000 {
        c.poll();
    }
    let rpc = |f: &dyn Fn(&netrpc::prelude::Stats) -> u64| {
        HONEST.iter().map(|&i| f(&c.ports[i as usize].rpc.stats())).sum::<u64>()
    };
    assert!(rpc(&|s| s.foreign_requests) >= foreign + 4, "packets sent as node 1 arrived as node 3's");
    match c.get_wait(0, page).expect("get after the spoofed update") {
        Got::Hit { version: got, data, .. } => assert!(got == version[5] && data == content(page, got)),
        Got::Miss => panic!("missed after the spoofed update"),
    }

    // A member turns hostile: node 1's host (one of the view; on a keyed link its packets
    // authenticate) names node 1 the holder of a page at u64::MAX, then at a version far
    // beyond every writer's. The page's directory refuses both and counts them; the page
    // keeps its holder and its bytes, and a later put of it is stored (issue 34).
    let members = c.ports[0].node.members();
    let n = (0..PAGES).find(|&n| members.directory_of(&PageId::new(SPACE, n)) != Some(1)).expect("a page");
    let page = PageId::new(SPACE, n);
    let dir = members.directory_of(&page).expect("a directory node") as usize;
    let refused = c.ports[dir].node.stats().rejected_updates;
    for v in [u64::MAX, u64::MAX / 2 + 1] {
        let up = DirUpdateReq { page, version: Version(v), seq: 0, view, site: 1 };
        inject_from(&mut c, 1, dir as u16, &ctrl(Kind::Request, OP_DIRUPDATE, own(1), 0, &up), None);
    }
    for _ in 0..2000 {
        c.poll();
    }
    assert_eq!(c.ports[dir].node.stats().rejected_updates, refused + 2, "both updates refused and counted");
    for from in 0..3 {
        match c.get_wait(from, page).expect("get after the member's update") {
            Got::Hit { version: got, data, .. } => assert!(got == version[n as usize] && data == content(page, got)),
            Got::Miss => panic!("node {from} missed {page:?} after the member's update"),
        }
    }
    let v = version[n as usize].next();
    let stored = c.ports[2].stats.puts_stored;
    let st = c.put_wait(2, page, v, &content(page, v)).expect("a put after the member's update");
    assert_eq!(st.puts_stored, stored + 1, "the later put is stored, not superseded");
    version[n as usize] = v;
    match c.get_wait(0, page).expect("get of the later put") {
        Got::Hit { version: got, data, .. } => assert!(got == v && data == content(page, v)),
        Got::Miss => panic!("the later put of {page:?} was not stored"),
    }

    // The same member, inside the lead: a registration at the newest version known plus
    // just under the lead (a leap over the named copy), a discard leaping over it, a drop
    // and a dir-verify it is not the directory for, a movepage of junk at the leap to a
    // third node, a moving read of a space that does not move (served as a plain one),
    // and heartbeats of its own alternating between an old incarnation and a new one.
    // Each is refused and counted; the holder keeps its copy, reads return its bytes, and
    // a later put is stored and read back (issue 34).
    let members = *c.ports[0].node.members();
    let n = (0..PAGES)
        .find(|&n| {
            let p = PageId::new(SPACE, n);
            members.directory_of(&p) != Some(1) && c.ports[1].node.held(&p).is_none()
        })
        .expect("a page neither directed nor held by node 1");
    let page = PageId::new(SPACE, n);
    let dir = members.directory_of(&page).expect("a directory node") as usize;
    let holder = HONEST.into_iter().find(|&i| c.ports[i as usize].node.held(&page).is_some()).expect("a holder");
    let target = HONEST.into_iter().find(|&i| i != 1 && i != holder).expect("a third node");
    let known = version[n as usize].0;
    let leap = Version(known + (VERSION_LEAD - 1));
    let stat = |c: &Cluster, i: usize| c.ports[i].node.stats();
    let before: Vec<GmsStats> = HONEST.iter().map(|&i| stat(&c, i as usize)).collect();
    let up = DirUpdateReq { page, version: leap, seq: 0, view, site: 1 };
    inject_from(&mut c, 1, dir as u16, &ctrl(Kind::Request, OP_DIRUPDATE, own(1), 0, &up), None);
    let dc = DiscardReq { page, version: leap };
    inject_from(&mut c, 1, dir as u16, &ctrl(Kind::Request, OP_DISCARDPAGE, own(1), 0, &dc), None);
    let drop = DropReq { page, version: leap, seq: ANY_SEQ };
    inject_from(&mut c, 1, holder, &ctrl(Kind::Request, OP_DROPPAGE, own(1), 0, &drop), None);
    inject_from(&mut c, 1, holder, &ctrl(Kind::Request, OP_DIRVERIFY, own(1), 0, &drop), None);
    let tag = OpId { slot: 0, generation: 1 };
    let mv = PutReq { page, version: leap, seq: 1, view, tag, flags: 0 };
    inject_from(&mut c, 1, target, &ctrl(Kind::OneWay, OP_MOVEPAGE, own(1), 0, &mv), Some((0x5A, PayloadToken::NONE)));
    let get = GetReq { page, want: Version(0), seq: 0, view, flags: GET_MOVING };
    inject_from(&mut c, 1, dir as u16, &ctrl(Kind::Request, OP_GETPAGE, own(1), 0, &get), None);
    for k in 0..6u64 {
        let hb = Heartbeat { node: 1, incarnation: if k % 2 == 0 { 0x01d } else { 0x2e3 }, held: 0, budget: 1 };
        for &victim in &[0u16, 2] {
            inject_from(&mut c, 1, victim, &ctrl(Kind::OneWay, OP_HEARTBEAT, own(1), 0, &hb), None);
        }
    }
    for _ in 0..4000 {
        c.poll();
    }
    let after: Vec<GmsStats> = HONEST.iter().map(|&i| stat(&c, i as usize)).collect();
    let grew = |f: fn(&GmsStats) -> u64| after.iter().map(f).sum::<u64>() - before.iter().map(f).sum::<u64>();
    // The leap, and the target's registration of the junk (a leap too).
    assert!(grew(|s| s.rejected_updates) >= 1, "{after:?}");
    assert_eq!(grew(|s| s.rejected_discards), 1, "{after:?}");
    assert_eq!(grew(|s| s.rejected_drops), 2, "{after:?}");
    assert_eq!(grew(|s| s.dir_discards), 0);
    assert_eq!(grew(|s| s.gets_moved), 0, "a moving read of a space that does not move");
    assert!(c.ports[target as usize].node.held(&page).is_none(), "the junk was dropped");
    assert!(c.ports[holder as usize].node.held(&page).is_some(), "the holder keeps its copy");
    assert_eq!(c.ports[dir].node.directory().lookup(&page), Some((holder, version[n as usize])));
    // Its heartbeats speak for itself: taken as node 1's, refused by no GMS rule.
    assert_eq!(grew(|s| s.rejected_heartbeats), 0);
    for from in 0..3 {
        match c.get_wait(from, page).expect("get after the member's messages") {
            Got::Hit { version: got, data, .. } => assert!(got == version[n as usize] && data == content(page, got)),
            Got::Miss => panic!("node {from} missed {page:?} after the member's messages"),
        }
    }
    let v = version[n as usize].next();
    let st = c.put_wait(0, page, v, &content(page, v)).expect("a put after the member's messages");
    assert!(st.puts_stored > 0);
    for from in 0..3 {
        match c.get_wait(from, page).expect("get of the later put") {
            Got::Hit { version: got, data, .. } => assert!(got == v && data == content(page, v)),
            Got::Miss => panic!("node {from}: the later put of {page:?} was not stored"),
        }
    }

    // The same member claims the page's copy with one registration it holds nothing for:
    // a step above the named version, then the named version claiming the named identity
    // (a hand-over). Its directory asks it first; it holds nothing, so the holder keeps its
    // copy, named again, and each claim is counted.
    let named = |c: &Cluster, p: &PageId| {
        let d = members.directory_of(p).expect("a directory node") as usize;
        c.ports[d].node.directory().named(p).map(|(s, v, _)| (d, s, v))
    };
    let (page, (dir, _, v)) = (0..PAGES)
        .map(|n| PageId::new(SPACE, n))
        .find_map(|p| named(&c, &p).filter(|&(d, s, _)| d != 1 && s != 1).map(|x| (p, x)))
        .expect("a page neither directed nor held by node 1");
    let claims = c.ports[dir].node.stats().rejected_claims;
    for step in [true, false] {
        let (_, named_v, seq) = c.ports[dir].node.directory().named(&page).expect("named");
        assert_eq!(named_v, v);
        let up = if step {
            DirUpdateReq { page, version: Version(v.0 + 16), seq: 0, view, site: 1 }
        } else {
            DirUpdateReq { page, version: v, seq, view, site: 1 }
        };
        inject_from(&mut c, 1, dir as u16, &ctrl(Kind::Request, OP_DIRUPDATE, own(1), 0, &up), None);
        for _ in 0..4000 {
            c.poll();
        }
        let holder = c.ports[dir].node.directory().lookup(&page).map(|(s, _)| s);
        assert!(holder.is_some_and(|h| h != 1 && c.ports[h as usize].node.held(&page).is_some()), "{holder:?}");
    }
    assert_eq!(c.ports[dir].node.stats().rejected_claims, claims + 2, "both claims refused and counted");
    for from in 0..3 {
        match c.get_wait(from, page).expect("get after the member's claims") {
            Got::Hit { version: got, data, .. } => assert!(got == v && data == content(page, got)),
            Got::Miss => panic!("node {from} missed {page:?} after the member's claims"),
        }
    }

    // The cluster still serves: a last honest put and read.
    let page = PageId::new(SPACE, PAGES + 1);
    c.put_wait(1, page, Version(9), &content(page, Version(9))).expect("put after the attack");
    match c.get_wait(2, page).expect("get after the attack") {
        Got::Hit { version, data, .. } => assert!(version == Version(9) && data == content(page, version)),
        Got::Miss => panic!("missed after the attack"),
    }
}

// ---- replays on a keyed link (issue 34 item 6) -------------------------------------------

/// Hooks on the switch port of node `.0` that record every frame its link sends:
/// (source, destination, bytes), sealed as they went on the wire.
struct Tap(u16, Arc<Mutex<Vec<Captured>>>);

type Captured = (u16, u16, Vec<u8>);

impl Hooks<InProcPort> for Tap {
    fn sending(&mut self, dst: u16, frame: &[u8]) {
        self.1.lock().unwrap().push((self.0, dst, frame.to_vec()));
    }
    fn describe(&self, port: &InProcPort) -> String {
        format!("tap on {}", port.describe())
    }
}

const NODES: u16 = 5;
/// The keyed member that turns hostile, and the node that dies.
const MEMBER: usize = 3;
const DEAD: usize = 4;
const RPAGES: u64 = 60;

/// A keyed cluster of [`NODES`] on `sw`, every frame recorded in `log`.
fn keyed(sw: &InProcSwitch, key: &ClusterKey, log: &Arc<Mutex<Vec<Captured>>>) -> Cluster {
    let cfg = GmsConfig { op_timeout: 500_000_000, ..GmsConfig::default() };
    let link = |id: u16| {
        let tap = Wrap::new(sw.port(id), Tap(id, log.clone()));
        let mut l = Link::new(id, Box::new(tap), FaultConfig::NONE);
        l.set_key(Some(key));
        l
    };
    Cluster::with_links(NODES, BUDGET, cfg, None, sw.clone(), link).expect("keyed cluster")
}

/// The honest nodes' link counters summed: (replays refused, tags refused).
fn refused_on_links(c: &Cluster) -> (u64, u64) {
    let s: Vec<_> = HONEST.iter().map(|&i| c.link_stats(i as usize)).collect();
    let replays = s.iter().map(|l| l.replayed + l.replay_stale_epoch + l.duplicate_frames).sum();
    (replays, s.iter().map(|l| l.mac_rejected).sum())
}

/// Every page reads back at `version` with its bytes, from every honest node.
#[track_caller]
fn all_read_back(c: &mut Cluster, version: &[Version], what: &str) {
    for (n, &v) in version.iter().enumerate() {
        let page = PageId::new(SPACE, n as u64);
        let from = HONEST[n % 3] as usize;
        match c.get_wait(from, page).expect("get") {
            Got::Hit { version: got, data, .. } => {
                assert_eq!(got, v, "{what}: {page:?} from node {from}: version");
                assert!(data == content(page, v), "{what}: {page:?} {v:?} from node {from}: wrong bytes");
            }
            Got::Miss => panic!("{what}: {page:?} {v:?} from node {from}: missed"),
        }
    }
}

/// Send `frames` as they were recorded, from a port of the switch that is no node's (`via`).
fn replay(c: &mut Cluster, sw: &InProcSwitch, via: u16, frames: &[Captured]) {
    let mut port = sw.port(via);
    for (_, dst, f) in frames {
        port.send_frame(*dst, f).expect("replay");
        c.poll();
    }
    for _ in 0..2000 {
        c.poll();
    }
}

#[test]
fn replays_are_refused_and_change_no_byte() {
    std::thread::Builder::new().stack_size(256 << 20).spawn(run_replays).unwrap().join().unwrap();
}

fn run_replays() {
    let key = ClusterKey::from_bytes([0x5a; 32]);
    let log = Arc::new(Mutex::new(Vec::new()));
    let sw = InProcSwitch::new();
    let mut c = keyed(&sw, &key, &log);
    let mut version = vec![Version(0); RPAGES as usize];
    for round in 1..=2u64 {
        for n in 0..RPAGES {
            let page = PageId::new(SPACE, n);
            let v = Version(4 + round);
            c.put_wait((n % NODES as u64) as usize, page, v, &content(page, v)).expect("put");
            version[n as usize] = v;
        }
    }
    // The node that will die says it is alive, to everyone.
    for &victim in &HONEST {
        let hb = Heartbeat { node: DEAD as u16, incarnation: 0x4d, held: 0, budget: 1 };
        inject_from(&mut c, DEAD, victim, &ctrl(Kind::OneWay, OP_HEARTBEAT, own(DEAD as u16), 0, &hb), None);
    }
    for _ in 0..2000 {
        c.poll();
    }
    all_read_back(&mut c, &version, "before");
    let run1: Vec<Captured> = log.lock().unwrap().clone();
    assert!(run1.len() > 4 * RPAGES as usize, "frames recorded: {}", run1.len());
    // Past the reassembler's duplicate memory (100 ms): the replay windows decide.
    std::thread::sleep(Duration::from_millis(150));
    let stored = |c: &Cluster| HONEST.iter().map(|&i| c.ports[i as usize].node.stats().pages_stored).sum::<u64>();

    // An outsider without the key replays what it captured, as it was and altered.
    let (replays, tags) = refused_on_links(&c);
    let before = stored(&c);
    let to_honest: Vec<Captured> = run1.iter().filter(|(_, d, _)| HONEST.contains(d)).cloned().collect();
    replay(&mut c, &sw, 9, &to_honest);
    let altered: Vec<Captured> = to_honest
        .iter()
        .map(|(s, d, f)| {
            let mut f = f.clone();
            let at = f.len() / 2;
            f[at] ^= 0x20;
            (*s, *d, f)
        })
        .collect();
    replay(&mut c, &sw, 9, &altered);
    let (replays2, tags2) = refused_on_links(&c);
    for &i in &HONEST {
        let l = c.link_stats(i as usize);
        let by = (l.replayed, l.replay_stale_epoch, l.duplicate_frames, l.mac_rejected);
        eprintln!("node {i} after the outsider: replayed, stale epoch, duplicates, MAC refused: {by:?}");
    }
    assert!(
        replays2 - replays >= to_honest.len() as u64 / 2,
        "replays refused: {} of {}",
        replays2 - replays,
        to_honest.len()
    );
    assert!(tags2 - tags >= altered.len() as u64 / 2, "altered frames refused: {} of {}", tags2 - tags, altered.len());
    assert_eq!(stored(&c), before, "no replayed put stored");
    all_read_back(&mut c, &version, "after an outsider's replays");

    // Node 4 dies; the keyed member replays its packets (its heartbeats and puts): none is
    // a sign of life, none stores anything.
    let lost: Vec<u64> = (0..RPAGES).filter(|&n| c.ports[DEAD].node.held(&PageId::new(SPACE, n)).is_some()).collect();
    c.kill(DEAD);
    for &i in &HONEST {
        c.ports[i as usize].node.host.heartbeats.clear();
    }
    // Its copies went with it (GMS keeps one): written again.
    for &n in &lost {
        let (page, v) = (PageId::new(SPACE, n), version[n as usize].next());
        c.put_wait(0, page, v, &content(page, v)).expect("put again");
        version[n as usize] = v;
    }
    let (replays, _) = refused_on_links(&c);
    let before = stored(&c);
    let dead: Vec<Captured> =
        run1.iter().filter(|(s, d, _)| *s == DEAD as u16 && HONEST.contains(d)).cloned().collect();
    assert!(!dead.is_empty());
    replay(&mut c, &sw, 10 + MEMBER as u16, &dead);
    let (replays2, _) = refused_on_links(&c);
    assert!(replays2 - replays >= dead.len() as u64 / 2, "{} of {}", replays2 - replays, dead.len());
    for &i in &HONEST {
        let hb = &c.ports[i as usize].node.host.heartbeats;
        assert!(hb.iter().all(|(src, _)| *src != DEAD as u16), "node {i} heard the dead node: {hb:?}");
    }
    assert_eq!(stored(&c), before);

    // The keyed member alternates between an old incarnation and a new one in its
    // heartbeats: each honest node's liveness table restarts it once and refuses the rest.
    for k in 0..8u64 {
        let incarnation = if k % 2 == 0 { 0x01d } else { 0x2e3 };
        let hb = Heartbeat { node: MEMBER as u16, incarnation, held: 0, budget: 1 };
        for &victim in &HONEST {
            inject_from(&mut c, MEMBER, victim, &ctrl(Kind::OneWay, OP_HEARTBEAT, own(MEMBER as u16), 0, &hb), None);
        }
    }
    for _ in 0..2000 {
        c.poll();
    }
    for &i in &HONEST {
        let peers: Vec<u16> = (0..NODES).filter(|&p| p != i).collect();
        let mut live = Liveness::<8>::new(i, 1, &peers, LivenessConfig::default(), 0).unwrap();
        let beats: Vec<_> =
            c.ports[i as usize].node.host.heartbeats.iter().filter(|(s, _)| *s == MEMBER as u16).copied().collect();
        assert_eq!(beats.len(), 8, "node {i}: the member's heartbeats arrived");
        let mut events = Vec::new();
        for (k, (src, hb)) in beats.iter().enumerate() {
            live.handle_heartbeat(k as u64 * 100_000_000, *src, hb.incarnation);
            while let Some(e) = live.poll_event() {
                events.push(e);
            }
        }
        assert_eq!(events, [Event::Joined(MEMBER as u16), Event::Restarted(MEMBER as u16)], "node {i}");
        assert_eq!(live.stale_incarnations, 3, "node {i}: the old incarnation's heartbeats refused and counted");
    }
    all_read_back(&mut c, &version, "after the member's replays and heartbeats");
    drop(c);

    // The whole cluster restarts (new NICs: new link epochs; new incarnations: a new view)
    // and writes the pages anew, at lower versions than the old run's. Old PUTPAGEs (of
    // versions 5 and 6, other bytes) replayed into it are refused: no rollback.
    let sw = InProcSwitch::new();
    let mut c = keyed(&sw, &key, &log);
    let ids: Vec<u16> = (0..NODES).collect();
    let view = gms::heartbeat::view_of_run(&ids, |n| 0x7000 + u64::from(n));
    for i in 0..NODES as usize {
        c.ports[i].set_members(view, &ids).expect("members");
    }
    for n in 0..RPAGES {
        let page = PageId::new(SPACE, n);
        let v = Version(1);
        // Every node puts to every other, so each has heard every link's new epoch.
        c.put_wait((n % NODES as u64) as usize, page, v, &content(page, v)).expect("put after the restart");
        version[n as usize] = v;
    }
    all_read_back(&mut c, &version, "the new run");
    let (replays, _) = refused_on_links(&c);
    let before = stored(&c);
    let puts: Vec<Captured> = to_honest.into_iter().filter(|(s, _, _)| *s != DEAD as u16).collect();
    replay(&mut c, &sw, 9, &puts);
    let (replays2, _) = refused_on_links(&c);
    let stale: u64 = HONEST.iter().map(|&i| c.link_stats(i as usize).replay_stale_epoch).sum();
    assert!(stale >= puts.len() as u64 / 2, "old run's packets refused as stale: {stale} of {}", puts.len());
    assert!(replays2 > replays);
    assert_eq!(stored(&c), before, "no old put stored");
    for &i in &HONEST {
        let l = c.link_stats(i as usize);
        let by = (l.replayed, l.replay_stale_epoch, l.duplicate_frames, l.mac_rejected);
        eprintln!("node {i} after the restart: replayed, stale epoch, duplicates, MAC refused: {by:?}");
    }
    all_read_back(&mut c, &version, "after the old run's replays");
    // The cluster still serves.
    let page = PageId::new(SPACE, RPAGES + 1);
    c.put_wait(1, page, Version(9), &content(page, Version(9))).expect("put after the replays");
    match c.get_wait(2, page).expect("get after the replays") {
        Got::Hit { version, data, .. } => assert!(version == Version(9) && data == content(page, version)),
        Got::Miss => panic!("missed after the replays"),
    }
}
