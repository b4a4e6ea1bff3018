// SPDX-License-Identifier: GPL-2.0-only
//! The types a runtime and a service exchange with [`super::rpc::Rpc`].

use super::wire::{Message, Operation, ReplyToken, MAX_BODY};

/// RPC errors, numbered from 1 (the wire carries [`RpcError::code`] in error replies).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum RpcError {
    /// Every call record is in use by calls that cannot be evicted.
    TableFull,
    /// A blocking call (or a nonblocking one with a timeout) got no reply in time.
    Timeout,
    /// A nonblocking call's record was reused for a newer call (LRU) before a reply came.
    Evicted,
    /// The server has no stub for the operation.
    UnknownOp,
    /// The request or reply body did not decode.
    Malformed,
    /// A body longer than [`MAX_BODY`].
    BodyTooLong,
    /// The call's continuation stack is full.
    ContinuationStackFull,
    /// The reply's payload was refused (token or buffer problem at the NIC).
    PayloadRefused,
    /// No call in flight has this id (already completed, or never issued).
    NoSuchCall,
    /// The request was delegated more than [`super::rpc::MAX_HOPS`] times.
    TooManyHops,
    /// The transmit queue is full: poll transmits before issuing more calls.
    TxFull,
    /// The caller gave up on the call.
    Cancelled,
    /// The server answered with its own error code (≥ 64).
    Remote(u16),
}

impl RpcError {
    pub fn code(self) -> u16 {
        match self {
            RpcError::TableFull => 1,
            RpcError::Timeout => 2,
            RpcError::Evicted => 3,
            RpcError::UnknownOp => 4,
            RpcError::Malformed => 5,
            RpcError::BodyTooLong => 6,
            RpcError::ContinuationStackFull => 7,
            RpcError::PayloadRefused => 8,
            RpcError::NoSuchCall => 9,
            RpcError::TooManyHops => 10,
            RpcError::TxFull => 11,
            RpcError::Cancelled => 12,
            RpcError::Remote(c) => c,
        }
    }
    pub fn from_code(c: u16) -> RpcError {
        match c {
            1 => RpcError::TableFull,
            2 => RpcError::Timeout,
            3 => RpcError::Evicted,
            4 => RpcError::UnknownOp,
            5 => RpcError::Malformed,
            6 => RpcError::BodyTooLong,
            7 => RpcError::ContinuationStackFull,
            8 => RpcError::PayloadRefused,
            9 => RpcError::NoSuchCall,
            10 => RpcError::TooManyHops,
            11 => RpcError::TxFull,
            12 => RpcError::Cancelled,
            c => RpcError::Remote(c),
        }
    }
}

/// Identifies a call in flight at its requester.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct CallId {
    pub record: u16,
    pub generation: u32,
}

/// A body buffer: up to [`MAX_BODY`] bytes.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Body {
    pub bytes: [u8; MAX_BODY],
    pub len: u8,
}

impl Body {
    pub const EMPTY: Body = Body { bytes: [0; MAX_BODY], len: 0 };

    #[inline]
    pub fn from_slice(b: &[u8]) -> Result<Body, RpcError> {
        if b.len() > MAX_BODY {
            return Err(RpcError::BodyTooLong);
        }
        let mut body = Body::EMPTY;
        body.bytes[..b.len()].copy_from_slice(b);
        body.len = b.len() as u8;
        Ok(body)
    }
    pub fn encode<M: Message>(m: &M) -> Result<Body, RpcError> {
        let mut body = Body::EMPTY;
        let n = m.encode(&mut body.bytes).map_err(|_| RpcError::Malformed)?;
        if n > MAX_BODY {
            return Err(RpcError::BodyTooLong);
        }
        body.len = n as u8;
        Ok(body)
    }
    #[inline]
    pub fn as_slice(&self) -> &[u8] {
        &self.bytes[..self.len as usize]
    }
}

