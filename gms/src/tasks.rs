// SPDX-License-Identifier: GPL-2.0-only
//! Background directory maintenance (`DIRUPDATE`, `DIRREMOVE`, `DROPPAGE`, each retried
//! until answered or its peer leaves the view), operation timeouts, and the one-way
//! notices queue: everything [`GmsNode::drive`] does.

use super::directory::ANY_SEQ;
use super::net::prelude::*;
use super::net::storage::Storage;
use super::node::{GmsNode, HeldState, Host};
use super::ops::*;
use super::slots::{OpState, Task, TaskKind, TaskState};
use super::table::Scan;

/// Slots of each table one scrub step looks at, at most.
const SCRUB_SLOTS: usize = 64;

/// A background update's `k`-th retry waits `retry_delay << k` before it is sent and
/// `task_timeout << k` for its answer, `k` capped here (×32): an update that timed out
/// because its peer or the network is slow (a loaded machine: every thread waits for a
/// core) must not multiply the traffic that slows it. Retried at a fixed 25 ms, a node's
/// 128 task slots could send 5,000 updates a second to peers that answered a few hundred.
const BACKOFF_DOUBLINGS: u32 = 5;

/// `base` doubled once per failed attempt, at most [`BACKOFF_DOUBLINGS`] times.
fn backed_off(base: u64, attempts: u32) -> u64 {
    base.saturating_mul(1 << attempts.min(BACKOFF_DOUBLINGS))
}

