// SPDX-License-Identifier: GPL-2.0-only
//! The driver's counters: module-wide atomics (one NIC per guest), shown read-only in
//! `/sys/module/trapeze/parameters/stats` and printed on unload. The firmware's own
//! counters live in the NIC's control block; the driver prints them on unload.

use crate::sys::param::{modinfo, param_table, show_entry, Show};
use core::fmt::Write;
use core::sync::atomic::{AtomicU64, Ordering};

/// One counter.
pub(crate) struct Counter(AtomicU64);

impl Counter {
    pub(crate) const fn new() -> Self {
        Self(AtomicU64::new(0))
    }
    pub(crate) fn inc(&self) {
        self.add(1);
    }
    pub(crate) fn add(&self, n: u64) {
        self.0.fetch_add(n, Ordering::Relaxed);
    }
    /// A gauge's new value.
    pub(crate) fn set(&self, n: u64) {
        self.0.store(n, Ordering::Relaxed);
    }
    pub(crate) fn get(&self) -> u64 {
        self.0.load(Ordering::Relaxed)
    }
}

/// A struct of [`Counter`]s, each named and described once, and its static: the driver's
/// (`Stats in STATS` here) and the disk's (`crate::blk`).
macro_rules! counters {
    ($ty:ident in $stat:ident: $doc:literal; $($name:ident: $what:literal,)*) => {
        #[doc = $doc]
        pub(crate) struct $ty {
            $(#[doc = $what] pub(crate) $name: $crate::stats::Counter,)*
        }

        /// The counters of this module.
        pub(crate) static $stat: $ty = $ty { $($name: $crate::stats::Counter::new(),)* };

        impl $ty {
            /// Every counter as (name, value).
            pub(crate) fn each(&self, mut f: impl FnMut(&'static str, u64)) {
                $(f(stringify!($name), self.$name.get());)*
            }
        }
    };
}
pub(crate) use counters;

counters! {
    Stats in STATS: "The driver's counters.";
    irqs: "interrupts handled (a receive batch in the hard interrupt)",
    irq_thread_runs: "interrupts whose receive work went on in the IRQ thread (more than a batch)",
    irqs_empty: "interrupts that found no message (merged or early interrupts)",
    rx_after_hold: "messages found on the receive ring just as the handler let the NIC interrupt again (taken at once)",
    rx_msgs: "messages taken from the receive ring",
    rx_answers: "of them, answers a holder's NIC sent from its answer table (reads its host never saw)",
    rx_ns: "ns spent in receive batches (taking messages, their continuations and completions, the sends and disk work they led to): the receive path's CPU, per message rx_ns / rx_msgs",
    rx_unknown: "messages that are not ping or pong",
    rx_budget_spent: "interrupts whose receive batch used its whole budget (the lock was released and draining went on)",
    rx_refused: "messages whose payload the NIC refused (no frame, bad token, DMA)",
    tx_msgs: "messages posted to the send ring",
    tx_ring_full: "sends not posted: send ring full",
    tx_no_frame: "sends not posted: no free transmit frame",
    tx_errors: "send completions with an error status",
    pings_sent: "pings posted",
    pings_answered: "pings answered with a pong",
    pongs_ok: "pongs whose payload matched the ping byte for byte",
    pongs_bad: "pongs with a wrong length, checksum or payload byte",
    pongs_stale: "pongs for a ping no longer waited for",
    bad_nic_access: "NIC-memory accesses outside the BAR (refused)",
    rpc_in: "NetRPC messages handed to the Rpc (requests and replies)",
    rpc_tx: "NetRPC transmits posted",
    rpc_no_frame: "unsolicited payloads refused: no free frame",
    continuations: "NetRPC continuations run from the receive path",
    deferred_work: "deferred-continuation work items run",
    echo_served: "NetRPC echo requests answered",
    heartbeats: "GMS heartbeats received (gms::heartbeat one-way messages; zero-length seq-0 echoes too)",
    echo_ok: "NetRPC echo replies verified (body and payload)",
    echo_bad: "NetRPC echo replies that failed, timed out or did not match",
    gms_put_stored: "GMS putpages stored at another node",
    gms_put_failed: "GMS putpages refused or failed",
    gms_get_ok: "GMS getpages whose page matched what was put",
    gms_get_bad: "GMS getpages that missed, failed or returned other bytes",
    gms_node_failed: "members declared failed (silent for gms_fail_ms; gms::store::liveness)",
    gms_rejoins: "members admitted again: heard after being declared failed, or restarted (a heartbeat with a new incarnation)",
    gms_never_heard: "gms_nodes= peers not heard within gms_fail_ms of the load: not members (never declared failed) until first heard",
    gms_heartbeats_refused: "GMS heartbeats refused by liveness: from a node not in gms_nodes=, or naming this node",
    gms_heartbeats_stale: "GMS heartbeats refused for an incarnation older than the one their sender is alive as (a replay, or a member alternating incarnations)",
    ticker_stalls: "GMS ticks that came more than half the failure timeout late (this guest did not run): members got a fresh grace period",
    lru_msgs: "global-LRU messages received (epoch starts, summaries, plans, next-epoch requests)",
    lru_plans: "global-LRU epoch plans adopted",
    lru_puts_by_plan: "/dev/gms0 putpage targets drawn from the global LRU's plan",
    lru_puts_fallback: "/dev/gms0 putpage targets chosen least loaded (no plan yet, or no usable target drawn)",
    disk_read_ahead: "/dev/gms0 pages read ahead of sequential reads (gms_disk_readahead=)",
    disk_read_ahead_hits: "/dev/gms0 reads served by a page read ahead (a copy held, or a read-ahead under way taken over)",
    disk_getpages: "/dev/gms0 GETPAGES sent: reads of nearby pages one member holds, asked together into their request pages (gms::store::group)",
    disk_getpages_pages: "/dev/gms0 reads carried by GETPAGES",
    disk_getpages_missed: "/dev/gms0 GETPAGES answered with no hit (their reads went on page by page)",
    disk_retries: "/dev/gms0 puts and getpages sent again (no answer, a refusal, a busy target, another view)",
    disk_busy_puts: "/dev/gms0 puts whose target was still registering an earlier copy of the page (put again after a millisecond)",
    disk_replica_fallbacks: "/dev/gms0 reads that went on to the next replica (the one before missed or was stale)",
    disk_under_replicated: "/dev/gms0 copies a write could not place (fewer live members than gms_replicas)",
    disk_rereplicated: "/dev/gms0 replicas copied to another member after their holder was declared failed",
    disk_rereplicate_failed: "/dev/gms0 re-replication copies that failed (fetch, put, or no member for them; a later pass tries again)",
    disk_rereplicate_passes: "/dev/gms0 re-replication passes over the disk completed",
    disk_replicas_short: "/dev/gms0 replicas on failed members that the last re-replication pass met (0: every page has its copies)",
    disk_top_asks: "/dev/gms0 TOPVERSION questions its load asked members before claiming an epoch (gms::store::claim)",
    disk_epochs_refused: "/dev/gms0 loads that took a member's TOPVERSION at gms::store::claim::EPOCH_REACH above the label's epoch, not at the epoch it named (a lying member, or 4,096 loads whose labels all died)",
    disk_lost_maps: "/dev/gms0 floor map pages its load found no copy of: their pages' reads fail (EIO) until each is written again",
    disk_stale_maps: "/dev/gms0 map pages its load read whose copy a member knew a newer write of: taken as unreadable (their pages count as written)",
    disk_ready: "/dev/gms0 loaded: 1 once its store read the volume's label and floor map and claimed it (requests wait until then)",
    disk_meta_lost: "/dev/gms0 meta pages (the volume's label, its floor map) with no copy on a live member, being written again from memory (0: a reload finds the volume)",
    inflight_failed: "calls still in flight at unload whose continuation ran with an error",
}

/// `/dev/gms0`'s pages stored at each member (node id < 16), by this node's writes: where
/// the global LRU placed them.
pub(crate) static PUTS_TO: [Counter; 16] = [const { Counter::new() }; 16];

/// A `fmt::Write` into a byte slice that truncates (at a character boundary).
pub(crate) struct SliceWriter<'a> {
    out: &'a mut [u8],
    len: usize,
}

impl<'a> SliceWriter<'a> {
    pub(crate) fn new(out: &'a mut [u8]) -> Self {
        Self { out, len: 0 }
    }

    /// What was written.
    pub(crate) fn as_str(&self) -> &str {
        core::str::from_utf8(&self.out[..self.len]).unwrap_or("?")
    }
}

impl Write for SliceWriter<'_> {
    fn write_str(&mut self, s: &str) -> core::fmt::Result {
        let room = self.out.len() - self.len;
        let mut n = s.len().min(room);
        while !s.is_char_boundary(n) {
            n -= 1;
        }
        self.out[self.len..self.len + n].copy_from_slice(&s.as_bytes()[..n]);
        self.len += n;
        if n < s.len() {
            Err(core::fmt::Error)
        } else {
            Ok(())
        }
    }
}

impl Show for Stats {
    fn show(out: &mut [u8]) -> usize {
        let mut w = SliceWriter::new(out);
        STATS.each(|name, v| {
            let _ = writeln!(w, "{name}: {v}");
        });
        for (n, c) in PUTS_TO.iter().enumerate().filter(|(_, c)| c.get() > 0) {
            let _ = writeln!(w, "disk_puts_stored_at_node_{n}: {}", c.get());
        }
        w.len
    }
}

param_table!(PARAMS: 1 = [show_entry::<Stats>(c"stats", &crate::THIS_MODULE)]);
modinfo!(PARM_STATS, "parm=stats:driver counters (read-only, text)\0");
