// SPDX-License-Identifier: GPL-2.0-only
//! The NetRPC state machine of one node: call records, continuation stacks, deferred
//! continuations, server dispatch and delegation. Sans-IO: the runtime feeds it received
//! messages ([`Rpc::handle_message`]) and time ([`Rpc::handle_timeouts`]), and sends what
//! [`Rpc::poll_transmit`] returns.
//!
//! Method kinds, in quinn-proto's terms: *commands* (`call`, `push_continuation`,
//! `take_outcome`, `cancel`), *inputs* (`handle_message`, `handle_timeouts`,
//! `run_deferred`) and *outputs* (`poll_transmit`, `poll_event`, `poll_timeout`). After
//! any command or input, drain the outputs. Commands that queue a request do not send it:
//! continuations pushed right after `call` are in place before any reply can arrive.

mod answer;
mod later;

use super::ring::Ring;
use super::types::*;
use super::wire::{Header, Kind, Message, Operation, PayloadKind, ReplyToken, CTRL_BYTES, HEADER_BYTES, MAX_BODY};
pub use answer::Descriptor;
pub use later::Pending;

/// Delegations allowed before a request is answered with [`RpcError::TooManyHops`].
pub const MAX_HOPS: u8 = 8;

/// Timeouts, in the runtime's time unit (ns suggested).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Config {
    /// A blocking call fails with [`RpcError::Timeout`] after this long.
    pub call_timeout: u64,
    /// A nonblocking call fails after this long; `None` keeps it until its record is
    /// evicted (least recently issued first) by a newer call, as in the papers.
    pub nonblocking_timeout: Option<u64>,
}

impl Default for Config {
    fn default() -> Self {
        Config { call_timeout: 1_000_000_000, nonblocking_timeout: None }
    }
}

/// How the caller waits.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Mode {
    /// A thread waits for [`Event::Completed`] and takes the outcome.
    Wait,
    /// Continuations run from the receive handler.
    NonBlocking,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum State {
    Free,
    /// Request sent, reply awaited.
    InFlight,
    /// A blocking call's outcome, waiting to be taken.
    Done,
    /// A nonblocking call's remaining continuations could not run yet.
    Deferred,
}

#[derive(Clone, Copy)]
struct Record<Ctx, F: Copy, const CONTS: usize> {
    state: State,
    mode: Mode,
    generation: u32,
    op: u16,
    /// The node the request went to: the only one whose direct reply (hops 0) is taken.
    dst: u16,
    issued: u64,
    deadline: Option<u64>,
    reply_to: ReplyTo<F>,
    /// The request may be answered by the callee's NIC ([`answer`]).
    answerable: bool,
    conts: [Option<(Continuation<Ctx, F>, u64)>; CONTS],
    nconts: usize,
    outcome: Option<Outcome<F>>,
}

impl<Ctx, F: Copy, const CONTS: usize> Record<Ctx, F, CONTS> {
    const FREE: Self = Self::free();

    const fn free() -> Self {
        Record {
            state: State::Free,
            mode: Mode::Wait,
            generation: 1,
            op: 0,
            dst: 0,
            issued: 0,
            deadline: None,
            reply_to: ReplyTo::None,
            answerable: false,
            conts: [None; CONTS],
            nconts: 0,
            outcome: None,
        }
    }
}

/// The words SipHash maps a seed to the generation key with (far from the counters a
/// seed's other uses feed it, such as IPT keys).
const GENERATION_KEY_0: u64 = 0x6e65_7472_7063_6730; // "netrpcg0"
const GENERATION_KEY_1: u64 = 0x6e65_7472_7063_6731; // "netrpcg1"

