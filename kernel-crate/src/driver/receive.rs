// SPDX-License-Identifier: GPL-2.0-only
//! The receive path: the MSI-X handler (a batch in the hard interrupt, the rest in its
//! thread), NetRPC's deferred continuations, draining the ring.

use super::shared::{Dev, Shared};
use crate::gms_backend;
use crate::net::now_ns;
use crate::selftest;
use crate::stats::STATS;
use crate::sys::irq::{HardReturn, IrqReturn, ThreadedHandler};
use crate::sys::work::Worked;
use crate::tpz::iface::layout::{ctrl, ctrl_word};
use crate::tpz::iface::mem::NicMemory;
use core::sync::atomic::Ordering;
use kernel::sync::{Arc, ArcBorrow};

/// Messages taken off the receive ring per hold of the core lock: one ring's worth (also
/// what the host's global-LRU inbox holds).
const RX_BUDGET: usize = crate::net::LRU_INBOX;

impl ThreadedHandler for Dev {
    /// One batch in the hard interrupt (the papers' short completion path: no thread to
    /// wake between a reply and the request it completes). While it runs the NIC raises
    /// no receive interrupt (`IRQ_HOLD`); the hold ends, then the ring is looked at once
    /// more, so a message the NIC made ready just before it saw the hold end is not left
    /// waiting. More than a batch: the thread goes on ([`Self::handle_irq`]), hold on.
    fn handle_hard(this: ArcBorrow<'_, Self>) -> HardReturn {
        STATS.irqs.inc();
        this.hold_irqs(true);
        let n = this.poll();
        if n == RX_BUDGET {
            STATS.rx_budget_spent.inc();
            return HardReturn::WakeThread;
        }
        this.hold_irqs(false);
        let m = this.poll();
        if m > 0 {
            STATS.rx_after_hold.inc();
            this.hold_irqs(true);
            return HardReturn::WakeThread;
        }
        if n == 0 {
            STATS.irqs_empty.inc();
        }
        Shared::after_irq(this);
        HardReturn::Handled
    }

    /// What one hard-interrupt batch left: batches until the ring is empty (the lock is
    /// released between them, so a flood delays the others' work by one batch at most),
    /// then the hold ends as in [`Self::handle_hard`].
    fn handle_irq(this: ArcBorrow<'_, Self>) -> IrqReturn {
        STATS.irq_thread_runs.inc();
        loop {
            let n = this.poll();
            if n == RX_BUDGET {
                STATS.rx_budget_spent.inc();
                continue;
            }
            if n > 0 {
                continue;
            }
            this.hold_irqs(false);
            if this.poll() == 0 {
                break;
            }
            STATS.rx_after_hold.inc();
            this.hold_irqs(true);
        }
        Shared::after_irq(this);
        IrqReturn::Handled
    }
}

impl Shared {
    /// NetRPC continuations deferred to process context go to the short work item.
    fn after_irq(this: ArcBorrow<'_, Dev>) {
        if this.core.lock().rpc.has_deferred() {
            Shared::queue_deferred(this.into());
        }
    }

    /// Tell the NIC whether this node is taking messages off its receive ring anyway
    /// (`ctrl::IRQ_HOLD`; the store is `SeqCst`: it comes before the next look at the ring).
    fn hold_irqs(&self, on: bool) {
        self.ctl.store(ctrl_word(ctrl::IRQ_HOLD), u32::from(on), Ordering::SeqCst);
    }

    /// The short work item: NetRPC's deferred continuations, in process context (a
    /// kworker), with the core spinlock held like on the receive path.
    pub(super) fn run_deferred(this: &Arc<Dev>) {
        if this.closing.load(Ordering::Acquire) {
            return;
        }
        STATS.deferred_work.inc();
        let sent = {
            let mut core = this.core.lock();
            let c = &mut *core;
            c.node.host.in_work = true;
            c.rpc.run_deferred(&mut c.node);
            c.node.host.in_work = false;
            c.node.drive(now_ns(), &mut c.rpc);
            c.settle();
            c.flush()
        };
        if sent {
            this.ring_nic();
        }
        this.complete_disk();
    }

    pub(super) fn queue_deferred(this: Arc<Dev>) {
        if !this.closing.load(Ordering::Acquire) {
            // Already queued: that run will see this continuation too.
            Worked::queue_short(this);
        }
    }

    /// Take the messages the NIC has delivered, at most [`RX_BUDGET`] (the self-tests'
    /// ping/pong to them, everything else to NetRPC, whose continuations run now), then
    /// timeouts and GMS's background work, the disk's completions and backlog, and send
    /// what NetRPC queued; returns how many messages (the budget: there may be more).
    pub(super) fn poll(&self) -> usize {
        let start = now_ns();
        let n = self.poll_batch();
        STATS.rx_ns.add(now_ns().saturating_sub(start));
        n
    }

    fn poll_batch(&self) -> usize {
        let mut core = self.core.lock();
        let c = &mut *core;
        let now = now_ns();
        c.node.host.reap();
        let mut n = 0;
        let mut sent = false;
        while n < RX_BUDGET {
            let Some(m) = c.node.host.ep.poll_recv() else { break };
            n += 1;
            STATS.rx_msgs.inc();
            if let Some(replied) = selftest::on_message(c, &m) {
                sent |= replied;
                c.node.host.ep.release_recv(None);
            } else {
                STATS.rpc_in.inc();
                // Any message from a member keeps it alive (only heartbeats make it one).
                if let Some(l) = c.node.host.liveness.as_mut() {
                    l.handle_heard(now, m.src);
                }
                let payload = c.node.host.receive(&m);
                let answer = m.answer();
                if answer.is_some() {
                    STATS.rx_answers.inc();
                }
                c.rpc.handle_received(now, &mut c.node, m.src, m.ctrl(), payload, answer);
                c.node.drive(now, &mut c.rpc);
            }
        }
        if c.node.host.lru_queued > 0 {
            c.lru_step(now);
        }
        c.rpc.handle_timeouts(now, &mut c.node);
        c.node.drive(now, &mut c.rpc);
        c.settle();
        gms_backend::issue(c, now);
        sent |= c.flush();
        drop(core);
        if sent {
            self.ring_nic();
        }
        if n > 0 {
            self.completed.notify_all();
        }
        self.complete_disk();
        n
    }
}
