// SPDX-License-Identifier: GPL-2.0-only
//! Deterministic edge cases of NetRPC, and fuzzing of `handle_message` with malformed,
//! truncated and mutated control bytes.

use netrpc::prelude::*;
use netrpc::wire::{Header, Kind, CTRL_BYTES, HEADER_BYTES};
use proptest::prelude::*;
use std::collections::HashMap;

type Frame = u32;

const OP_ECHO: u16 = 0x0100;
const OP_FWD: u16 = 0x0200;
const OP_ONEWAY_REPLY: u16 = 0x0300;
const OP_PAGE: u16 = 0x0400;
const OP_LATER: u16 = 0x0500;

/// A runtime that records what NetRPC asks of it.
#[derive(Default)]
struct Rt {
    id: u16,
    /// Next node to delegate OP_FWD to (always delegates).
    fwd_to: u16,
    released: Vec<Frame>,
    copies: Vec<(Frame, Frame, u32)>,
    /// Continuation runs: (arg, outcome).
    runs: Vec<(u64, Outcome<Frame>)>,
    /// Remaining refusals per continuation arg.
    refuse: HashMap<u64, u32>,
    attempts: Vec<u64>,
    served: Vec<(u16, u8)>,
    /// Frames handed to NetRPC as server reply payloads.
    server_frames: Vec<Frame>,
    next_frame: Frame,
    /// Receive buffers a stub took ownership of.
    stub_buffers: Vec<Frame>,
    /// Replies owed (OP_LATER).
    owed: Vec<Pending>,
}

impl Runtime<Frame> for Rt {
    fn serve(&mut self, inc: &Incoming<'_, Frame>) -> Action<Frame> {
        self.served.push((inc.op, inc.hops));
        if let InPayload::Buffer { frame, .. } = inc.payload {
            self.stub_buffers.push(frame);
        }
        match inc.op {
            OP_ECHO => Action::Reply { body: Body::from_slice(inc.body).unwrap(), payload: None },
            OP_FWD => Action::delegate(self.fwd_to, inc),
            OP_LATER => {
                self.owed.extend(Pending::of(inc));
                Action::Done
            }
            OP_ONEWAY_REPLY | OP_PAGE => {
                self.next_frame += 1;
                let f = 1000 * (self.id as u32 + 1) + self.next_frame;
                self.server_frames.push(f);
                Action::Reply { body: Body::EMPTY, payload: Some((f, 4096)) }
            }
            _ => Action::Error(RpcError::UnknownOp),
        }
    }
    fn copy_payload(&mut self, from: &Frame, to: &Frame, len: u32) -> bool {
        self.copies.push((*from, *to, len));
        true
    }
    fn release(&mut self, frame: Frame) {
        assert!(!self.released.contains(&frame), "frame {frame} released twice");
        self.released.push(frame);
    }
}

fn note(ctx: &mut Rt, o: &Outcome<Frame>, arg: u64) -> bool {
    if let Some(k) = ctx.refuse.get_mut(&arg) {
        if *k > 0 {
            *k -= 1;
            ctx.attempts.push(arg);
            return false;
        }
    }
    ctx.runs.push((arg, *o));
    true
}

type Small = Rpc<Rt, Frame, 3, 4, 8>;

fn rt(id: u16) -> Rt {
    Rt { id, ..Rt::default() }
}

/// Deliver every transmit between `rpcs` (no payload modelling: payloads become
/// buffers numbered from 9000).
fn pump<const C: usize, const K: usize, const T: usize>(rpcs: &mut [Rpc<Rt, Frame, C, K, T>], rts: &mut [Rt]) -> usize {
    let mut n = 0;
    let mut buf = 9000;
    loop {
        let mut moved = false;
        for src in 0..rpcs.len() {
            while let Some(t) = rpcs[src].poll_transmit() {
                let dst = t.dst as usize;
                let payload = match t.payload {
                    Some((_, len)) => {
                        buf += 1;
                        InPayload::Buffer { frame: buf, len }
                    }
                    None => InPayload::None,
                };
                rpcs[dst].handle_message(0, &mut rts[dst], src as u16, t.ctrl(), payload);
                moved = true;
                n += 1;
            }
        }
        if !moved {
            return n;
        }
    }
}

fn body8(v: u64) -> [u8; 8] {
    v.to_le_bytes()
}

