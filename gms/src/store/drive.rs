// SPDX-License-Identifier: GPL-2.0-only
//! The store's loop over a `GmsNode`: what [`Store::poll_issue`] asks for, sent as
//! putpages and getpages, and their completions fed back. Every runtime runs this one
//! loop; they differ only in their frames ([`Frames`]), which may live beside the node (a
//! simulator's world) or inside the node's host (a user-space port's pool): the loop
//! reaches them through [`FramesIn`], one borrow at a time.

use super::super::epochs::Lru;
use super::super::net::prelude::*;
use super::super::net::storage::Storage;
use super::super::node::{GmsNode, Host};
use super::super::ops::GETPAGES_MAX;
use super::super::page::{PageId, Version};
use super::super::types::{Completion, GetResult, GmsError, OpId, OpResult};
use super::group::Group;
use super::{Data, Issue, IssueKind, Route, Store};

/// A runtime's frames, as the store's loop needs them.
pub trait Frames<Io, F> {
    /// Bytes of a volume page.
    const PAGE_BYTES: u32;
    /// A frame holding `io`'s page for the put of GMS page `page` (a replica) at
    /// `version` to send from (lent to the NIC until the put completes; then
    /// [`Self::give_back`]). Each replica's put asks for its own (a runtime that needs a
    /// token per send, or a simulator that tags a frame with what it carries).
    fn lend(&mut self, io: &Io, page: PageId, version: Version) -> Option<F>;
    /// `io`'s page armed for a getpage's reply to land in.
    fn arm(&mut self, io: &Io) -> Option<ReplyTo<F>>;
    /// A frame of the runtime's armed for a getpage's reply (a copy re-replication puts).
    fn scratch(&mut self) -> Option<ReplyTo<F>>;
    /// The pages of `ios` (2 to `GETPAGES_MAX`, in order) as one frame armed for a
    /// `GETPAGES` reply, which fills them one after the other ([`super::group`]); given
    /// back as one ([`Self::give_back`]). `None`: not now, or never in this runtime (the
    /// default): the store then reads them page by page.
    fn group(&mut self, ios: &[&Io]) -> Option<ReplyTo<F>> {
        let _ = ios;
        None
    }
    /// A frame lent, armed or handed out is the runtime's again (disarm it if armed).
    fn give_back(&mut self, frame: F);
    /// A frame of the runtime's whose bytes `write` fills: meta page `page` to put at
    /// `version` (given back when the put completes).
    fn fill(&mut self, page: PageId, version: Version, write: impl FnOnce(&mut [u8])) -> Option<F>;
    /// The frame to send a copy the store holds (`frame`, fetched for re-replication) as
    /// `page` at `version`: itself, for a runtime whose frames are just memory (the
    /// default); a simulator that names a frame by what it carries gives a relabelled one.
    fn relabel(&mut self, frame: F, page: PageId, version: Version) -> F {
        let _ = (page, version);
        frame
    }
    /// Let `read` see the bytes of `frame` (a meta page a getpage brought).
    fn bytes(&mut self, frame: &F, read: impl FnOnce(&[u8]));
}

/// A borrowed runtime's frames are its frames.
impl<Io, F, T: Frames<Io, F>> Frames<Io, F> for &mut T {
    const PAGE_BYTES: u32 = T::PAGE_BYTES;
    fn lend(&mut self, io: &Io, page: PageId, version: Version) -> Option<F> {
        (**self).lend(io, page, version)
    }
    fn arm(&mut self, io: &Io) -> Option<ReplyTo<F>> {
        (**self).arm(io)
    }
    fn scratch(&mut self) -> Option<ReplyTo<F>> {
        (**self).scratch()
    }
    fn group(&mut self, ios: &[&Io]) -> Option<ReplyTo<F>> {
        (**self).group(ios)
    }
    fn give_back(&mut self, frame: F) {
        (**self).give_back(frame)
    }
    fn fill(&mut self, page: PageId, version: Version, write: impl FnOnce(&mut [u8])) -> Option<F> {
        (**self).fill(page, version, write)
    }
    fn relabel(&mut self, frame: F, page: PageId, version: Version) -> F {
        (**self).relabel(frame, page, version)
    }
    fn bytes(&mut self, frame: &F, read: impl FnOnce(&[u8])) {
        (**self).bytes(frame, read)
    }
}

