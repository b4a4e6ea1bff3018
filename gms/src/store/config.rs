// SPDX-License-Identifier: GPL-2.0-only
//! How a store behaves: its replicas, retries and delays, read routes, read-ahead and
//! grouping, set by the runtime (the kernel's module parameters, gmsd's options).

/// How the store behaves.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct StoreConfig {
    /// Copies of each page, on distinct members (1..=[`crate::replica::MAX_REPLICAS`]).
    pub replicas: u8,
    /// With fewer live members than `replicas`, acknowledge a write with the copies it
    /// could place (counted in [`super::StoreStats::under_replicated`]) instead of refusing it.
    pub degraded_writes: bool,
    /// How long a write's replica is put again after puts that got no answer, met another
    /// view or a busy target, before the write fails: longer than a dead member takes to
    /// be declared failed.
    pub write_window_ns: u64,
    /// The pause before a put or read goes again after a refusal or a miss that may be
    /// temporary.
    pub retry_delay_ns: u64,
    /// The pause before a put goes again after its target answered busy: still
    /// registering an earlier copy of the page with its directory node (a round trip
    /// or two), as a page written again at once finds it.
    pub busy_delay_ns: u64,
    /// Tries of one replica's getpage that got no answer before the read moves on.
    pub read_tries: u8,
    /// Passes over the replicas a read makes while a site of the newest data is still
    /// a live member (its copy may be registering with a new directory node).
    pub read_passes: u8,
    /// Rounds in which every target refused before a write fails with
    /// [`super::StoreError::NoSpace`].
    pub full_after: u8,
    /// Reads go to the holder the store knows (two messages), not the directory node.
    pub direct_reads: bool,
    /// Reads name the holder's NIC answer entry (one-sided reads).
    pub nic_answers: bool,
    /// Re-replications in flight at most, and the least time between two starts (ns).
    pub repair_in_flight: u8,
    pub repair_gap_ns: u64,
    /// Bytes of a page (the runtime's frames hold one each).
    pub page_bytes: u32,
    /// Pages read ahead of sequential reads (0: off; at most [`super::ahead::MAX_AHEAD`]).
    pub read_ahead: u8,
    /// Reads asked together in one `GETPAGES` at most ([`super::group`]; 0 or 1: each alone; at
    /// most `GETPAGES_MAX`): the pages one reply to the runtime's NIC holds.
    pub group_pages: u8,
}

impl Default for StoreConfig {
    fn default() -> Self {
        Self::DEFAULT
    }
}

impl StoreConfig {
    /// The defaults, for constant evaluation (a kernel's templates).
    pub const DEFAULT: StoreConfig = {
        StoreConfig {
            replicas: 2,
            degraded_writes: false,
            write_window_ns: 12_000_000_000,
            retry_delay_ns: 100_000_000,
            busy_delay_ns: 1_000_000,
            read_tries: 3,
            read_passes: 3,
            full_after: 3,
            direct_reads: true,
            nic_answers: true,
            repair_in_flight: 4,
            repair_gap_ns: 1_000_000,
            page_bytes: 4096,
            read_ahead: 0,
            group_pages: super::super::ops::GETPAGES_MAX as u8,
        }
    };
}