#[test]
fn table_full_with_only_blocking_calls() {
    let mut a = rt(0);
    let mut rpc: Small = Rpc::new(0, Config::default());
    for i in 0..3 {
        rpc.call_raw(0, &mut a, 1, OP_ECHO, &body8(i), ReplyTo::None, Mode::Wait).unwrap();
    }
    let n_tx = core::iter::from_fn(|| rpc.poll_transmit()).count();
    assert_eq!(n_tx, 3);
    // Blocking calls are never evicted: a new call of either mode is refused, and the
    // caller's frame stays the caller's.
    for mode in [Mode::Wait, Mode::NonBlocking] {
        let r = rpc.call_raw(0, &mut a, 1, OP_ECHO, &[], ReplyTo::UnsolicitedCopy { frame: 7 }, mode);
        assert_eq!(r, Err(RpcError::TableFull));
    }
    assert!(rpc.poll_transmit().is_none(), "a refused call queued a request");
    assert!(a.released.is_empty());
    assert_eq!(rpc.stats().evictions, 0);
    assert_eq!(rpc.stats().calls, 3);
    assert_eq!(rpc.calls_in_use(), 3);
}

#[test]
fn eviction_order_and_evicted_continuations() {
    let mut rts = [rt(0), rt(1)];
    let mut rpcs: [Small; 2] = [Rpc::new(0, Config::default()), Rpc::new(1, Config::default())];
    let (a, _) = rts.split_at_mut(1);
    let a = &mut a[0];
    // Two nonblocking calls and one blocking call fill the table.
    let nb1 = rpcs[0]
        .call_raw(0, a, 1, OP_ECHO, &body8(1), ReplyTo::Solicited { token: 11, frame: 1 }, Mode::NonBlocking)
        .unwrap();
    rpcs[0].push_continuation(nb1, note, 10).unwrap();
    rpcs[0].push_continuation(nb1, note, 11).unwrap();
    let nb2 = rpcs[0]
        .call_raw(0, a, 1, OP_ECHO, &body8(2), ReplyTo::UnsolicitedCopy { frame: 2 }, Mode::NonBlocking)
        .unwrap();
    rpcs[0].push_continuation(nb2, note, 20).unwrap();
    let w = rpcs[0].call_raw(0, a, 1, OP_ECHO, &body8(3), ReplyTo::None, Mode::Wait).unwrap();
    // Keep the first three requests (and their replies) in hand.
    let early: Vec<_> = core::iter::from_fn(|| rpcs[0].poll_transmit()).collect();
    assert_eq!(early.len(), 3);

    // A fourth call evicts the least recently issued nonblocking call (nb1) ...
    let nb4 = rpcs[0].call_raw(0, a, 1, OP_ECHO, &body8(4), ReplyTo::None, Mode::NonBlocking).unwrap();
    rpcs[0].push_continuation(nb4, note, 40).unwrap();
    assert_eq!(nb4.record, nb1.record);
    assert_ne!(nb4.generation, nb1.generation);
    assert_eq!(a.runs, vec![(11, Err(RpcError::Evicted)), (10, Err(RpcError::Evicted))], "LIFO, with Evicted");
    assert_eq!(a.released, vec![1], "the evicted call's frame is released");
    // ... the fifth evicts nb2, the blocking call stays.
    let nb5 = rpcs[0].call_raw(0, a, 1, OP_ECHO, &body8(5), ReplyTo::None, Mode::NonBlocking).unwrap();
    assert_eq!(nb5.record, nb2.record);
    assert_eq!(a.runs[2], (20, Err(RpcError::Evicted)));
    assert_eq!(a.released, vec![1, 2]);
    // The sixth evicts nb4 (issued before nb5), never the blocking call.
    let nb6 = rpcs[0].call_raw(0, a, 1, OP_ECHO, &body8(6), ReplyTo::None, Mode::NonBlocking).unwrap();
    assert_eq!(nb6.record, nb4.record);
    assert_eq!(a.runs[3], (40, Err(RpcError::Evicted)));
    assert_eq!(rpcs[0].stats().evictions, 3);
    assert!(rpcs[0].push_continuation(nb1, note, 0).is_err(), "an evicted call takes no continuations");

    // Late replies for the evicted calls arrive: stale, they complete nothing.
    for t in &early {
        rpcs[1].handle_message(0, &mut rts[1], 0, t.ctrl(), InPayload::None);
    }
    let mut replies = Vec::new();
    while let Some(t) = rpcs[1].poll_transmit() {
        replies.push(t);
    }
    let runs_before = rts[0].runs.len();
    for (i, t) in replies.iter().enumerate() {
        rpcs[0].handle_message(0, &mut rts[0], 1, t.ctrl(), InPayload::Buffer { frame: 77 + i as u32, len: 8 });
    }
    assert_eq!(rpcs[0].stats().stale_replies, 2);
    assert_eq!(rts[0].runs.len(), runs_before, "a stale reply ran a newer call's continuations");
    // The blocking call's reply did complete it, with its own body.
    assert_eq!(rpcs[0].poll_event(), Some(Event::Completed(w)));
    let o = rpcs[0].take_outcome(w).unwrap().unwrap();
    assert_eq!(o.body.as_slice(), &body8(3));
    // Every receive buffer was released (stale: dropped; the blocking call: ReplyTo::None
    // hands it back in the outcome).
    assert_eq!(o.payload, Payload::Buffer { frame: 79, len: 8 });
    assert_eq!(rts[0].released, vec![1, 2, 77, 78]);
}