/// Where the store's loop finds a runtime's [`Frames`] while it also drives the node
/// whose host is `H`: frames kept beside the node ignore `host`; frames in a pool the
/// host owns are borrowed from it for each step.
pub trait FramesIn<Io, F, H> {
    fn frames<'a>(&'a mut self, host: &'a mut H) -> impl Frames<Io, F> + 'a;
}

/// The frame a [`ReplyTo`] lands in.
fn frame_of<F: Copy>(r: &ReplyTo<F>) -> Option<F> {
    r.caller_frame().copied()
}

impl<Io, F: Copy + PartialEq, S: Storage, const M: usize, const Q: usize, const OPS: usize> Store<Io, F, S, M, Q, OPS> {
    /// Send everything the store wants sent now through `node`. Returns whether anything
    /// was sent (the runtime flushes its transmits then). Completions that happen inside
    /// the calls (a page this node holds itself) reach the host as usual; feed them to
    /// [`Self::complete`].
    #[allow(clippy::too_many_arguments)]
    pub fn issue<
        H: Host<F>,
        S2: Storage,
        const MM: usize,
        const T: usize,
        const X: usize,
        const C: usize,
        const K: usize,
        const XX: usize,
    >(
        &mut self,
        now: u64,
        node: &mut GmsNode<F, H, S2, MM, OPS, T, X>,
        rpc: &mut Rpc<GmsNode<F, H, S2, MM, OPS, T, X>, F, C, K, XX>,
        lru: &mut Lru,
        frames: &mut impl FramesIn<Io, F, H>,
    ) -> bool {
        let mut sent = false;
        let coordinator = node.lru_coordinator();
        // Operations go while the node has a slot for them, one left for others (its own
        // background work, a runtime's tests).
        while node.ops_in_use() + 1 < OPS {
            let Some(issue) = self.poll_issue(now, lru, coordinator) else { break };
            let (op, lent) = self.send(now, &issue, node, rpc, frames);
            sent |= op.is_some();
            self.handle_issued_with(now, &issue, op, lent);
        }
        sent
    }

    /// Send one issue: the operation and the frame it holds of the store's or a request's.
    fn send<
        H: Host<F>,
        S2: Storage,
        const MM: usize,
        const T: usize,
        const X: usize,
        const C: usize,
        const K: usize,
        const XX: usize,
    >(
        &self,
        now: u64,
        issue: &Issue<F>,
        node: &mut GmsNode<F, H, S2, MM, OPS, T, X>,
        rpc: &mut Rpc<GmsNode<F, H, S2, MM, OPS, T, X>, F, C, K, XX>,
        frames: &mut impl FramesIn<Io, F, H>,
    ) -> (Option<OpId>, Option<F>) {
        match issue.kind {
            IssueKind::Put { page, version, target, data } => {
                let mut fr = frames.frames(&mut node.host);
                let (frame, lent) = match data {
                    Data::Request => match self.io(issue.req).and_then(|io| fr.lend(io, page, version)) {
                        Some(f) => (f, true),
                        None => return (None, None),
                    },
                    Data::Frame(f) => (fr.relabel(f, page, version), false),
                    Data::Meta(m) => match fr.fill(page, version, |buf| self.fill_meta(m, buf)) {
                        Some(f) => (f, true),
                        None => return (None, None),
                    },
                    Data::Scratch => return (None, None),
                };
                let page_bytes = page_bytes_of(&fr);
                drop(fr);
                match node.putpage(now, rpc, page, version, frame, page_bytes, target, false, Mode::NonBlocking) {
                    Ok(op) => (Some(op), lent.then_some(frame)),
                    Err(_) => {
                        if lent {
                            frames.frames(&mut node.host).give_back(frame);
                        }
                        (None, None)
                    }
                }
            }
            IssueKind::Gets(g) => {
                let mut fr = frames.frames(&mut node.host);
                let reply = self.ios_of(&g).and_then(|ios| fr.group(&ios[..g.len()]));
                drop(fr);
                let Some(reply) = reply else { return (None, None) };
                let frame = frame_of(&reply);
                let (mode, known) = (Mode::NonBlocking, g.known());
                match node.getpages_hinted(now, rpc, g.first, g.mask, known, g.holder, reply, mode) {
                    Ok(op) => (Some(op), None),
                    Err(_) => {
                        if let Some(f) = frame {
                            frames.frames(&mut node.host).give_back(f);
                        }
                        (None, None)
                    }
                }
            }
            IssueKind::Get { page, at_least, route, into } => {
                let mut fr = frames.frames(&mut node.host);
                let reply = match into {
                    Data::Request => self.io(issue.req).and_then(|io| fr.arm(io)),
                    Data::Scratch | Data::Meta(_) => fr.scratch(),
                    Data::Frame(_) => None,
                };
                drop(fr);
                let Some(reply) = reply else { return (None, None) };
                let frame = frame_of(&reply);
                match route.getpage(now, node, rpc, page, at_least, reply) {
                    Ok(op) => (Some(op), None),
                    Err(_) => {
                        if let Some(f) = frame {
                            frames.frames(&mut node.host).give_back(f);
                        }
                        (None, None)
                    }
                }
            }
            IssueKind::Top { node: to, family, scope } => {
                (node.top_version(now, rpc, to, family, scope, Mode::NonBlocking).ok(), None)
            }
        }
    }

