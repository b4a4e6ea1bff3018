// SPDX-License-Identifier: GPL-2.0-only
//! A fixed-capacity hash table: open addressing, linear probing, backward-shift deletion
//! (no tombstones), `N` slots inline. No heap, no `unsafe`, never panics on a full table.

/// A key with a well-mixed 64-bit hash (the table takes the slot from it directly).
pub trait Key: Copy + Eq {
    fn hash64(&self) -> u64;
}

/// The table is full: the entry that could not be inserted.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Full<K, V>(pub K, pub V);

/// `N` slots of `(K, V)`. Lookups probe from the key's home slot to the first empty slot,
/// so a table kept below ~90 % load stays fast; a full table still works (every probe
/// ends after `N` slots).
#[derive(Clone, Copy)]
pub struct Table<K: Key, V: Copy, const N: usize> {
    slots: [Option<(K, V)>; N],
    len: usize,
}

impl<K: Key, V: Copy, const N: usize> Default for Table<K, V, N> {
    fn default() -> Self {
        Self::new()
    }
}

impl<K: Key, V: Copy, const N: usize> Table<K, V, N> {
    const _NONEMPTY: () = assert!(N > 0);

    pub const fn new() -> Self {
        let () = Self::_NONEMPTY;
        Table { slots: [None; N], len: 0 }
    }

    pub const fn capacity(&self) -> usize {
        N
    }
    pub fn len(&self) -> usize {
        self.len
    }
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }
    pub fn is_full(&self) -> bool {
        self.len == N
    }

    fn home(k: &K) -> usize {
        // Multiply-shift range reduction: uses the high bits, no division.
        ((k.hash64() as u128 * N as u128) >> 64) as usize
    }

    /// The slot holding `k`, if any.
    fn find(&self, k: &K) -> Option<usize> {
        let mut i = Self::home(k);
        for _ in 0..N {
            match &self.slots[i] {
                None => return None,
                Some((key, _)) if key == k => return Some(i),
                Some(_) => i = (i + 1) % N,
            }
        }
        None
    }

    pub fn get(&self, k: &K) -> Option<&V> {
        self.find(k).and_then(|i| self.slots[i].as_ref().map(|(_, v)| v))
    }
    pub fn get_mut(&mut self, k: &K) -> Option<&mut V> {
        let i = self.find(k)?;
        self.slots[i].as_mut().map(|(_, v)| v)
    }
    pub fn contains(&self, k: &K) -> bool {
        self.find(k).is_some()
    }

    /// Insert or replace; returns the previous value of `k`. A new key in a full table
    /// is given back in `Err`.
    pub fn insert(&mut self, k: K, v: V) -> Result<Option<V>, Full<K, V>> {
        let mut i = Self::home(&k);
        for _ in 0..N {
            match &mut self.slots[i] {
                slot @ None => {
                    *slot = Some((k, v));
                    self.len += 1;
                    return Ok(None);
                }
                Some((key, val)) if *key == k => return Ok(Some(core::mem::replace(val, v))),
                Some(_) => i = (i + 1) % N,
            }
        }
        Err(Full(k, v))
    }

    pub fn remove(&mut self, k: &K) -> Option<V> {
        let i = self.find(k)?;
        self.remove_at(i).map(|(_, v)| v)
    }

    /// Empty slot `i` and shift the rest of its probe run back so every key stays
    /// reachable from its home slot.
    fn remove_at(&mut self, mut hole: usize) -> Option<(K, V)> {
        let out = self.slots[hole].take()?;
        self.len -= 1;
        let mut j = hole;
        loop {
            j = (j + 1) % N;
            let Some((key, _)) = &self.slots[j] else { break };
            let h = Self::home(key);
            // Move `j` into the hole unless its home lies cyclically in (hole, j].
            let stays = if hole <= j { hole < h && h <= j } else { hole < h || h <= j };
            if !stays {
                self.slots[hole] = self.slots[j].take();
                hole = j;
            }
        }
        Some(out)
    }

    /// Keep the entries for which `keep` returns true (it may also change them). `keep`
    /// sees each removed entry exactly once; a kept entry near the end of the array may be
    /// offered twice (when a removal shifts it across the wrap), so keep `keep` idempotent
    /// for the entries it keeps.
    pub fn retain(&mut self, mut keep: impl FnMut(&K, &mut V) -> bool) {
        let mut i = 0;
        while i < N {
            let drop = match &mut self.slots[i] {
                Some((k, v)) => !keep(k, v),
                None => false,
            };
            if drop {
                // The shift may bring an unvisited entry into `i`: look at `i` again.
                self.remove_at(i);
            } else {
                i += 1;
            }
        }
    }

    /// Remove and return one entry matching `pred` (scans from the start).
    pub fn take_first(&mut self, mut pred: impl FnMut(&K, &V) -> bool) -> Option<(K, V)> {
        let i = self.slots.iter().position(|s| s.as_ref().is_some_and(|(k, v)| pred(k, v)))?;
        self.remove_at(i)
    }

    /// The first entry in slot `from` or later, with its slot (for cursors that walk the
    /// table a step at a time).
    pub fn next_from(&self, from: usize) -> Option<(usize, K, V)> {
        (from..N).find_map(|i| self.slots[i].map(|(k, v)| (i, k, v)))
    }

    pub fn iter(&self) -> impl Iterator<Item = (&K, &V)> {
        self.slots.iter().filter_map(|s| s.as_ref().map(|(k, v)| (k, v)))
    }
    pub fn iter_mut(&mut self) -> impl Iterator<Item = (&K, &mut V)> {
        self.slots.iter_mut().filter_map(|s| s.as_mut().map(|(k, v)| (&*k, v)))
    }
    pub fn clear(&mut self) {
        self.slots = [None; N];
        self.len = 0;
    }
}

