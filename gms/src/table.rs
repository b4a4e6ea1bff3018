// SPDX-License-Identifier: GPL-2.0-only
//! A hash table over slots its owner supplies: open addressing, linear probing,
//! backward-shift deletion (no tombstones). The slots are any slice the runtime sized at
//! set-up (a boxed slice, a `KVVec`: [`Storage::Buf`](super::net::storage::Storage::Buf)) or an [`Inline`]
//! array; the table never allocates, never uses `unsafe`, never panics on a full table.

use core::marker::PhantomData;
use core::ops::{Deref, DerefMut};

/// A key with a well-mixed 64-bit hash (the table takes the slot from it directly).
pub trait Key: Copy + Eq {
    fn hash64(&self) -> u64;
}

/// The table is full: the entry that could not be inserted.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Full<K, V>(pub K, pub V);

/// Slots for a table meant to hold `entries`: a ninth more, so it stays below ~90 % load.
pub const fn slots_for(entries: usize) -> usize {
    entries.saturating_add(entries / 8).saturating_add(1)
}

/// Where [`Table::scan`] stopped.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Scan<K, V> {
    /// An accepted entry in this slot.
    Found(usize, K, V),
    /// None within the limit: go on from this slot.
    Stopped(usize),
    /// None up to the last slot.
    End,
}

/// One slot of a table: empty, or a key and its value.
pub type Slot<K, V> = Option<(K, V)>;

/// `N` slots kept inline, for tables whose size is fixed at build time.
#[derive(Clone, Copy)]
pub struct Inline<T, const N: usize>(pub [T; N]);

impl<T, const N: usize> Deref for Inline<T, N> {
    type Target = [T];
    fn deref(&self) -> &[T] {
        &self.0
    }
}
impl<T, const N: usize> DerefMut for Inline<T, N> {
    fn deref_mut(&mut self) -> &mut [T] {
        &mut self.0
    }
}

/// A table over the slots in `B`. Lookups probe from the key's home slot to the first
/// empty slot, so a table kept below ~90 % load stays fast; a full table still works
/// (every probe ends after one lap). Cost does not grow with the capacity: a slot is
/// found by a multiply-shift of the key's hash.
#[derive(Clone, Copy)]
pub struct Table<K, V, B> {
    slots: B,
    len: usize,
    kv: PhantomData<fn() -> (K, V)>,
}

/// A table of `N` inline slots.
pub type InlineTable<K, V, const N: usize> = Table<K, V, Inline<Slot<K, V>, N>>;

impl<K: Key, V: Copy, const N: usize> InlineTable<K, V, N> {
    /// An empty table of `N` inline slots.
    pub const fn new() -> Self {
        Table::over(Inline([None; N]))
    }
}

impl<K: Key, V: Copy, const N: usize> Default for InlineTable<K, V, N> {
    fn default() -> Self {
        Self::new()
    }
}

impl<K, V, B> Table<K, V, B> {
    /// A table over `slots`, which must all be empty (`None`): what
    /// [`Storage::buf`](super::net::storage::Storage::buf)`(n, None)` gives. A `const fn`, so a
    /// `static` template can hold a table over an empty buffer.
    pub const fn over(slots: B) -> Self {
        Table { slots, len: 0, kv: PhantomData }
    }
}

