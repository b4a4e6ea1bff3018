// SPDX-License-Identifier: GPL-2.0-only
//! This node as a GMS member: joining `gms_nodes=`, the ticker (heartbeats, failure detection), `/dev/gms0`.

use super::params;
use super::shared::{Dev, GmsBackend, Shared, HEARTBEAT_MS, TICK_MS};
use crate::gms_backend::{self, DiskCore, DiskParams, DiskState};
use crate::net::{self, now_ns};
use crate::stats::STATS;
use crate::sys;
use crate::tpz::gms::heartbeat;
use crate::tpz::gms::store::liveness::Event;
use crate::tpz::gms::store::nodes::MAX_NODE;
use core::sync::atomic::Ordering;
use kernel::prelude::*;
use kernel::sync::Arc;

impl Shared {
    /// The long work item, the GMS ticker, until remove: NetRPC and GMS timeouts and
    /// background work (they run on the receive path too, but a silent member sends
    /// nothing), heartbeats to the members, and failure detection. It wakes at the cores'
    /// next deadline ([`Self::next_tick_ms`]), at least every `TICK_MS`.
    pub(super) fn run_ticker(this: &Arc<Dev>) {
        let mut last_beat = 0u64;
        // This run's incarnation in the GMS heartbeats (never 0).
        let incarnation = sys::random_u64() | 1;
        let mut last_tick = now_ns();
        let mut sleep = TICK_MS;
        while !this.closing.load(Ordering::Acquire) {
            sys::msleep(sleep);
            let now = now_ns();
            // This guest itself did not run for a while (an emulator starved of CPU): its
            // members' silence says nothing about them, so they get a fresh grace period.
            let stalled = now.saturating_sub(last_tick);
            last_tick = now;
            if stalled > this.fail_ms * 1_000_000 / 2 {
                STATS.ticker_stalls.inc();
                for h in this.heard.iter() {
                    if h.load(Ordering::Relaxed) != 0 {
                        h.store(now, Ordering::Relaxed);
                    }
                }
            }
            let beat = now.saturating_sub(last_beat) >= HEARTBEAT_MS * 1_000_000;
            if beat {
                last_beat = now;
            }
            this.tick(now, beat.then_some(incarnation));
            sleep = this.next_tick_ms(now_ns());
        }
    }

    /// Milliseconds until the earliest deadline NetRPC, GMS or the global LRU reports
    /// (their `poll_timeout`s), at least 1 and at most `TICK_MS` (heartbeats and failure
    /// detection need the regular tick).
    fn next_tick_ms(&self, now: u64) -> u32 {
        let next = {
            let c = self.core.lock();
            let store = c.client.as_ref().and_then(|d| d.poll_timeout());
            [c.rpc.poll_timeout(), c.node.poll_timeout(), c.lru.poll_timeout(), store].into_iter().flatten().min()
        };
        match next {
            Some(at) => (at.saturating_sub(now) / 1_000_000).clamp(1, u64::from(TICK_MS)) as u32,
            None => TICK_MS,
        }
    }

    /// Join the GMS members of `gms_nodes=` (if given); how many members.
    pub(super) fn join_gms(&self) -> usize {
        let Some(list) = params::GMS_NODES.get() else {
            return 0;
        };
        let mut ids = [0u16; net::MEMBERS];
        let Some(n) = net::parse_members(list, &mut ids) else {
            pr_err!("gms_nodes={:?}: expected up to {} node ids separated by commas\n", list, net::MEMBERS);
            return 0;
        };
        if !ids[..n].contains(&self.node) {
            pr_err!("gms_nodes={:?} does not list this node ({}): no GMS node\n", list, self.node);
            return 0;
        }
        let sent = {
            let mut core = self.core.lock();
            let c = &mut *core;
            if !set_view(c, now_ns(), &ids[..n]) {
                return 0;
            }
            c.flush()
        };
        let bits = ids[..n].iter().filter(|&&m| usize::from(m) < net::BEAT_NODES).fold(0u64, |b, &m| b | 1 << m);
        self.configured.store(bits, Ordering::Relaxed);
        if sent {
            self.ring_nic();
        }
        pr_info!(
            "gms: node {} joined members {:?} with a budget of {} pages\n",
            self.node,
            &ids[..n],
            self.core.lock().node.budget()
        );
        n
    }