#[cfg(test)]
mod tests {
    extern crate std;
    use super::*;
    use std::collections::HashMap;
    use std::vec::Vec;

    #[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
    struct K(u32);
    impl Key for K {
        // Few distinct homes: long probe runs and wrap-around clusters.
        fn hash64(&self) -> u64 {
            (self.0 as u64 % 5).wrapping_mul(0x3333_3333_3333_3333)
        }
    }

    fn check<const N: usize>(t: &Table<K, u64, N>, m: &HashMap<K, u64>) {
        assert_eq!(t.len(), m.len());
        for (k, v) in m {
            assert_eq!(t.get(k), Some(v), "{k:?}");
        }
        assert_eq!(t.iter().count(), m.len());
        for (k, v) in t.iter() {
            assert_eq!(m.get(k), Some(v));
        }
    }

    #[test]
    fn insert_get_remove_full() {
        let mut t: Table<K, u64, 7> = Table::new();
        for i in 0..7 {
            assert_eq!(t.insert(K(i), i as u64), Ok(None));
        }
        assert!(t.is_full());
        assert_eq!(t.insert(K(99), 1), Err(Full(K(99), 1)));
        assert_eq!(t.insert(K(3), 33), Ok(Some(3)), "replacing works when full");
        assert_eq!(t.get(&K(42)), None, "a miss in a full table ends");
        assert_eq!(t.remove(&K(3)), Some(33));
        assert_eq!(t.remove(&K(3)), None);
        assert_eq!(t.insert(K(99), 1), Ok(None));
        for i in [0, 1, 2, 4, 5, 6, 99] {
            assert!(t.contains(&K(i)), "{i}");
        }
    }

    #[test]
    fn matches_a_hashmap_under_random_operations() {
        let mut seed = 0x1234_5678_9abc_def0u64;
        let mut next = || {
            seed ^= seed << 13;
            seed ^= seed >> 7;
            seed ^= seed << 17;
            seed
        };
        for round in 0..200 {
            let mut t: Table<K, u64, 13> = Table::new();
            let mut m = HashMap::new();
            for _ in 0..300 {
                let k = K((next() % 20) as u32);
                match next() % 4 {
                    0 | 1 => {
                        let v = next();
                        match t.insert(k, v) {
                            Ok(prev) => assert_eq!(prev, m.insert(k, v), "round {round}"),
                            Err(_) => assert!(m.len() == 13 && !m.contains_key(&k)),
                        }
                    }
                    2 => assert_eq!(t.remove(&k), m.remove(&k), "round {round}"),
                    _ => {
                        let cut = next() % 20;
                        let mut removed = Vec::new();
                        t.retain(|k, v| {
                            if (k.0 as u64) < cut {
                                *v = v.wrapping_add(0); // kept entries may be offered twice
                                true
                            } else {
                                removed.push(*k);
                                false
                            }
                        });
                        let before = m.len();
                        m.retain(|k, _| (k.0 as u64) < cut);
                        assert_eq!(removed.len(), before - m.len(), "each removed entry seen once");
                    }
                }
                check(&t, &m);
            }
        }
    }

    #[test]
    fn take_first_and_clear() {
        let mut t: Table<K, u64, 8> = Table::new();
        for i in 0..6 {
            t.insert(K(i), i as u64 * 10).unwrap();
        }
        let (k, v) = t.take_first(|_, v| *v >= 30).unwrap();
        assert!(v >= 30 && k.0 as u64 * 10 == v);
        assert_eq!(t.len(), 5);
        for (_, v) in t.iter_mut() {
            *v += 1;
        }
        assert!(t.iter().all(|(k, v)| *v == k.0 as u64 * 10 + 1));
        let (i, k, _) = t.next_from(0).unwrap();
        assert_eq!(t.next_from(i).map(|e| e.1), Some(k));
        assert!(t.next_from(i + 1).is_none_or(|(j, _, _)| j > i));
        assert!(t.next_from(8).is_none());
        t.clear();
        assert!(t.is_empty() && t.iter().next().is_none() && t.next_from(0).is_none());
    }
}
