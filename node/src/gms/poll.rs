// SPDX-License-Identifier: GPL-2.0-only
//! A port's poll loop: the NIC, received messages, timers, GMS's background work and transmits.

use super::GmsPort;
use crate::rpc::POST_TRIES;
use std::sync::Arc;
use std::time::{Duration, Instant};
use trapeze_firmware::iface::layout::Counter;
use trapeze_vnic::nic::InlineNative;

/// Idle passes between two clock reads in [`GmsPort::poll`] (a few µs).
const CLOCK_PASSES: u32 = 32;

/// How often an idle poll checks GMS's and the LRU's timers (ns).
const TIMER_CHECK_NS: u64 = 20_000;

impl GmsPort {
    pub(super) fn poll_nic(&mut self) -> bool {
        self.cpu.as_mut().is_some_and(|c| c.poll())
    }

    /// Wake a NIC processor thread that may sleep on its doorbell.
    fn ring(doorbell: &Option<Arc<std::os::fd::OwnedFd>>) {
        if let Some(d) = doorbell {
            let _ = rustix::io::write(d, &1u64.to_ne_bytes());
        }
    }

    /// One pass: NIC firmware, send completions, received messages, timeouts, GMS's
    /// background work, transmits, completions. Returns whether anything happened.
    pub fn poll(&mut self) -> bool {
        let mut busy = self.poll_nic();
        busy |= self.node.host.frames.reap(|_, _| {});
        // The clock is read when something happened, else every CLOCK_PASSES idle passes
        // (a clock read costs more than the rest of an idle pass).
        self.clock_in = self.clock_in.saturating_sub(1);
        let idle = !busy && self.clock_in > 0;
        let mut clock = None;
        while let Some(m) = self.node.host.frames.ep.poll_recv() {
            busy = true;
            self.stats.messages += 1;
            let now = match clock {
                Some(t) => t,
                None => *clock.insert(self.tick_clock()),
            };
            let payload = self.node.host.frames.receive(&m);
            let answer = m.answer();
            self.rpc.handle_received(now, &mut *self.node, m.src, m.ctrl(), payload, answer);
            // `drive` runs once after the batch (below): its scans of the operation and
            // task tables cost more than handling a message. A batch is at most a receive
            // ring (32), well within the node's notice queue.
            // A burst of putpages must find room as it arrives, not after the burst.
            self.make_room(now);
        }
        if self.rpc.has_deferred() {
            self.rpc.run_deferred(&mut *self.node);
            busy = true;
        }
        if idle && clock.is_none() {
            // Nothing arrived, nothing completed: no input for GMS, nothing to send.
            return false;
        }
        let now = match clock {
            Some(t) => t,
            None => self.tick_clock(),
        };
        // NetRPC's timers (it reads its call records only once its next deadline passed).
        self.rpc.handle_timeouts(now, &mut *self.node);
        // GMS's own are coarse (ms): an idle spin asks the node for them every
        // TIMER_CHECK_NS, not on every pass (its answer scans the operation and task tables).
        let timers = now >= self.timers_at;
        if timers {
            self.timers_at = now + TIMER_CHECK_NS;
        }
        if busy || (timers && self.node.poll_timeout().is_some_and(|t| t <= now)) {
            self.node.drive(now, &mut self.rpc);
        }
        if busy || timers || !self.node.host.lru_inbox.is_empty() {
            busy |= self.lru_step(now);
        }
        busy |= self.flush();
        busy |= self.handle_completions();
        busy
    }

