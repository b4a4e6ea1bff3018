// SPDX-License-Identifier: GPL-2.0-only
//! Calls a callee's NIC may answer by itself (the Trapeze answer table,
//! `iface::answer`): one-sided reads of what the callee's host exported.
//!
//! [`Rpc::call_answerable`] is a call whose request ends with an answer descriptor (the
//! callee's entry, its key, and the call's own IPT token), sent as answerable. The
//! callee's NIC either answers it — a message the caller's NIC marks as an answer, whose
//! control message is the reply body the callee's host exported and whose payload went
//! into the call's frame — or hands it to the callee's host, which serves it as any
//! request (the descriptor after the body is ignored there). An answer reaches
//! [`Rpc::handle_answer`]: it completes the call it names by its IPT token, only if that
//! call was answerable and made to the node that answered, exactly as a reply with that
//! body would.

use super::*;

pub use super::super::iface::answer::Descriptor;

impl<Ctx: Runtime<F>, F: Copy, const CALLS: usize, const CONTS: usize, const TX: usize> Rpc<Ctx, F, CALLS, CONTS, TX> {
    /// [`Self::call`] of operation `O`, answerable by `dst`'s NIC from its entry
    /// `index` holding `key`. The reply payload must be solicited (the answer's payload
    /// lands in that frame).
    #[allow(clippy::too_many_arguments)]
    pub fn call_answerable<O: Operation>(
        &mut self,
        now: u64,
        ctx: &mut Ctx,
        dst: u16,
        req: &O::Request,
        reply_to: ReplyTo<F>,
        mode: Mode,
        index: u32,
        key: u64,
    ) -> Result<CallId, RpcError> {
        if !matches!(reply_to, ReplyTo::Solicited { .. }) {
            return Err(RpcError::Malformed);
        }
        let body = Body::encode(req)?;
        self.start_call(now, ctx, dst, O::OP, body.as_slice(), reply_to, mode, Some((index, key)), None)
    }

    /// What the runtime's NIC received from node `src`: a NIC's answer (`answer`: the IPT
    /// token its payload arrived under) to [`Self::handle_answer`], any other message to
    /// [`Self::handle_message`].
    pub fn handle_received(
        &mut self,
        now: u64,
        ctx: &mut Ctx,
        src: u16,
        ctrl: &[u8],
        payload: InPayload<F>,
        answer: Option<u64>,
    ) {
        match answer {
            Some(token) => self.handle_answer(ctx, src, token, ctrl, payload),
            None => self.handle_message(now, ctx, src, ctrl, payload),
        }
    }

    /// A NIC's answer from node `src` (the runtime saw it marked so): `body` is the
    /// reply body, the payload arrived under IPT `token`. Completes the answerable call to
    /// `src` whose reply frame that token names; anything else is dropped and counted
    /// ([`Stats::stale_replies`]).
    pub fn handle_answer(&mut self, ctx: &mut Ctx, src: u16, token: u64, body: &[u8], payload: InPayload<F>) {
        let found = self.records.iter().position(|r| {
            r.state == State::InFlight
                && r.answerable
                && r.dst == src
                && matches!(r.reply_to, ReplyTo::Solicited { token: t, .. } if t == token && t != 0)
        });
        let (Some(i), Ok(body_len)) = (found, u16::try_from(body.len())) else {
            self.stats.stale_replies += 1;
            self.drop_payload(ctx, payload);
            return;
        };
        let r = &self.records[i];
        let h = Header {
            kind: Kind::Reply,
            op: r.op,
            token: ReplyToken {
                origin: self.node,
                record: i as u16,
                generation: r.generation,
                payload_kind: PayloadKind::Solicited as u8,
                payload_token: token,
            },
            hops: 0,
            body_len,
        };
        self.stats.answers += 1;
        self.reply(ctx, src, &h, body, payload);
    }
}
