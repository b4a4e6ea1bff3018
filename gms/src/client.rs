// SPDX-License-Identifier: GPL-2.0-only
//! Client entry points: getpage, putpage, movepage, discard, and how their replies
//! complete them.
//!
//! Every operation returns an [`OpId`] at once and completes exactly once: through
//! [`Host::completed`] (`Mode::NonBlocking`, from the receive path, like the papers'
//! continuations) or by [`GmsNode::take`] after [`GmsNode::poll_event`] names it
//! (`Mode::Wait`). GMS's own NetRPC calls are always nonblocking with a continuation;
//! an operation not finished after [`GmsConfig::op_timeout`] is cancelled by
//! [`GmsNode::drive`] and completes as a failure.

use super::directory::FRESH;
use super::net::prelude::*;
use super::net::storage::Storage;
use super::node::{GmsNode, Held, HeldState, Host};
use super::ops::*;
use super::page::{PageId, Version};
use super::slots::{OpKind, OpSlot, OpState};
use super::types::*;

impl<
        F: Copy + PartialEq,
        H: Host<F>,
        S: Storage,
        const MEMBERS: usize,
        const OPS: usize,
        const TASKS: usize,
        const OUTQ: usize,
    > GmsNode<F, H, S, MEMBERS, OPS, TASKS, OUTQ>
{
    /// Fetch `page` into `reply_to` (normally `Solicited`: the runtime armed an IPT entry
    /// for its frame). Goes to the page's directory node, which answers itself (2-way) or
    /// delegates to the caching site (3-way); the page lands in the frame zero-copy. In a
    /// space with moving reads the caching site drops its copy and this node becomes the
    /// holder. On `Err` nothing was sent and the frame is still the caller's.
    pub fn getpage<const C: usize, const K: usize, const X: usize>(
        &mut self,
        now: u64,
        rpc: &mut Rpc<Self, F, C, K, X>,
        page: PageId,
        reply_to: ReplyTo<F>,
        mode: Mode,
    ) -> Result<OpId, GmsError> {
        self.getpage_at_least(now, rpc, page, Version(0), reply_to, mode)
    }

    /// [`Self::getpage`] by a reader that knows version `known` of the page was written
    /// (e.g. a block device, the page's only writer): an older copy is a miss, never a hit.
    /// The directory answers a miss itself when it names an older one. Without it, a page
    /// whose directory node changed may be served at a version older than one
    /// acknowledged to another node: a copy superseded while the old directory's word to
    /// drop it died with it may register again with the new one.
    #[allow(clippy::too_many_arguments)]
    pub fn getpage_at_least<const C: usize, const K: usize, const X: usize>(
        &mut self,
        now: u64,
        rpc: &mut Rpc<Self, F, C, K, X>,
        page: PageId,
        known: Version,
        reply_to: ReplyTo<F>,
        mode: Mode,
    ) -> Result<OpId, GmsError> {
        self.getpage_via(now, rpc, page, known, None, None, reply_to, mode)
    }

    /// [`Self::getpage_at_least`] sent straight to `holder`, a member the caller believes
    /// holds the page at `known` or newer (a block device's last put target for it): two
    /// messages even when the directory is a third node, which would have delegated, and
    /// an answer from the copy itself while a directory that moved with a membership
    /// change has not had it registered again yet. A miss means only that `holder` has no
    /// such copy (it was moved or dropped): ask the directory then. Where `holder` is this
    /// node or not a member, or reads move pages, this is the plain getpage.
    ///
    /// Only for a page this node alone writes: the holder checks the copy against `known`
    /// and nothing else, so `known` must be the newest version acknowledged to anyone (the
    /// directory would have named a newer copy put by another writer).
    ///
    /// `answer`: the entry of `holder`'s NIC answer table holding the copy (told in the
    /// `PUTDONE` of the put that stored it there). With a solicited reply, that NIC answers
    /// by itself without interrupting `holder` (a one-sided read); whatever it cannot
    /// answer (the entry moved on) `holder` serves.
    #[allow(clippy::too_many_arguments)]
    pub fn getpage_hinted<const C: usize, const K: usize, const X: usize>(
        &mut self,
        now: u64,
        rpc: &mut Rpc<Self, F, C, K, X>,
        page: PageId,
        known: Version,
        holder: u16,
        answer: Option<Answer>,
        reply_to: ReplyTo<F>,
        mode: Mode,
    ) -> Result<OpId, GmsError> {
        self.getpage_via(now, rpc, page, known, Some(holder), answer, reply_to, mode)
    }

    #[allow(clippy::too_many_arguments)]
    fn getpage_via<const C: usize, const K: usize, const X: usize>(
        &mut self,
        now: u64,
        rpc: &mut Rpc<Self, F, C, K, X>,
        page: PageId,
        known: Version,
        hint: Option<u16>,
        answer: Option<Answer>,
        reply_to: ReplyTo<F>,
        mode: Mode,
    ) -> Result<OpId, GmsError> {
        self.enter(now);
        let moving = self.policy(page.space).reads == ReadPolicy::Moving;
        let i = self.alloc_op(OpKind::Get, mode, page, known)?;
        let id = self.op_id(i);
        self.ops[i].moving = moving;
        self.stats.gets += 1;
        let caller_frame = reply_to.caller_frame().copied();
        let Some(dir) = self.members.directory_of(&page) else {
            self.stats.get_failures += 1;
            self.finish(i, OpResult::Get(GetResult::Miss { reason: MissReason::NoDirectory, frame: caller_frame }));
            return Ok(id);
        };
        let mut flags = if moving { GET_MOVING } else { 0 };
        let (dst, want, seq) = if let Some(h) = hint.filter(|&h| !moving && h != self.id && self.members.contains(h)) {
            // Straight to the holder named by the caller (2-way, whoever the directory is,
            // and whether or not its entry was repaired yet after a membership change); it
            // answers a miss itself.
            flags |= GET_HINTED;
            (h, known, 0)
        } else if dir == self.id {
            // The requester is the directory node: look up here, ask the site directly.
            match self.named_at(&page, known) {
                Err(reason) => {
                    self.stats.misses += 1;
                    self.finish(i, OpResult::Get(GetResult::Miss { reason, frame: caller_frame }));
                    return Ok(id);
                }
                Ok((site, v, seq)) if site == self.id => {
                    let r = self.local_hit(page, v, seq, caller_frame);
                    self.finish(i, OpResult::Get(r));
                    return Ok(id);
                }
                Ok((site, v, seq)) => {
                    flags |= GET_DIRECT;
                    (site, v, seq)
                }
            }
        } else {
            // The directory answers a miss if it names an older version.
            (dir, known, 0)
        };
        let req = GetReq { page, want, seq, view: self.members.view(), flags };
        self.ops[i].dst = dst;
        let called = match answer.filter(|_| flags & GET_HINTED != 0 && matches!(reply_to, ReplyTo::Solicited { .. })) {
            Some(a) => {
                rpc.call_answerable::<GetPage>(now, self, dst, &req, reply_to, Mode::NonBlocking, a.index, a.key)
            }
            None => rpc.call::<GetPage>(now, self, dst, &req, reply_to, Mode::NonBlocking),
        };
        match called {
            Ok(call) => self.launched(rpc, i, call),
            Err(e) => {
                self.free_op(i);
                self.stats.gets -= 1;
                return Err(GmsError::Rpc(e));
            }
        }
        Ok(id)
    }

    /// Put a copy of `page` at `version` from the runtime's `frame` into `target`'s
    /// memory (the target is chosen by the global LRU). One-way with the page as payload;
    /// the target stores it (or refuses: budget), has the directory name it, and answers
    /// with `PUTDONE` once the directory did — so a getpage issued after a `Stored`
    /// completion sees this version or a newer one. The frame stays the runtime's (free it
    /// after the send). Any older copy in the cluster is dropped.
    #[allow(clippy::too_many_arguments)]
    pub fn putpage<const C: usize, const K: usize, const X: usize>(
        &mut self,
        now: u64,
        rpc: &mut Rpc<Self, F, C, K, X>,
        page: PageId,
        version: Version,
        frame: F,
        len: u32,
        target: u16,
        dirty: bool,
        mode: Mode,
    ) -> Result<OpId, GmsError> {
        self.enter(now);
        if dirty && self.policy(page.space).writes == WritePolicy::WriteThrough {
            return Err(GmsError::DirtyWriteThrough);
        }
        self.send_put(rpc, OpKind::Put, page, (version, FRESH), (frame, len), target, dirty, mode)
    }

    /// Move this node's held copy of `page` to `target`: like putpage, and when it is
    /// stored this node drops its copy (single copy: the directory names the target only).
    /// On failure this node keeps the copy (and the directory, if it moved the name, has
    /// this node drop it).
    pub fn movepage<const C: usize, const K: usize, const X: usize>(
        &mut self,
        now: u64,
        rpc: &mut Rpc<Self, F, C, K, X>,
        page: PageId,
        target: u16,
        mode: Mode,
    ) -> Result<OpId, GmsError> {
        self.enter(now);
        let h = *self.held.get(&page).ok_or(GmsError::NotHeld)?;
        let moving = self.ops.iter().any(|o| o.state == OpState::InFlight && o.kind == OpKind::Move && o.page == page);
        if h.state != HeldState::Registered || moving {
            return Err(GmsError::Busy);
        }
        self.send_put(rpc, OpKind::Move, page, (h.version, h.seq), (h.frame, h.len), target, h.dirty, mode)
    }

    #[allow(clippy::too_many_arguments)]
    fn send_put<const C: usize, const K: usize, const X: usize>(
        &mut self,
        rpc: &mut Rpc<Self, F, C, K, X>,
        kind: OpKind,
        page: PageId,
        (version, seq): (Version, u64),
        payload: (F, u32),
        target: u16,
        dirty: bool,
        mode: Mode,
    ) -> Result<OpId, GmsError> {
        if target == self.id || !self.members.contains(target) {
            return Err(GmsError::BadTarget);
        }
        let i = self.alloc_op(kind, mode, page, version)?;
        self.ops[i].dst = target;
        self.ops[i].seq = seq;
        let tag = self.op_id(i);
        let flags = if dirty { PUT_DIRTY } else { 0 };
        let req = PutReq { page, version, seq, view: self.members.view(), tag, flags };
        let op = if kind == OpKind::Move { OP_MOVEPAGE } else { OP_PUTPAGE };
        let sent = Body::encode(&req).and_then(|b| rpc.send_oneway(target, op, b.as_slice(), Some(payload)));
        if let Err(e) = sent {
            self.free_op(i);
            return Err(GmsError::Rpc(e));
        }
        if kind == OpKind::Move {
            self.stats.moves += 1;
        } else {
            self.stats.puts += 1;
        }
        Ok(tag)
    }

    /// Forget `page` cluster-wide up to `version` (e.g. the file was truncated or the page
    /// rewritten): a getpage issued after `Done` never returns such a version. The
    /// directory answers; the holder drops its copy in the background.
    pub fn discard<const C: usize, const K: usize, const X: usize>(
        &mut self,
        now: u64,
        rpc: &mut Rpc<Self, F, C, K, X>,
        page: PageId,
        version: Version,
        mode: Mode,
    ) -> Result<OpId, GmsError> {
        self.enter(now);
        let i = self.alloc_op(OpKind::Discard, mode, page, version)?;
        let id = self.op_id(i);
        self.stats.discards += 1;
        match self.members.directory_of(&page) {
            None => self.finish(i, OpResult::Discard(DiscardResult::Failed)),
            Some(d) if d == self.id => {
                let r = match self.apply_discard(page, version) {
                    AckStatus::Ok => DiscardResult::Done,
                    _ => DiscardResult::Failed,
                };
                self.finish(i, OpResult::Discard(r));
            }
            Some(d) => {
                self.ops[i].dst = d;
                let req = DiscardReq { page, version };
                match rpc.call::<DiscardPage>(now, self, d, &req, ReplyTo::None, Mode::NonBlocking) {
                    Ok(call) => self.launched(rpc, i, call),
                    Err(e) => {
                        self.free_op(i);
                        self.stats.discards -= 1;
                        return Err(GmsError::Rpc(e));
                    }
                }
            }
        }
        Ok(id)
    }

    /// A wait-mode operation that finished (take it with [`Self::take`]).
    pub fn poll_event(&mut self) -> Option<OpId> {
        self.events.pop()
    }

    /// The result of a finished wait-mode operation (frees its slot), or `None` while it
    /// is in flight.
    pub fn take(&mut self, op: OpId) -> Option<Completion<F>> {
        let o = self.ops.get(op.slot as usize)?;
        if o.generation != op.generation || o.state != OpState::Done {
            return None;
        }
        let done = o.done;
        self.free_op(op.slot as usize);
        done
    }

    // ---- completion ------------------------------------------------------------------

    /// A call was queued for operation `i`: hang the completion on it.
    pub(super) fn launched<const C: usize, const K: usize, const X: usize>(
        &mut self,
        rpc: &mut Rpc<Self, F, C, K, X>,
        i: usize,
        call: CallId,
    ) {
        self.ops[i].call = Some(call);
        let arg = (self.ops[i].generation as u64) << 16 | i as u64;
        if let Err(e) = rpc.push_continuation(call, Self::op_reply, arg) {
            // Cannot happen (a fresh call has an empty stack); fail cleanly anyway.
            let _ = rpc.cancel(self, call);
            self.fail_op(i, e);
        }
    }

    fn op_slot(&self, arg: u64) -> Option<usize> {
        let i = (arg & 0xffff) as usize;
        let o = self.ops.get(i)?;
        (o.generation == (arg >> 16) as u32 && o.state == OpState::InFlight).then_some(i)
    }

    /// The continuation of every client call.
    fn op_reply(node: &mut Self, o: &Outcome<F>, arg: u64) -> bool {
        node.lent = None;
        let Some(i) = node.op_slot(arg) else {
            // Not ours any more: whatever frame came back is the runtime's.
            if let Ok(Reply { payload: Payload::Frame { frame, .. } | Payload::Buffer { frame, .. }, .. }) = o {
                node.host.release(*frame);
            }
            return true;
        };
        let result = match node.ops[i].kind {
            OpKind::Get if node.ops[i].group.is_some() => OpResult::Get(node.getpages_reply(i, o)),
            OpKind::Get => OpResult::Get(node.get_reply(i, o)),
            OpKind::Discard => {
                if let Ok(Reply { payload: Payload::Buffer { frame, .. }, .. }) = o {
                    node.host.release(*frame);
                }
                let page = node.ops[i].page;
                let ok = matches!(o, Ok(r) if r.decode::<DirAck>().is_ok_and(|a| a.status == AckStatus::Ok && a.page == page));
                OpResult::Discard(if ok { DiscardResult::Done } else { DiscardResult::Failed })
            }
            OpKind::Put | OpKind::Move => OpResult::Put(PutResult::Failed),
            OpKind::Top => OpResult::Top(node.top_reply(i, o)),
        };
        node.finish(i, result);
        true
    }

    /// A get (of one page or a `GETPAGES`'s) whose call failed with `e`: a miss, counted
    /// for each of its pages; GMS's own deadline shows as a timeout.
    pub(super) fn get_failed(&mut self, op: &OpSlot<F>, e: RpcError) -> GetResult<F> {
        self.stats.get_failures += op.pages();
        let e = if op.timed_out { RpcError::Timeout } else { e };
        GetResult::Miss { reason: MissReason::Failed(e), frame: None }
    }

    fn get_reply(&mut self, i: usize, o: &Outcome<F>) -> GetResult<F> {
        let op = self.ops[i];
        let r = match o {
            Ok(r) => r,
            Err(e) => return self.get_failed(&op, *e),
        };
        let (frame, len) = match r.payload {
            Payload::Frame { frame, len } | Payload::Buffer { frame, len } => (Some(frame), len),
            Payload::None => (None, 0),
        };
        let rep = match r.decode::<GetReply>() {
            Ok(rep) if rep.page == op.page => rep,
            _ => {
                self.stats.get_failures += 1;
                return GetResult::Miss { reason: MissReason::Malformed, frame };
            }
        };
        if matches!(rep.status, GetStatus::Hit | GetStatus::Local) && rep.version < op.version {
            // Older than the reader knows (a directory that did not check).
            self.stats.misses += 1;
            let frame = match r.payload {
                Payload::Frame { .. } => frame,
                _ => {
                    if let Some(b) = frame {
                        self.host.release(b);
                    }
                    None
                }
            };
            return GetResult::Miss { reason: MissReason::NotCached, frame };
        }
        match (rep.status, frame) {
            (GetStatus::Hit, Some(frame)) if len > 0 => {
                let via = if rep.server == op.dst { Via::TwoWay } else { Via::ThreeWay };
                if via == Via::TwoWay {
                    self.stats.hits_2way += 1;
                } else {
                    self.stats.hits_3way += 1;
                }
                let dirty = rep.flags & REPLY_DIRTY != 0;
                // A moving read makes this node the holder if the site handed its copy over
                // (it keeps one still registering) — only within the view the page was read
                // in (a directory lost since then may have known newer versions).
                let held = op.moving
                    && rep.flags & REPLY_MOVED != 0
                    && op.view == self.members.view()
                    && self.adopt(op.page, (rep.version, rep.seq), frame, len, dirty);
                GetResult::Hit { version: rep.version, frame, len, via, held }
            }
            (GetStatus::Hit, frame) => {
                self.stats.get_failures += 1;
                GetResult::Miss { reason: MissReason::Malformed, frame }
            }
            (GetStatus::Miss, frame) => {
                self.stats.misses += 1;
                GetResult::Miss { reason: MissReason::NotCached, frame }
            }
            (GetStatus::Refused, frame) => {
                self.stats.get_failures += 1;
                GetResult::Miss { reason: MissReason::Refused, frame }
            }
            (GetStatus::Rebuilding, frame) => {
                self.stats.misses += 1;
                GetResult::Miss { reason: MissReason::Rebuilding, frame }
            }
            (GetStatus::Local, frame) => {
                // A receive buffer is no caller frame: hand it back and serve from the copy.
                let to = match r.payload {
                    Payload::Frame { .. } => frame,
                    _ => {
                        if let Some(b) = frame {
                            self.host.release(b);
                        }
                        None
                    }
                };
                self.local_hit(op.page, rep.version, rep.seq, to)
            }
        }
    }

    /// The directory names this node for `page` at `version` (the copy with identity
    /// `seq`): serve from the held copy, copied into the caller's frame (or lent, if the
    /// caller gave none).
    pub(super) fn local_hit(&mut self, page: PageId, version: Version, seq: u64, to: Option<F>) -> GetResult<F> {
        let epoch = self.epoch;
        let Some(h) = self.held.get_mut(&page).filter(|h| h.version >= version) else {
            // Named for a copy this node does not have: repair the directory.
            self.forget_site(page, version, seq);
            self.stats.misses += 1;
            return GetResult::Miss { reason: MissReason::NotCached, frame: to };
        };
        h.last_access = epoch;
        let h = *h;
        match to {
            Some(to) if self.host.copy_payload(&h.frame, &to, h.len) => {
                self.stats.hits_local += 1;
                GetResult::Hit { version: h.version, frame: to, len: h.len, via: Via::Local, held: false }
            }
            Some(to) => {
                self.stats.get_failures += 1;
                GetResult::Miss { reason: MissReason::Failed(RpcError::PayloadRefused), frame: Some(to) }
            }
            None => {
                self.stats.hits_local += 1;
                GetResult::Hit { version: h.version, frame: h.frame, len: h.len, via: Via::Local, held: true }
            }
        }
    }

    /// Become the holder of a page read by a moving read (if there is room, and the
    /// directory takes it): the registration claims the identity `seq` of the copy
    /// served, a hand-over. `false`: the frame stays the runtime's alone.
    fn adopt(&mut self, page: PageId, (version, seq): (Version, u64), frame: F, len: u32, dirty: bool) -> bool {
        let local = self.members.directory_of(&page) == Some(self.id);
        if self.held.contains(&page)
            || self.held.len() >= self.budget()
            || (!local && self.free_task().is_none())
            || self.settling(&page)
        {
            return false;
        }
        // This node is the directory: decide first, so a refusal never drops a frame the
        // completion hands to the runtime.
        let (state, seq) = if local {
            match self.apply_update(page, self.id, version, seq) {
                (AckStatus::Ok, named) => (HeldState::Registered, named),
                _ => return false,
            }
        } else {
            (HeldState::Registering, seq)
        };
        let h = Held { frame, len, version, dirty, last_access: self.epoch, state, seq, repair: false, answer: None };
        if self.held.insert(page, h).is_err() {
            if local {
                self.forget_site(page, version, seq);
            }
            return false;
        }
        if !local {
            self.register(page, None);
        }
        true
    }

    /// A target's `PUTDONE` for one of this node's putpages or movepages.
    pub(super) fn put_done(&mut self, from: u16, d: &PutDone) {
        let i = d.tag.slot as usize;
        let Some(o) = self.ops.get(i).copied() else { return };
        let matches = o.generation == d.tag.generation
            && o.state == OpState::InFlight
            && matches!(o.kind, OpKind::Put | OpKind::Move)
            && o.page == d.page
            && o.version == d.version
            && o.dst == from;
        if !matches {
            return;
        }
        let result = match d.status {
            PutStatus::Stored => PutResult::Stored { target: d.site },
            PutStatus::Refused => PutResult::Refused,
            PutStatus::Busy => PutResult::Busy,
            PutStatus::Superseded => PutResult::Superseded,
            PutStatus::WrongView => PutResult::WrongView,
            PutStatus::Failed => PutResult::Failed,
        };
        if o.kind == OpKind::Move && matches!(result, PutResult::Stored { .. }) {
            // Single copy: the target's is the one the directory names now. Only the copy
            // moved goes (one handed back since has a newer identity).
            self.drop_held(&d.page, d.version, o.seq);
        }
        // A move `Superseded` keeps the copy: the directory refused the target's claim,
        // which says only that it names something else — a newer version (whose
        // registration had this node drop a named copy), or this very copy under an
        // identity this node has not learnt yet (a re-registration after a membership
        // change, its answer still on its way), which must not go. A copy the directory
        // has moved on from is dropped when its re-registration (the scrub's) is refused.
        let answer = match result {
            PutResult::Stored { .. } => {
                self.stats.puts_stored += 1;
                d.answer
            }
            _ => None,
        };
        self.finish_with(i, OpResult::Put(result), answer);
    }
}
