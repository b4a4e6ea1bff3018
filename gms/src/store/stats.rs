// SPDX-License-Identifier: GPL-2.0-only
//! The store's counters: what it did, for a runtime's status and its tests.

/// What a store did (runtimes publish them: the kernel's `stats`, `gms stat`).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct StoreStats {
    pub writes: u64,
    pub reads: u64,
    pub zero_reads: u64,
    pub puts: u64,
    pub gets: u64,
    /// Puts and gets sent again after no answer, a refusal, a busy target or another
    /// view; of them, the puts whose target was busy with an earlier copy of the page.
    pub retries: u64,
    pub busy_puts: u64,
    /// Reads that went on to another replica or the directory.
    pub fallbacks: u64,
    /// Degraded writes acknowledged with fewer copies than configured.
    pub under_replicated: u64,
    /// Replicas made again after their holder failed.
    pub repaired: u64,
    pub failed_writes: u64,
    pub failed_reads: u64,
    /// Of the failures: pages whose every copy was gone.
    pub lost: u64,
    /// Passes of the repair scan over the volume completed, and the lost replicas the
    /// last one met and did not make again (0: every page it scanned has its copies).
    pub repair_passes: u64,
    pub repair_short: u64,
    /// Of a write's puts, those whose target the global LRU's plan drew, and those kept
    /// on the replica's holder (a rewrite in place, [`super::record`]: no stray left).
    pub puts_by_plan: u64,
    pub puts_kept: u64,
    /// Read-ahead getpages started ([`super::ahead`]), and user reads served by one.
    pub ahead_reads: u64,
    pub ahead_hits: u64,
    /// `TOPVERSION` questions a load asked before its claim ([`super::claim`]), and the map
    /// pages it read whose copy a member knew a newer write of (taken as unreadable), and
    /// the map pages whose floors it lost so (or with no copy left): [`super::volume`].
    pub top_asks: u64,
    /// Loads that took a member's answer at [`super::claim::EPOCH_REACH`] above the meta
    /// pages' epoch, not at the epoch it named.
    pub epochs_refused: u64,
    pub stale_maps: u64,
    pub lost_maps: u64,
    /// `GETPAGES` sent ([`super::group`]), the reads they carried, and those answered
    /// with no hit (their reads went on page by page).
    pub group_gets: u64,
    pub group_reads: u64,
    pub group_misses: u64,
}

impl StoreStats {
    pub const ZERO: StoreStats = StoreStats {
        writes: 0,
        reads: 0,
        zero_reads: 0,
        puts: 0,
        gets: 0,
        retries: 0,
        busy_puts: 0,
        fallbacks: 0,
        under_replicated: 0,
        repaired: 0,
        failed_writes: 0,
        failed_reads: 0,
        lost: 0,
        repair_passes: 0,
        repair_short: 0,
        puts_by_plan: 0,
        puts_kept: 0,
        ahead_reads: 0,
        ahead_hits: 0,
        top_asks: 0,
        epochs_refused: 0,
        stale_maps: 0,
        lost_maps: 0,
        group_gets: 0,
        group_reads: 0,
        group_misses: 0,
    };

    /// Add `o`'s counters to these (a runtime's total over several stores).
    pub fn accumulate(&mut self, o: &StoreStats) {
        self.writes += o.writes;
        self.reads += o.reads;
        self.zero_reads += o.zero_reads;
        self.puts += o.puts;
        self.gets += o.gets;
        self.retries += o.retries;
        self.busy_puts += o.busy_puts;
        self.fallbacks += o.fallbacks;
        self.under_replicated += o.under_replicated;
        self.repaired += o.repaired;
        self.failed_writes += o.failed_writes;
        self.failed_reads += o.failed_reads;
        self.lost += o.lost;
        self.repair_passes += o.repair_passes;
        self.repair_short += o.repair_short;
        self.puts_by_plan += o.puts_by_plan;
        self.puts_kept += o.puts_kept;
        self.ahead_reads += o.ahead_reads;
        self.ahead_hits += o.ahead_hits;
        self.top_asks += o.top_asks;
        self.epochs_refused += o.epochs_refused;
        self.stale_maps += o.stale_maps;
        self.lost_maps += o.lost_maps;
        self.group_gets += o.group_gets;
        self.group_reads += o.group_reads;
        self.group_misses += o.group_misses;
    }
}
