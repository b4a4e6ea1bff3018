// SPDX-License-Identifier: GPL-2.0-only
//! The server stubs: NetRPC's dispatch into GMS ([`Runtime`] for [`GmsNode`]).
//!
//! Message flows (R requester, D the page's directory node, C caching site, T target):
//! - getpage: R→D `GETPAGE`; D holds it: D→R reply + page (2-way); C holds it: D
//!   delegates to C with R's reply token and the version it names, C→R reply + page
//!   tagged with R's IPT token (3-way); nobody: D→R miss; D names R itself: "local".
//!   A moving read: C drops its copy (and has D un-name it); R registers itself.
//! - putpage/movepage: R→T `PUTPAGE`/`MOVEPAGE` + page (one-way); T stores it (or
//!   refuses), T→D `DIRUPDATE`, D→T ack (a displaced holder H of another node: D asks T
//!   whether it holds the copy, `DIRVERIFY`, then has H drop its own with `DROPPAGE`; if T
//!   does not, H is named again), T→R `PUTDONE`. A movepage's R drops its copy on `Stored`.
//! - discard: R→D `DISCARDPAGE`, D→R ack; D→C `DROPPAGE` in the background.
//! - upkeep: a holder that lost a copy tells D (`DIRREMOVE`); a caching site asked for a
//!   copy it lacks does too (lazy repair); the scrub has D ask each named holder
//!   (`DIRVERIFY`) and each holder re-register its copies (`DIRUPDATE`), one entry per
//!   [`super::types::GmsConfig::scrub_interval`]. All retried until answered.

use super::directory::{ANY_SEQ, VERSION_STEP};
use super::heartbeat::{is_heartbeat_op, Heartbeat};
use super::net::prelude::*;
use super::net::storage::Storage;
use super::node::{let_go, GmsNode, Held, HeldState, Host};
use super::ops::*;
use super::page::Version;
use super::slots::{OpKind, OpState, TaskKind};
use super::types::{GmsStats, MissReason, ReadPolicy};