/// One node's NetRPC. `F` is the runtime's frame handle; `CALLS` call records, `CONTS`
/// continuations per call, `TX` queued transmits.
pub struct Rpc<Ctx, F: Copy, const CALLS: usize = 64, const CONTS: usize = 4, const TX: usize = 64> {
    node: u16,
    cfg: Config,
    seq: u64,
    records: [Record<Ctx, F, CONTS>; CALLS],
    tx: Ring<Transmit<F>, TX>,
    events: Ring<Event, CALLS>,
    deferred: Ring<u16, CALLS>,
    /// No record below this index is free (a lower bound that `alloc_record` scans from).
    free_hint: usize,
    /// No call in flight has a deadline before this (`u64::MAX`: none known): a lower
    /// bound, exact after each scan of the records, lowered by every call issued.
    deadline_floor: u64,
    /// Key and counter of the generation sequence (`None`: counting up, for tests).
    secret: Option<[u64; 2]>,
    drawn: u64,
    stats: Stats,
}

impl<Ctx: Runtime<F>, F: Copy, const CALLS: usize, const CONTS: usize, const TX: usize> Rpc<Ctx, F, CALLS, CONTS, TX> {
    const _FITS: () = assert!(CALLS > 0 && CALLS <= u16::MAX as usize && CONTS > 0 && TX > 0);

    /// A `const fn`: the kernel module copies a `static` made with it into its heap
    /// allocation (an `Rpc` is too large for a kernel stack), then [`Rpc::set_node`].
    pub const fn new(node: u16, cfg: Config) -> Self {
        let () = Self::_FITS;
        Rpc {
            node,
            cfg,
            seq: 0,
            // A repeat expression (not `array::from_fn`), so that `new` is a `const fn`.
            records: [Record::FREE; CALLS],
            tx: Ring::new(),
            events: Ring::new(),
            deferred: Ring::new(),
            free_hint: 0,
            deadline_floor: u64::MAX,
            secret: None,
            drawn: 0,
            stats: Stats::ZERO,
        }
    }

    /// Use `cfg`'s timeouts for the calls made from now on (calls in flight keep their
    /// deadlines).
    pub fn set_config(&mut self, cfg: Config) {
        self.cfg = cfg;
    }

    /// Draw call generations from `seed` (secret, random: from the OS) from now on, so
    /// that reply tokens cannot be guessed by a node that saw others: without a secret a
    /// record's generation counts up. Every free record gets a fresh generation at once.
    /// The seed may be the endpoint's own (the keys are derived for this use alone).
    pub fn set_secret(&mut self, seed: [u64; 2]) {
        let derive = |d: u64| super::iface::siphash::siphash24(seed[0], seed[1], d);
        self.secret = Some([derive(GENERATION_KEY_0), derive(GENERATION_KEY_1)]);
        for i in 0..CALLS {
            if self.records[i].state == State::Free {
                self.records[i].generation = self.next_generation(self.records[i].generation);
            }
        }
    }

    /// The generation after `g`: the next of the secret sequence (never 0), or `g + 1`.
    fn next_generation(&mut self, g: u32) -> u32 {
        let Some([k0, k1]) = self.secret else { return g.wrapping_add(1).max(1) };
        loop {
            self.drawn = self.drawn.wrapping_add(1);
            let v = super::iface::siphash::siphash24(k0, k1, self.drawn) as u32;
            if v != 0 && v != g {
                return v;
            }
        }
    }

    pub fn node(&self) -> u16 {
        self.node
    }
    /// Give a fresh `Rpc` (no call issued yet) its node id and configuration.
    pub fn set_node(&mut self, node: u16, cfg: Config) {
        self.node = node;
        self.cfg = cfg;
    }
    pub fn stats(&self) -> Stats {
        self.stats
    }
    /// Calls in flight (sent, or completed and not yet taken or still deferred).
    pub fn calls_in_use(&self) -> usize {
        self.records.iter().filter(|r| r.state != State::Free).count()
    }

    // ---- commands ----------------------------------------------------------------

