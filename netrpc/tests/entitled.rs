// SPDX-License-Identifier: GPL-2.0-only
//! Who may answer a call: a reply is taken only from the node called or, after a
//! delegation, from a node the runtime accepts as its delegate; a request straight from a
//! requester must name that requester as its origin. Everything else is dropped and counted.

use netrpc::prelude::*;
use netrpc::rpc::Descriptor;
use netrpc::wire::{Header, Kind, HEADER_BYTES};
use proptest::prelude::*;

type Frame = u32;

const OP_ECHO: u16 = 0x0100;
const OP_FWD: u16 = 0x0200;

/// A runtime that echoes, delegates `OP_FWD` to `fwd_to` (echoes it when that is 0), and accepts delegated replies
/// only from the nodes in `delegates`.
#[derive(Default)]
struct Rt {
    fwd_to: u16,
    delegates: Vec<u16>,
    released: Vec<Frame>,
    served: u32,
}

impl Runtime<Frame> for Rt {
    fn serve(&mut self, inc: &Incoming<'_, Frame>) -> Action<Frame> {
        self.served += 1;
        match inc.op {
            OP_ECHO | OP_FWD if self.fwd_to == 0 => {
                Action::Reply { body: Body::from_slice(inc.body).unwrap(), payload: None }
            }
            OP_FWD => Action::delegate(self.fwd_to, inc),
            _ => Action::Error(RpcError::UnknownOp),
        }
    }
    fn copy_payload(&mut self, _: &Frame, _: &Frame, _: u32) -> bool {
        true
    }
    fn release(&mut self, frame: Frame) {
        assert!(!self.released.contains(&frame), "frame {frame} released twice");
        self.released.push(frame);
    }
    fn accept_delegated_reply(&self, _op: u16, _called: u16, from: u16, _hops: u8) -> bool {
        self.delegates.contains(&from)
    }
}

type R = Rpc<Rt, Frame, 4, 4, 8>;

fn nodes(n: u16) -> (Vec<R>, Vec<Rt>) {
    ((0..n).map(|i| Rpc::new(i, Config::default())).collect(), (0..n).map(|_| Rt::default()).collect())
}

/// The control bytes of `t` with the hop count replaced (what a forger can write).
fn with_hops(t: &Transmit<Frame>, hops: u8) -> Vec<u8> {
    let mut c = t.ctrl().to_vec();
    let (mut h, _) = Header::parse(&c).unwrap();
    h.hops = hops;
    h.emit(&mut c[..HEADER_BYTES]);
    c
}

/// Node 0 calls node 1 (echo); node 1's genuine reply is returned, not delivered.
fn echo_call(mode: Mode, reply_to: ReplyTo<Frame>) -> (Vec<R>, Vec<Rt>, CallId, Transmit<Frame>) {
    let (mut rpcs, mut rts) = nodes(3);
    let c = rpcs[0].call_raw(0, &mut rts[0], 1, OP_ECHO, &[7; 8], reply_to, mode).unwrap();
    let t = rpcs[0].poll_transmit().unwrap();
    rpcs[1].handle_message(0, &mut rts[1], 0, t.ctrl(), InPayload::None);
    let r = rpcs[1].poll_transmit().unwrap();
    (rpcs, rts, c, r)
}

/// The genuine reply token, sent by node 2 (never called): dropped and counted, the call
/// waits on, and the reply of node 1 still completes it.
#[test]
fn a_reply_from_a_node_not_called_is_dropped() {
    let (mut rpcs, mut rts, c, r) = echo_call(Mode::Wait, ReplyTo::None);
    rpcs[0].handle_message(0, &mut rts[0], 2, r.ctrl(), InPayload::Buffer { frame: 50, len: 8 });
    assert_eq!(rpcs[0].stats().foreign_replies, 1);
    assert_eq!(rpcs[0].take_outcome(c), None, "the forged reply completed the call");
    assert_eq!(rts[0].released, vec![50], "the forged reply's buffer is released");
    // An error reply from the wrong node is no better.
    let mut e = r.ctrl().to_vec();
    e[1] = Kind::ErrorReply as u8;
    rpcs[0].handle_message(0, &mut rts[0], 2, &e, InPayload::None);
    assert_eq!(rpcs[0].stats().foreign_replies, 2);
    rpcs[0].handle_message(0, &mut rts[0], 1, r.ctrl(), InPayload::None);
    let o = rpcs[0].take_outcome(c).expect("the called node's reply completes the call").unwrap();
    assert_eq!(o.body.as_slice(), &[7; 8]);
    assert_eq!(rpcs[0].stats().replies, 1);
}