/// Where the caller wants the reply payload. `F` is the runtime's frame handle.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ReplyTo<F> {
    None,
    /// The runtime armed an IPT entry for `frame` and got `token`; the replying node tags
    /// the payload with it and the NIC delivers straight into `frame`.
    Solicited {
        token: u64,
        frame: F,
    },
    /// Into a receive buffer of the caller's NIC, handed to the caller with the reply.
    Unsolicited,
    /// Into a receive buffer, then copied into `frame` by the runtime.
    UnsolicitedCopy {
        frame: F,
    },
}

impl<F> ReplyTo<F> {
    pub fn caller_frame(&self) -> Option<&F> {
        match self {
            ReplyTo::Solicited { frame, .. } | ReplyTo::UnsolicitedCopy { frame } => Some(frame),
            _ => None,
        }
    }
}

/// What arrived with a message, as the runtime saw it at the NIC.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum InPayload<F> {
    None,
    /// Delivered into the IPT frame of `token` (zero-copy).
    Ipt {
        token: u64,
        len: u32,
    },
    /// In a receive buffer the runtime detached from its ring slot; whoever receives it
    /// (a server stub, or the caller through [`Payload::Buffer`]) owns it.
    Buffer {
        frame: F,
        len: u32,
    },
    /// The NIC refused the payload (bad token, no buffer, DMA refused).
    Refused,
}

/// The payload of a completed call.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Payload<F> {
    None,
    /// In the caller's own frame (solicited, or copied); `len` may be 0 if the reply had
    /// no payload. The frame is the caller's again.
    Frame {
        frame: F,
        len: u32,
    },
    /// In a receive buffer, now the caller's.
    Buffer {
        frame: F,
        len: u32,
    },
}

/// A reply, as continuations and waiters see it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Reply<F> {
    pub op: u16,
    pub body: Body,
    pub payload: Payload<F>,
}

impl<F> Reply<F> {
    pub fn decode<M: Message>(&self) -> Result<M, RpcError> {
        M::decode(self.body.as_slice()).map_err(|_| RpcError::Malformed)
    }
}

/// How a call ended.
pub type Outcome<F> = Result<Reply<F>, RpcError>;

/// A continuation procedure: runs from the receive handler with the outcome and the
/// argument it was pushed with. Returns `false` *without side effects* if it cannot run
/// now (a lock it needs is held); it is then deferred and retried by
/// [`super::rpc::Rpc::run_deferred`].
pub type Continuation<Ctx, F> = fn(&mut Ctx, &Outcome<F>, u64) -> bool;

/// A message for the runtime to send through the Trapeze host API.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Transmit<F> {
    pub dst: u16,
    pub ctrl: [u8; super::wire::CTRL_BYTES],
    pub ctrl_len: usize,
    /// Attach this frame's first `len` bytes as the payload.
    pub payload: Option<(F, u32)>,
    /// Tag the payload with this IPT token (0: unsolicited).
    pub tag: u64,
    /// A request the callee's NIC may answer (`crate::answer`): `ctrl` ends with the
    /// descriptor; post it as answerable.
    pub answerable: bool,
}

impl<F> Transmit<F> {
    pub fn ctrl(&self) -> &[u8] {
        &self.ctrl[..self.ctrl_len]
    }
}

/// Something the runtime should act on.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Event {
    /// A blocking call completed: wake its waiter, who takes the outcome.
    Completed(CallId),
}

/// A request as a server stub sees it.
#[derive(Clone, Copy, Debug)]
pub struct Incoming<'a, F> {
    pub src: u16,
    pub op: u16,
    pub body: &'a [u8],
    pub token: ReplyToken,
    /// Delegations so far (0: straight from the requester).
    pub hops: u8,
    /// A payload that came with the request (the stub owns a `Buffer`).
    pub payload: InPayload<F>,
    /// Whether the requester expects a reply.
    pub one_way: bool,
    pub now: u64,
}

impl<F> Incoming<'_, F> {
    pub fn decode<O: Operation>(&self) -> Result<O::Request, RpcError> {
        O::Request::decode(self.body).map_err(|_| RpcError::Malformed)
    }
}

