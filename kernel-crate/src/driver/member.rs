// SPDX-License-Identifier: GPL-2.0-only
//! This node as a GMS member: joining `gms_nodes=`, the ticker (heartbeats, timeouts),
//! membership from `gms::store::liveness` (the policy `gmsd` shares), `/dev/gms0`.
//!
//! Who is a member is liveness's alone: a `gms_nodes=` peer becomes one when first heard
//! in a heartbeat, is declared failed after `gms_fail_ms` of silence, and is admitted
//! again when heard again (a new incarnation: restarted, its memory gone). A peer never
//! heard is never a member (and never "failed"): puts are never aimed at a node that
//! never started. The driver only maps each [`Event`] onto GMS's view
//! (`node_failed`, `set_members`) and the disk's store ([`DiskState::handle_member`]);
//! the view is always this node and liveness's members. Probe waits for liveness to
//! settle ([`Shared::settle`]) so that what runs at load (the disk's volume load, the
//! self-tests) sees the cluster that is up.

use super::params;
use super::shared::{Dev, GmsBackend, Shared, HEARTBEAT_MS, TICK_MS};
use crate::gms_backend::{self, DiskCore, DiskParams, DiskState};
use crate::net::{self, now_ns};
use crate::stats::STATS;
use crate::sys;
use crate::tpz::gms::heartbeat;
use crate::tpz::gms::store::liveness::{Event, Liveness, LivenessConfig, LivenessError, Peer};
use crate::tpz::gms::store::StoreConfig;
use core::sync::atomic::Ordering;
use kernel::prelude::*;
use kernel::sync::Arc;

impl Shared {
    /// The long work item, the GMS ticker, until remove: NetRPC and GMS timeouts and
    /// background work (they run on the receive path too, but a silent member sends
    /// nothing), liveness (heartbeats, failures, joins). It wakes at the cores' next
    /// deadline ([`Self::next_tick_ms`]), at least every `TICK_MS`.
    pub(super) fn run_ticker(this: &Arc<Dev>) {
        let mut settled = false;
        let mut sleep = TICK_MS;
        while !this.closing.load(Ordering::Acquire) {
            sys::msleep(sleep);
            this.tick(now_ns(), &mut settled);
            sleep = this.next_tick_ms(now_ns());
        }
    }

    /// Milliseconds until the earliest deadline NetRPC, GMS, the global LRU, the disk's
    /// store or liveness reports (their `poll_timeout`s), at least 1 and at most `TICK_MS`.
    fn next_tick_ms(&self, now: u64) -> u32 {
        let next = {
            let c = self.core.lock();
            let store = c.client.as_ref().and_then(|d| d.poll_timeout());
            let live = c.node.host.liveness.as_ref().map(|l| l.poll_timeout());
            [c.rpc.poll_timeout(), c.node.poll_timeout(), c.lru.poll_timeout(), store, live].into_iter().flatten().min()
        };
        match next {
            Some(at) => (at.saturating_sub(now) / 1_000_000).clamp(1, u64::from(TICK_MS)) as u32,
            None => TICK_MS,
        }
    }

