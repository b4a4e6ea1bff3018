// SPDX-License-Identifier: GPL-2.0-only
//! A node's share of the global page directory: page → caching site and version, with
//! the rules that keep reads from going stale.
//!
//! An entry names one caching site (the single copy the cluster serves). Versions only
//! grow while an entry lives; when an entry is removed (holder gone, dropped, discarded)
//! it becomes a *tombstone* that keeps a version *floor*, so a late or duplicated update
//! carrying an older version cannot bring stale data back. Tombstones are reclaimed for
//! space only after [`super::types::GmsConfig::tombstone_ttl`].
//!
//! A discard may name a version the directory has never named (its put is still on its
//! way, or the sender is wrong or hostile): the floor it sets beyond the newest known
//! version is *provisional* and binds for `tombstone_ttl` only (long enough for any late
//! update of those versions to have arrived), so no discard, not even of `u64::MAX`,
//! blocks a page for good.

use super::page::{PageId, Version};
use super::table::Table;

/// `site` of a tombstone.
pub const NO_SITE: u16 = u16::MAX;

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct DirEntry {
    /// The caching site, or [`NO_SITE`].
    pub site: u16,
    pub version: Version,
    /// Updates older than this are refused (until `stamp` + ttl if above `firm`).
    pub floor: Version,
    /// The part of the floor that never lapses: versions up to the newest the directory
    /// named (or a discard at most that new). Equal to `floor` unless a discard went
    /// beyond every known version.
    pub firm: Version,
    /// When the entry last changed.
    pub stamp: u64,
}

impl DirEntry {
    pub fn site(&self) -> Option<u16> {
        (self.site != NO_SITE).then_some(self.site)
    }
    /// The floor that binds at `now`: a provisional one lapses `ttl` after it was set.
    pub fn floor_at(&self, now: u64, ttl: u64) -> Version {
        if self.floor > self.firm && self.stamp.saturating_add(ttl) <= now {
            self.firm
        } else {
            self.floor
        }
    }
}

/// What a directory update did.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Update {
    /// The entry now names the new site; `prev` was named before (at that version) and
    /// must drop its copy if it is another node.
    Accepted { prev: Option<(u16, Version)> },
    /// Older than the entry or its floor.
    Rejected,
    /// No slot for a new entry (and no tombstone old enough to reclaim).
    Full,
}

/// No slot for a new entry (and no tombstone old enough to reclaim).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct DirFull;

/// `N` entries (live and tombstones).
pub struct Directory<const N: usize> {
    t: Table<PageId, DirEntry, N>,
    ttl: u64,
}

impl<const N: usize> Directory<N> {
    pub const fn new(tombstone_ttl: u64) -> Self {
        Directory { t: Table::new(), ttl: tombstone_ttl }
    }

    pub(super) fn set_ttl(&mut self, tombstone_ttl: u64) {
        self.ttl = tombstone_ttl;
    }

    /// The live entry: (site, version).
    pub fn lookup(&self, page: &PageId) -> Option<(u16, Version)> {
        self.t.get(page).and_then(|e| e.site().map(|s| (s, e.version)))
    }
    pub fn entry(&self, page: &PageId) -> Option<&DirEntry> {
        self.t.get(page)
    }
    /// All entries, tombstones included.
    pub fn iter(&self) -> impl Iterator<Item = (&PageId, &DirEntry)> {
        self.t.iter()
    }
    /// The first live entry in slot `from` or later: (slot, page, site, version).
    pub fn next_live_from(&self, mut from: usize) -> Option<(usize, PageId, u16, Version)> {
        while let Some((i, p, e)) = self.t.next_from(from) {
            if e.site != NO_SITE {
                return Some((i, p, e.site, e.version));
            }
            from = i + 1;
        }
        None
    }

    /// Live entries.
    pub fn live(&self) -> usize {
        self.t.iter().filter(|(_, e)| e.site != NO_SITE).count()
    }
    pub fn capacity(&self) -> usize {
        N
    }

    /// Would an update of `page` to `version` at `now` be accepted, and whom would it
    /// displace?
    pub fn check(&self, page: &PageId, version: Version, now: u64) -> Option<Option<(u16, Version)>> {
        match self.t.get(page) {
            None => Some(None),
            Some(e) if version < e.floor_at(now, self.ttl) => None,
            Some(e) => match e.site() {
                None => Some(None),
                Some(_) if version < e.version => None,
                Some(s) => Some(Some((s, e.version))),
            },
        }
    }

