// SPDX-License-Identifier: GPL-2.0-only
//! Remove: quiesce the NIC (sends finished, HALT, calls failed) before its frames go; the unload-in-flight test.

#![forbid(unsafe_code)]

use super::control::{detach_frames, device_request};
use super::{now_ns, Device, Shared, BOUND, POLL_MS, SENDS_TIMEOUT_MS};
use crate::net;
use crate::stats::{SliceWriter, STATS};
use crate::sys;
use crate::tpz::gms::prelude::Host;
use crate::tpz::iface::layout::{ctrl, ctrl_word, host_req, Counter, FwState};
use crate::tpz::iface::mem::NicMemory;
use crate::tpz::netrpc::prelude::Mode;
use core::fmt::Write;
use core::sync::atomic::Ordering;
use kernel::prelude::*;

impl Drop for Device {
    fn drop(&mut self) {
        let name = self.pdev.name();
        let s = &self.shared;
        s.closing.store(true, Ordering::Release);
        if let Some(disk) = self.disk.take() {
            // New disk I/O fails from now on; fail what is queued or in flight, then
            // del_gendisk finds no request left.
            if let Some(d) = s.core.lock().node.host.disk.as_ref() {
                let k = &d.counters;
                pr_info!(
                    "{}: /dev/gms0 on GMS: {} reads of unwritten pages (zeros), {} reads over the network, {} from the read-ahead cache ({} prefetches), {} writes stored, {} errors\n",
                    name, k.reads_zero, k.reads_ok, k.reads_cache, k.prefetches, k.writes_ok, k.errors
                );
            }
            let failed = s.core.lock().node.host.disk.as_mut().map_or(0, |d| d.fail_all());
            s.complete_disk();
            if failed > 0 {
                pr_info!("{}: failed {} /dev/gms0 pages still queued or in flight\n", name, failed);
            }
            drop(disk);
        }
        // No handler runs after this returns, so nothing queues the work item again.
        drop(self.irq.take());
        sys::work::flush(&s.deferred_work);
        sys::work::flush(&s.tick_work);
        {
            let core = s.core.lock();
            let (calls, ops) = (core.rpc.calls_in_use(), core.node.ops_in_use());
            if calls + ops > 0 {
                pr_info!(
                    "{}: unloading with {} NetRPC calls and {} GMS operations in flight: they fail\n",
                    name,
                    calls,
                    ops
                );
            }
        }
        let unsent = s.finish_sends();
        if unsent > 0 {
            pr_warn!("{}: {} sends still in flight after {} ms\n", name, unsent, SENDS_TIMEOUT_MS);
        }
        let halted = device_request(&s.ctl, &s.regs, host_req::HALT).is_ok()
            && FwState::from_u32(s.ctl.load(ctrl_word(ctrl::FW_STATE), Ordering::Acquire)) == Some(FwState::Halted);
        s.fail_in_flight(name);
        s.log_counters();
        let mut core = s.core.lock();
        let host = &mut core.node.host;
        if let Some(mem) = host.ep.mem() {
            detach_frames(mem);
        }
        if halted {
            pr_info!(
                "{}: node {} removed: NIC halted, frames freed ({} held by GMS or in use)\n",
                name,
                s.node,
                host.frames_out()
            );
        } else {
            // Leaking is safe; freeing memory the NIC may still write is not.
            let port = host.ep.0.take();
            let tx = core::mem::take(&mut host.tx);
            let frames = port.as_ref().map_or(0, |p| crate::tpz::runtime::FrameMem::count(p.frames()));
            pr_err!("{}: the NIC did not confirm HALT: leaking {} DMA frames\n", name, frames + tx.len());
            core::mem::forget(port);
            core::mem::forget(tx);
        }
        BOUND.fetch_sub(1, Ordering::Relaxed);
    }
}

impl Shared {
    /// Reap completed sends until none is in flight or the time is up; returns how many
    /// are still in flight.
    fn finish_sends(&self) -> usize {
        let mut waited = 0;
        loop {
            let mut core = self.core.lock();
            core.node.host.reap();
            let left = core.node.host.ep.sends_in_flight();
            drop(core);
            if left == 0 || waited >= SENDS_TIMEOUT_MS {
                return left;
            }
            self.ring_nic();
            sys::msleep(POLL_MS);
            waited += POLL_MS;
        }
    }