#[test]
fn evicting_a_deferred_call_keeps_its_record() {
    let mut a = rt(0);
    let mut rpc: Rpc<Rt, Frame, 1, 4, 8> = Rpc::new(0, Config::default());
    let c = rpc.call_raw(0, &mut a, 1, OP_ECHO, &[], ReplyTo::None, Mode::NonBlocking).unwrap();
    rpc.push_continuation(c, note, 1).unwrap();
    a.refuse.insert(1, 1);
    // The victim's continuation cannot run: it is deferred, so there is still no room.
    assert_eq!(rpc.call_raw(0, &mut a, 1, OP_ECHO, &[], ReplyTo::None, Mode::NonBlocking), Err(RpcError::TableFull));
    assert!(rpc.has_deferred());
    assert_eq!(rpc.run_deferred(&mut a), 1);
    assert_eq!(a.runs, vec![(1, Err(RpcError::Evicted))]);
    assert!(rpc.call_raw(0, &mut a, 1, OP_ECHO, &[], ReplyTo::None, Mode::NonBlocking).is_ok());
}

#[test]
fn deferred_continuations_run_once_lifo() {
    let mut rts = [rt(0), rt(1)];
    let mut rpcs: [Small; 2] = [Rpc::new(0, Config::default()), Rpc::new(1, Config::default())];
    let c = rpcs[0].call_raw(0, &mut rts[0], 1, OP_ECHO, &body8(9), ReplyTo::None, Mode::NonBlocking).unwrap();
    for arg in [1, 2, 3] {
        rpcs[0].push_continuation(c, note, arg).unwrap();
    }
    rts[0].refuse.insert(2, 2);
    pump(&mut rpcs, &mut rts);
    // 3 ran, 2 refused: 2 and 1 wait for the worker.
    assert_eq!(rts[0].runs.iter().map(|r| r.0).collect::<Vec<_>>(), vec![3]);
    assert!(rpcs[0].has_deferred());
    assert_eq!(rpcs[0].calls_in_use(), 1);
    assert_eq!(rpcs[0].cancel(&mut rts[0], c), Err(RpcError::NoSuchCall), "a completed call cannot be cancelled");
    assert_eq!(rpcs[0].run_deferred(&mut rts[0]), 0);
    assert_eq!(rpcs[0].run_deferred(&mut rts[0]), 1);
    assert_eq!(rpcs[0].run_deferred(&mut rts[0]), 0);
    assert_eq!(rts[0].runs.iter().map(|r| r.0).collect::<Vec<_>>(), vec![3, 2, 1]);
    assert_eq!(rts[0].attempts, vec![2, 2]);
    let first = rts[0].runs[0].1;
    assert!(rts[0].runs.iter().all(|r| r.1 == first), "one outcome for every continuation");
    assert_eq!(first.unwrap().body.as_slice(), &body8(9));
    assert_eq!(rpcs[0].calls_in_use(), 0);
    let s = rpcs[0].stats();
    assert_eq!((s.deferred, s.deferred_runs), (1, 1));
}

#[test]
fn hop_limit_answers_too_many_hops() {
    // Nodes 1 and 2 delegate to each other forever.
    let mut rts = [rt(0), Rt { fwd_to: 2, ..rt(1) }, Rt { fwd_to: 1, ..rt(2) }];
    let mut rpcs: [Small; 3] = core::array::from_fn(|i| Rpc::new(i as u16, Config::default()));
    let c = rpcs[0].call_raw(0, &mut rts[0], 1, OP_FWD, &body8(5), ReplyTo::None, Mode::Wait).unwrap();
    pump(&mut rpcs, &mut rts);
    assert_eq!(rpcs[0].poll_event(), Some(Event::Completed(c)));
    assert_eq!(rpcs[0].take_outcome(c), Some(Err(RpcError::TooManyHops)));
    let delegated: u64 = rpcs.iter().map(|r| r.stats().delegated).sum();
    assert_eq!(delegated, MAX_HOPS as u64);
    let served: Vec<u8> = rts.iter().flat_map(|r| r.served.iter().map(|s| s.1)).collect();
    assert_eq!(served.len(), MAX_HOPS as usize + 1);
    assert_eq!(served.iter().max(), Some(&MAX_HOPS));
}