impl<K: Key, V: Copy, B: DerefMut<Target = [Slot<K, V>]>> Table<K, V, B> {
    pub fn capacity(&self) -> usize {
        self.slots.len()
    }
    pub fn len(&self) -> usize {
        self.len
    }
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }
    pub fn is_full(&self) -> bool {
        self.len == self.slots.len()
    }

    fn home(&self, k: &K) -> usize {
        // Multiply-shift range reduction: uses the high bits, no division.
        ((k.hash64() as u128 * self.slots.len() as u128) >> 64) as usize
    }

    fn next(&self, i: usize) -> usize {
        if i + 1 == self.slots.len() {
            0
        } else {
            i + 1
        }
    }

    /// The slot holding `k`, if any.
    fn find(&self, k: &K) -> Option<usize> {
        let mut i = self.home(k);
        for _ in 0..self.slots.len() {
            match &self.slots[i] {
                None => return None,
                Some((key, _)) if key == k => return Some(i),
                Some(_) => i = self.next(i),
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
        if self.slots.is_empty() {
            return Err(Full(k, v));
        }
        let mut i = self.home(&k);
        for _ in 0..self.slots.len() {
            let after = self.next(i);
            match &mut self.slots[i] {
                slot @ None => {
                    *slot = Some((k, v));
                    self.len += 1;
                    return Ok(None);
                }
                Some((key, val)) if *key == k => return Ok(Some(core::mem::replace(val, v))),
                Some(_) => i = after,
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
            j = self.next(j);
            let Some((key, _)) = &self.slots[j] else { break };
            let h = self.home(key);
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
        while i < self.slots.len() {
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

    /// The first entry in slot `from` or later that `pred` accepts, looking at no more
    /// than `limit` slots (for cursors that walk the table a step at a time: a step's cost
    /// stays bounded however large and sparse the table is).
    pub fn scan(&self, from: usize, limit: usize, pred: impl Fn(&K, &V) -> bool) -> Scan<K, V> {
        let end = from.saturating_add(limit).min(self.slots.len());
        for i in from..end {
            if let Some((k, v)) = self.slots[i] {
                if pred(&k, &v) {
                    return Scan::Found(i, k, v);
                }
            }
        }
        if end == self.slots.len() {
            Scan::End
        } else {
            Scan::Stopped(end)
        }
    }

    /// The entries in `limit` slots from slot `from` on, wrapping around the end (each
    /// slot at most once): a sample of the table whose cost is `limit`, however large the
    /// table. Slots follow the keys' hashes, so a run of them is a random draw of keys.
    pub fn window(&self, from: usize, limit: usize) -> impl Iterator<Item = (&K, &V)> {
        let n = self.slots.len();
        let from = if n == 0 { 0 } else { from % n };
        let (tail, head) = self.slots.split_at(from);
        head.iter().chain(tail).take(limit.min(n)).filter_map(|s| s.as_ref().map(|(k, v)| (k, v)))
    }

    /// The entries in slots `from` up to `end` (cut to the table).
    pub fn range(&self, from: usize, end: usize) -> impl Iterator<Item = (&K, &V)> {
        let end = end.min(self.slots.len());
        self.slots[from.min(end)..end].iter().filter_map(|s| s.as_ref().map(|(k, v)| (k, v)))
    }

    pub fn iter(&self) -> impl Iterator<Item = (&K, &V)> {
        self.slots.iter().filter_map(|s| s.as_ref().map(|(k, v)| (k, v)))
    }
    pub fn iter_mut(&mut self) -> impl Iterator<Item = (&K, &mut V)> {
        self.slots.iter_mut().filter_map(|s| s.as_mut().map(|(k, v)| (&*k, v)))
    }
    pub fn clear(&mut self) {
        self.slots.fill(None);
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

    fn check<B: DerefMut<Target = [Slot<K, u64>]>>(t: &Table<K, u64, B>, m: &HashMap<K, u64>) {
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
    fn a_window_wraps_and_sees_each_slot_once() {
        let mut t: InlineTable<K, u64, 7> = Table::new();
        for i in 0..7 {
            t.insert(K(i), i as u64).unwrap();
        }
        let slots: Vec<u64> = t.slots.iter().map(|s| s.unwrap().1).collect();
        let w: Vec<u64> = t.window(5, 4).map(|(_, v)| *v).collect();
        assert_eq!(w, [slots[5], slots[6], slots[0], slots[1]]);
        assert_eq!(t.window(12, 100).count(), 7, "a window longer than the table covers it once");
        t.remove(&K(w[0] as u32));
        assert_eq!(t.window(5, 4).count(), 3, "empty slots count towards the window");
    }

    #[test]
    fn insert_get_remove_full() {
        let mut t: InlineTable<K, u64, 7> = Table::new();
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
            let mut t = Table::over(std::vec![None; 13]);
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
        let mut t = Table::over(std::vec![None; 8]);
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
        let all = |_: &K, _: &u64| true;
        let Scan::Found(i, k, _) = t.scan(0, 8, all) else { panic!("5 entries in 8 slots") };
        assert!(matches!(t.scan(i, 1, all), Scan::Found(j, k2, _) if j == i && k2 == k));
        assert!(matches!(t.scan(i + 1, 8, all), Scan::Found(j, _, _) if j > i));
        assert_eq!(t.scan(8, 8, all), Scan::End);
        assert_eq!(t.scan(0, 8, |_, _| false), Scan::End);
        t.clear();
        assert!(t.is_empty() && t.iter().next().is_none());
        // An empty table is walked `limit` slots a step.
        assert_eq!(t.scan(0, 3, all), Scan::Stopped(3));
        assert_eq!(t.scan(6, 3, all), Scan::End);
    }
}
