// SPDX-License-Identifier: GPL-2.0-only
//! Target `firmware_recv`: the firmware's receive path fed arbitrary packets, in the
//! timing model (`trapeze_firmware::sim`), with the oracle "never DMA outside a posted
//! frame or an armed IPT entry, never an answer outside an exported entry".
//!
//! Two nodes; node 1 is under test. Packets from outside the cluster (`Cluster::inject`)
//! reach node 1's link in, a few bytes per tick, with a good or a bad trailer: any bytes,
//! or a header the script builds (any flags, sources, destinations, lengths that lie or
//! not, payload tokens of node 1 right or flipped, answerable requests whose descriptor
//! names node 1's answer table with the right key or not and a payload token node 0 armed
//! or not), cut short or overlong. Node 0 posts ordinary and answerable messages to node 1
//! in between, and node 1's host exports, retracts, reuses and half-changes answer-table
//! entries while all this is in flight ([`crate::answers`]). Oracles, checked after every
//! tick: node 1's host writes lie inside a frame attached to one of its receive slots or
//! armed in its IPT; its host reads inside a frame its host exported; an answer leaves
//! only whole, from its entry's live export with that export's bytes; node 0 receives
//! only such answers, and its host writes stay inside its own frames. Nothing panics (the
//! firmware's debug assertions are on).

use crate::answers::{check_host_writes, offer_writes, Change, Exports};
use crate::firmware::{token_of, Desc, Token, FAST};
use arbitrary::{Arbitrary, Unstructured};
use trapeze_firmware::iface::ipt::PayloadToken;
use trapeze_firmware::iface::layout::Policy;
use trapeze_firmware::iface::wire::{ctrl_wire_bytes, Header, MAGIC};
use trapeze_firmware::sim::{Cluster, Faults, NodeConfig, OutMsg};

const HOST_MEM: usize = 256 << 10;

/// A packet the script builds: a header of its choosing, then control bytes and payload.
#[derive(Arbitrary, Clone, Debug)]
struct Built {
    flags: u8,
    /// Source node (`% 4`: node 3 does not exist) unless `raw_src`.
    src: u8,
    raw_src: Option<u16>,
    /// Destination: node 1 unless given.
    dst: Option<u16>,
    /// What the header claims, if it lies.
    ctrl_len: Option<u16>,
    payload_len: Option<u32>,
    token: Token,
    ctrl: Vec<u8>,
    /// An answerable request's descriptor after `ctrl` (node 0's tokens).
    desc: Option<Desc>,
    payload: u16,
    seq: u32,
    /// Cut the packet to this many bytes, or add this many.
    cut: Option<u16>,
    extra: u8,
    /// Break the magic or version.
    bad_magic: bool,
}

#[derive(Arbitrary, Debug)]
enum Packet {
    Raw(Vec<u8>),
    Built(Built),
}

#[derive(Arbitrary, Debug)]
enum Step {
    /// A packet from outside into node 1's link in.
    Inject { packet: Packet, chunk: u8, trailer_ok: bool },
    /// Node 0 sends node 1 a message (answerable if it has a descriptor).
    Post { ctrl: Vec<u8>, payload: u16, token: Token, desc: Option<Desc> },
    /// Node 1's host changes its answer table.
    Change(Change),
    /// Let model time pass (µs, modulo 64).
    Pause(u8),
}

#[derive(Arbitrary, Debug)]
struct Script {
    policy: u8,
    recv_pulse: u16,
    mtu: u16,
    /// IPT entries node 1 and node 0 arm: frame length and segment count.
    arms1: Vec<(u16, u8)>,
    arms0: Vec<(u16, u8)>,
    steps: Vec<Step>,
}

pub fn fuzz(data: &[u8]) {
    let _ = run(data);
}

/// What an input did: answers that left node 1 whole, messages node 1's host received
/// (`None`: not a script).
pub fn run(data: &[u8]) -> Option<(u32, usize)> {
    let s = Script::arbitrary(&mut Unstructured::new(data)).ok()?;
    Some(run_script(&s))
}

fn run_script(s: &Script) -> (u32, usize) {
    let policy = match s.policy % 3 {
        0 => Policy::Eager,
        1 => Policy::FixedPulse,
        _ => Policy::StoreAndForward,
    };
    let mtu = 64 + (s.mtu as u32 % 4033);
    let cfg = NodeConfig { policy, send_pulse: 256, recv_pulse: 4 + (s.recv_pulse as u32 % 4096), mtu, notify: 0 };
    let mut c = Cluster::with_host_mem(FAST, 2, cfg, Faults::default(), HOST_MEM);
    let (tokens, writes) = offer_writes(&mut c, mtu, [&s.arms0, &s.arms1]);
    let mut exports = Exports::new(1, mtu);
    for step in s.steps.iter().take(24) {
        match step {
            Step::Inject { packet, chunk, trailer_ok } => {
                let bytes = match packet {
                    Packet::Raw(b) => b.clone(),
                    Packet::Built(b) => build(b, &tokens),
                };
                c.inject(1, &bytes, 1 + *chunk as u32 * 8, *trailer_ok);
            }
            Step::Post { ctrl, payload, token, desc } => {
                let mut ctrl: Vec<u8> = ctrl.iter().copied().take(96).collect();
                if let Some(d) = desc {
                    ctrl.resize(ctrl.len() & !3, 0);
                    ctrl.extend_from_slice(&d.bytes(&tokens[0]));
                }
                let len = *payload as usize % (mtu as usize + 1);
                let msg = OutMsg {
                    peer: 1,
                    ctrl,
                    payload: vec![0xC3; len],
                    token: PayloadToken(token_of(token, &tokens[1])),
                    answerable: desc.is_some(),
                    ..OutMsg::default()
                };
                let now = c.now_ps();
                c.host_mut(0).post(now, msg);
            }
            Step::Change(ch) => exports.apply(&mut c, ch),
            Step::Pause(us) => exports.run_for(&mut c, *us as u64 % 64),
        }
    }
    exports.settle(&mut c, 0);
    for (n, w) in writes.iter().enumerate() {
        check_host_writes(&c, n, w);
    }
    (exports.answers, c.host(1).delivered.len())
}