    /// Issue a typed call of operation `O` to node `dst`.
    pub fn call<O: Operation>(
        &mut self,
        now: u64,
        ctx: &mut Ctx,
        dst: u16,
        req: &O::Request,
        reply_to: ReplyTo<F>,
        mode: Mode,
    ) -> Result<CallId, RpcError> {
        let body = Body::encode(req)?;
        self.call_raw(now, ctx, dst, O::OP, body.as_slice(), reply_to, mode)
    }

    /// Issue a call with a raw body. On error nothing was queued and `reply_to`'s frame is
    /// still the caller's.
    #[allow(clippy::too_many_arguments)]
    pub fn call_raw(
        &mut self,
        now: u64,
        ctx: &mut Ctx,
        dst: u16,
        op: u16,
        body: &[u8],
        reply_to: ReplyTo<F>,
        mode: Mode,
    ) -> Result<CallId, RpcError> {
        self.start_call(now, ctx, dst, op, body, reply_to, mode, None, None)
    }

    /// [`Self::call`] with `payload` (a frame's first `len` bytes) sent unsolicited with
    /// the request: the callee's stub gets it as [`InPayload::Buffer`]. The frame stays the
    /// caller's; it may reuse it once the call has completed (the request's send is done
    /// by then) or failed. On error nothing was queued.
    pub fn call_with_payload<O: Operation>(
        &mut self,
        now: u64,
        ctx: &mut Ctx,
        dst: u16,
        req: &O::Request,
        payload: (F, u32),
        mode: Mode,
    ) -> Result<CallId, RpcError> {
        let body = Body::encode(req)?;
        self.start_call(now, ctx, dst, O::OP, body.as_slice(), ReplyTo::None, mode, None, Some(payload))
    }

    /// [`Self::call_raw`], the request answerable by `dst`'s NIC from entry `answer` of
    /// its answer table when that names the request's page (`crate::answer`).
    #[allow(clippy::too_many_arguments)]
    pub(crate) fn start_call(
        &mut self,
        now: u64,
        ctx: &mut Ctx,
        dst: u16,
        op: u16,
        body: &[u8],
        reply_to: ReplyTo<F>,
        mode: Mode,
        answer: Option<(u32, u64)>,
        payload: Option<(F, u32)>,
    ) -> Result<CallId, RpcError> {
        let room = |n: usize| (HEADER_BYTES + n).next_multiple_of(4) + Descriptor::BYTES <= CTRL_BYTES;
        if body.len() > MAX_BODY || answer.is_some() && !room(body.len()) {
            return Err(RpcError::BodyTooLong);
        }
        if self.tx.is_full() {
            return Err(RpcError::TxFull);
        }
        let i = self.alloc_record(ctx)?;
        self.seq += 1;
        let deadline = match mode {
            Mode::Wait => Some(now.saturating_add(self.cfg.call_timeout)),
            Mode::NonBlocking => self.cfg.nonblocking_timeout.map(|t| now.saturating_add(t)),
        };
        let r = &mut self.records[i];
        r.state = State::InFlight;
        r.mode = mode;
        r.op = op;
        r.dst = dst;
        r.issued = self.seq;
        r.deadline = deadline;
        r.reply_to = reply_to;
        r.answerable = answer.is_some();
        if let Some(d) = deadline {
            self.deadline_floor = self.deadline_floor.min(d);
        }
        // A free record has no continuations and no outcome (`free_record`).
        debug_assert!(r.nconts == 0 && r.outcome.is_none());
        let (kind, tag) = match reply_to {
            ReplyTo::None => (PayloadKind::None, 0),
            ReplyTo::Solicited { token, .. } => (PayloadKind::Solicited, token),
            ReplyTo::Unsolicited => (PayloadKind::Unsolicited, 0),
            ReplyTo::UnsolicitedCopy { .. } => (PayloadKind::UnsolicitedCopy, 0),
        };
        let token = ReplyToken {
            origin: self.node,
            record: i as u16,
            generation: r.generation,
            payload_kind: kind as u8,
            payload_token: tag,
        };
        let id = CallId { record: i as u16, generation: r.generation };
        let answer = answer.map(|(index, key)| Descriptor { index, key, token: tag });
        // Cannot fail: checked that the queue has room above.
        let _ = self.queue(dst, Kind::Request, op, token, 0, body, payload, 0, answer);
        self.stats.calls += 1;
        Ok(id)
    }