impl<
        F: Copy + PartialEq,
        H: Host<F>,
        S: Storage,
        const MEMBERS: usize,
        const OPS: usize,
        const TASKS: usize,
        const OUTQ: usize,
    > Runtime<F> for GmsNode<F, H, S, MEMBERS, OPS, TASKS, OUTQ>
{
    fn serve(&mut self, inc: &Incoming<'_, F>) -> Action<F> {
        self.enter(inc.now);
        if !is_gms_op(inc.op) {
            if is_heartbeat_op(inc.op) && inc.one_way && Heartbeat::from_message(inc.src, inc.body).is_err() {
                // It speaks for another node (or is malformed): the runtime drops it too.
                self.stats.rejected_heartbeats += 1;
            }
            // Another service's request: `serve_other` owns its payload.
            return self.host.serve_other(inc);
        }
        // `inc.src` is the node whose NIC sent the message (the NIC stamps it); only the
        // members of this node's view act on its directory and memory.
        let member = self.members.contains(inc.src);
        if let (OP_PUTPAGE | OP_MOVEPAGE, true) = (inc.op, inc.one_way) {
            if member {
                self.serve_put(inc);
            } else {
                self.stats.rejected_puts += 1;
                self.release_payload(inc.payload);
            }
            return Action::Done;
        }
        // Only puts carry a page.
        self.release_payload(inc.payload);
        match (inc.op, inc.one_way) {
            (OP_GETPAGE, false) => self.serve_get(inc, member),
            (OP_GETPAGES, false) => self.serve_getpages(inc, member),
            (OP_TOPVERSION, false) => self.serve_top(inc, member),
            (OP_PUTDONE, true) => {
                match inc.decode::<PutDoneOp>() {
                    Ok(d) if self.put_in_flight(inc.src, &d) => self.put_done(inc.src, &d),
                    Ok(_) => self.stats.rejected_putdones += 1,
                    Err(_) => {}
                }
                Action::Done
            }
            (OP_DISCARDPAGE, false) => match inc.decode::<DiscardPage>() {
                Ok(req) if !member => self.refuse(|s| &mut s.rejected_discards, AckStatus::WrongView, &req),
                // No writer's version reaches it: a floor there would refuse every version.
                // Nor does one leaping over a firm named copy (`directory.rs`): its holder keeps it.
                Ok(req)
                    if req.version == Version(u64::MAX)
                        || self.dir.leap_over_named(&req.page, req.version, self.now) =>
                {
                    self.refuse(|s| &mut s.rejected_discards, AckStatus::Rejected, &req)
                }
                Ok(req) if self.members.directory_of(&req.page) == Some(self.id) => {
                    ack(self.apply_discard(req.page, req.version), &req)
                }
                Ok(req) => ack(AckStatus::NotDirectory, &req),
                Err(e) => Action::Error(e),
            },
            (OP_DIRUPDATE, false) => self.serve_update(inc, member),
            (OP_DIRREMOVE, false) => match inc.decode::<DirRemove>() {
                Ok(req) if req.site != inc.src => {
                    self.stats.rejected_removes += 1;
                    Action::Error(RpcError::Malformed)
                }
                Ok(req) if !member => self.refuse(|s| &mut s.rejected_removes, AckStatus::WrongView, &req),
                // The copy named is being confirmed: its answer decides (the site may never
                // have held it, and its displaced copy is then named again). Asked again.
                Ok(req)
                    if self.confirming(&req.page, req.site).is_some()
                        && self.dir.named(&req.page).is_some_and(|(s, v, q)| {
                            s == req.site && (v < req.version || (v == req.version && q <= req.seq))
                        }) =>
                {
                    ack(AckStatus::Busy, &req)
                }
                Ok(req) if self.members.directory_of(&req.page) == Some(self.id) => {
                    if self.dir.remove(&req.page, req.site, req.version, req.seq, self.now) {
                        self.stats.dir_removes += 1;
                    }
                    ack(AckStatus::Ok, &req)
                }
                Ok(req) => ack(AckStatus::NotDirectory, &req),
                Err(e) => Action::Error(e),
            },
            (OP_DIRVERIFY, false) => match inc.decode::<DirVerify>() {
                Ok(req) if !self.sent_by_directory(inc.src, &req.page) => {
                    self.refuse(|s| &mut s.rejected_drops, AckStatus::NotDirectory, &req)
                }
                Ok(req) => {
                    let holds = self.holds_or_gave_up(&req.page, req.version);
                    ack(if holds { AckStatus::Ok } else { AckStatus::Rejected }, &req)
                }
                Err(e) => Action::Error(e),
            },
            (OP_DROPPAGE, false) => match inc.decode::<DropPage>() {
                // Only the page's directory node has copies dropped (a holder drops its
                // own without a message).
                Ok(req) if !self.sent_by_directory(inc.src, &req.page) => {
                    self.refuse(|s| &mut s.rejected_drops, AckStatus::NotDirectory, &req)
                }
                Ok(req) => {
                    // A registered copy registering again (after a membership change, or the
                    // scrub) may be named under an identity above its claim that this node has
                    // not learnt yet, and a drop of the claimed one may come from the
                    // directory node's previous incarnation (dead, with its decision): only a
                    // drop above the claim covers it, as a copy still registering; at the
                    // claim, the registration's answer decides (`Rejected` drops it).
                    let again =
                        self.tasks.iter().any(|t| t.live() && t.kind == TaskKind::Register && t.page == req.page);
                    let seq = if again && req.seq != ANY_SEQ { req.seq.saturating_sub(1) } else { req.seq };
                    self.drop_held(&req.page, req.version, seq);
                    ack(AckStatus::Ok, &req)
                }
                Err(e) => Action::Error(e),
            },
            // A GMS op sent the wrong way (a call that should be one-way or vice versa).
            (_, true) => Action::Done,
            (_, false) => Action::Error(RpcError::Malformed),
        }
    }

    /// A getpage reply that says it was delegated is taken from a member of this node's
    /// view, after the one delegation GMS makes (directory → caching site): the requester
    /// cannot know the site the directory names, and the reply needs the call's secret
    /// generation too. Every other reply comes from the node called (NetRPC checks it).
    fn accept_delegated_reply(&self, op: u16, _called: u16, from: u16, hops: u8) -> bool {
        op == OP_GETPAGE && hops == 1 && self.members.contains(from)
    }

    fn copy_payload(&mut self, from: &F, to: &F, len: u32) -> bool {
        self.host.copy_payload(from, to, len)
    }

    fn release(&mut self, frame: F) {
        // The held frame of a reply NetRPC could not queue stays GMS's.
        if self.lent.take() == Some(frame) {
            return;
        }
        self.host.release(frame)
    }
}