/// A wrapping cursor's step: the entry found, and the slot the next step starts at.
fn cursor<K, V>(s: Scan<K, V>) -> (Option<(K, V)>, usize) {
    match s {
        Scan::Found(i, k, v) => (Some((k, v)), i + 1),
        Scan::Stopped(at) => (None, at),
        Scan::End => (None, 0),
    }
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
    /// Time passes and work queued by the last inputs goes out: fail overdue operations
    /// (cancelling their calls: a miss, never a hang), retry overdue background updates,
    /// issue due ones, send queued notices. Call after every input to the node or its
    /// `Rpc`, and at [`Self::poll_timeout`]; then drain the `Rpc`'s transmits.
    pub fn drive<const C: usize, const K: usize, const X: usize>(&mut self, now: u64, rpc: &mut Rpc<Self, F, C, K, X>) {
        self.enter(now);
        // The tables are scanned only when something in them may be due.
        if now >= self.ops_deadline {
            self.drive_ops(now, rpc);
        }
        self.repair_step();
        if !self.tasks_idle {
            self.drive_tasks(now, rpc);
            self.tasks_idle = self.tasks.iter().all(|t| t.state == TaskState::Free);
        }
        if self.cfg.scrub_interval > 0 && now >= self.scrub_at {
            self.scrub_at = now.saturating_add(self.cfg.scrub_interval);
            self.scrub_step();
        }
        while let Some(n) = self.outq.peek().copied() {
            let sent = Body::encode(&n.done).and_then(|b| rpc.send_oneway(n.dst, OP_PUTDONE, b.as_slice(), None));
            if sent == Err(RpcError::TxFull) {
                break;
            }
            self.outq.pop();
        }
    }

    /// The operation table's part of [`Self::drive`]: fail overdue operations.
    fn drive_ops<const C: usize, const K: usize, const X: usize>(&mut self, now: u64, rpc: &mut Rpc<Self, F, C, K, X>) {
        for i in 0..OPS {
            let o = self.ops[i];
            if o.state != OpState::InFlight || o.deadline > now {
                continue;
            }
            self.ops[i].timed_out = true;
            self.stats.op_timeouts += 1;
            match o.call {
                // The continuation completes it (as a timeout).
                Some(call) if rpc.cancel(self, call).is_ok() => {}
                _ => self.fail_op(i, RpcError::Timeout),
            }
        }
        // The earliest deadline left (an operation still in flight past its deadline keeps
        // it due, as before: it is looked at again on the next drive).
        let next = self.ops.iter().filter(|o| o.state == OpState::InFlight).map(|o| o.deadline).min();
        self.ops_deadline = next.unwrap_or(u64::MAX);
    }

    /// The task table's part of [`Self::drive`]: timeouts, cancellations, retries due.
    fn drive_tasks<const C: usize, const K: usize, const X: usize>(
        &mut self,
        now: u64,
        rpc: &mut Rpc<Self, F, C, K, X>,
    ) {
        for i in 0..TASKS {
            let state = self.tasks[i].state;
            match state {
                // Cancelled: the continuation schedules the retry.
                TaskState::InFlight { call, deadline } if deadline <= now && rpc.cancel(self, call).is_err() => {
                    self.retry(i);
                }
                TaskState::Cancel(call) => {
                    // The continuation ignores it (the task's generation moved on).
                    let _ = rpc.cancel(self, call);
                    self.tasks[i].state = TaskState::Free;
                }
                _ => {}
            }
        }
        for i in 0..TASKS {
            let state = self.tasks[i].state;
            match state {
                TaskState::Backoff => {
                    let wait = backed_off(self.cfg.retry_delay, self.tasks[i].attempts.saturating_sub(1));
                    self.tasks[i].state = TaskState::Due(now.saturating_add(wait));
                }
                TaskState::Due(at) if at <= now && !self.issue(now, rpc, i) => break,
                _ => {}
            }
        }
    }

    /// When [`Self::drive`] has something to do next (an operation or update deadline, a
    /// retry, a queued notice).
    pub fn poll_timeout(&self) -> Option<u64> {
        let ops = self.ops.iter().filter(|o| o.state == OpState::InFlight).map(|o| o.deadline);
        let tasks = self.tasks.iter().filter_map(|t| match t.state {
            TaskState::Free => None,
            TaskState::Due(at) => Some(at),
            TaskState::Backoff | TaskState::Cancel(_) => Some(self.now),
            TaskState::InFlight { deadline, .. } => Some(deadline),
        });
        let notices = (!self.outq.is_empty()).then_some(self.now);
        ops.chain(tasks).chain(notices).min()
    }

    /// One step of the scrub: check the next directory entry with its site, and
    /// re-register the next registered held page (both idempotent when all is well). A
    /// step looks at no more than [`SCRUB_SLOTS`] slots of each table, however large and
    /// empty they are; a cursor at a table's end starts again at slot 0 next step.
    fn scrub_step(&mut self) {
        let (next, at) = cursor(self.dir.scan_live(self.scrub_dir, SCRUB_SLOTS));
        self.scrub_dir = at;
        if let Some((page, e)) = next {
            if e.site == self.id {
                if self.held.get(&page).is_none_or(|h| h.version < e.version) {
                    self.unname(page, e.site, e.version, e.seq);
                }
            } else {
                self.queue_task(TaskKind::Verify, page, e.version, e.seq, e.site, None);
            }
        }
        let (next, at) = cursor(self.held.scan(self.scrub_held, SCRUB_SLOTS, |_, _| true));
        self.scrub_held = at;
        if let Some((page, h)) = next {
            if h.state == HeldState::Registered {
                if self.members.directory_of(&page) == Some(self.id) {
                    if self.dir.named(&page) != Some((self.id, h.version, h.seq)) {
                        let (status, seq) = self.apply_update(page, self.id, h.version, h.seq);
                        self.registered(page, h.version, h.seq, status, seq, None);
                    }
                } else {
                    self.queue_task(TaskKind::Register, page, h.version, h.seq, self.id, None);
                }
            }
        }
    }

    /// The directory learnt that `site` does not hold `page` at `version` (the copy with
    /// identity `seq` it named when it asked).
    fn unname(&mut self, page: super::page::PageId, site: u16, version: super::page::Version, seq: u64) {
        // A copy being confirmed: the confirmation decides.
        if self.confirming(&page, site).is_some() {
            return;
        }
        if self.dir.remove(&page, site, version, seq, self.now) {
            self.stats.scrub_removed += 1;
            self.stats.dir_removes += 1;
        }
    }

    /// Free task `i` without telling anyone, and return it.
    fn take_task(&mut self, i: usize) -> Task {
        let t = self.tasks[i];
        self.tasks[i].state = TaskState::Free;
        self.tasks[i].notify = None;
        self.tasks[i].generation = t.generation.wrapping_add(1).max(1);
        t
    }

    /// Send task `i` (or do it here when this node is its peer). `false`: NetRPC has no
    /// room now, stop issuing.
    fn issue<const C: usize, const K: usize, const X: usize>(
        &mut self,
        now: u64,
        rpc: &mut Rpc<Self, F, C, K, X>,
        i: usize,
    ) -> bool {
        let t = self.tasks[i];
        let dst = match t.kind {
            TaskKind::Register | TaskKind::Remove => self.members.directory_of(&t.page),
            TaskKind::Drop | TaskKind::Verify | TaskKind::Confirm => Some(t.site).filter(|&s| self.members.contains(s)),
        };
        let Some(dst) = dst else {
            self.give_up(i);
            return true;
        };
        if dst == self.id {
            let t = self.take_task(i);
            match t.kind {
                TaskKind::Register => {
                    let (status, seq) = self.apply_update(t.page, self.id, t.version, t.seq);
                    self.registered(t.page, t.version, t.seq, status, seq, t.notify);
                }
                TaskKind::Remove => {
                    if self.dir.remove(&t.page, self.id, t.version, t.seq, now) {
                        self.stats.dir_removes += 1;
                    }
                }
                TaskKind::Drop => {
                    self.drop_held(&t.page, t.version, t.seq);
                }
                TaskKind::Verify => {
                    if self.held.get(&t.page).is_none_or(|h| h.version < t.version) {
                        self.unname(t.page, self.id, t.version, t.seq);
                    }
                }
                TaskKind::Confirm => {
                    let holds = self.holds_or_gave_up(&t.page, t.version);
                    self.confirmed(&t, holds);
                }
            }
            return true;
        }
        let (page, version, seq, view, me) = (t.page, t.version, t.seq, self.members.view(), self.id);
        let none = ReplyTo::None;
        let nb = Mode::NonBlocking;
        let r = match t.kind {
            TaskKind::Register => {
                let req = DirUpdateReq { page, version, seq, view, site: me };
                rpc.call::<DirUpdate>(now, self, dst, &req, none, nb)
            }
            TaskKind::Remove => {
                rpc.call::<DirRemove>(now, self, dst, &DirRemoveReq { page, version, seq, site: me }, none, nb)
            }
            TaskKind::Drop => rpc.call::<DropPage>(now, self, dst, &DropReq { page, version, seq }, none, nb),
            TaskKind::Verify | TaskKind::Confirm => {
                rpc.call::<DirVerify>(now, self, dst, &DropReq { page, version, seq }, none, nb)
            }
        };
        match r {
            Ok(call) => {
                // Issuing may have evicted another call whose continuation ended this task.
                if self.tasks[i].generation != t.generation || self.tasks[i].state == TaskState::Free {
                    let _ = rpc.cancel(self, call);
                    return true;
                }
                let arg = (t.generation as u64) << 16 | i as u64;
                if rpc.push_continuation(call, Self::task_reply, arg).is_err() {
                    // Cannot happen (a fresh call has an empty stack).
                    let _ = rpc.cancel(self, call);
                    self.retry(i);
                    return true;
                }
                let deadline = now.saturating_add(backed_off(self.cfg.task_timeout, self.tasks[i].attempts));
                self.tasks[i].state = TaskState::InFlight { call, deadline };
                self.tasks[i].sent = version;
                self.tasks[i].sent_seq = seq;
                self.stats.tasks_issued += 1;
                true
            }
            Err(RpcError::TxFull | RpcError::TableFull) => false,
            Err(_) => {
                self.retry(i);
                true
            }
        }
    }

    /// The continuation of every background call.
    fn task_reply(node: &mut Self, o: &Outcome<F>, arg: u64) -> bool {
        node.lent = None;
        if let Ok(Reply { payload: Payload::Buffer { frame, .. }, .. }) = o {
            node.host.release(*frame);
        }
        let i = (arg & 0xffff) as usize;
        let Some(t) = node.tasks.get(i).copied() else { return true };
        if t.generation != (arg >> 16) as u32 || !matches!(t.state, TaskState::InFlight { .. }) {
            return true;
        }
        let ack = match o {
            Ok(r) => r.decode::<DirAck>().ok().filter(|a| a.page == t.page),
            Err(_) => None,
        };
        let (status, seq) = (ack.map(|a| a.status), ack.map_or(0, |a| a.seq));
        match (t.kind, status) {
            (TaskKind::Register, Some(_)) if (t.version, t.seq) != (t.sent, t.sent_seq) => {
                // A newer copy replaced the one this call registered: register that one.
                node.tasks[i].state = TaskState::Due(node.now);
            }
            (TaskKind::Register, Some(AckStatus::WrongView | AckStatus::NotDirectory | AckStatus::Busy))
                if node.reregistering(&t.page, t.sent) =>
            {
                // A copy the directory named before (the repair after a membership change,
                // or the scrub): never dropped for a view the two nodes do not share yet or
                // a directory with no room; asked again.
                node.retry(i);
            }
            (TaskKind::Register, Some(s @ (AckStatus::Ok | AckStatus::Rejected))) => {
                let t = node.take_task(i);
                node.registered(t.page, t.sent, t.sent_seq, s, seq, t.notify);
            }
            (TaskKind::Verify, Some(s @ (AckStatus::Ok | AckStatus::Rejected))) => {
                let t = node.take_task(i);
                if s == AckStatus::Rejected && node.members.directory_of(&t.page) == Some(node.id) {
                    node.unname(t.page, t.site, t.sent, t.sent_seq);
                }
            }
            (TaskKind::Confirm, Some(s @ (AckStatus::Ok | AckStatus::Rejected))) => {
                let t = node.take_task(i);
                node.confirmed(&t, s == AckStatus::Ok);
            }
            // The directory is confirming the copy this removal un-names: asked again.
            (TaskKind::Remove, Some(AckStatus::Busy)) => node.retry(i),
            (TaskKind::Remove | TaskKind::Drop, Some(_)) => {
                if (t.version, t.seq) > (t.sent, t.sent_seq) {
                    // Merged with a newer version while in flight: send that too.
                    node.tasks[i].state = TaskState::Due(node.now);
                } else {
                    node.take_task(i);
                }
            }
            _ => node.retry(i),
        }
        true
    }

    /// Task `i` failed: back off and retry, or give up after `max_attempts`.
    fn retry(&mut self, i: usize) {
        if self.tasks[i].withdrawn {
            self.take_task(i);
            return;
        }
        self.stats.task_retries += 1;
        let t = &mut self.tasks[i];
        t.attempts = t.attempts.saturating_add(1);
        if self.cfg.max_attempts > 0 && t.attempts >= self.cfg.max_attempts {
            self.give_up(i);
        } else {
            t.state = TaskState::Backoff;
        }
    }

    /// Abandon task `i`: an unregistered copy is dropped (never served as if named); a copy
    /// displaced by one whose holder never answered is dropped (as it would have been
    /// without the confirmation).
    fn give_up(&mut self, i: usize) {
        let t = self.take_task(i);
        match t.kind {
            TaskKind::Register => {
                self.drop_held(&t.page, t.version, ANY_SEQ);
                self.notify(t.notify, t.page, t.version, PutStatus::Failed);
            }
            TaskKind::Confirm => {
                if let Some(then) = t.then {
                    self.displaced_dropped(t.page, then);
                }
            }
            _ => {}
        }
    }
}