    /// Name `site` as the holder of `page` at `version` (accepted iff `version` is at
    /// least the entry's version and floor). Idempotent.
    pub fn update(&mut self, page: PageId, site: u16, version: Version, now: u64) -> Update {
        let Some(prev) = self.check(&page, version, now) else { return Update::Rejected };
        // The version is at least the floor: a provisional floor is firm from now on.
        let floor = self.t.get(&page).map_or(Version(0), |e| e.floor_at(now, self.ttl));
        match self.put(page, DirEntry { site, version, floor, firm: floor, stamp: now }, now) {
            Ok(()) => Update::Accepted { prev },
            Err(DirFull) => Update::Full,
        }
    }

    /// `site` no longer holds `page` up to `version`: tombstone the entry if it names
    /// `site` at that version or older. Returns whether it did.
    pub fn remove(&mut self, page: &PageId, site: u16, version: Version, now: u64) -> bool {
        match self.t.get_mut(page) {
            Some(e) if e.site == site && e.version <= version => {
                e.site = NO_SITE;
                e.floor = e.floor.max(e.version);
                e.firm = e.firm.max(e.version);
                e.stamp = now;
                true
            }
            _ => false,
        }
    }

    /// Forget `page` up to `version`: versions ≤ `version` are refused from now on (those
    /// beyond the newest version the directory named only for the tombstone ttl). The
    /// entry is tombstoned if it named such a version; returns the site that held it.
    /// `Err` when there was no entry and no room to record the floor.
    pub fn discard(&mut self, page: PageId, version: Version, now: u64) -> Result<Option<(u16, Version)>, DirFull> {
        let floor = version.next();
        let ttl = self.ttl;
        match self.t.get_mut(&page) {
            Some(e) => {
                // What binds now, before this discard moves the stamp.
                let prior = e.floor_at(now, ttl);
                e.firm = e.firm.max(floor.min(e.version.next()));
                e.floor = prior.max(floor).max(e.firm);
                let held = e.site().filter(|_| e.version < floor).map(|s| (s, e.version));
                if held.is_some() || e.site == NO_SITE {
                    e.site = NO_SITE;
                    e.stamp = now;
                }
                Ok(held)
            }
            None => {
                let tomb = DirEntry { site: NO_SITE, version: Version(0), floor, firm: Version(0), stamp: now };
                self.put(page, tomb, now).map(|()| None)
            }
        }
    }

    /// A node failed: tombstone every entry naming it. Returns how many.
    pub fn site_failed(&mut self, site: u16, now: u64) -> usize {
        let mut n = 0;
        for (_, e) in self.t.iter_mut() {
            if e.site == site {
                e.site = NO_SITE;
                e.floor = e.floor.max(e.version);
                e.firm = e.firm.max(e.version);
                e.stamp = now;
                n += 1;
            }
        }
        n
    }

    /// Keep only the entries of pages for which `mine` is true (after a view change).
    pub fn retain_pages(&mut self, mut mine: impl FnMut(&PageId) -> bool) {
        self.t.retain(|p, _| mine(p));
    }