    /// Join the GMS members of `gms_nodes=` (if given): liveness over the others, and a
    /// view of this node alone until they are heard. How many nodes `gms_nodes=` lists.
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
        let mut peers = [0u16; net::MEMBERS];
        let mut k = 0;
        for &m in ids[..n].iter().filter(|&&m| m != self.node) {
            peers[k] = m;
            k += 1;
        }
        let cfg = LivenessConfig { interval_ns: HEARTBEAT_MS * 1_000_000, dead_after_ns: self.fail_ms * 1_000_000 };
        // This run's incarnation in the GMS heartbeats (never 0): the wall clock, so that a
        // reload's is higher and its peers take it at once (a lower one waits until the old
        // one has been silent for the failure timeout: `gms::store::liveness`).
        let table = match Liveness::new(self.node, sys::real_ns() | 1, &peers[..k], cfg, now_ns()) {
            Ok(t) => t,
            Err(e) => {
                // `params::check` refused out-of-range ids in `gms_nodes=`; `node=` may be one.
                let why = match e {
                    LivenessError::OutOfRange(_) => "a node id past the ids GMS liveness covers (0..=63)",
                    LivenessError::TooManyPeers | LivenessError::SelfAsPeer => "not a list of peers",
                };
                pr_err!("gms_nodes={:?} with node={}: {}: no GMS node\n", list, self.node, why);
                return 0;
            }
        };
        let Ok(table) = KBox::new(table, GFP_KERNEL) else {
            pr_err!("gms: no memory for the liveness table: no GMS node\n");
            return 0;
        };
        let sent = {
            let mut core = self.core.lock();
            let c = &mut *core;
            c.node.host.liveness = Some(table);
            if !set_view(c, now_ns(), &[self.node]) {
                c.node.host.liveness = None;
                return 0;
            }
            c.flush()
        };
        if sent {
            self.ring_nic();
        }
        pr_info!(
            "gms: node {} joined members {:?} with a budget of {} pages (each a member once heard)\n",
            self.node,
            &ids[..n],
            self.core.lock().node.budget()
        );
        n
    }

    /// Wait (probe, process context) until liveness has settled: every `gms_nodes=` peer
    /// heard and its join handled by the ticker (in the view and the members a disk
    /// starts with), or `gms_fail_ms` since the join (the ticker and the receive path run
    /// meanwhile). Bounded by `gms_fail_ms` and a second.
    pub(super) fn settle(&self) {
        let start = now_ns();
        let bound = (self.fail_ms + 1_000) * 1_000_000;
        loop {
            let now = now_ns();
            let settled = self.core.lock().node.host.liveness.as_ref().map_or(true, |l| l.settled(now));
            if settled || now.saturating_sub(start) > bound || self.is_closing() {
                return;
            }
            sys::msleep(20);
        }
    }

    /// One tick of the GMS ticker (see [`Shared::run_ticker`]). `settled`: whether the
    /// peers never heard were reported already.
    fn tick(&self, now: u64, settled: &mut bool) {
        let sent = {
            let mut core = self.core.lock();
            let c = &mut *core;
            c.rpc.handle_timeouts(now, &mut c.node);
            c.node.drive(now, &mut c.rpc);
            let mut beat = None;
            let mut peers = [0u16; net::MEMBERS];
            let mut np = 0;
            if let Some(l) = c.node.host.liveness.as_mut() {
                let stalls = l.stalls;
                l.handle_timeout(now);
                if l.stalls != stalls {
                    // This guest did not run for a while (an emulator starved of CPU):
                    // liveness gave the members a fresh grace period.
                    STATS.ticker_stalls.inc();
                }
                if !*settled && l.settled(now) {
                    *settled = true;
                    for (m, _) in l.peers().filter(|(_, p)| *p == Peer::Unheard) {
                        STATS.gms_never_heard.inc();
                        pr_warn!(
                            "gms: node {} (gms_nodes=) not heard within {} ms of the load: not a member until it is\n",
                            m,
                            self.fail_ms
                        );
                    }
                }
                if l.poll_beat(now) {
                    beat = Some(l.incarnation());
                    for (m, _) in l.peers() {
                        peers[np] = m;
                        np += 1;
                    }
                }
            }
            while let Some(e) = c.node.host.liveness.as_mut().and_then(|l| l.poll_event()) {
                self.on_member(c, now, e);
            }
            if let Some(incarnation) = beat {
                // The GMS heartbeat (one-way; the same message a host `gmsd` sends and
                // expects), to every configured peer: one not heard yet, or declared
                // failed, learns of this node from it.
                let hb = heartbeat::Heartbeat {
                    node: self.node,
                    incarnation,
                    held: c.node.held_count() as u32,
                    budget: c.node.budget() as u32,
                };
                for &m in &peers[..np] {
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

    /// A membership change from liveness: GMS's view becomes this node and liveness's
    /// members, and the disk's store is told. A member that failed is `node_failed`
    /// (its directory entries dropped, operations waiting on it failed); one that is back
    /// is forgotten first if GMS still has it (a restart lost its memory), then added.
    fn on_member(&self, c: &mut DiskCore, now: u64, e: Event) {
        match e {
            Event::Failed(m) => {
                STATS.gms_node_failed.inc();
                pr_warn!("gms: node {} silent for more than {} ms: declared failed\n", m, self.fail_ms);
                c.node.node_failed(now, &mut c.rpc, m);
            }
            Event::Joined(m) | Event::Restarted(m) => {
                let bit = 1u64 << (m % 64);
                if self.admitted.fetch_or(bit, Ordering::Relaxed) & bit == 0 {
                    pr_info!("gms: node {} heard: a member\n", m);
                } else {
                    STATS.gms_rejoins.inc();
                    let how = if matches!(e, Event::Restarted(_)) { " with a new incarnation" } else { "" };
                    pr_info!("gms: node {} is back{}: admitted again\n", m, how);
                }
                c.node.member_back(now, &mut c.rpc, m);
            }
        }
        let mut ids = [0u16; net::MEMBERS];
        let k = view_ids(c, self.node, &mut ids);
        set_view(c, now, &ids[..k]);
        if let Some(d) = c.client.as_mut() {
            d.handle_member(now, e);
        }
    }

    /// `/dev/gms0` with `pages` pages on the GMS backend, putting to the other members.
    /// `gms_replicas=` is checked against the peers `gms_nodes=` lists; the store starts
    /// with the ones liveness has heard (probe waited for it to settle) and follows its
    /// events from then on. With fewer members than replicas, writes fail as the store
    /// refuses them (`TooFewMembers`), until enough are heard.
    pub(super) fn gms_disk(&self, this: &Arc<Dev>, pages: u64) -> Result<crate::blk::GmsDisk> {
        let peers = self.core.lock().node.host.liveness.as_ref().map_or(0, |l| l.peers().count());
        if peers == 0 {
            pr_err!("gms_disk_pages= needs gms_nodes= with another member\n");
            return Err(EINVAL);
        }
        let replicas = params::gms_replicas(peers + 1);
        if usize::from(replicas) > peers {
            pr_err!("gms_replicas={} needs that many other GMS members; gms_nodes= lists {}\n", replicas, peers);
            return Err(EINVAL);
        }
        let degraded_writes = params::GMS_DEGRADED_WRITES.get() == 1;
        if degraded_writes {
            pr_warn!("gms_degraded_writes=1: with fewer live members than gms_replicas= a write is acknowledged with fewer copies (counted in disk_under_replicated)\n");
        }
        let p = DiskParams {
            pages,
            identity: params::gms_disk_id(self.node),
            me: self.node,
            store: StoreConfig {
                replicas,
                degraded_writes,
                direct_reads: params::GMS_DISK_DIRECT_READS.get() == 1,
                nic_answers: params::GMS_NIC_ANSWERS.get() == 1,
                // Checked at load: 0..=MAX_READAHEAD.
                read_ahead: u8::try_from(params::GMS_DISK_READAHEAD.get()).unwrap_or(0),
                ..gms_backend::STORE_CONFIG
            },
        };
        let mut state = DiskState::new(&p, &[])?;
        pr_info!("/dev/gms0: disk identity {:#x} (gms_disk_id=)\n", p.identity);
        let live = {
            // The members now, and every event after, under one hold of the lock: the
            // ticker's events go to the disk from here on.
            let mut core = self.core.lock();
            let c = &mut *core;
            let now = now_ns();
            let mut ids = [0u16; net::MEMBERS];
            let k = view_ids(c, self.node, &mut ids);
            for &m in ids[..k].iter().filter(|&&m| m != self.node) {
                state.handle_member(now, Event::Joined(m));
            }
            c.client = Some(state);
            k - 1
        };
        if live < usize::from(replicas) {
            pr_warn!(
                "/dev/gms0: {} of the {} other members in gms_nodes= heard; writes fail until gms_replicas={} of them are\n",
                live,
                peers,
                replicas
            );
        }
        let backend: Arc<dyn crate::blk::PageBackend> = Arc::new(GmsBackend(this.clone()), GFP_KERNEL)?;
        let disk = crate::blk::GmsDisk::new(c"gms0", pages, backend);
        if disk.is_err() {
            self.core.lock().client = None;
        }
        pr_info!(
            "/dev/gms0: {} pages on GMS, written through to {} other member(s) ({} heard now), {} copies of each\n",
            pages,
            peers,
            live,
            replicas
        );
        disk
    }
}

/// GMS's view: this node `me` and liveness's members, sorted, into `ids`; how many.
fn view_ids(c: &DiskCore, me: u16, ids: &mut [u16; net::MEMBERS]) -> usize {
    ids[0] = me;
    let mut k = 1;
    if let Some(l) = c.node.host.liveness.as_ref() {
        for m in l.members().iter() {
            if let Some(slot) = ids.get_mut(k) {
                *slot = m;
                k += 1;
            }
        }
    }
    ids[..k].sort_unstable();
    k
}

/// Set the GMS view to the members `ids`, with the view number every node (gmsd too)
/// computes from the member set and the members' incarnations (`Liveness::view`: a view
/// of an earlier run never matches); whether GMS took it.
fn set_view(c: &mut DiskCore, now: u64, ids: &[u16]) -> bool {
    let view = c.node.host.liveness.as_ref().map_or_else(|| heartbeat::view_of(ids), |l| l.view(ids));
    match c.node.set_members(now, &mut c.rpc, view, ids) {
        Ok(()) => true,
        Err(e) => {
            pr_err!("gms: set_members: {:?}\n", e);
            false
        }
    }
}
