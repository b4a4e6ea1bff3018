// SPDX-License-Identifier: GPL-2.0-only
//! What a [`StoreError`] means, in words a runtime's log and its users read: the same
//! sentence in the kernel's `/dev/gms0` and in `gmsd`, which add only their own names
//! (a module parameter, a daemon option).

use super::StoreError;
use core::fmt;

impl fmt::Display for StoreError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            StoreError::OutOfRange => f.write_str("the page is past the end of the volume"),
            StoreError::Busy => {
                f.write_str("every request slot is in use, or an earlier request on the page is running")
            }
            StoreError::TooFewMembers => {
                f.write_str("fewer live members than the volume's replicas, and degraded writes are off")
            }
            StoreError::NoSpace => f.write_str("no member has room for the page"),
            StoreError::Unreachable => f.write_str("no member that holds or takes the page answered in time"),
            StoreError::Superseded => {
                f.write_str("a newer version of the page is recorded in the cluster: another writer uses this identity")
            }
            StoreError::Lost => f.write_str("the page was written and no copy of it is left on a live member"),
            StoreError::NotSent => f.write_str("the runtime could not send (no frame or operation slot)"),
            StoreError::IdentityInUse { owner } => {
                write!(f, "the volume's identity is in use by node {owner}, a live member that loaded it")
            }
            StoreError::NotThisVolume => {
                f.write_str("the cluster holds a volume of this identity of another size or number of replicas")
            }
            StoreError::VersionsExhausted => f.write_str(
                "a member knows a version of this volume in its last epoch, so no load can claim a newer one",
            ),
        }
    }
}

#[cfg(test)]
mod tests {
    extern crate std;
    use super::*;
    use std::string::ToString;

    /// Every error has its own sentence, and the one naming a node names it.
    #[test]
    fn each_error_reads_as_its_own_sentence() {
        let all = [
            StoreError::OutOfRange,
            StoreError::Busy,
            StoreError::TooFewMembers,
            StoreError::NoSpace,
            StoreError::Unreachable,
            StoreError::Superseded,
            StoreError::Lost,
            StoreError::NotSent,
            StoreError::IdentityInUse { owner: 7 },
            StoreError::NotThisVolume,
            StoreError::VersionsExhausted,
        ];
        let text: std::vec::Vec<_> = all.iter().map(|e| e.to_string()).collect();
        for (i, t) in text.iter().enumerate() {
            assert!(!t.is_empty() && !t.ends_with('.'), "{t:?}");
            assert!(text[..i].iter().all(|u| u != t), "{t:?} twice");
        }
        assert!(text[8].contains("node 7"), "{}", text[8]);
    }
}