#[test]
fn unknown_op_and_timeout_and_late_reply() {
    let mut rts = [rt(0), rt(1)];
    let cfg = Config { call_timeout: 100, nonblocking_timeout: Some(50) };
    let mut rpcs: [Small; 2] = [Rpc::new(0, cfg), Rpc::new(1, cfg)];
    let u = rpcs[0].call_raw(0, &mut rts[0], 1, 0x7777, &[], ReplyTo::None, Mode::Wait).unwrap();
    pump(&mut rpcs, &mut rts);
    assert_eq!(rpcs[0].take_outcome(u), Some(Err(RpcError::UnknownOp)));
    assert_eq!(rpcs[1].stats().unknown_ops, 1);

    let w =
        rpcs[0].call_raw(10, &mut rts[0], 1, OP_ECHO, &[], ReplyTo::UnsolicitedCopy { frame: 5 }, Mode::Wait).unwrap();
    let nb = rpcs[0]
        .call_raw(10, &mut rts[0], 1, OP_ECHO, &[], ReplyTo::Solicited { token: 3, frame: 6 }, Mode::NonBlocking)
        .unwrap();
    rpcs[0].push_continuation(nb, note, 1).unwrap();
    let reqs: Vec<_> = core::iter::from_fn(|| rpcs[0].poll_transmit()).collect();
    assert_eq!(rpcs[0].poll_timeout(), Some(60));
    rpcs[0].handle_timeouts(59, &mut rts[0]);
    assert!(rts[0].runs.is_empty());
    rpcs[0].handle_timeouts(60, &mut rts[0]);
    assert_eq!(rts[0].runs, vec![(1, Err(RpcError::Timeout))]);
    assert_eq!(rpcs[0].poll_timeout(), Some(110));
    rpcs[0].handle_timeouts(110, &mut rts[0]);
    assert_eq!(rpcs[0].take_outcome(w), Some(Err(RpcError::Timeout)));
    assert_eq!(rts[0].released, vec![6, 5]);
    // Late replies: stale, payload buffers released, nothing runs again.
    for t in reqs {
        rpcs[1].handle_message(200, &mut rts[1], 0, t.ctrl(), InPayload::None);
    }
    let mut buf = 40;
    while let Some(t) = rpcs[1].poll_transmit() {
        rpcs[0].handle_message(200, &mut rts[0], 1, t.ctrl(), InPayload::Buffer { frame: buf, len: 1 });
        buf += 1;
    }
    assert_eq!(rpcs[0].stats().stale_replies, 2);
    assert_eq!(rts[0].runs.len(), 1);
    assert_eq!(rts[0].released, vec![6, 5, 40, 41]);
    assert_eq!(rpcs[0].stats().timeouts, 2);
}

/// A solicited page call from node 0 to node 1, answered by node 1: the caller's NetRPC,
/// its runtime, the call and the reply node 1 queued (its payload tagged with token 99).
fn solicited_page_call() -> ([Small; 2], [Rt; 2], CallId, Transmit<Frame>) {
    let mut rts = [rt(0), rt(1)];
    let mut rpcs: [Small; 2] = [Rpc::new(0, Config::default()), Rpc::new(1, Config::default())];
    let c = rpcs[0]
        .call_raw(0, &mut rts[0], 1, OP_PAGE, &[], ReplyTo::Solicited { token: 99, frame: 4 }, Mode::Wait)
        .unwrap();
    let t = rpcs[0].poll_transmit().unwrap();
    rpcs[1].handle_message(0, &mut rts[1], 0, t.ctrl(), InPayload::None);
    let r = rpcs[1].poll_transmit().unwrap();
    (rpcs, rts, c, r)
}

#[test]
fn refused_solicited_payload_fails_the_call() {
    let (mut rpcs, mut rts, c, r) = solicited_page_call();
    assert_eq!(r.tag, 99, "a solicited reply payload is tagged with the requester's token");
    rpcs[0].handle_message(0, &mut rts[0], 1, r.ctrl(), InPayload::Refused);
    assert_eq!(rpcs[0].take_outcome(c), Some(Err(RpcError::PayloadRefused)));
    assert_eq!(rts[0].released, vec![4]);
}