    /// When [`Self::poll`] must run again although no message arrives, if ever: NetRPC's
    /// call deadlines, GMS's operation and task deadlines and queued notices, the global
    /// LRU's epoch timers (at once when this node coordinates and has started no epoch
    /// yet), work left for the next pass, and the inline NIC's own
    /// ([`InlineNative::poll_timeout`]). A caller that sleeps on the link's descriptor
    /// instead of polling wakes by then ([`Self::prepare_wait`], [`Self::end_wait`]). The
    /// node's scrub is not among them: it steps when the node is driven for other reasons.
    pub fn poll_timeout(&self) -> Option<Instant> {
        let now = Instant::now();
        let at = |ns: u64| self.epoch + Duration::from_nanos(ns);
        let pending = !self.node.host.done.is_empty()
            || self.store_done.as_ref().is_some_and(|d| !d.is_empty())
            || !self.node.host.lru_inbox.is_empty()
            || self.rpc.has_deferred();
        let coordinating = self.coordinator() == Some(self.id());
        let lru = self.lru.poll_timeout().map(at).or_else(|| coordinating.then_some(now));
        [
            pending.then_some(now),
            self.rpc.poll_timeout().map(at),
            self.node.poll_timeout().map(at),
            lru,
            self.cpu.as_ref().and_then(|c| c.poll_timeout(now)),
        ]
        .into_iter()
        .flatten()
        .min()
    }

    /// Before the caller sleeps on the link's descriptor: whether it may (`false`: a
    /// packet already waits in the NIC's link, so poll instead). After the sleep,
    /// [`Self::end_wait`].
    pub fn prepare_wait(&self) -> bool {
        self.cpu.as_ref().is_none_or(InlineNative::prepare_wait)
    }

    /// The caller slept: the next [`Self::poll`] reads the clock and runs every timer that
    /// came due meanwhile (an idle pass would otherwise skip them for a few passes).
    pub fn end_wait(&mut self) {
        if let Some(c) = &self.cpu {
            c.end_wait();
        }
        self.clock_in = 0;
        self.timers_at = 0;
    }

    /// Messages received other than heartbeats and global-LRU messages, which come on
    /// their periods whatever the load, plus the requests this node's NIC answered by
    /// itself (one-sided reads, sent or aborted): a caller that spins a while after work
    /// before it sleeps counts these as work, and the periodic ones not. A holder whose
    /// NIC serves every getpage receives no message at all, yet must keep polling: asleep,
    /// each request waits for its wake-up (`bench gms`'s 32 MiB set, 2026-11-29: node 0
    /// saw 27 µs per getpage instead of 13.5).
    pub fn foreground_messages(&self) -> u64 {
        let ep = &self.node.host.frames.ep;
        let answered = ep.counter(Counter::TxAnswers).wrapping_add(ep.counter(Counter::TxAnswersAborted));
        self.stats.messages.saturating_sub(self.node.host.background).wrapping_add(answered)
    }

    /// Read the clock (and give the node its LRU tick).
    fn tick_clock(&mut self) -> u64 {
        self.clock_in = CLOCK_PASSES;
        let now = self.now();
        self.node.set_epoch(self.lru.tick(now));
        now
    }

    /// After a client call that only queued messages (a getpage): send them. The node's
    /// timers and tasks wait for the next poll's `drive` (a getpage arms no task, and its
    /// deadline is milliseconds away); on the read-ahead path this halves the table scans.
    pub(super) fn after_call(&mut self) {
        self.flush();
        self.handle_completions();
    }

    /// After a direct input to the node: drive it and send.
    pub(super) fn after_input(&mut self) {
        let now = self.now();
        self.node.drive(now, &mut self.rpc);
        self.flush();
        self.handle_completions();
    }

    /// Hand queued transmits to the NIC.
    pub(super) fn flush(&mut self) -> bool {
        let mut sent = false;
        while let Some(t) = self.rpc.poll_transmit() {
            let cpu = &mut self.cpu;
            let doorbell = &self.doorbell;
            self.node.host.frames.post(&t, POST_TRIES, |_| match cpu.as_mut() {
                Some(c) => {
                    c.poll();
                }
                None => Self::ring(doorbell),
            });
            if let Some((_, len)) = t.payload {
                self.stats.bytes_out += len as u64;
            }
            sent = true;
        }
        // Frames dropped so far wait for every send posted up to now.
        let frames = &mut self.node.host.frames;
        frames.tag_limbo();
        frames.reap(|_, _| {});
        if sent {
            Self::ring(&self.doorbell);
            // Run the NIC until the sends have left, or until a message for the host has
            // landed (handled at the next pass).
            if let Some(c) = self.cpu.as_mut() {
                let ep = &self.node.host.frames.ep;
                c.run(|| ep.recv_ready());
            }
        }
        sent
    }
}
