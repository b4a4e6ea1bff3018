// SPDX-License-Identifier: GPL-2.0-only
//! Replies a server stub sends after it returned: the stub started work that finishes
//! outside the receive handler (a disk read, say), returned [`Action::Done`], and kept a
//! [`Pending`] — what the reply needs from the request (the requester's reply token, the
//! op, the delegation count). When the work is done, [`Rpc::reply_later`] or
//! [`Rpc::error_later`] queues the reply exactly as an immediate `Action::Reply` or
//! `Action::Error` would have: to the token's origin, a solicited payload tagged with the
//! requester's IPT token. The requester cannot tell the two apart; a reply that comes
//! after the call timed out is a stale reply there, dropped and counted.

use super::*;

/// A request whose reply is still owed (see the module doc). One-way requests have none.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Pending {
    op: u16,
    token: ReplyToken,
    hops: u8,
}

impl Pending {
    /// The reply `inc` is owed; `None` for a one-way request.
    pub fn of<F>(inc: &Incoming<'_, F>) -> Option<Pending> {
        (!inc.one_way).then_some(Pending { op: inc.op, token: inc.token, hops: inc.hops })
    }

    pub(super) fn of_header(h: &Header) -> Pending {
        Pending { op: h.op, token: h.token, hops: h.hops }
    }

    /// The node the reply goes to.
    pub fn requester(&self) -> u16 {
        self.token.origin
    }
}

impl<Ctx: Runtime<F>, F: Copy, const CALLS: usize, const CONTS: usize, const TX: usize> Rpc<Ctx, F, CALLS, CONTS, TX> {
    /// Queue the reply `p` is owed, with `body` and optionally `len` bytes of a frame.
    /// On `Err` (the body is too long, the transmit queue is full) nothing is queued and
    /// the frame is still the caller's.
    pub fn reply_later(&mut self, p: Pending, body: &[u8], payload: Option<(F, u32)>) -> Result<(), RpcError> {
        if body.len() > MAX_BODY {
            return Err(RpcError::Malformed);
        }
        self.send_reply(p, body, payload)
    }

    /// Queue the error reply `p` is owed.
    pub fn error_later(&mut self, p: Pending, e: RpcError) -> Result<(), RpcError> {
        self.send_error(p, e)
    }

    /// Queue a reply: the one rule for immediate and later replies.
    pub(super) fn send_reply(&mut self, p: Pending, body: &[u8], payload: Option<(F, u32)>) -> Result<(), RpcError> {
        let tag = if p.token.payload_kind == PayloadKind::Solicited as u8 && payload.is_some() {
            p.token.payload_token
        } else {
            0
        };
        self.queue(p.token.origin, Kind::Reply, p.op, p.token, p.hops, body, payload, tag, None)
    }

    /// Queue an error reply.
    pub(super) fn send_error(&mut self, p: Pending, e: RpcError) -> Result<(), RpcError> {
        self.queue(p.token.origin, Kind::ErrorReply, p.op, p.token, p.hops, &e.code().to_le_bytes(), None, 0, None)
    }
}