    /// Send a one-way request (no reply, no call record).
    pub fn send_oneway(&mut self, dst: u16, op: u16, body: &[u8], payload: Option<(F, u32)>) -> Result<(), RpcError> {
        if body.len() > MAX_BODY {
            return Err(RpcError::BodyTooLong);
        }
        let token = ReplyToken { origin: self.node, ..ReplyToken::default() };
        self.queue(dst, Kind::OneWay, op, token, 0, body, payload, 0, None)
    }

    /// Push a continuation on a nonblocking call's stack; continuations run last pushed
    /// first when the call completes (successfully or not).
    pub fn push_continuation(&mut self, call: CallId, f: Continuation<Ctx, F>, arg: u64) -> Result<(), RpcError> {
        let r = self.live(call).ok_or(RpcError::NoSuchCall)?;
        if r.mode != Mode::NonBlocking || r.state != State::InFlight {
            return Err(RpcError::NoSuchCall);
        }
        if r.nconts == CONTS {
            return Err(RpcError::ContinuationStackFull);
        }
        r.conts[r.nconts] = Some((f, arg));
        r.nconts += 1;
        Ok(())
    }

    /// The outcome of a completed blocking call (frees its record), or `None` while it is
    /// still in flight.
    pub fn take_outcome(&mut self, call: CallId) -> Option<Outcome<F>> {
        let r = self.live(call)?;
        if r.mode != Mode::Wait || r.state != State::Done {
            return None;
        }
        let o = r.outcome.take();
        self.free_record(call.record as usize);
        o
    }

    /// Give up on a call: it completes with [`RpcError::Cancelled`] now (its caller frame
    /// is released; a late reply will be dropped as stale).
    pub fn cancel(&mut self, ctx: &mut Ctx, call: CallId) -> Result<(), RpcError> {
        match self.live(call) {
            Some(r) if r.state == State::InFlight => {}
            Some(r) if r.state == State::Done => {
                // The waiter gives up on an outcome it never took: the frame that outcome
                // hands back (caller frame or receive buffer) has no taker any more.
                let o = r.outcome.take();
                self.free_record(call.record as usize);
                Self::release_outcome(ctx, o);
                return Ok(());
            }
            _ => return Err(RpcError::NoSuchCall),
        }
        self.complete(ctx, call.record as usize, Err(RpcError::Cancelled));
        if self.live(call).is_some_and(|r| r.state == State::Done) {
            self.free_record(call.record as usize);
        }
        Ok(())
    }

    // ---- inputs ------------------------------------------------------------------

    /// A message arrived from node `src` (as the NIC stamped it, not as the message
    /// claims) with control bytes `ctrl` and `payload`. Runs server stubs, delegations,
    /// and reply handling (waking waiters or running continuations). Bad input is counted
    /// and dropped, never a panic: a request that names another node as its requester
    /// ([`Stats::foreign_requests`]), a reply from a node the call was not entitled to be
    /// answered by ([`Stats::foreign_replies`]: see [`Runtime::accept_delegated_reply`]). `now` is used
    /// only for requests and one-way messages (their handlers see it); for a reply
    /// ([`wire::message_kind`](crate::wire::message_kind)) any value will do.
    pub fn handle_message(&mut self, now: u64, ctx: &mut Ctx, src: u16, ctrl: &[u8], payload: InPayload<F>) {
        let Ok((h, body)) = Header::parse(ctrl) else {
            self.stats.malformed += 1;
            self.drop_payload(ctx, payload);
            return;
        };
        match h.kind {
            // A request straight from its requester names the sender as its origin (the
            // reply goes there): one naming another node would make this node answer a
            // call that node never made.
            Kind::Request | Kind::OneWay if h.hops == 0 && h.token.origin != src => {
                self.stats.foreign_requests += 1;
                self.drop_payload(ctx, payload);
            }
            Kind::Request | Kind::OneWay => self.serve(now, ctx, src, &h, body, payload),
            Kind::Reply | Kind::ErrorReply => self.reply(ctx, src, &h, body, payload),
        }
    }