/// The bytes of a built packet.
fn build(b: &Built, tokens: &[Vec<u64>; 2]) -> Vec<u8> {
    let mut ctrl: Vec<u8> = b.ctrl.iter().copied().take(128).collect();
    if let Some(d) = &b.desc {
        ctrl.truncate(104);
        ctrl.resize(ctrl.len() & !3, 0);
        ctrl.extend_from_slice(&d.bytes(&tokens[0]));
    }
    let payload = b.payload as u32 % 4200;
    let hdr = Header {
        flags: b.flags,
        src: b.raw_src.unwrap_or(u16::from(b.src % 4)),
        dst: b.dst.unwrap_or(1),
        ctrl_len: b.ctrl_len.unwrap_or(ctrl.len() as u16),
        payload_len: b.payload_len.unwrap_or(payload),
        token: token_of(&b.token, &tokens[1]),
        seq: b.seq,
    };
    let mut bytes = hdr.to_bytes().to_vec();
    if b.bad_magic {
        bytes[0] ^= (MAGIC as u8) | 1;
    }
    bytes.extend_from_slice(&ctrl);
    bytes.resize(bytes.len() + (ctrl_wire_bytes(ctrl.len() as u32) as usize - ctrl.len()), 0);
    bytes.extend((0..payload).map(|i| i as u8 ^ 0x5A));
    match b.cut {
        Some(n) => bytes.truncate(n as usize),
        None => bytes.resize(bytes.len() + b.extra as usize, 0xEE),
    }
    bytes
}

#[cfg(test)]
mod tests {
    use super::*;

    fn desc() -> Desc {
        Desc { slot: 0, raw: false, key: 0, flip: None, token: Token::Armed { index: 0, flip: None } }
    }

    fn script(request: Step) -> Script {
        let publish = Change::Publish { slot: 0, len: 300, key: 0, fresh: true, extra: vec![1, 2, 3] };
        Script {
            policy: 0,
            recv_pulse: 60,
            mtu: 1000,
            arms1: vec![],
            arms0: vec![(1000, 2)],
            steps: vec![Step::Change(publish), request, Step::Pause(63)],
        }
    }

    #[test]
    fn an_answerable_request_is_answered_from_a_node_or_from_outside() {
        let post = Step::Post { ctrl: vec![7; 8], payload: 0, token: Token::None, desc: Some(desc()) };
        assert_eq!(run_script(&script(post)), (1, 0));
        let built = Built {
            flags: trapeze_firmware::iface::wire::FLAG_ANSWER,
            src: 0,
            raw_src: None,
            dst: None,
            ctrl_len: None,
            payload_len: None,
            token: Token::None,
            ctrl: vec![],
            desc: Some(desc()),
            payload: 0,
            seq: 9,
            cut: None,
            extra: 0,
            bad_magic: false,
        };
        let inject = |trailer_ok| Step::Inject { packet: Packet::Built(built.clone()), chunk: 3, trailer_ok };
        assert_eq!(run_script(&script(inject(true))), (1, 0));
        assert_eq!(run_script(&script(inject(false))), (0, 0), "a bad trailer: not answered");
    }

    /// The race, at every moment: the entry retracted and its frame rewritten
    /// while the answer is being read or leaving. The oracle (in `answers`) panics if a
    /// torn answer leaves; some moments abort the answer, the later ones let it go.
    #[test]
    fn a_frame_reused_while_its_answer_leaves_is_never_sent_torn() {
        let mut outcomes = Vec::new();
        for pause in 0..40 {
            let post = Step::Post { ctrl: vec![], payload: 0, token: Token::None, desc: Some(desc()) };
            let mut s = script(post);
            s.mtu = 4000;
            s.arms0 = vec![(4000, 1)];
            s.steps[0] = Step::Change(Change::Publish { slot: 0, len: 3936, key: 0, fresh: true, extra: vec![] });
            s.steps.insert(2, Step::Pause(pause));
            s.steps.insert(3, Step::Change(Change::Reuse { slot: 0, fill: 0x55 }));
            outcomes.push(run_script(&s).0);
        }
        assert!(outcomes.contains(&0) && outcomes.contains(&1), "the race window was missed: {outcomes:?}");
    }
}