/// A solicited call's payload must land in its IPT frame: a reply whose payload came as
/// an unsolicited buffer (what a node forging a reply can send) fails the call, and both
/// the buffer and the caller's frame are released.
#[test]
fn a_solicited_call_refuses_an_unsolicited_buffer_as_its_reply() {
    let (mut rpcs, mut rts, c, r) = solicited_page_call();
    rpcs[0].handle_message(0, &mut rts[0], 1, r.ctrl(), InPayload::Buffer { frame: 77, len: 4096 });
    assert_eq!(rpcs[0].take_outcome(c), Some(Err(RpcError::PayloadRefused)));
    assert_eq!(rts[0].released, vec![77, 4]);
    assert_eq!(rpcs[0].stats().refused_payloads, 1);
}

/// With a secret, a record's generations are drawn, not counted: they differ between
/// seeds, never repeat the previous one and are not the previous one plus one, so a node
/// that saw one reply token cannot name the next. Without a secret they count up.
#[test]
fn generations_are_drawn_from_the_secret() {
    let gens = |seed: Option<[u64; 2]>| -> Vec<u32> {
        let mut a = rt(0);
        let mut rpc: Small = Rpc::new(0, Config::default());
        if let Some(s) = seed {
            rpc.set_secret(s);
        }
        (0..32)
            .map(|i| {
                let c = rpc.call_raw(0, &mut a, 1, OP_ECHO, &body8(i), ReplyTo::None, Mode::Wait).unwrap();
                assert_eq!(c.record, 0);
                rpc.cancel(&mut a, c).unwrap();
                while rpc.poll_transmit().is_some() {}
                c.generation
            })
            .collect()
    };
    let plain = gens(None);
    assert!(plain.windows(2).all(|w| w[1] == w[0] + 1), "{plain:?}");
    let (a, b) = (gens(Some([1, 2])), gens(Some([3, 4])));
    assert_eq!(a, gens(Some([1, 2])), "the same secret, the same sequence");
    assert_ne!(a, b);
    for g in [&a, &b] {
        assert!(g.iter().all(|&x| x != 0));
        assert!(g.windows(2).all(|w| w[1] != w[0] && w[1] != w[0].wrapping_add(1)), "{g:?}");
    }
}

#[test]
fn body_too_long_is_rejected() {
    let mut a = rt(0);
    let mut rpc: Small = Rpc::new(0, Config::default());
    let long = [0u8; MAX_BODY + 1];
    assert_eq!(
        rpc.call_raw(0, &mut a, 1, OP_ECHO, &long, ReplyTo::UnsolicitedCopy { frame: 3 }, Mode::Wait),
        Err(RpcError::BodyTooLong)
    );
    assert_eq!(rpc.send_oneway(1, OP_ECHO, &long, None), Err(RpcError::BodyTooLong));
    assert_eq!(Body::from_slice(&long), Err(RpcError::BodyTooLong));
    // A typed request that does not fit is refused too.
    struct Big;
    impl Operation for Big {
        const OP: u16 = 0x0999;
        type Request = Bytes<{ MAX_BODY + 1 }>;
        type Reply = ();
    }
    assert!(rpc.call::<Big>(0, &mut a, 1, &Bytes([0; MAX_BODY + 1]), ReplyTo::None, Mode::Wait).is_err());
    assert!(matches!(Action::<Frame>::reply(&Bytes([0u8; MAX_BODY + 1]), None), Action::Error(_)));
    // The largest body is fine.
    assert!(rpc.call_raw(0, &mut a, 1, OP_ECHO, &[7; MAX_BODY], ReplyTo::None, Mode::Wait).is_ok());
    assert_eq!(rpc.poll_transmit().unwrap().ctrl().len(), CTRL_BYTES);
    assert!(rpc.poll_transmit().is_none());
    assert_eq!(rpc.calls_in_use(), 1);
    assert!(a.released.is_empty());
    // A header claiming a body longer than MAX_BODY is malformed.
    let mut ctrl = [0u8; CTRL_BYTES + 8];
    let h = Header {
        kind: Kind::Request,
        op: OP_ECHO,
        token: ReplyToken::default(),
        hops: 0,
        body_len: MAX_BODY as u16 + 1,
    };
    h.emit(&mut ctrl);
    rpc.handle_message(0, &mut a, 1, &ctrl, InPayload::None);
    assert_eq!(rpc.stats().malformed, 1);
    assert!(a.served.is_empty());
}

// ---- frames given to NetRPC come back or are released (regressions) -------------------