    /// The user requests of `g`'s reads, in its order (`None`: one is not a user's).
    fn ios_of(&self, g: &Group) -> Option<[&Io; GETPAGES_MAX]> {
        let first = self.io(*g.reads().first()?)?;
        let mut ios = [first; GETPAGES_MAX];
        for (io, &r) in ios.iter_mut().zip(g.reads()) {
            *io = self.io(r)?;
        }
        Some(ios)
    }

    /// A completion from the node's host: the store's own operations are handled here
    /// (returns `true`; their frames are given back to `frames` unless the store keeps
    /// them), anything else is the runtime's (`false`).
    pub fn complete(&mut self, now: u64, done: &Completion<F>, frames: &mut impl Frames<Io, F>) -> bool {
        let Some(lent) = self.op_frame(done.op) else { return false };
        match done.result {
            OpResult::Put(result) => {
                self.handle_put(now, done.op, done.page, result, done.answer);
                if let Some(f) = lent {
                    frames.give_back(f);
                }
            }
            OpResult::Get(ref result) => {
                let kept = match *result {
                    GetResult::Hit { frame, .. } if self.wants_bytes(done.op) => {
                        let mut kept = false;
                        frames.bytes(&frame, |b| kept = self.handle_get_bytes(now, done.op, result, b));
                        kept
                    }
                    _ => self.handle_get(now, done.op, result),
                };
                let frame = match *result {
                    GetResult::Hit { frame, .. } => Some(frame),
                    GetResult::Miss { frame, .. } => frame,
                };
                if let Some(f) = frame.filter(|_| !kept) {
                    frames.give_back(f);
                }
            }
            OpResult::Top(result) => self.handle_top(now, done.op, result),
            _ => {}
        }
        true
    }
}

/// Bytes of a page in `frames`' runtime.
fn page_bytes_of<Io, F, Fr: Frames<Io, F>>(_: &Fr) -> u32 {
    Fr::PAGE_BYTES
}

impl Route {
    /// Send a getpage of `page` at `at_least` or newer along this route, its reply to
    /// `reply` (nonblocking: it completes through the node's host).
    #[allow(clippy::too_many_arguments)]
    pub fn getpage<
        F: Copy + PartialEq,
        H: Host<F>,
        S: Storage,
        const MM: usize,
        const OPS: usize,
        const T: usize,
        const X: usize,
        const C: usize,
        const K: usize,
        const XX: usize,
    >(
        self,
        now: u64,
        node: &mut GmsNode<F, H, S, MM, OPS, T, X>,
        rpc: &mut Rpc<GmsNode<F, H, S, MM, OPS, T, X>, F, C, K, XX>,
        page: PageId,
        at_least: Version,
        reply: ReplyTo<F>,
    ) -> Result<OpId, GmsError> {
        match self {
            Route::Holder { node: holder, answer } => {
                node.getpage_hinted(now, rpc, page, at_least, holder, answer, reply, Mode::NonBlocking)
            }
            Route::Directory => node.getpage_at_least(now, rpc, page, at_least, reply, Mode::NonBlocking),
        }
    }
}
