// SPDX-License-Identifier: GPL-2.0-only
//! Reading a replicated page as a *reader*: a page kept as `r` copies is `r` GMS pages
//! ([`gms::replica::replica`]); a reader that did not write it takes replica 0, then the
//! next while one misses or is older than a version it knows was written. Writing pages
//! (placement, versions, retries, re-replication) is the client core's, `gms::store`
//! ([`super::store`]).

use gms::prelude::*;
pub use gms::replica::{default_replicas, replica, MAX_REPLICAS};

/// What a read of a replicated page does after replica `k` answered.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ReadStep {
    /// Replica `k`'s copy is current: it is the answer.
    Take,
    /// Replica `k` missed or is stale: read replica `k` (the next).
    Next(u8),
    /// Every replica missed or was stale: a miss.
    Miss,
}

/// After replica `k` of `r` answered (`hit`: the version it found, `None` a miss), given
/// the version the reader knows was written (`floor`, if any): take it, or go on.
pub fn read_step(r: u8, k: u8, hit: Option<Version>, floor: Option<Version>) -> ReadStep {
    match hit {
        Some(v) if floor.is_none_or(|f| v >= f) => ReadStep::Take,
        _ if k + 1 < r => ReadStep::Next(k + 1),
        _ => ReadStep::Miss,
    }
}