    /// One tick of the GMS ticker (see [`Shared::run_ticker`]).
    /// `beat`: send the members a heartbeat with this incarnation.
    fn tick(&self, now: u64, beat: Option<u64>) {
        let sent = {
            let mut core = self.core.lock();
            let c = &mut *core;
            c.rpc.handle_timeouts(now, &mut c.node);
            c.node.drive(now, &mut c.rpc);
            // Members heard again after they were declared failed, or restarted (a new
            // incarnation), are admitted again — as gmsd does; never another node.
            let (beats, restarts) = c.node.host.take_beats();
            let back = (restarts | (beats & self.failed.load(Ordering::Relaxed)))
                & self.configured.load(Ordering::Relaxed)
                & !(1u64 << (self.node % 64));
            for m in (0..net::BEAT_NODES as u16).filter(|&m| back & (1 << m) != 0) {
                self.rejoin(c, now, m, restarts & (1 << m) != 0);
            }
            let mut members = [0u16; net::MEMBERS];
            let n = c.node.members().ids().len().min(net::MEMBERS);
            members[..n].copy_from_slice(&c.node.members().ids()[..n]);
            for &m in members[..n].iter().filter(|&&m| m != self.node) {
                let heard = self.heard.get(usize::from(m)).map_or(0, |h| h.load(Ordering::Relaxed));
                // Only a member that was heard from can fail: the others may not be up yet.
                if heard != 0 && now.saturating_sub(heard) > self.fail_ms * 1_000_000 {
                    let bit = 1u64 << (m % 64);
                    if self.failed.fetch_or(bit, Ordering::Relaxed) & bit == 0 {
                        STATS.gms_node_failed.inc();
                        pr_warn!("gms: node {} silent for more than {} ms: declared failed\n", m, self.fail_ms);
                        c.node.node_failed(now, &mut c.rpc, m);
                        let mut left = [0u16; net::MEMBERS];
                        let k = c.node.members().len().min(net::MEMBERS);
                        left[..k].copy_from_slice(&c.node.members().ids()[..k]);
                        set_view(c, now, &left[..k]);
                        if let Some(d) = c.client.as_mut() {
                            d.handle_member(now, Event::Failed(m));
                        }
                    }
                } else if let Some(incarnation) = beat {
                    // The GMS heartbeat (one-way; the same message a host `gmsd` sends and
                    // expects): any message from a member refreshes `heard`.
                    let hb = heartbeat::Heartbeat {
                        node: self.node,
                        incarnation,
                        held: c.node.held_count() as u32,
                        budget: c.node.budget() as u32,
                    };
                    let _ = c.rpc.send_oneway(m, heartbeat::OP_HEARTBEAT, &hb.to_bytes(), None);
                }
            }
            c.lru_step(now);
            c.settle();
            gms_backend::issue(c, now);
            c.flush()
        };
        if sent {
            self.ring_nic();
        }
        self.completed.notify_all();
        self.complete_disk();
    }

    /// Member `m` is back: heard after it was declared failed, or `restarted` with a new
    /// incarnation (its pages are gone either way: a restart lost them, a failure had
    /// them dropped from their directories). It is forgotten first if it is still a
    /// member, then added to the view, and the disk puts to it again (re-replication
    /// makes the replicas it held, or that no member could take, again).
    fn rejoin(&self, c: &mut DiskCore, now: u64, m: u16, restarted: bool) {
        self.failed.fetch_and(!(1u64 << (m % 64)), Ordering::Relaxed);
        if let Some(h) = self.heard.get(usize::from(m)) {
            h.store(now.max(1), Ordering::Relaxed);
        }
        STATS.gms_rejoins.inc();
        let how = if restarted { " with a new incarnation" } else { "" };
        pr_info!("gms: node {} is back{}: admitted again\n", m, how);
        // A new incarnation lost its memory; the same one (declared failed while it ran)
        // kept it, and the disk's reads may ask it for the copies it held.
        let event = if restarted { Event::Restarted(m) } else { Event::Joined(m) };
        if c.node.members().contains(m) {
            c.node.node_failed(now, &mut c.rpc, m);
        }
        let mut ids = [0u16; net::MEMBERS];
        let mut k = c.node.members().len().min(net::MEMBERS);
        ids[..k].copy_from_slice(&c.node.members().ids()[..k]);
        if k < net::MEMBERS {
            ids[k] = m;
            k += 1;
        }
        ids[..k].sort_unstable();
        set_view(c, now, &ids[..k]);
        if let Some(d) = c.client.as_mut() {
            d.handle_member(now, event);
        }
    }