    /// Fail every NetRPC call and GMS operation still in flight (remove, NIC halted): their
    /// deadlines are moved to now, so continuations and GMS completions run with an error
    /// (a waiter would be woken); what they queue is not sent.
    fn fail_in_flight(&self, name: &CStr) {
        let mut core = self.core.lock();
        let c = &mut *core;
        let before = (c.rpc.calls_in_use(), c.node.ops_in_use());
        for _ in 0..3 {
            c.rpc.run_deferred(&mut c.node);
            c.rpc.handle_timeouts(u64::MAX, &mut c.node);
            c.node.drive(u64::MAX, &mut c.rpc);
            while c.rpc.poll_transmit().is_some() {}
            while c.rpc.poll_event().is_some() {}
        }
        // GMS's background work may have issued calls in the last round: fail those too.
        c.rpc.handle_timeouts(u64::MAX, &mut c.node);
        c.rpc.run_deferred(&mut c.node);
        while c.rpc.poll_transmit().is_some() {}
        while c.rpc.poll_event().is_some() {}
        let after = (c.rpc.calls_in_use(), c.node.ops_in_use());
        if before != (0, 0) {
            pr_info!(
                "{}: {} NetRPC calls and {} GMS operations were in flight at unload: failed ({} calls, {} operations left)\n",
                name,
                before.0,
                before.1,
                after.0,
                after.1
            );
        }
    }

    fn log_counters(&self) {
        let mut buf = [0u8; 768];
        let mut w = SliceWriter::new(&mut buf);
        {
            let core = self.core.lock();
            for c in Counter::ALL {
                let v = core.node.host.ep.counter(c);
                if v != 0 {
                    let _ = write!(w, " {}={}", c.name(), v);
                }
            }
        }
        pr_info!("node {} firmware counters:{}\n", self.node, w.as_str());
        let mut buf = [0u8; 768];
        let mut w = SliceWriter::new(&mut buf);
        STATS.each(|name, v| {
            if v != 0 {
                let _ = write!(w, " {}={}", name, v);
            }
        });
        pr_info!("node {} driver counters:{}\n", self.node, w.as_str());
        let core = self.core.lock();
        let (r, g) = (core.rpc.stats(), core.node.stats());
        pr_info!(
            "node {} netrpc: calls={} served={} replies={} timeouts={} deferred={}; gms: puts={} stored={} gets={} hits_2way={} hits_3way={} misses={} pages_stored={} refused={} held={}\n",
            self.node, r.calls, r.requests_served, r.replies, r.timeouts, r.deferred, g.puts, g.puts_stored, g.gets,
            g.hits_2way, g.hits_3way, g.misses, g.pages_stored, g.puts_refused, core.node.held_count()
        );
    }

    /// Leave `n` nonblocking echo calls in flight to a node that does not answer.
    pub(super) fn leave_in_flight(&self, n: usize) {
        const SILENT_NODE: u16 = 0x3ff;
        let sent = {
            let mut core = self.core.lock();
            let c = &mut *core;
            let mut issued = 0;
            for i in 0..n {
                let Some(reply_to) = c.node.host.solicit() else { break };
                let body = net::Echo::body(i as u32, 0);
                match c.rpc.call::<net::Echo>(now_ns(), &mut c.node, SILENT_NODE, &body, reply_to, Mode::NonBlocking) {
                    Ok(id) => {
                        let _ = c.rpc.push_continuation(id, net::inflight_continuation, 0);
                        issued += 1;
                    }
                    Err(_) => {
                        if let Some(f) = reply_to.caller_frame() {
                            c.node.host.release(*f);
                        }
                        break;
                    }
                }
            }
            // And getpages: those whose directory node is a silent member stay in flight.
            let mut gets = 0;
            for i in 0..n {
                let Some(reply_to) = c.node.host.solicit() else { break };
                let page = crate::tpz::gms::prelude::PageId::new(0xdead, i as u64);
                if c.node.getpage(now_ns(), &mut c.rpc, page, reply_to, Mode::NonBlocking).is_err() {
                    if let Some(f) = reply_to.caller_frame() {
                        c.node.host.release(*f);
                    }
                    break;
                }
                gets += 1;
            }
            pr_info!("left {} echo calls to silent node {} and {} getpages in flight\n", issued, SILENT_NODE, gets);
            c.flush()
        };
        if sent {
            self.ring_nic();
        }
    }
}