    /// Fail the calls whose deadline has passed.
    /// Reads the records only once [`Self::poll_timeout`] has passed.
    pub fn handle_timeouts(&mut self, now: u64, ctx: &mut Ctx) {
        if now < self.deadline_floor {
            return;
        }
        let mut next = u64::MAX;
        for i in 0..CALLS {
            let r = &self.records[i];
            match r.deadline {
                Some(d) if r.state == State::InFlight && d <= now => {
                    self.stats.timeouts += 1;
                    self.complete(ctx, i, Err(RpcError::Timeout));
                }
                Some(d) if r.state == State::InFlight => next = next.min(d),
                _ => {}
            }
        }
        self.deadline_floor = next;
    }

    /// Retry deferred continuations in order (a worker thread's job). Stops at the first
    /// that still cannot run. Returns how many calls finished their continuations.
    pub fn run_deferred(&mut self, ctx: &mut Ctx) -> usize {
        let mut done = 0;
        while let Some(&i) = self.deferred.peek() {
            let i = i as usize;
            if !self.run_continuations(ctx, i) {
                break;
            }
            self.deferred.pop();
            self.stats.deferred_runs += 1;
            done += 1;
        }
        done
    }

    // ---- outputs -----------------------------------------------------------------

    pub fn poll_transmit(&mut self) -> Option<Transmit<F>> {
        self.tx.pop()
    }
    /// The transmit [`Self::poll_transmit`] would return, left in the queue (no copy of
    /// it); [`Self::consume_transmit`] then removes it once sent.
    pub fn peek_transmit(&self) -> Option<&Transmit<F>> {
        self.tx.peek()
    }
    /// Remove the transmit [`Self::peek_transmit`] showed.
    pub fn consume_transmit(&mut self) {
        self.tx.discard();
    }
    pub fn poll_event(&mut self) -> Option<Event> {
        self.events.pop()
    }
    /// When [`Self::handle_timeouts`] must run next: no call in flight has an earlier
    /// deadline (the earliest exactly, unless calls finished since the last scan: then
    /// possibly earlier, never later; `None`: no call has a deadline). O(1), so a runtime
    /// may ask on every pass and sleep until then.
    pub fn poll_timeout(&self) -> Option<u64> {
        (self.deadline_floor != u64::MAX).then_some(self.deadline_floor)
    }
    /// Deferred continuations are waiting for [`Self::run_deferred`].
    pub fn has_deferred(&self) -> bool {
        !self.deferred.is_empty()
    }

    // ---- internals ---------------------------------------------------------------

    fn live(&mut self, call: CallId) -> Option<&mut Record<Ctx, F, CONTS>> {
        self.records.get_mut(call.record as usize).filter(|r| r.generation == call.generation && r.state != State::Free)
    }

    fn free_record(&mut self, i: usize) {
        self.free_hint = self.free_hint.min(i);
        let r = &mut self.records[i];
        r.state = State::Free;
        let g = r.generation;
        let g = self.next_generation(g);
        let r = &mut self.records[i];
        r.generation = g;
        r.conts = [None; CONTS];
        r.nconts = 0;
        r.outcome = None;
        r.reply_to = ReplyTo::None;
    }