#[test]
fn cancelling_an_untaken_outcome_releases_its_frames() {
    let mut rts = [rt(0), rt(1)];
    let mut rpcs: [Small; 2] = [Rpc::new(0, Config::default()), Rpc::new(1, Config::default())];
    let s =
        rpcs[0].call_raw(0, &mut rts[0], 1, OP_PAGE, &[], ReplyTo::UnsolicitedCopy { frame: 5 }, Mode::Wait).unwrap();
    let u = rpcs[0].call_raw(0, &mut rts[0], 1, OP_PAGE, &[], ReplyTo::Unsolicited, Mode::Wait).unwrap();
    pump(&mut rpcs, &mut rts);
    // Both completed (copy: buffer 9001 released after the copy into frame 5; unsolicited:
    // buffer 9002 is the outcome's), but the waiters give up before taking the outcomes.
    assert_eq!(rts[0].copies, vec![(9001, 5, 4096)]);
    assert_eq!(rpcs[0].cancel(&mut rts[0], s), Ok(()));
    assert_eq!(rpcs[0].cancel(&mut rts[0], u), Ok(()));
    assert_eq!(rts[0].released, vec![9001, 5, 9002]);
    assert_eq!(rpcs[0].take_outcome(s), None);
    assert_eq!(rpcs[0].calls_in_use(), 0);
}

#[test]
fn a_reply_payload_that_is_not_sent_is_released() {
    let mut rts = [rt(0), rt(1)];
    let mut rpcs: [Rpc<Rt, Frame, 4, 4, 2>; 2] = [Rpc::new(0, Config::default()), Rpc::new(1, Config::default())];
    // A stub answers a one-way request with a payload: nothing is sent, the frame is
    // given back to the runtime.
    rpcs[0].send_oneway(1, OP_ONEWAY_REPLY, &[], None).unwrap();
    pump(&mut rpcs, &mut rts);
    assert_eq!(rts[1].server_frames.len(), 1);
    assert_eq!(rts[1].released, rts[1].server_frames);
    // A server whose transmit queue is full drops the reply and releases its payload.
    rts[1].released.clear();
    let mut reqs = Vec::new();
    for _ in 0..2 {
        rpcs[0].call_raw(0, &mut rts[0], 1, OP_ECHO, &[], ReplyTo::None, Mode::NonBlocking).unwrap();
        reqs.push(rpcs[0].poll_transmit().unwrap());
    }
    let page = rpcs[0].call_raw(0, &mut rts[0], 1, OP_PAGE, &[], ReplyTo::Unsolicited, Mode::NonBlocking).unwrap();
    reqs.push(rpcs[0].poll_transmit().unwrap());
    let _ = page;
    for t in &reqs {
        rpcs[1].handle_message(0, &mut rts[1], 0, t.ctrl(), InPayload::None);
    }
    assert_eq!(rpcs[1].stats().tx_dropped, 1);
    let sent: Vec<_> = core::iter::from_fn(|| rpcs[1].poll_transmit()).collect();
    assert_eq!(sent.len(), 2);
    assert!(sent.iter().all(|t| t.payload.is_none()));
    assert_eq!(rts[1].released, vec![*rts[1].server_frames.last().unwrap()]);
}

#[test]
fn a_nonblocking_call_without_continuations_releases_its_payload() {
    let mut rts = [rt(0), rt(1)];
    let mut rpcs: [Small; 2] = [Rpc::new(0, Config::default()), Rpc::new(1, Config::default())];
    rpcs[0].call_raw(0, &mut rts[0], 1, OP_PAGE, &[], ReplyTo::Unsolicited, Mode::NonBlocking).unwrap();
    rpcs[0]
        .call_raw(0, &mut rts[0], 1, OP_PAGE, &[], ReplyTo::UnsolicitedCopy { frame: 8 }, Mode::NonBlocking)
        .unwrap();
    pump(&mut rpcs, &mut rts);
    assert_eq!(rpcs[0].calls_in_use(), 0);
    // Nobody can ever see these outcomes: their frames go back to the runtime.
    let mut rel = rts[0].released.clone();
    rel.sort();
    assert_eq!(rel, vec![8, 9001, 9002]);
}

// ---- fuzzing handle_message -------------------------------------------------------------

/// A node with calls in flight of every kind, to aim mutated replies at.
fn busy_node() -> (Rpc<Rt, Frame, 8, 4, 8>, Rt, Vec<u8>) {
    let mut a = rt(0);
    let mut rpc = Rpc::new(0, Config { call_timeout: 10, nonblocking_timeout: Some(10) });
    rpc.call_raw(0, &mut a, 1, OP_ECHO, &[1, 2, 3], ReplyTo::Solicited { token: 5, frame: 1 }, Mode::Wait).unwrap();
    let c = rpc.call_raw(0, &mut a, 1, OP_ECHO, &[], ReplyTo::UnsolicitedCopy { frame: 2 }, Mode::NonBlocking).unwrap();
    rpc.push_continuation(c, note, 1).unwrap();
    rpc.call_raw(0, &mut a, 1, OP_ECHO, &[], ReplyTo::Unsolicited, Mode::NonBlocking).unwrap();
    let first = rpc.poll_transmit().unwrap();
    while rpc.poll_transmit().is_some() {}
    // A valid reply to the first call, to mutate.
    let (h, body) = Header::parse(first.ctrl()).unwrap();
    let mut ctrl = vec![0u8; HEADER_BYTES + body.len()];
    Header { kind: Kind::Reply, ..h }.emit(&mut ctrl);
    ctrl[HEADER_BYTES..].copy_from_slice(body);
    (rpc, a, ctrl)
}