/// A forger that claims a delegation (hops 1) is still not a delegate the runtime accepts.
#[test]
fn a_claimed_delegation_needs_an_accepted_delegate() {
    let (mut rpcs, mut rts, c, r) = echo_call(Mode::Wait, ReplyTo::None);
    rts[0].delegates = vec![3];
    rpcs[0].handle_message(0, &mut rts[0], 2, &with_hops(&r, 1), InPayload::None);
    assert_eq!((rpcs[0].stats().foreign_replies, rpcs[0].take_outcome(c)), (1, None));
    // Beyond the hop limit even an accepted node is refused.
    rpcs[0].handle_message(0, &mut rts[0], 3, &with_hops(&r, MAX_HOPS + 1), InPayload::None);
    assert_eq!((rpcs[0].stats().foreign_replies, rpcs[0].take_outcome(c)), (2, None));
    // An accepted node with a plausible hop count completes it.
    rpcs[0].handle_message(0, &mut rts[0], 3, &with_hops(&r, 1), InPayload::None);
    assert!(rpcs[0].take_outcome(c).is_some_and(|o| o.is_ok()));
}

/// A genuine 3-way call: 0 calls 1, 1 delegates to 2, 2 replies to 0. Taken when the
/// runtime accepts 2 as a delegate, dropped when it does not.
#[test]
fn a_delegated_reply_is_taken_only_from_an_accepted_delegate() {
    for accept in [true, false] {
        let (mut rpcs, mut rts) = nodes(3);
        rts[1].fwd_to = 2;
        if accept {
            rts[0].delegates = vec![2];
        }
        let c = rpcs[0].call_raw(0, &mut rts[0], 1, OP_FWD, &[1; 4], ReplyTo::None, Mode::Wait).unwrap();
        let t = rpcs[0].poll_transmit().unwrap();
        rpcs[1].handle_message(0, &mut rts[1], 0, t.ctrl(), InPayload::None);
        let d = rpcs[1].poll_transmit().unwrap();
        assert_eq!(d.dst, 2);
        rpcs[2].handle_message(0, &mut rts[2], 1, d.ctrl(), InPayload::None);
        let r = rpcs[2].poll_transmit().unwrap();
        assert_eq!(r.dst, 0);
        rpcs[0].handle_message(0, &mut rts[0], 2, r.ctrl(), InPayload::None);
        assert_eq!(rpcs[0].take_outcome(c).is_some(), accept, "accept {accept}");
        assert_eq!(rpcs[0].stats().foreign_replies, u64::from(!accept));
    }
}

/// A foreign reply whose payload the NIC already put into the call's IPT frame (it knew
/// the token): the frame's bytes are not the called node's, so the call fails and the
/// frame goes back to the runtime; the true reply that follows is stale.
#[test]
fn a_foreign_payload_in_the_calls_frame_fails_the_call() {
    let (mut rpcs, mut rts, c, r) = echo_call(Mode::Wait, ReplyTo::Solicited { token: 99, frame: 4 });
    rpcs[0].handle_message(0, &mut rts[0], 2, r.ctrl(), InPayload::Ipt { token: 99, len: 8192 });
    assert_eq!(rpcs[0].take_outcome(c), Some(Err(RpcError::PayloadRefused)));
    assert_eq!(rts[0].released, vec![4]);
    rpcs[0].handle_message(0, &mut rts[0], 1, r.ctrl(), InPayload::None);
    let s = rpcs[0].stats();
    assert_eq!((s.foreign_replies, s.stale_replies, s.replies), (1, 1, 0));
}

/// A request straight from a requester (hops 0) that names another node as its origin
/// would make the server answer a call nobody made there: dropped, not served.
#[test]
fn a_request_naming_another_origin_is_not_served() {
    let (mut rpcs, mut rts) = nodes(3);
    let _ = rpcs[0].call_raw(0, &mut rts[0], 1, OP_ECHO, &[2; 8], ReplyTo::None, Mode::Wait).unwrap();
    let t = rpcs[0].poll_transmit().unwrap();
    rpcs[1].handle_message(0, &mut rts[1], 2, t.ctrl(), InPayload::Buffer { frame: 60, len: 10 });
    assert_eq!((rpcs[1].stats().foreign_requests, rts[1].served), (1, 0));
    assert_eq!(rts[1].released, vec![60]);
    assert!(rpcs[1].poll_transmit().is_none(), "nothing is sent for a foreign request");
    // One-way messages too.
    rpcs[0].send_oneway(1, OP_ECHO, &[1], None).unwrap();
    let t = rpcs[0].poll_transmit().unwrap();
    rpcs[1].handle_message(0, &mut rts[1], 2, t.ctrl(), InPayload::None);
    assert_eq!((rpcs[1].stats().foreign_requests, rts[1].served), (2, 0));
    // From its true origin it is served.
    rpcs[1].handle_message(0, &mut rts[1], 0, t.ctrl(), InPayload::None);
    assert_eq!(rts[1].served, 1);
}