/// The page a directory-maintenance request is about.
trait AboutPage {
    fn page(&self) -> super::page::PageId;
}
macro_rules! about_page {
    ($($t:ty),*) => { $(impl AboutPage for $t { fn page(&self) -> super::page::PageId { self.page } })* };
}
about_page!(DiscardReq, DirUpdateReq, DirRemoveReq, DropReq);

fn ack<F, R: AboutPage>(status: AckStatus, req: &R) -> Action<F> {
    Action::reply(&DirAck { status, page: req.page(), seq: 0 }, None)
}

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
    fn release_payload(&mut self, p: InPayload<F>) {
        if let InPayload::Buffer { frame, .. } = p {
            self.host.release(frame);
        }
    }

    /// Count a message its sender was not entitled to send, and answer it with `status`.
    fn refuse<R: AboutPage>(
        &mut self,
        counter: fn(&mut GmsStats) -> &mut u64,
        status: AckStatus,
        req: &R,
    ) -> Action<F> {
        *counter(&mut self.stats) += 1;
        ack(status, req)
    }

    /// Whether `src` is `page`'s directory node in this node's view.
    fn sent_by_directory(&self, src: u16, page: &super::page::PageId) -> bool {
        self.members.directory_of(page) == Some(src)
    }

    /// Whether a `PUTDONE` from `src` answers a put or move this node has in flight to
    /// `src`, of that page and version (the tag's slot and generation name it).
    fn put_in_flight(&self, src: u16, d: &PutDone) -> bool {
        self.ops.get(usize::from(d.tag.slot)).is_some_and(|o| {
            o.generation == d.tag.generation
                && o.state == OpState::InFlight
                && matches!(o.kind, OpKind::Put | OpKind::Move)
                && o.dst == src
                && o.page == d.page
                && o.version == d.version
                && (d.status != PutStatus::Stored || d.site == src)
        })
    }

    fn get_answer(&self, status: GetStatus, req: &GetReq, version: Version, seq: u64) -> Action<F> {
        let rep = GetReply { status, page: req.page, version, seq, server: self.id, flags: 0 };
        Action::reply(&rep, None)
    }

    /// `GETPAGE` at the directory node (hops 0), or at the caching site (delegated, or
    /// sent directly by a requester that is the directory node).
    /// Only a member may ask, and only the page's directory node may make this node serve
    /// as the caching site (a moving read hands the copy over).
    fn serve_get(&mut self, inc: &Incoming<'_, F>, member: bool) -> Action<F> {
        let req = match inc.decode::<GetPage>() {
            Ok(r) => r,
            Err(e) => return Action::Error(e),
        };
        if !member {
            self.stats.rejected_gets += 1;
            return self.get_answer(GetStatus::Refused, &req, Version(0), 0);
        }
        if req.flags & GET_HINTED != 0 {
            if inc.hops > 0 || req.flags & (GET_MOVING | GET_DIRECT) != 0 {
                self.stats.rejected_gets += 1;
                return self.get_answer(GetStatus::Miss, &req, Version(0), 0);
            }
            return self.serve_as_site(&req, false);
        }
        let as_site = inc.hops > 0 || req.flags & GET_DIRECT != 0;
        if as_site && !self.sent_by_directory(inc.src, &req.page) {
            self.stats.rejected_gets += 1;
            return self.get_answer(GetStatus::Miss, &req, Version(0), 0);
        }
        if as_site {
            return self.serve_as_site(&req, true);
        }
        if self.members.directory_of(&req.page) != Some(self.id) {
            return self.get_answer(GetStatus::Miss, &req, Version(0), 0);
        }
        // A requester's `want` is the version it knows of: an older copy is no answer.
        match self.named_at(&req.page, req.want) {
            Err(MissReason::Rebuilding) => self.get_answer(GetStatus::Rebuilding, &req, Version(0), 0),
            Err(_) => self.get_answer(GetStatus::Miss, &req, Version(0), 0),
            Ok((site, v, seq)) if site == inc.token.origin => self.get_answer(GetStatus::Local, &req, v, seq),
            Ok((site, v, seq)) if site == self.id => self.serve_as_site(&GetReq { want: v, seq, ..req }, true),
            Ok((site, v, seq)) => {
                self.stats.gets_delegated += 1;
                match Body::encode(&GetReq { want: v, seq, ..req }) {
                    Ok(body) => Action::Delegate { to: site, body },
                    Err(e) => Action::Error(e),
                }
            }
        }
    }

    /// Serve `req.page` at `req.want` or newer from this node's copy: the one with
    /// identity `req.seq` the directory named (`by_directory`), or for a requester's `GET_HINTED`
    /// read, which never moves the copy and whose miss repairs nothing (the directory did
    /// not name this node).
    fn serve_as_site(&mut self, req: &GetReq, by_directory: bool) -> Action<F> {
        let page = req.page;
        let epoch = self.epoch;
        let Some(h) = self.held.get_mut(&page).filter(|h| h.version >= req.want) else {
            // The directory named a copy this node does not have: repair the entry.
            if by_directory {
                self.forget_site(page, req.want, req.seq);
            }
            return self.get_answer(GetStatus::Miss, req, Version(0), 0);
        };
        h.last_access = epoch;
        let h: Held<F> = *h;
        self.stats.gets_served += 1;
        // Only in a space whose reads move (cluster configuration: every node sets the same
        // policies) does a read hand the copy over: a moving read of another space, which
        // no honest requester sends, is answered as a plain one, so that no single request
        // has a holder give up a copy the requester will not adopt.
        let moving = req.flags & GET_MOVING != 0 && self.policy(page.space).reads == ReadPolicy::Moving;
        let local_dir = self.members.directory_of(&page) == Some(self.id);
        // A moving read hands the copy (and its dirt) to the requester. Only a registered
        // copy moves, only under the identity the directory named (a re-registration may
        // have given it a newer one whose answer is still on its way: the reader's claim
        // of the older one would be refused, and the copy lost), and only if the directory
        // can be told.
        let named = h.version > req.want || h.seq >= req.seq;
        let moved = moving && h.state == HeldState::Registered && named && (local_dir || self.free_task().is_some());
        if moved {
            self.held.remove(&page);
            self.cancel_register(&page, PutStatus::Failed);
            self.stats.gets_moved += 1;
            // The reader's registration claims this copy's identity: the directory takes it
            // as the hand-over and refuses this node's own registrations of it from now on.
            if local_dir {
                if self.dir.remove(&page, self.id, h.version, h.seq, self.now) {
                    self.stats.dir_removes += 1;
                }
            } else {
                self.forget_copy(page, h.version, h.seq);
            }
            let_go(&mut self.host, page, &Held { dirty: false, ..h });
        }
        self.lent = Some(h.frame);
        let flags = if h.dirty { REPLY_DIRTY } else { 0 } | if moved { REPLY_MOVED } else { 0 };
        let rep = GetReply { status: GetStatus::Hit, page, version: h.version, seq: h.seq, server: self.id, flags };
        Action::reply(&rep, Some((h.frame, h.len)))
    }

    /// `PUTPAGE`/`MOVEPAGE` at the target (one-way, the page in a receive buffer).
    fn serve_put(&mut self, inc: &Incoming<'_, F>) {
        let Ok(req) = inc.decode::<PutPage>() else {
            self.release_payload(inc.payload);
            return;
        };
        let to = Some((inc.src, req.tag));
        let InPayload::Buffer { frame, len } = inc.payload else {
            self.release_payload(inc.payload);
            self.notify(to, req.page, req.version, PutStatus::Refused);
            return;
        };
        if let Err(status) = self.store(&req, frame, len, to) {
            self.host.release(frame);
            if status == PutStatus::Refused {
                self.stats.puts_refused += 1;
            }
            self.notify(to, req.page, req.version, status);
        }
    }

    /// Take the page into this node's page-frame directory and start its registration
    /// (which answers the putter). `Err`: answer now, the frame was not taken.
    fn store(
        &mut self,
        req: &PutReq,
        frame: F,
        len: u32,
        to: Option<(u16, super::types::OpId)>,
    ) -> Result<(), PutStatus> {
        if req.view != self.members.view() {
            return Err(PutStatus::WrongView);
        }
        let page = req.page;
        let dir = self.members.directory_of(&page).ok_or(PutStatus::Refused)?;
        match self.held.get(&page).copied() {
            Some(h) if h.version > req.version => return Err(PutStatus::Superseded),
            // A copy handed back at this version (a movepage claiming an identity newer than
            // ours: the directory has moved on from our copy) replaces ours below.
            Some(h) if h.version == req.version && !(h.state == HeldState::Registered && req.seq > h.seq) => {
                // A duplicate, or the same page again: keep the copy we have.
                self.host.release(frame);
                match h.state {
                    HeldState::Registered => self.notify(to, page, req.version, PutStatus::Stored),
                    HeldState::Registering if self.attach_notify(&page, to) => {}
                    HeldState::Registering => self.notify(to, page, req.version, PutStatus::Busy),
                }
                return Ok(());
            }
            // Busy registering an older version: try again later.
            Some(h) if h.state == HeldState::Registering => return Err(PutStatus::Busy),
            // Far beyond the copy held (a leap, as the directory would see it without the
            // time since): the directory may refuse it, and the copy must not be given up
            // for it first. The putter tries another target.
            Some(h) if req.version.0 > h.version.0.saturating_add(VERSION_STEP) => return Err(PutStatus::Refused),
            Some(_) => {}
            None if self.held.len() >= self.budget() => return Err(PutStatus::Refused),
            None => {}
        }
        // Busy with an earlier copy of the page (its removal not answered yet): a mover keeps
        // its copy, a putter tries elsewhere.
        if (dir != self.id && self.free_task().is_none()) || self.settling(&page) {
            return Err(PutStatus::Busy);
        }
        // A movepage hands over the mover's copy: its registration claims the mover's
        // identity. A putpage's copy is one no directory named yet (its `seq` is 0).
        let seq = req.seq;
        let h = Held {
            frame,
            len,
            version: req.version,
            dirty: req.flags & PUT_DIRTY != 0,
            last_access: self.epoch,
            state: HeldState::Registering,
            seq,
            repair: false,
            answer: None,
        };
        match self.held.insert(page, h) {
            Ok(Some(old)) => let_go(&mut self.host, page, &Held { dirty: false, ..old }),
            Ok(None) => {}
            Err(_) => return Err(PutStatus::Refused),
        }
        self.stats.pages_stored += 1;
        self.register(page, to);
        Ok(())
    }

    /// A second putter of the same version waits on the registration in progress.
    fn attach_notify(&mut self, page: &super::page::PageId, to: Option<(u16, super::types::OpId)>) -> bool {
        let Some(t) = self.tasks.iter_mut().find(|t| t.live() && t.kind == TaskKind::Register && t.page == *page)
        else {
            return false;
        };
        match t.notify {
            None => {
                t.notify = to;
                true
            }
            n => n == to,
        }
    }

    /// `DIRUPDATE` at the directory node.
    /// A member names itself only: it holds the copy it registers (it stored it for a
    /// putter, read it moving, or holds it for itself); the directory has no record of
    /// which puts went where, so beyond that it bounds the version claimed (the lead, and
    /// no leap over a firm copy: `directory.rs`): one message may not have the holder
    /// give its copy up for a version far beyond it, nor leave a floor no writer reaches.
    /// Both refusals are counted as unentitled.
    fn serve_update(&mut self, inc: &Incoming<'_, F>, member: bool) -> Action<F> {
        let req = match inc.decode::<DirUpdate>() {
            Ok(r) => r,
            Err(e) => return Action::Error(e),
        };
        if req.site != inc.src {
            self.stats.rejected_updates += 1;
            return Action::Error(RpcError::Malformed);
        }
        if !member {
            return self.refuse(|s| &mut s.rejected_updates, AckStatus::WrongView, &req);
        }
        let status = if req.view != self.members.view() {
            AckStatus::WrongView
        } else if self.members.directory_of(&req.page) != Some(self.id) {
            AckStatus::NotDirectory
        } else if self.dir.beyond_lead(&req.page, req.version)
            || self.dir.leap_over_named(&req.page, req.version, self.now)
        {
            return self.refuse(|s| &mut s.rejected_updates, AckStatus::Rejected, &req);
        } else {
            let (status, seq) = self.apply_update(req.page, req.site, req.version, req.seq);
            return Action::reply(&DirAck { status, page: req.page, seq }, None);
        };
        ack(status, &req)
    }
}