/// What a server stub does with a request.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Action<F> {
    /// Reply to the requester, optionally attaching `len` bytes of a frame; the payload
    /// is tagged with the requester's IPT token if it asked for a solicited payload.
    Reply { body: Body, payload: Option<(F, u32)> },
    /// Forward the request (with the requester's reply token) to another node, which
    /// replies to the requester directly or delegates again.
    Delegate { to: u16, body: Body },
    /// Answer with an error.
    Error(RpcError),
    /// No reply now: a one-way request, or the stub replies later by itself
    /// ([`super::rpc::Pending`], [`super::rpc::Rpc::reply_later`]).
    Done,
}

impl<F> Action<F> {
    /// A typed reply.
    pub fn reply<M: Message>(m: &M, payload: Option<(F, u32)>) -> Action<F> {
        match Body::encode(m) {
            Ok(body) => Action::Reply { body, payload },
            Err(e) => Action::Error(e),
        }
    }
    /// Forward the request unchanged.
    pub fn delegate(to: u16, inc: &Incoming<'_, F>) -> Action<F> {
        match Body::from_slice(inc.body) {
            Ok(body) => Action::Delegate { to, body },
            Err(e) => Action::Error(e),
        }
    }
}

/// What an [`super::rpc::Rpc`] needs from its runtime and service.
pub trait Runtime<F: Copy> {
    /// Run the server stub for `inc.op` (the dispatch vector). Unknown ops answer
    /// `Action::Error(RpcError::UnknownOp)`.
    fn serve(&mut self, inc: &Incoming<'_, F>) -> Action<F>;
    /// Copy `len` bytes of a received buffer into a caller's frame (unsolicited+copy).
    fn copy_payload(&mut self, from: &F, to: &F, len: u32) -> bool;
    /// A frame this layer no longer needs: a receive buffer (after a copy, or with a
    /// stale reply), or the frame of a failed call (for a solicited frame: disarm its
    /// IPT entry first). The runtime frees or recycles it.
    fn release(&mut self, frame: F);
    /// Whether a reply to a call of `op` made to node `called` may come from node `from`
    /// after `hops` delegations (1..=[`super::rpc::MAX_HOPS`]; `from` is not `called`, and
    /// may be this node itself when the request was delegated back to it). The default
    /// accepts any node: the reply still needs the call's secret generation, which only
    /// the nodes the request went through learn. A service that knows whom it delegates to
    /// narrows it.
    fn accept_delegated_reply(&self, op: u16, called: u16, from: u16, hops: u8) -> bool {
        let _ = (op, called, from, hops);
        true
    }
}

/// Counters.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Stats {
    pub calls: u64,
    pub requests_served: u64,
    pub delegated: u64,
    pub replies: u64,
    pub error_replies: u64,
    /// Replies for no call in flight (late, duplicate, or for a reused record): dropped.
    pub stale_replies: u64,
    pub malformed: u64,
    pub unknown_ops: u64,
    pub timeouts: u64,
    pub evictions: u64,
    pub deferred: u64,
    pub deferred_runs: u64,
    /// Replies or delegations dropped because the transmit queue was full.
    pub tx_dropped: u64,
    /// Replies to solicited calls whose payload came as an unsolicited buffer: refused.
    pub refused_payloads: u64,
    /// Replies (with a live call's token) from a node the call was not made to, and not
    /// accepted as its delegate: dropped (the call waits on, unless the sender's payload
    /// already took the call's IPT frame: then it fails with `PayloadRefused`).
    pub foreign_replies: u64,
    /// Requests straight from a requester (no delegation) naming another node as their
    /// origin, where the reply would go: dropped.
    pub foreign_requests: u64,
    /// Answerable calls completed by the callee's NIC (its answer table), not its host.
    pub answers: u64,
}

impl Stats {
    /// All counters zero (`Default`, usable in `const` contexts).
    pub const ZERO: Stats = Stats {
        calls: 0,
        requests_served: 0,
        delegated: 0,
        replies: 0,
        error_replies: 0,
        stale_replies: 0,
        malformed: 0,
        unknown_ops: 0,
        timeouts: 0,
        evictions: 0,
        deferred: 0,
        deferred_runs: 0,
        tx_dropped: 0,
        refused_payloads: 0,
        foreign_replies: 0,
        foreign_requests: 0,
        answers: 0,
    };
}