proptest! {
    /// Whatever hop count a reply claims, a sender that is neither the node called nor an
    /// accepted delegate never completes the call, and each try is counted.
    #[test]
    fn no_reply_from_an_unentitled_node_completes_a_call(
        tries in prop::collection::vec((3u16..40, any::<u8>(), any::<bool>()), 1..20),
        nonblocking in any::<bool>(),
    ) {
        let mode = if nonblocking { Mode::NonBlocking } else { Mode::Wait };
        let (mut rpcs, mut rts, c, r) = echo_call(mode, ReplyTo::None);
        rts[0].delegates = vec![2];
        for (i, &(src, hops, error)) in tries.iter().enumerate() {
            let mut ctrl = with_hops(&r, hops);
            if error {
                ctrl[1] = Kind::ErrorReply as u8;
            }
            rpcs[0].handle_message(0, &mut rts[0], src, &ctrl, InPayload::None);
            prop_assert_eq!(rpcs[0].stats().foreign_replies, i as u64 + 1);
            prop_assert_eq!(rpcs[0].calls_in_use(), 1);
        }
        if !nonblocking {
            prop_assert_eq!(rpcs[0].take_outcome(c), None);
        }
        rpcs[0].handle_message(0, &mut rts[0], 1, r.ctrl(), InPayload::None);
        prop_assert_eq!(rpcs[0].stats().replies, 1);
    }
}

/// An echo of 4 bytes, the operation the answer test calls.
struct Echo;
impl Operation for Echo {
    const OP: u16 = OP_ECHO;
    type Request = Bytes<4>;
    type Reply = Bytes<4>;
}

/// A NIC's answer completes only the answerable call it names by its IPT token, and only
/// from the node that call went to; its request carries the descriptor the callee's NIC
/// reads. Anything else is dropped and counted stale, and the call waits on.
#[test]
fn an_answer_completes_only_the_answerable_call_to_the_answering_node() {
    let (mut rpc, mut rt) = nodes(3);
    let reply_to = ReplyTo::Solicited { token: 77, frame: 5 };
    let call = rpc[0].call_answerable::<Echo>(0, &mut rt[0], 1, &Bytes(*b"ping"), reply_to, Mode::Wait, 3, 9).unwrap();
    let t = rpc[0].poll_transmit().expect("the request");
    assert!(t.answerable);
    assert_eq!(Descriptor::from_ctrl(t.ctrl()), Some(Descriptor { index: 3, key: 9, token: 77 }));
    assert_eq!(t.ctrl().len() % 4, 0, "whole words, as the NIC reads them");
    // A plain solicited call to the same node, under another token.
    let plain = ReplyTo::Solicited { token: 88, frame: 6 };
    let other = rpc[0].call::<Echo>(0, &mut rt[0], 1, &Bytes(*b"pong"), plain, Mode::Wait).unwrap();
    assert!(!rpc[0].poll_transmit().expect("the second request").answerable);

    let ipt = |token| InPayload::Ipt { token, len: 4096 };
    // From a node the call did not go to, under another token, or for the plain call.
    rpc[0].handle_answer(&mut rt[0], 2, 77, b"body", ipt(77));
    rpc[0].handle_answer(&mut rt[0], 1, 78, b"body", ipt(78));
    rpc[0].handle_answer(&mut rt[0], 1, 88, b"body", ipt(88));
    assert_eq!(rpc[0].stats().stale_replies, 3);
    assert_eq!(rpc[0].stats().answers, 0);
    assert!(rpc[0].take_outcome(call).is_none() && rpc[0].take_outcome(other).is_none(), "both still waiting");

    rpc[0].handle_received(1, &mut rt[0], 1, b"body", ipt(77), Some(77));
    let reply = rpc[0].take_outcome(call).expect("answered").expect("a reply");
    assert_eq!(reply.body.as_slice(), b"body");
    assert_eq!(reply.payload, Payload::Frame { frame: 5, len: 4096 });
    assert_eq!(rpc[0].stats().answers, 1);
    // Answered once: the same answer again is stale.
    rpc[0].handle_answer(&mut rt[0], 1, 77, b"body", ipt(77));
    assert_eq!(rpc[0].stats().stale_replies, 4);
    // Only a solicited call can be answered (the answer's payload needs its frame).
    let none = rpc[0].call_answerable::<Echo>(0, &mut rt[0], 1, &Bytes(*b"ping"), ReplyTo::None, Mode::Wait, 3, 9);
    assert_eq!(none, Err(RpcError::Malformed));
}