    /// `/dev/gms0` with `pages` pages on the GMS backend, putting to the other members.
    pub(super) fn gms_disk(&self, this: &Arc<Dev>, pages: u64) -> Result<crate::blk::GmsDisk> {
        let mut targets = [0u16; net::MEMBERS];
        let (n, replicas) = {
            let mut core = self.core.lock();
            let mut n = 0;
            for &m in core.node.members().ids().iter().filter(|&&m| m != self.node) {
                targets[n] = m;
                n += 1;
            }
            if n == 0 {
                pr_err!("gms_disk_pages= needs gms_nodes= with another member\n");
                return Err(EINVAL);
            }
            drop(core);
            if let Some(&m) =
                Iterator::chain(targets[..n].iter(), core::iter::once(&self.node)).find(|&&m| m > MAX_NODE)
            {
                pr_err!(
                    "gms_nodes=/node=: node {} is past the ids /dev/gms0's store covers (0..={}); gms_disk_pages= needs smaller ids\n",
                    m,
                    MAX_NODE
                );
                return Err(EINVAL);
            }
            let replicas = params::gms_replicas(n + 1);
            if usize::from(replicas) > n {
                pr_err!("gms_replicas={} needs that many other GMS members; gms_nodes= lists {}\n", replicas, n);
                return Err(EINVAL);
            }
            if params::GMS_DISK_READAHEAD.get() > 0 {
                pr_warn!("gms_disk_readahead=: read-ahead is not ported to the store yet; reads are not read ahead\n");
            }
            let degraded_writes = params::GMS_DEGRADED_WRITES.get() == 1;
            if degraded_writes {
                pr_warn!("gms_degraded_writes=1: with fewer live members than gms_replicas= a write is acknowledged with fewer copies (counted in disk_under_replicated)\n");
            }
            let p = DiskParams {
                pages,
                identity: params::gms_disk_id(self.node),
                me: self.node,
                replicas,
                degraded_writes,
                direct_reads: params::GMS_DISK_DIRECT_READS.get() == 1,
                nic_answers: params::GMS_NIC_ANSWERS.get() == 1,
            };
            let state = DiskState::new(&p, &targets[..n])?;
            pr_info!("/dev/gms0: disk identity {:#x} (gms_disk_id=)\n", p.identity);
            core = self.core.lock();
            core.client = Some(state);
            (n, replicas)
        };
        let backend: Arc<dyn crate::blk::PageBackend> = Arc::new(GmsBackend(this.clone()), GFP_KERNEL)?;
        let disk = crate::blk::GmsDisk::new(pages, backend);
        if disk.is_err() {
            self.core.lock().client = None;
        }
        pr_info!(
            "/dev/gms0: {} pages on GMS, written through to {} other member(s), {} copies of each\n",
            pages,
            n,
            replicas
        );
        disk
    }
}

/// Set the GMS view to the members `ids`, with the view number every node (gmsd too)
/// computes from the member set; whether GMS took it.
fn set_view(c: &mut DiskCore, now: u64, ids: &[u16]) -> bool {
    match c.node.set_members(now, &mut c.rpc, heartbeat::view_of(ids), ids) {
        Ok(()) => true,
        Err(e) => {
            pr_err!("gms: set_members: {:?}\n", e);
            false
        }
    }
}