/// Time out whatever is left, run deferred continuations, take blocking outcomes.
fn settle(rpc: &mut Rpc<Rt, Frame, 8, 4, 8>, a: &mut Rt) {
    rpc.handle_timeouts(100, a);
    while rpc.has_deferred() {
        rpc.run_deferred(a);
    }
    while let Some(Event::Completed(id)) = rpc.poll_event() {
        let _ = rpc.take_outcome(id);
    }
    assert_eq!(rpc.calls_in_use(), 0);
}

fn any_payload() -> impl Strategy<Value = InPayload<Frame>> {
    prop_oneof![
        Just(InPayload::None),
        Just(InPayload::Refused),
        (any::<u64>(), any::<u32>()).prop_map(|(token, len)| InPayload::Ipt { token, len }),
        any::<u32>().prop_map(|len| InPayload::Buffer { frame: 500, len }),
    ]
}

/// Whatever arrives, no panic, and a receive buffer is released exactly once or owned by
/// a stub or handed back in an outcome.
fn check_buffer(a: &Rt, rpc: &mut Rpc<Rt, Frame, 8, 4, 8>, payload: InPayload<Frame>) {
    let released = a.released.iter().filter(|&&f| f == 500).count();
    let stub = a.stub_buffers.iter().filter(|&&f| f == 500).count();
    let mut outcome =
        a.runs.iter().filter(|r| matches!(r.1, Ok(Reply { payload: Payload::Buffer { frame: 500, .. }, .. }))).count();
    while let Some(Event::Completed(id)) = rpc.poll_event() {
        if let Some(Ok(Reply { payload: Payload::Buffer { frame: 500, .. }, .. })) = rpc.take_outcome(id) {
            outcome += 1;
        }
    }
    let want = matches!(payload, InPayload::Buffer { .. }) as usize;
    assert_eq!(released + stub + outcome, want, "buffer 500: released {released}, stub {stub}, outcome {outcome}");
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 1500, failure_persistence: None, ..ProptestConfig::default() })]

    #[test]
    fn arbitrary_bytes_never_panic(bytes in prop::collection::vec(any::<u8>(), 0..200), payload in any_payload()) {
        let (mut rpc, mut a, _) = busy_node();
        rpc.handle_message(3, &mut a, 1, &bytes, payload);
        check_buffer(&a, &mut rpc, payload);
        settle(&mut rpc, &mut a);
    }

    #[test]
    fn mutated_messages_never_panic(
        edits in prop::collection::vec((0usize..40, any::<u8>()), 0..6),
        cut in prop::option::of(0usize..40),
        kind in 1u8..=4,
        payload in any_payload(),
    ) {
        let (mut rpc, mut a, mut ctrl) = busy_node();
        ctrl[1] = kind;
        for (i, v) in edits {
            if i < ctrl.len() {
                ctrl[i] = v;
            }
        }
        if let Some(c) = cut {
            ctrl.truncate(c);
        }
        rpc.handle_message(3, &mut a, 1, &ctrl, payload);
        check_buffer(&a, &mut rpc, payload);
        while rpc.poll_transmit().is_some() {}
        settle(&mut rpc, &mut a);
    }
}

#[test]
fn every_truncation_is_malformed() {
    let (mut rpc, mut a, ctrl) = busy_node();
    for n in 0..ctrl.len() {
        rpc.handle_message(0, &mut a, 1, &ctrl[..n], InPayload::Buffer { frame: 600 + n as u32, len: 1 });
    }
    let s = rpc.stats();
    assert_eq!(s.malformed, ctrl.len() as u64);
    assert_eq!((s.replies, s.stale_replies, s.requests_served), (0, 0, 0));
    assert_eq!(a.released, (600..600 + ctrl.len() as u32).collect::<Vec<_>>());
    // The whole message is the first call's reply.
    rpc.handle_message(0, &mut a, 1, &ctrl, InPayload::Ipt { token: 5, len: 10 });
    let Some(Event::Completed(id)) = rpc.poll_event() else { panic!("no completion") };
    let o = rpc.take_outcome(id).unwrap().unwrap();
    assert_eq!(o.body.as_slice(), &[1, 2, 3]);
    assert_eq!(o.payload, Payload::Frame { frame: 1, len: 10 });
}

