// SPDX-License-Identifier: GPL-2.0-only
//! The receive path: the MSI-X handler, NetRPC's deferred continuations, draining the ring.

#![forbid(unsafe_code)]

use super::{now_ns, Core, Shared, FRAME_BYTES};
use crate::proto::{Kind, Msg};
use crate::stats::STATS;
use crate::sys::irq::{IrqReturn, ThreadedHandler};
use crate::tpz::endpoint::RecvMsg;
use core::sync::atomic::Ordering;
use kernel::prelude::*;
use kernel::sync::{Arc, ArcBorrow};
use kernel::workqueue::{self, WorkItem};

impl ThreadedHandler for Shared {
    fn handle_irq(this: ArcBorrow<'_, Self>) -> IrqReturn {
        STATS.irqs.inc();
        if this.poll() == 0 {
            STATS.irqs_empty.inc();
        }
        if this.core.lock().rpc.has_deferred() {
            this.queue_deferred(this.into());
        }
        IrqReturn::Handled
    }
}

impl WorkItem for Shared {
    type Pointer = Arc<Shared>;
    /// NetRPC's deferred continuations, in process context (a kworker), with the core
    /// spinlock held like on the receive path.
    fn run(this: Arc<Shared>) {
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
            c.flush()
        };
        if sent {
            this.ring_nic();
        }
        this.complete_disk();
    }
}

impl Shared {
    pub(super) fn queue_deferred(&self, this: Arc<Shared>) {
        if !self.closing.load(Ordering::Acquire) {
            // Already queued: that run will see this continuation too.
            let _ = workqueue::system().enqueue::<Arc<Shared>, 0>(this);
        }
    }

    /// Take every message the NIC has delivered (ping/pong here, everything else to
    /// NetRPC, whose continuations run now), then timeouts and GMS's background work, and
    /// send what NetRPC queued; returns how many messages.
    pub(super) fn poll(&self) -> usize {
        let mut core = self.core.lock();
        let c = &mut *core;
        let now = now_ns();
        c.node.host.reap();
        let mut n = 0;
        let mut sent = false;
        while let Some(m) = c.node.host.ep.poll_recv() {
            n += 1;
            STATS.rx_msgs.inc();
            if Msg::parse(m.ctrl()).is_some() {
                sent |= self.handle_msg(c, &m);
                c.node.host.ep.release_recv(None);
            } else {
                STATS.rpc_in.inc();
                if let Some(h) = self.heard.get(usize::from(m.src)) {
                    h.store(now.max(1), Ordering::Relaxed);
                }
                let payload = c.node.host.receive(&m);
                c.rpc.handle_message(now, &mut c.node, m.src, m.ctrl(), payload);
                c.node.drive(now, &mut c.rpc);
            }
        }
        if c.node.host.lru_queued > 0 {
            c.lru_step(now);
        }
        c.rpc.handle_timeouts(now, &mut c.node);
        c.node.drive(now, &mut c.rpc);
        Self::issue_disk(c, now);
        Self::issue_prefetches(c, now);
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

    /// Handle one ping or pong; whether a reply was posted.
    fn handle_msg(&self, core: &mut Core, m: &RecvMsg) -> bool {
        if m.payload_refused() {
            STATS.rx_refused.inc();
        }
        let host = &core.node.host;
        let frame = host.slot_frame(m.slot).unwrap_or(0);
        let payload_ok = !m.payload_refused() && !m.via_ipt() && m.payload_len as usize <= FRAME_BYTES;
        match Msg::parse(m.ctrl()) {
            Some(msg) if msg.kind == Kind::Ping => self.answer_ping(core, m, &msg, frame, payload_ok),
            Some(msg) => {
                self.check_pong(core, m, &msg, frame, payload_ok);
                false
            }
            None => {
                STATS.rx_unknown.inc();
                pr_info!(
                    "message from node {}: {} control bytes, {} payload bytes (not ours)\n",
                    m.src,
                    m.ctrl_len,
                    m.payload_len
                );
                false
            }
        }
    }
}
