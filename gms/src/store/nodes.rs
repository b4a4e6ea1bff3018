// SPDX-License-Identifier: GPL-2.0-only
//! Sets of node ids as a bit mask: the members a page's copies may sit on, the live
//! members, the members a put keeps clear of. Every node id the store accepts fits
//! ([`MAX_NODE`]); a larger one is refused where it enters ([`NodeSet::check`]), never
//! silently dropped or aliased onto another id.

/// The largest node id the store covers: ids `0..=MAX_NODE`.
pub const MAX_NODE: u16 = 63;

/// A node id above [`MAX_NODE`].
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct NodeOutOfRange(pub u16);

/// A set of node ids `0..=MAX_NODE`.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub struct NodeSet(u64);

impl NodeSet {
    pub const EMPTY: NodeSet = NodeSet(0);
    /// Every node id there can be.
    pub const ALL: NodeSet = NodeSet(u64::MAX);

    /// `node`, if the store covers it.
    pub const fn check(node: u16) -> Result<u16, NodeOutOfRange> {
        if node <= MAX_NODE {
            Ok(node)
        } else {
            Err(NodeOutOfRange(node))
        }
    }

    /// The set of `nodes` (each checked).
    pub fn of(nodes: &[u16]) -> Result<NodeSet, NodeOutOfRange> {
        let mut s = NodeSet::EMPTY;
        for &n in nodes {
            s.insert(Self::check(n)?);
        }
        Ok(s)
    }

    /// `{node}` (empty for an id out of range: such ids never enter a set).
    pub const fn one(node: u16) -> NodeSet {
        if node <= MAX_NODE {
            NodeSet(1 << node)
        } else {
            NodeSet(0)
        }
    }

    pub fn insert(&mut self, node: u16) {
        *self = self.union(Self::one(node));
    }

    pub fn remove(&mut self, node: u16) {
        self.0 &= !Self::one(node).0;
    }

    pub const fn contains(self, node: u16) -> bool {
        Self::one(node).0 & self.0 != 0
    }

    pub const fn union(self, other: NodeSet) -> NodeSet {
        NodeSet(self.0 | other.0)
    }

    pub const fn intersect(self, other: NodeSet) -> NodeSet {
        NodeSet(self.0 & other.0)
    }

    pub const fn minus(self, other: NodeSet) -> NodeSet {
        NodeSet(self.0 & !other.0)
    }

    pub const fn is_empty(self) -> bool {
        self.0 == 0
    }

    pub const fn len(self) -> usize {
        self.0.count_ones() as usize
    }

    /// Whether every node of `self` is in `other`.
    pub const fn within(self, other: NodeSet) -> bool {
        self.0 & !other.0 == 0
    }

    /// The ids, ascending.
    pub fn iter(self) -> impl Iterator<Item = u16> {
        (0..=MAX_NODE).filter(move |&n| self.contains(n))
    }
}

/// The ids, ascending, separated by commas (as `gms_nodes=` lists them).
impl core::fmt::Display for NodeSet {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        for (k, n) in self.iter().enumerate() {
            if k > 0 {
                f.write_str(",")?;
            }
            write!(f, "{n}")?;
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_set_reads_as_its_ids() {
        extern crate std;
        use std::string::ToString;
        assert_eq!(NodeSet::of(&[3, 1, 63]).unwrap().to_string(), "1,3,63");
        assert_eq!(NodeSet::EMPTY.to_string(), "");
    }

    #[test]
    fn ids_out_of_range_are_refused_not_aliased() {
        assert_eq!(NodeSet::of(&[1, 63]).map(|s| s.len()), Ok(2));
        assert_eq!(NodeSet::of(&[1, 64]), Err(NodeOutOfRange(64)));
        let mut s = NodeSet::EMPTY;
        s.insert(64);
        s.insert(0);
        assert!(s.iter().eq([0]));
        assert!(!s.contains(64));
    }
}