    /// Insert or replace, reclaiming the oldest expired tombstone if the table is full.
    fn put(&mut self, page: PageId, e: DirEntry, now: u64) -> Result<(), DirFull> {
        if self.t.is_full() && !self.t.contains(&page) {
            let ttl = self.ttl;
            let oldest = self
                .t
                .iter()
                .filter(|(_, e)| e.site == NO_SITE && e.stamp.saturating_add(ttl) <= now)
                .min_by_key(|(_, e)| e.stamp)
                .map(|(p, _)| *p);
            match oldest {
                Some(p) => {
                    self.t.remove(&p);
                }
                None => return Err(DirFull),
            }
        }
        self.t.insert(page, e).map(|_| ()).map_err(|_| DirFull)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const P: PageId = PageId::new(1, 1);

    #[test]
    fn versions_only_grow_and_tombstones_keep_the_floor() {
        let mut d: Directory<4> = Directory::new(100);
        assert_eq!(d.update(P, 1, Version(5), 0), Update::Accepted { prev: None });
        assert_eq!(d.update(P, 2, Version(4), 1), Update::Rejected, "older version");
        assert_eq!(
            d.update(P, 2, Version(5), 2),
            Update::Accepted { prev: Some((1, Version(5))) },
            "same version, new site"
        );
        assert_eq!(d.update(P, 2, Version(5), 3), Update::Accepted { prev: Some((2, Version(5))) }, "idempotent");
        assert!(!d.remove(&P, 1, Version(9), 4), "only the named site removes");
        assert!(!d.remove(&P, 2, Version(4), 4), "only up to its version");
        assert!(d.remove(&P, 2, Version(5), 4));
        assert_eq!(d.lookup(&P), None);
        assert_eq!(d.update(P, 3, Version(4), 5), Update::Rejected, "the tombstone's floor");
        assert_eq!(d.update(P, 3, Version(5), 5), Update::Accepted { prev: None }, "same version may come back");
        assert_eq!(d.lookup(&P), Some((3, Version(5))));
    }

    #[test]
    fn discard_raises_the_floor_past_the_version() {
        let mut d: Directory<4> = Directory::new(100);
        d.update(P, 1, Version(3), 0);
        assert_eq!(d.discard(P, Version(3), 1), Ok(Some((1, Version(3)))));
        assert_eq!(d.lookup(&P), None);
        assert_eq!(d.update(P, 1, Version(3), 2), Update::Rejected);
        assert_eq!(d.update(P, 2, Version(4), 2), Update::Accepted { prev: None });
        // Discarding an older version keeps a newer entry but raises the floor.
        assert_eq!(d.discard(P, Version(2), 3), Ok(None));
        assert_eq!(d.lookup(&P), Some((2, Version(4))));
        // A discard of an unknown page leaves a floor.
        let q = PageId::new(2, 2);
        assert_eq!(d.discard(q, Version(7), 4), Ok(None));
        assert_eq!(d.update(q, 1, Version(7), 5), Update::Rejected);
        assert_eq!(d.update(q, 1, Version(8), 5), Update::Accepted { prev: None });
    }

    #[test]
    fn a_discard_beyond_every_known_version_lapses_after_the_ttl() {
        let mut d: Directory<4> = Directory::new(100);
        d.update(P, 1, Version(3), 0);
        // Up to version 3 is known: that part of the floor is firm.
        assert_eq!(d.discard(P, Version(u64::MAX), 10), Ok(Some((1, Version(3)))));
        assert_eq!(d.update(P, 2, Version(9), 50), Update::Rejected, "binds within the ttl");
        assert_eq!(d.update(P, 2, Version(3), 200), Update::Rejected, "the known versions stay discarded");
        assert_eq!(d.update(P, 2, Version(4), 200), Update::Accepted { prev: None }, "lapsed");
        assert_eq!(d.entry(&P).map(|e| (e.floor, e.firm)), Some((Version(4), Version(4))));
        // A page the directory never named: the whole floor is provisional.
        let q = PageId::new(2, 2);
        assert_eq!(d.discard(q, Version(1 << 40), 300), Ok(None));
        assert_eq!(d.update(q, 1, Version(1), 399), Update::Rejected);
        assert_eq!(d.update(q, 1, Version(1), 400), Update::Accepted { prev: None });
        // A discard within what is known is firm for good.
        assert_eq!(d.discard(q, Version(1), 500), Ok(Some((1, Version(1)))));
        assert_eq!(d.update(q, 1, Version(1), 10_000), Update::Rejected);
    }

    #[test]
    fn failed_sites_are_tombstoned() {
        let mut d: Directory<8> = Directory::new(100);
        for i in 0..6u64 {
            d.update(PageId::new(0, i), (i % 3) as u16, Version(i + 1), 0);
        }
        assert_eq!(d.site_failed(1, 10), 2);
        assert_eq!(d.live(), 4);
        assert!(d.iter().all(|(_, e)| e.site != 1));
        assert_eq!(d.update(PageId::new(0, 1), 2, Version(1), 11), Update::Rejected);
        assert_eq!(d.update(PageId::new(0, 1), 2, Version(2), 11), Update::Accepted { prev: None });
        assert_eq!(d.update(PageId::new(0, 4), 2, Version(4), 11), Update::Rejected);
    }

    #[test]
    fn full_table_reclaims_only_expired_tombstones() {
        let mut d: Directory<2> = Directory::new(100);
        d.update(PageId::new(0, 1), 1, Version(1), 0);
        d.update(PageId::new(0, 2), 1, Version(1), 0);
        assert_eq!(d.update(PageId::new(0, 3), 1, Version(1), 500), Update::Full, "live entries stay");
        d.remove(&PageId::new(0, 1), 1, Version(1), 50);
        assert_eq!(d.update(PageId::new(0, 3), 1, Version(1), 120), Update::Full, "tombstone too young");
        assert_eq!(d.update(PageId::new(0, 3), 1, Version(1), 150), Update::Accepted { prev: None });
        assert!(d.entry(&PageId::new(0, 1)).is_none(), "the expired tombstone made room");
        assert_eq!(d.discard(PageId::new(0, 9), Version(1), 150), Err(DirFull));
    }
}