    /// A free record, evicting the least recently issued nonblocking call if needed.
    fn alloc_record(&mut self, ctx: &mut Ctx) -> Result<usize, RpcError> {
        // The lowest free record, as a scan from 0 finds it: none below the hint is free.
        if let Some(k) = self.records[self.free_hint..].iter().position(|r| r.state == State::Free) {
            let i = self.free_hint + k;
            self.free_hint = i;
            return Ok(i);
        }
        self.free_hint = CALLS;
        let victim = (0..CALLS)
            .filter(|&i| self.records[i].state == State::InFlight && self.records[i].mode == Mode::NonBlocking)
            .min_by_key(|&i| self.records[i].issued)
            .ok_or(RpcError::TableFull)?;
        self.stats.evictions += 1;
        self.complete(ctx, victim, Err(RpcError::Evicted));
        if self.records[victim].state == State::Free {
            Ok(victim)
        } else {
            // Its continuations were deferred: the record stays until they run.
            Err(RpcError::TableFull)
        }
    }

    #[allow(clippy::too_many_arguments)]
    /// Queue a message to `dst`; `answer` (a request the callee's NIC may answer) goes after
    /// the body, padded to whole words.
    #[allow(clippy::too_many_arguments)]
    fn queue(
        &mut self,
        dst: u16,
        kind: Kind,
        op: u16,
        token: ReplyToken,
        hops: u8,
        body: &[u8],
        payload: Option<(F, u32)>,
        tag: u64,
        answer: Option<Descriptor>,
    ) -> Result<(), RpcError> {
        // Callers checked `body.len() <= MAX_BODY` (and room for a descriptor).
        let h = Header { kind, op, token, hops, body_len: body.len() as u16 };
        let end = HEADER_BYTES + body.len();
        let ctrl_len = if answer.is_some() { end.next_multiple_of(4) + Descriptor::BYTES } else { end };
        // Built in its queue slot: a transmit is 150-odd bytes, moved twice otherwise.
        let t = Transmit { dst, ctrl: [0u8; CTRL_BYTES], ctrl_len, payload, tag, answerable: answer.is_some() };
        self.tx
            .push_with(t, |t| {
                h.emit(&mut t.ctrl);
                t.ctrl[HEADER_BYTES..end].copy_from_slice(body);
                if let Some(d) = answer {
                    t.ctrl[end..ctrl_len - Descriptor::BYTES].fill(0);
                    t.ctrl[ctrl_len - Descriptor::BYTES..ctrl_len].copy_from_slice(&d.to_bytes());
                }
            })
            .map_err(|_| RpcError::TxFull)
    }

    /// Give the frame an outcome would hand back (caller frame or receive buffer) to the
    /// runtime, when nobody can take that outcome any more.
    fn release_outcome(ctx: &mut Ctx, o: Option<Outcome<F>>) {
        if let Some(Ok(Reply { payload: Payload::Frame { frame, .. } | Payload::Buffer { frame, .. }, .. })) = o {
            ctx.release(frame);
        }
    }

    fn drop_payload(&mut self, ctx: &mut Ctx, payload: InPayload<F>) {
        if let InPayload::Buffer { frame, .. } = payload {
            ctx.release(frame);
        }
    }

    fn serve(&mut self, now: u64, ctx: &mut Ctx, src: u16, h: &Header, body: &[u8], payload: InPayload<F>) {
        let one_way = h.kind == Kind::OneWay;
        let inc = Incoming { src, op: h.op, body, token: h.token, hops: h.hops, payload, one_way, now };
        self.stats.requests_served += 1;
        let action = ctx.serve(&inc);
        // A reply payload frame handed over by the stub but not sent (one-way request, or
        // transmit queue full) goes back to the runtime.
        let mut unsent = None;
        let result = match action {
            Action::Done => Ok(()),
            _ if one_way => {
                if let Action::Reply { payload: Some((f, _)), .. } = action {
                    unsent = Some(f);
                }
                Ok(())
            }
            Action::Reply { body, payload } => {
                let r = self.send_reply(Pending::of_header(h), body.as_slice(), payload);
                if r.is_err() {
                    unsent = payload.map(|(f, _)| f);
                }
                r
            }
            Action::Delegate { to, body } => {
                if h.hops >= MAX_HOPS {
                    self.send_error(Pending::of_header(h), RpcError::TooManyHops)
                } else {
                    self.stats.delegated += 1;
                    self.queue(to, Kind::Request, h.op, h.token, h.hops + 1, body.as_slice(), None, 0, None)
                }
            }
            Action::Error(e) => {
                if e == RpcError::UnknownOp {
                    self.stats.unknown_ops += 1;
                }
                self.send_error(Pending::of_header(h), e)
            }
        };
        if result.is_err() {
            self.stats.tx_dropped += 1;
        }
        if let Some(f) = unsent {
            ctx.release(f);
        }
    }

