// SPDX-License-Identifier: GPL-2.0-only
//! Remove: quiesce the NIC (sends finished, HALT, calls failed) before its frames go.

use super::control::{detach_frames, device_request, POLL_MS};
use super::shared::{Device, Shared, BOUND, SENDS_TIMEOUT_MS};
use crate::stats::{SliceWriter, STATS};
use crate::sys;
use crate::sys::work::Worked;
use crate::tpz::iface::layout::{ctrl, ctrl_word, host_req, Counter, FwState, LinkCounter, LINK_KEYED};
use crate::tpz::iface::mem::NicMemory;
use core::fmt::Write;
use core::sync::atomic::Ordering;
use kernel::prelude::*;

impl Drop for Device {
    fn drop(&mut self) {
        let name = self.pdev.name();
        let s = &self.shared;
        s.closing.store(true, Ordering::Release);
        // The disk stays until the NIC is quiesced: its pages lent to the NIC (a read's
        // armed IPT entry, a write's send) are taken back first.
        let disk = self.disk.take();
        if disk.is_some() {
            // New disk I/O fails from now on; fail what is queued or in flight, so that
            // del_gendisk finds no request left once the lent pages are back.
            if let Some(d) = s.core.lock().client.as_ref() {
                let k = &d.counters;
                pr_info!(
                    "{}: /dev/gms0 on GMS: {} reads of unwritten pages (zeros), {} reads over the network, {} writes stored, {} errors, {} writes with no room (ENOSPC), {} writes refused for too few live members\n",
                    name, k.reads_zero, k.reads_ok, k.writes_ok, k.errors, k.full, k.too_few
                );
            }
            let failed = {
                let mut core = s.core.lock();
                let c = &mut *core;
                c.client.as_mut().map_or(0, |d| d.fail_all(&mut c.node.host))
            };
            s.complete_disk();
            if failed > 0 {
                pr_info!("{}: failed {} /dev/gms0 pages still queued or in flight\n", name, failed);
            }
        }
        // No handler runs after this returns, so nothing queues the work item again.
        drop(self.irq.take());
        Worked::flush(s);
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
        if let Some(disk) = disk {
            let (back, leaked) = s.core.lock().node.host.reclaim_lent();
            s.complete_disk();
            if back > 0 {
                pr_info!("{}: took back {} /dev/gms0 pages still lent to the NIC\n", name, back);
            }
            if leaked > 0 {
                // Their requests never end: del_gendisk waits for them rather than hand
                // the block layer pages the NIC may still write.
                pr_err!("{}: {} /dev/gms0 pages stay lent to a NIC that kept writing into them\n", name, leaked);
            }
            drop(disk);
        }
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
        // The disk's failed operations give their frames back (its pages were failed).
        c.settle();
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

    /// A frame of its own: its two text buffers stay off the stack of `drop`, whose other
    /// calls go deep (completing the disk's pages issues its backlog).
    #[inline(never)]
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
        self.log_link_counters();
        let core = self.core.lock();
        let (r, g) = (core.rpc.stats(), core.node.stats());
        pr_info!(
            "node {} netrpc: calls={} served={} replies={} timeouts={} deferred={} foreign={}; gms: puts={} stored={} gets={} hits_2way={} hits_3way={} misses={} pages_stored={} refused={} held={} unentitled={} reregistered={}\n",
            self.node, r.calls, r.requests_served, r.replies, r.timeouts, r.deferred,
            r.foreign_replies + r.foreign_requests, g.puts, g.puts_stored, g.gets, g.hits_2way, g.hits_3way, g.misses,
            g.pages_stored, g.puts_refused, core.node.held_count(), g.unentitled(), g.reregistered
        );
        pr_info!(
            "node {} gms refused from senders not entitled: rejected_gets={} rejected_puts={} rejected_putdones={} rejected_updates={} rejected_removes={} rejected_discards={} rejected_drops={} rejected_heartbeats={}\n",
            self.node, g.rejected_gets, g.rejected_puts, g.rejected_putdones, g.rejected_updates, g.rejected_removes,
            g.rejected_discards, g.rejected_drops, g.rejected_heartbeats
        );
    }

    /// The link's refusals, every one by name, zero or not (the NIC device publishes them
    /// in the control block, current after the HALT that came before): replays, stale
    /// incarnations, forged trailers and MAC failures never reach the firmware, so the
    /// firmware's counters cannot show them. Counted since the NIC was created.
    #[inline(never)]
    fn log_link_counters(&self) {
        let mut buf = [0u8; 384];
        let mut w = SliceWriter::new(&mut buf);
        for c in LinkCounter::ALL {
            let _ = write!(w, " {}={}", c.name(), self.ctl.load_u64(c.offset()));
        }
        let keyed = self.ctl.load_relaxed(ctrl_word(ctrl::LINK_FLAGS)) & LINK_KEYED != 0;
        pr_info!(
            "node {} link ({}) refused:{}\n",
            self.node,
            if keyed { "keyed" } else { "no cluster key" },
            w.as_str()
        );
    }
}
