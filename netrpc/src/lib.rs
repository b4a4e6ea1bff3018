// SPDX-License-Identifier: GPL-2.0-only
//! NetRPC: typed kernel-to-kernel RPC over Trapeze, after the GMS `gmsnet` layer.
//!
//! Messages are typed by an op code and a request/reply kind ([`wire`]); a service
//! declares operations with [`wire::Operation`] and dispatches incoming requests in
//! [`types::Runtime::serve`]. A caller's [`rpc::Rpc::call`] takes a call record and puts
//! a reply token (record, generation, origin node, and the IPT payload token of a
//! solicited reply) into the request; the reply's token finds the record again, so late,
//! duplicate and stale replies are recognised and dropped. Calls either **wait** (the
//! runtime wakes a thread on [`types::Event::Completed`]) or are **nonblocking**: the
//! issuing stub pushes continuations on the call's stack and the receive handler pops and
//! runs them. A continuation that cannot run (a lock is held) returns `false` with no
//! side effects and is **deferred** to [`rpc::Rpc::run_deferred`]. A server stub may
//! **delegate** a request to another node with the original reply token; the last node
//! replies straight to the requester, tagging a solicited payload with the requester's
//! IPT token, so a 3-way call is as zero-copy as a 2-way one. A call may also be
//! **answerable** ([`rpc::Rpc::call_answerable`]): the callee's NIC answers it from its
//! answer table without the callee's host, and the answer completes the call like a reply
//! ([`rpc::Rpc::handle_answer`]).
//!
//! Call generations are drawn from a secret ([`rpc::Rpc::set_secret`]) so a node on the
//! link cannot guess a reply token, and a solicited call takes its payload only from its
//! own IPT frame, never from an unsolicited buffer. A reply is taken only from the node
//! called or, after a delegation, from a node the runtime accepts as its delegate
//! ([`types::Runtime::accept_delegated_reply`]); a request straight from a requester must
//! name its sender as its origin. Anything else is dropped and counted ([`types::Stats`]).
//!
//! The crate is sans-IO, `#![no_std]` and allocation-free; its one dependency is the
//! interface crate (for SipHash). The same source runs in user space, in the kernel module
//! (`#[path]` modules: paths inside use `super::`), and in the property tests' simulated
//! network. The runtime owns the NIC:
//! it sends what [`rpc::Rpc::poll_transmit`] returns through the Trapeze host API and
//! feeds received control messages and payloads to [`rpc::Rpc::handle_message`].
//!
//! ```
//! use netrpc::prelude::*;
//!
//! /// A directory service: lookup(page) -> (holder, version), delegated to the holder.
//! struct Lookup;
//! impl Operation for Lookup {
//!     const OP: u16 = 0x0101;
//!     type Request = Bytes<8>; // page id
//!     type Reply = Bytes<4>;   // version
//! }
//!
//! /// One node: a directory that knows node 2 holds every page, or a holder.
//! struct Node { id: u16, got: Option<u32> }
//! impl Runtime<u32> for Node {
//!     fn serve(&mut self, inc: &Incoming<'_, u32>) -> Action<u32> {
//!         match inc.op {
//!             // The directory (node 1) delegates; the holder (node 2) replies.
//!             Lookup::OP if self.id == 1 => Action::delegate(2, inc),
//!             Lookup::OP => Action::reply(&Bytes(7u32.to_le_bytes()), None),
//!             _ => Action::Error(RpcError::UnknownOp),
//!         }
//!     }
//!     fn copy_payload(&mut self, _: &u32, _: &u32, _: u32) -> bool { true }
//!     fn release(&mut self, _: u32) {}
//! }
//!
//! fn note(ctx: &mut Node, o: &Outcome<u32>, _arg: u64) -> bool {
//!     ctx.got = o.as_ref().ok().and_then(|r| r.decode::<Bytes<4>>().ok()).map(|b| u32::from_le_bytes(b.0));
//!     true
//! }
//!
//! let mut nodes = [Node { id: 0, got: None }, Node { id: 1, got: None }, Node { id: 2, got: None }];
//! let mut rpcs: Vec<Rpc<Node, u32>> = (0..3).map(|i| Rpc::new(i, Config::default())).collect();
//! let call = rpcs[0]
//!     .call::<Lookup>(0, &mut nodes[0], 1, &Bytes(42u64.to_le_bytes()), ReplyTo::None, Mode::NonBlocking)
//!     .unwrap();
//! rpcs[0].push_continuation(call, note, 0).unwrap();
//! // A perfect network: deliver every transmit until none is left (0 → 1 → 2 → 0).
//! loop {
//!     let mut moved = false;
//!     for src in 0..3 {
//!         while let Some(t) = rpcs[src].poll_transmit() {
//!             let dst = t.dst as usize;
//!             rpcs[dst].handle_message(1, &mut nodes[dst], src as u16, t.ctrl(), InPayload::None);
//!             moved = true;
//!         }
//!     }
//!     if !moved { break; }
//! }
//! assert_eq!(nodes[0].got, Some(7)); // the holder's answer reached the requester directly
//! assert_eq!(rpcs[1].stats().delegated, 1);
//! ```

#![no_std]
#![forbid(unsafe_code)]

#[cfg(all(feature = "alloc", not(MODULE)))]
extern crate alloc;

#[cfg(MODULE)]
use super::iface;
/// The interface crate; in the kernel module, the sibling `iface` module (`--cfg MODULE`).
#[cfg(not(MODULE))]
use trapeze_iface as iface;

pub mod ring;
pub mod rpc;
pub mod storage;
pub mod types;
pub mod wire;

/// Everything a service and a runtime need.
pub mod prelude {
    pub use super::rpc::{Config, Mode, Pending, Rpc, MAX_HOPS};
    pub use super::types::{
        Action, Body, CallId, Continuation, Event, InPayload, Incoming, Outcome, Payload, Reply, ReplyTo, RpcError,
        Runtime, Stats, Transmit,
    };
    pub use super::wire::{Bytes, Message, Operation, PayloadKind, ReplyToken, MAX_BODY};
}