    fn reply(&mut self, ctx: &mut Ctx, src: u16, h: &Header, body: &[u8], payload: InPayload<F>) {
        let t = h.token;
        let i = t.record as usize;
        let fresh = t.origin == self.node
            && self
                .records
                .get(i)
                .is_some_and(|r| r.generation == t.generation && r.state == State::InFlight && r.op == h.op);
        if !fresh {
            self.stats.stale_replies += 1;
            self.drop_payload(ctx, payload);
            return;
        }
        if !self.entitled(ctx, i, src, h) {
            self.stats.foreign_replies += 1;
            self.drop_payload(ctx, payload);
            // A payload the NIC delivered into the call's own frame under its one-shot
            // token: the frame's bytes are the sender's and the true reply's payload can no
            // longer land there, so the call fails now (never completing with those bytes).
            if let (ReplyTo::Solicited { token, .. }, InPayload::Ipt { token: got, .. }) =
                (self.records[i].reply_to, payload)
            {
                if token == got {
                    self.complete(ctx, i, Err(RpcError::PayloadRefused));
                }
            }
            return;
        }
        let outcome = if h.kind == Kind::ErrorReply {
            self.stats.error_replies += 1;
            self.drop_payload(ctx, payload);
            let code = match body {
                [a, b, ..] => u16::from_le_bytes([*a, *b]),
                _ => RpcError::Malformed.code(),
            };
            Err(RpcError::from_code(code))
        } else {
            self.stats.replies += 1;
            match Body::from_slice(body) {
                Err(e) => {
                    self.drop_payload(ctx, payload);
                    Err(e)
                }
                Ok(b) => self.reply_payload(ctx, i, payload).map(|p| Reply { op: h.op, body: b, payload: p }),
            }
        };
        self.complete(ctx, i, outcome);
    }

    /// Whether node `src` may answer call record `i`: the node it called (whatever the
    /// hop count: a delegation may come back to it), or, for a reply that says it was
    /// delegated (1..=[`MAX_HOPS`] hops), a node the runtime accepts as a delegate of the
    /// called node for this operation. The caller cannot see whom the called node
    /// delegated to (that node never writes back), so a delegate is bounded by the hop
    /// limit, by the call's secret generation (only a node the request reached knows it),
    /// and by [`Runtime::accept_delegated_reply`] (e.g. GMS: members of its view, one hop,
    /// getpage only).
    fn entitled(&self, ctx: &Ctx, i: usize, src: u16, h: &Header) -> bool {
        let called = self.records[i].dst;
        src == called || ((1..=MAX_HOPS).contains(&h.hops) && ctx.accept_delegated_reply(h.op, called, src, h.hops))
    }