struct Echo;
impl Operation for Echo {
    const OP: u16 = OP_ECHO;
    type Request = Bytes<8>;
    type Reply = Bytes<8>;
}

/// A call with a request payload: the request carries it unsolicited, the callee's stub
/// gets it as its own buffer, the reply completes the call, and the caller's frame is
/// never released by NetRPC (it stays the caller's). A refused call queues nothing.
#[test]
fn a_call_carries_a_request_payload_to_the_stub() {
    let mut rts = [rt(0), rt(1)];
    let mut rpcs: [Small; 2] = [Rpc::new(0, Config::default()), Rpc::new(1, Config::default())];
    let id = rpcs[0].call_with_payload::<Echo>(0, &mut rts[0], 1, &Bytes(body8(5)), (42, 8192), Mode::Wait).unwrap();
    let t = *rpcs[0].peek_transmit().unwrap();
    assert_eq!((t.payload, t.tag), (Some((42, 8192)), 0), "sent unsolicited from the caller's frame");
    pump(&mut rpcs, &mut rts);
    assert_eq!(rts[1].stub_buffers, vec![9001], "the stub owns the received buffer");
    let reply = rpcs[0].take_outcome(id).unwrap().unwrap();
    assert_eq!(reply.decode::<Bytes<8>>().unwrap().0, body8(5));
    assert!(rts[0].released.is_empty(), "the payload frame is the caller's again");
    for _ in 0..3 {
        rpcs[0].call_with_payload::<Echo>(0, &mut rts[0], 1, &Bytes(body8(6)), (43, 1), Mode::Wait).unwrap();
    }
    let r = rpcs[0].call_with_payload::<Echo>(0, &mut rts[0], 1, &Bytes(body8(7)), (44, 1), Mode::Wait);
    assert_eq!(r, Err(RpcError::TableFull));
    assert_eq!(core::iter::from_fn(|| rpcs[0].poll_transmit()).count(), 3, "the refused call queued nothing");
}

/// A stub that replies later (`Action::Done`, then `reply_later` / `error_later`): the
/// requester gets what an immediate reply would give it — the body, the solicited payload
/// tagged with its IPT token, an error code — and a later reply after the call ended is
/// a stale reply, dropped.
#[test]
fn a_reply_sent_later_completes_the_call_as_an_immediate_one() {
    let mut rts = [rt(0), rt(1)];
    let mut rpcs: [Small; 2] = [Rpc::new(0, Config::default()), Rpc::new(1, Config::default())];
    let solicited = ReplyTo::Solicited { token: 99, frame: 4 };
    let a = rpcs[0].call_raw(0, &mut rts[0], 1, OP_LATER, &[], solicited, Mode::Wait).unwrap();
    let b = rpcs[0].call_raw(0, &mut rts[0], 1, OP_LATER, &[], ReplyTo::None, Mode::Wait).unwrap();
    pump(&mut rpcs, &mut rts);
    assert_eq!(rpcs[0].take_outcome(a), None, "nothing sent yet");
    let [pa, pb] = rts[1].owed[..] else { panic!("two replies owed: {:?}", rts[1].owed) };
    assert_eq!(pa.requester(), 0);
    rpcs[1].reply_later(pa, &body8(7), Some((55, 4096))).unwrap();
    let r = rpcs[1].poll_transmit().unwrap();
    assert_eq!(r.tag, 99, "a solicited payload is tagged with the requester's token");
    rpcs[0].handle_message(0, &mut rts[0], 1, r.ctrl(), InPayload::Ipt { token: 99, len: 4096 });
    let got = rpcs[0].take_outcome(a).unwrap().unwrap();
    assert_eq!(got.body.as_slice(), &body8(7));
    rpcs[1].error_later(pb, RpcError::Remote(0x0B05)).unwrap();
    pump(&mut rpcs, &mut rts);
    assert_eq!(rpcs[0].take_outcome(b), Some(Err(RpcError::Remote(0x0B05))));
    // The same reply again: its call is over.
    rpcs[1].error_later(pb, RpcError::Remote(0x0B05)).unwrap();
    pump(&mut rpcs, &mut rts);
    assert_eq!(rpcs[0].stats().stale_replies, 1);
    assert!(
        Pending::of(&Incoming {
            src: 0,
            op: OP_LATER,
            body: &[],
            token: ReplyToken { origin: 0, record: 0, generation: 0, payload_kind: 0, payload_token: 0 },
            hops: 0,
            payload: InPayload::<Frame>::None,
            one_way: true,
            now: 0
        })
        .is_none(),
        "a one-way request is owed nothing"
    );
}
