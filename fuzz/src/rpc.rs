// SPDX-License-Identifier: GPL-2.0-only
//! Target `netrpc`: NetRPC messages — the header codec and the engine's
//! `handle_message` fed any control bytes and payload descriptions.
//!
//! Oracles: an accepted header re-emits to the same 24 bytes and its body is the bytes
//! after it; the engine (a node with calls of its own outstanding, so replies can match)
//! never panics, never releases a frame twice, and every transmit it produces parses as
//! a NetRPC header.

use arbitrary::{Arbitrary, Unstructured};
use netrpc::prelude::*;
use netrpc::wire::{Header, HEADER_BYTES};

type Frame = u32;
const OP_ECHO: u16 = 0x0100;
const OP_FWD: u16 = 0x0200;

#[derive(Default)]
struct Rt {
    released: Vec<Frame>,
}

impl Runtime<Frame> for Rt {
    fn serve(&mut self, inc: &Incoming<'_, Frame>) -> Action<Frame> {
        match inc.op {
            OP_ECHO => Action::Reply { body: Body::from_slice(inc.body).unwrap_or(Body::EMPTY), payload: None },
            OP_FWD => Action::delegate(2, inc),
            _ => Action::Error(RpcError::UnknownOp),
        }
    }
    fn copy_payload(&mut self, _from: &Frame, _to: &Frame, _len: u32) -> bool {
        true
    }
    fn release(&mut self, frame: Frame) {
        assert!(!self.released.contains(&frame), "frame {frame} released twice");
        self.released.push(frame);
    }
}

#[derive(Arbitrary, Debug)]
enum In {
    None,
    Refused,
    Ipt { token: u64, len: u32 },
    Buffer { len: u32 },
}

#[derive(Arbitrary, Debug)]
enum Reply {
    None,
    Solicited,
    Unsolicited,
    UnsolicitedCopy,
}

#[derive(Arbitrary, Debug)]
enum Step {
    /// A message from node `src % 4`.
    Message {
        src: u8,
        ctrl: Vec<u8>,
        payload: In,
        now: u16,
    },
    /// A call of our own (so replies have records to match).
    Call {
        dst: u8,
        op: u16,
        body: Vec<u8>,
        reply: Reply,
        wait: bool,
        token: u64,
    },
    Timeouts {
        now: u16,
    },
    Deferred,
}

fn header_round_trip(b: &[u8]) {
    if let Ok((h, body)) = Header::parse(b) {
        let mut out = [0u8; HEADER_BYTES];
        h.emit(&mut out);
        assert_eq!(&out[..], &b[..HEADER_BYTES], "header changed in the round trip");
        assert_eq!(body, &b[HEADER_BYTES..HEADER_BYTES + h.body_len as usize]);
    }
}

pub fn fuzz(data: &[u8]) {
    header_round_trip(data);
    let mut u = Unstructured::new(data);
    let mut rpc: Rpc<Rt, Frame, 4, 4, 8> = Rpc::new(1, Config { call_timeout: 1000, nonblocking_timeout: Some(1000) });
    let mut rt = Rt::default();
    let mut next_frame: Frame = 1;
    let mut clock = 0u64;
    let mut calls = Vec::new();
    for _ in 0..32 {
        let Ok(step) = Step::arbitrary(&mut u) else { break };
        match step {
            Step::Message { src, ctrl, payload, now } => {
                clock += now as u64;
                header_round_trip(&ctrl);
                let payload = match payload {
                    In::None => InPayload::None,
                    In::Refused => InPayload::Refused,
                    In::Ipt { token, len } => InPayload::Ipt { token, len },
                    In::Buffer { len } => {
                        next_frame += 1;
                        InPayload::Buffer { frame: next_frame, len }
                    }
                };
                rpc.handle_message(clock, &mut rt, src as u16 % 4, &ctrl, payload);
            }
            Step::Call { dst, op, body, reply, wait, token } => {
                next_frame += 1;
                let frame = next_frame;
                let reply_to = match reply {
                    Reply::None => ReplyTo::None,
                    Reply::Solicited => ReplyTo::Solicited { token, frame },
                    Reply::Unsolicited => ReplyTo::Unsolicited,
                    Reply::UnsolicitedCopy => ReplyTo::UnsolicitedCopy { frame },
                };
                let mode = if wait { Mode::Wait } else { Mode::NonBlocking };
                if let Ok(id) = rpc.call_raw(clock, &mut rt, dst as u16 % 4, op, &body, reply_to, mode) {
                    calls.push(id);
                }
            }
            Step::Timeouts { now } => {
                clock += now as u64;
                rpc.handle_timeouts(clock, &mut rt);
            }
            Step::Deferred => {
                rpc.run_deferred(&mut rt);
            }
        }
        while let Some(t) = rpc.poll_transmit() {
            assert!(Header::parse(t.ctrl()).is_ok(), "engine produced an unparsable message");
        }
        while rpc.poll_event().is_some() {}
        calls.retain(|&id| rpc.take_outcome(id).is_none());
    }
}
