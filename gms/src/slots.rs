// SPDX-License-Identifier: GPL-2.0-only
//! The records of a node's pending work: client operation slots, background directory
//! tasks and the notices they leave (the node's tables hold them; [`super::pending`]
//! works on them).

use super::directory::NO_SITE;
use super::net::prelude::*;
use super::ops::PutDone;
use super::page::{PageId, Version};
use super::types::*;

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum OpKind {
    Get,
    Put,
    Move,
    Discard,
    Top,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum OpState {
    Free,
    InFlight,
    /// Wait mode: finished, waiting for `take`.
    Done,
}

#[derive(Clone, Copy)]
pub(super) struct OpSlot<F> {
    pub(super) state: OpState,
    pub(super) generation: u32,
    pub(super) kind: OpKind,
    pub(super) mode: Mode,
    pub(super) page: PageId,
    pub(super) version: Version,
    /// A movepage: the identity of the copy moved (only that copy is dropped when it is
    /// stored: the page may have come back meanwhile).
    pub(super) seq: u64,
    /// Where the request went (directory, caching site, or put target).
    pub(super) dst: u16,
    pub(super) view: u64,
    pub(super) moving: bool,
    /// A `GETPAGES` ([`super::getpages`]): its mask and the versions it wants (`page` is
    /// its first page).
    pub(super) group: Option<(u64, super::ops::Versions)>,
    pub(super) call: Option<CallId>,
    pub(super) deadline: u64,
    pub(super) timed_out: bool,
    pub(super) done: Option<Completion<F>>,
}

impl<F> OpSlot<F> {
    /// The pages the operation is about: a `GETPAGES`'s, or one.
    pub(super) fn pages(&self) -> u64 {
        self.group.map_or(1, |(mask, _)| u64::from(mask.count_ones()))
    }

    pub(super) const FREE: OpSlot<F> = OpSlot {
        state: OpState::Free,
        generation: 1,
        kind: OpKind::Get,
        mode: Mode::NonBlocking,
        page: PageId::new(0, 0),
        version: Version(0),
        seq: 0,
        dst: NO_SITE,
        view: 0,
        moving: false,
        group: None,
        call: None,
        deadline: 0,
        timed_out: false,
        done: None,
    };
}

/// Background directory maintenance, retried until answered.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum TaskKind {
    /// `DIRUPDATE`: name this node as the holder of its copy.
    Register,
    /// `DIRREMOVE`: this node no longer holds the page.
    Remove,
    /// `DROPPAGE` to `site`: it holds a superseded copy.
    Drop,
    /// `DIRVERIFY` to `site` (scrub): un-name it unless it holds the page.
    Verify,
    /// `DIRVERIFY` to `site`, just named for a copy that displaced another site's
    /// (`Task::then`): the displaced copy is dropped once `site` confirms it holds its own,
    /// and named again if it does not (see [`super::directory`]'s module doc).
    Confirm,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum TaskState {
    Free,
    /// Send at this time.
    Due(u64),
    /// Failed: the next `drive` schedules a retry.
    Backoff,
    InFlight {
        call: CallId,
        deadline: u64,
    },
    /// Ended while its call was in flight: the next `drive` cancels the call.
    Cancel(CallId),
}

#[derive(Clone, Copy, Debug)]
pub(super) struct Task {
    pub(super) state: TaskState,
    pub(super) generation: u32,
    pub(super) kind: TaskKind,
    pub(super) page: PageId,
    pub(super) version: Version,
    /// The identity it is about: a registration's claim, the copies a removal or drop
    /// covers at `version`, the one a verify asks about.
    pub(super) seq: u64,
    /// The version and identity the call in flight carries.
    pub(super) sent: Version,
    pub(super) sent_seq: u64,
    pub(super) site: u16,
    /// A putter waiting for this registration: (node, its operation).
    pub(super) notify: Option<(u16, OpId)>,
    pub(super) attempts: u32,
    /// A registration whose copy was taken back while it was on its way: never sent
    /// again; only the answer of the call in flight is awaited (to take back exactly the
    /// identity it names).
    pub(super) withdrawn: bool,
    /// A confirmation: the copy displaced (site, version, identity).
    pub(super) then: Option<super::directory::Named>,
    /// A removal of a copy this node held and gave up (taken back, moved, dropped), not
    /// one it was named for and lacked: it answers a `DIRVERIFY` as holding the copy, since
    /// the copy existed.
    pub(super) gave_up: bool,
}

impl Task {
    /// Work still to do (not free, not being cancelled).
    pub(super) fn live(&self) -> bool {
        !matches!(self.state, TaskState::Free | TaskState::Cancel(_))
    }

    pub(super) const FREE: Task = Task {
        state: TaskState::Free,
        generation: 1,
        kind: TaskKind::Remove,
        page: PageId::new(0, 0),
        version: Version(0),
        seq: 0,
        sent: Version(0),
        sent_seq: 0,
        site: NO_SITE,
        notify: None,
        attempts: 0,
        withdrawn: false,
        then: None,
        gave_up: false,
    };
}

/// A queued one-way `PUTDONE`.
#[derive(Clone, Copy, Debug)]
pub(super) struct Notice {
    pub(super) dst: u16,
    pub(super) done: PutDone,
}