    /// Match what arrived with what the caller asked for.
    fn reply_payload(&mut self, ctx: &mut Ctx, i: usize, payload: InPayload<F>) -> Result<Payload<F>, RpcError> {
        let reply_to = self.records[i].reply_to;
        // The caller frame is handed back with the payload, so `complete` must not release
        // it again on success.
        self.records[i].reply_to = ReplyTo::None;
        match (reply_to, payload) {
            (ReplyTo::Solicited { frame, token }, InPayload::Ipt { token: t, len }) if t == token => {
                Ok(Payload::Frame { frame, len })
            }
            (ReplyTo::UnsolicitedCopy { frame }, InPayload::Buffer { frame: buf, len }) => {
                let ok = ctx.copy_payload(&buf, &frame, len);
                ctx.release(buf);
                if ok {
                    Ok(Payload::Frame { frame, len })
                } else {
                    ctx.release(frame);
                    Err(RpcError::PayloadRefused)
                }
            }
            (ReplyTo::Solicited { frame, .. }, InPayload::Buffer { frame: buf, .. }) => {
                // A solicited call's payload lands in its own IPT frame, under its token;
                // one that came as an unsolicited buffer was not sent by the node called.
                self.stats.refused_payloads += 1;
                ctx.release(buf);
                ctx.release(frame);
                Err(RpcError::PayloadRefused)
            }
            (rt, InPayload::Buffer { frame: buf, len }) => {
                if let Some(f) = rt.caller_frame() {
                    ctx.release(*f);
                }
                Ok(Payload::Buffer { frame: buf, len })
            }
            (rt, InPayload::None) => Ok(match rt.caller_frame() {
                Some(f) => Payload::Frame { frame: *f, len: 0 },
                None => Payload::None,
            }),
            (rt, InPayload::Refused) | (rt, InPayload::Ipt { .. }) => {
                // Refused at the NIC, or delivered under someone else's token.
                if let Some(f) = rt.caller_frame() {
                    ctx.release(*f);
                }
                Err(RpcError::PayloadRefused)
            }
        }
    }

    /// Finish call record `i` with `outcome`, exactly once.
    fn complete(&mut self, ctx: &mut Ctx, i: usize, outcome: Outcome<F>) {
        if outcome.is_err() {
            if let Some(f) = self.records[i].reply_to.caller_frame() {
                ctx.release(*f);
            }
            self.records[i].reply_to = ReplyTo::None;
        }
        let r = &mut self.records[i];
        match r.mode {
            Mode::Wait => {
                r.outcome = Some(outcome);
                r.state = State::Done;
                let id = CallId { record: i as u16, generation: r.generation };
                // Cannot overflow: at most one event per record.
                let _ = self.events.push(Event::Completed(id));
            }
            Mode::NonBlocking => {
                if r.nconts == 0 {
                    // No continuation will ever see this outcome.
                    Self::release_outcome(ctx, Some(outcome));
                }
                // The continuations see the outcome where it is; the record keeps it only
                // if one must wait (continuations reach the context, never the record,
                // so none can tell the difference).
                if !self.run_continuations_with(ctx, i, &outcome) {
                    self.records[i].outcome = Some(outcome);
                    self.records[i].state = State::Deferred;
                    self.stats.deferred += 1;
                    // Cannot overflow: at most one entry per record.
                    let _ = self.deferred.push(i as u16);
                }
            }
        }
    }

    /// Pop and run record `i`'s continuations; `false` if one must wait (it and those
    /// below it stay on the stack). Frees the record when all have run.
    fn run_continuations(&mut self, ctx: &mut Ctx, i: usize) -> bool {
        let Some(outcome) = self.records[i].outcome else {
            self.free_record(i);
            return true;
        };
        self.run_continuations_with(ctx, i, &outcome)
    }

    /// [`Self::run_continuations`] with record `i`'s outcome.
    fn run_continuations_with(&mut self, ctx: &mut Ctx, i: usize, outcome: &Outcome<F>) -> bool {
        while self.records[i].nconts > 0 {
            let n = self.records[i].nconts - 1;
            let Some((f, arg)) = self.records[i].conts[n] else { break };
            if !f(ctx, outcome, arg) {
                return false;
            }
            self.records[i].conts[n] = None;
            self.records[i].nconts = n;
        }
        self.free_record(i);
        true
    }
}

/// Encode a typed request body (for tests and runtimes that build messages by hand).
pub fn encode<M: Message>(m: &M) -> Result<Body, RpcError> {
    Body::encode(m)
}
