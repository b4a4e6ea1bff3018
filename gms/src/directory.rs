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
//!
//! Versions alone cannot order two registrations of one version: a copy changes hands at
//! the same version (movepage, moving read), and a registration of its previous holder
//! (a scrub re-registration in flight, a duplicated `DIRUPDATE`) may arrive after the
//! new holder's. So every named copy also has an *identity*, [`DirEntry::seq`]: the
//! directory assigns it when it accepts a registration (growing per page, kept by a
//! tombstone) and the holder learns it from the answer. A registration carries a
//! *claim*: the identity of the copy it descends from (the previous holder's, for a
//! hand-over), its own (a re-registration), or [`FRESH`] (a copy no directory has named:
//! a put, a page read from disk). At the version the entry names, a claim below the
//! entry's identity is stale and refused; a claim equal to it from another site is the
//! hand-over of the named copy and displaces it; the identity given up by a removal (or
//! by a verify that found no copy) is refused from its last site even after the entry
//! became a tombstone. A member declared failed gave nothing up (it may have been
//! suspected falsely): its tombstones let any copy at their version be named again, the
//! one whose naming answer it never heard included. Removals and drops name the identity
//! they mean, so a late one never un-names a newer copy.
//!
//! **What one registration may claim.** The directory keeps no record of puts, and any
//! member may write any page at any version (a put to any target, or a copy it holds for
//! itself): it cannot tell a real new version from a claimed one. What it bounds is how
//! far one message may move a page, so that no single message blocks a page for good or
//! has the holder of its current copy give it up:
//!
//! - *Lead.* A registration (a `DIRUPDATE`, or this node's own for a put it stored) is
//!   refused when its version is `u64::MAX` or more than [`VERSION_LEAD`] above the newest
//!   version the directory knows (the page's entry, and the *horizon*: the newest firm
//!   version it accepted for any page), so the version space is never used up.
//! - *Step.* A registration is a *step* when its version is at most [`VERSION_STEP`] above
//!   the page's *reach*, plus the nanoseconds since the reach was set: the reach is the
//!   newest version the directory knows of the page (provisional ones included) or the
//!   horizon, whichever is newer. A step is *firm*: it displaces the named copy (a write
//!   makes the older copy stale) and the floor it leaves never lapses. Writers' versions
//!   step: the store's [`Clock`](super::store) adds 16 per write and 2^40 per load, the
//!   wall clock (gmsd today) as much as time passes.
//! - *Leap.* Any other registration is a *leap*. A leap never displaces a firm named copy
//!   (refused, and counted at `DIRUPDATE`: the holder keeps its copy). Otherwise (a new
//!   page, a tombstone, a provisional copy) it is accepted and served, but *provisional*:
//!   it moves neither the horizon nor the page's firm versions, and it binds for
//!   `tombstone_ttl` only. After that, a registration below it (a writer moving on; a late message of an
//!   older version would have arrived by then) displaces it, named or not, and its floor
//!   lapses as a discard's does. A step from it (its writer writing again, its holder
//!   registering it again) makes it firm. Another member's leap is confirmed as a
//!   displacement is (below): if its site does not hold it, it is withdrawn
//!   ([`Directory::withdraw`]: un-named, its floor and firm versions those from before it),
//!   so one message claiming a copy it does not hold blocks a new page's first put for a
//!   round trip at most.
//!
//! So one message moves a page's firm versions by at most a step, which a writer passes by
//! writing on (the wall clock: in [`VERSION_STEP`] ns; the store: by a load's epoch above
//! it), and a leap, which is refused over a firm copy and lapses otherwise.
//!
//! *Confirmed displacement.* A registration from another member that displaces the named
//! copy of another site (a step, or a hand-over at the named version claiming its
//! identity) is applied at once, but the displaced holder is told to drop its copy only
//! once the new site confirms it holds the copy it was named for: the directory asks it
//! (`DIRVERIFY`, [`Directory::reinstate`]'s caller). A site that gave its copy up since
//! (taken back, handed on) confirms it too, until its removal reaches the directory, which
//! holds such a removal (answers `Busy`) while the confirmation is out. If the site does
//! not hold it and the entry still names that copy, the displaced copy is named again,
//! under a new identity, and counted (`rejected_claims`); it was never dropped. So one
//! message claiming a copy its sender does not hold (at a step, or a same-version hand-over
//! claiming the named identity) costs the page at most a miss while the question is out.
//! The firm versions and horizon the claim moved stay moved (a step's worth).
//!
//! Limits. A step by a member that holds the copy it registers displaces the named copy,
//! as its put would (any member may write any page); so does a registration at the named
//! version claiming the named copy's identity or above that it confirms (a hand-over: the
//! directory cannot tell a copy that descends from the named one from a claimed one). A
//! member whose GMS itself lies (confirms a copy it lacks) is not caught: that is a write
//! followed by a loss, as its put and a crash would be. A site that loses a copy it was just
//! named for without telling its directory (its task table full) answers the confirmation
//! `Rejected`, and the older displaced copy is named again: a stale read, as rare as that
//! overflow (`task_overflow`). A leap its site holds (or a lying member's) binds a
//! page against lower versions for the ttl (a new page's first put is refused meanwhile),
//! and may displace a provisional copy. Provisional copies are those that leapt: on a directory
//! that knows nothing near them (a new node, after a cluster restart) with writers whose
//! versions are far apart (the wall clock's); the store's versions are steps. A
//! provisional copy's holder registering it again (the scrub) makes it firm.

use super::page::{PageId, Version};
use super::table::{Scan, Slot, Table};
use core::ops::DerefMut;

/// `site` of a tombstone.
pub const NO_SITE: u16 = u16::MAX;

/// The claim of a copy no directory has named yet (a put, a page held for itself).
pub const FRESH: u64 = 0;

/// A removal or drop of every identity up to its version (the sender knows none).
pub const ANY_SEQ: u64 = u64::MAX;

/// How far above every version the directory knows one registration may reach (see the
/// module doc).
pub const VERSION_LEAD: u64 = 1 << 62;

/// How far above a page's reach a registration is a firm step rather than a provisional
/// leap (see the module doc): 256 of the store's load epochs, or about 3.3 days of
/// nanoseconds.
pub const VERSION_STEP: u64 = 1 << 48;

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct DirEntry {
    /// The caching site, or [`NO_SITE`].
    pub site: u16,
    pub version: Version,
    /// The identity of the copy named (a tombstone keeps the last one's).
    pub seq: u64,
    /// The site named last (a tombstone keeps it: its identity `seq` was given up), or
    /// [`NO_SITE`] when nobody gave it up (a tombstone made by declaring its site failed).
    pub last: u16,
    /// Updates older than this are refused (until `stamp` + ttl if above `firm`).
    pub floor: Version,
    /// The newest version the directory knows firmly: what never lapses. A named version
    /// above it is provisional (a leap, see the module doc), and so is a floor above it
    /// (a discard beyond every firm version, or a provisional copy un-named).
    pub firm: Version,
    /// When the entry last changed (a live one: when its version was set).
    pub stamp: u64,
}

impl DirEntry {
    pub fn site(&self) -> Option<u16> {
        (self.site != NO_SITE).then_some(self.site)
    }
    /// The floor that binds at `now`: a provisional one lapses `ttl` after it was set.
    pub fn floor_at(&self, now: u64, ttl: u64) -> Version {
        if self.floor > self.firm && self.lapsed(now, ttl) {
            self.firm
        } else {
            self.floor
        }
    }
    /// Whether the entry names a copy at a provisional version (a leap not confirmed).
    pub fn provisional(&self) -> bool {
        self.site != NO_SITE && self.version > self.firm
    }
    /// The newest version known firmly or provisionally: what the page's steps count from.
    pub fn reach(&self) -> Version {
        self.version.max(self.firm)
    }
    fn lapsed(&self, now: u64, ttl: u64) -> bool {
        self.stamp.saturating_add(ttl) <= now
    }
}

/// What a directory update did.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Update {
    /// The entry now names the new site with identity `seq`; `prev` was named before
    /// (site, version, identity) and must drop that copy if it is another node.
    Accepted { prev: Option<Named>, seq: u64 },
    /// Older than the entry or its floor.
    Rejected,
    /// No slot for a new entry (and no tombstone old enough to reclaim).
    Full,
}

/// No slot for a new entry (and no tombstone old enough to reclaim).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct DirFull;

/// A named copy: (site, version, identity).
pub type Named = (u16, Version, u64);

/// One slot of a directory's table.
pub type DirSlot = Slot<PageId, DirEntry>;

/// Entries (live and tombstones) in the slots of `B`, sized by the runtime.
pub struct Directory<B> {
    t: Table<PageId, DirEntry, B>,
    ttl: u64,
    /// The newest firm version of any registration accepted (see the module doc), and
    /// when it was set.
    horizon: Version,
    horizon_at: u64,
}

impl<B> Directory<B> {
    /// A directory over `slots`, all empty ([`Table::over`]).
    pub const fn new(slots: B, tombstone_ttl: u64) -> Self {
        Directory { t: Table::over(slots), ttl: tombstone_ttl, horizon: Version(0), horizon_at: 0 }
    }
}

impl<B: DerefMut<Target = [DirSlot]>> Directory<B> {
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
    /// The entries, tombstones included, in slots `from` up to `end`.
    pub fn range(&self, from: usize, end: usize) -> impl Iterator<Item = (&PageId, &DirEntry)> {
        self.t.range(from, end)
    }
    /// The live entry with the named copy's identity: (site, version, seq).
    pub fn named(&self, page: &PageId) -> Option<Named> {
        self.t.get(page).and_then(|e| e.site().map(|s| (s, e.version, e.seq)))
    }
    /// The first live entry in slot `from` or later, looking at no more than `limit` slots.
    pub fn scan_live(&self, from: usize, limit: usize) -> Scan<PageId, DirEntry> {
        self.t.scan(from, limit, |_, e| e.site != NO_SITE)
    }

    /// Live entries.
    pub fn live(&self) -> usize {
        self.t.iter().filter(|(_, e)| e.site != NO_SITE).count()
    }
    pub fn capacity(&self) -> usize {
        self.t.capacity()
    }

    /// Whether a registration of `page` at `version` reaches further than one message may
    /// move a page: `u64::MAX`, or more than [`VERSION_LEAD`] above the newest version the
    /// directory knows of the page or the horizon.
    pub fn beyond_lead(&self, page: &PageId, version: Version) -> bool {
        let page_known = self.t.get(page).map_or(Version(0), |e| e.reach());
        let known = page_known.max(self.horizon);
        version == Version(u64::MAX) || version.0 > known.0.saturating_add(VERSION_LEAD)
    }

    /// Whether a registration of `page` at `version` is a firm step at `now`: at most
    /// [`VERSION_STEP`] above the page's reach or the horizon, plus the time since it was
    /// set (else it is a leap; see the module doc).
    pub fn step(&self, page: &PageId, version: Version, now: u64) -> bool {
        let reach = |v: Version, at: u64| v.0.saturating_add(VERSION_STEP).saturating_add(now.saturating_sub(at));
        let page_reach = self.t.get(page).map_or(0, |e| reach(e.reach(), e.stamp));
        version.0 <= page_reach.max(reach(self.horizon, self.horizon_at))
    }

    /// Whether a registration of `page` at `version` is a leap over a firm named copy:
    /// refused, the holder keeps its copy (see the module doc).
    pub fn leap_over_named(&self, page: &PageId, version: Version, now: u64) -> bool {
        self.t.get(page).is_some_and(|e| e.site != NO_SITE && !e.provisional()) && !self.step(page, version, now)
    }

    /// Would a registration of `site`'s copy of `page` at `version`, claiming identity
    /// `claim`, be accepted at `now`? `Some((prev, seq))`: the copy named before (site,
    /// version, identity) and the identity the registered copy gets.
    pub fn check(
        &self,
        page: &PageId,
        site: u16,
        version: Version,
        claim: u64,
        now: u64,
    ) -> Option<(Option<Named>, u64)> {
        if self.beyond_lead(page, version) || self.leap_over_named(page, version, now) {
            return None;
        }
        let next = |seq: u64| seq.max(claim).saturating_add(1);
        let Some(e) = self.t.get(page) else { return Some((None, next(0))) };
        if version < e.floor_at(now, self.ttl) {
            return None;
        }
        let prev = e.site().map(|s| (s, e.version, e.seq));
        if version > e.version {
            return Some((prev, next(e.seq)));
        }
        if version < e.version {
            // Below a live copy: only a provisional one whose ttl ran out yields (a writer
            // moving on). Below a tombstone whose floor lapsed: no identity of this
            // version was given up there.
            let lapsed = e.site == NO_SITE || (e.provisional() && e.lapsed(now, self.ttl));
            return lapsed.then_some((prev, next(e.seq)));
        }
        match e.site() {
            // The named site again: the same copy (its registration repeated, or a put of
            // the version it holds): nothing changes.
            Some(s) if s == site && claim <= e.seq => Some((prev, e.seq)),
            // The named copy handed over (or a copy that descends from it).
            Some(_) if claim >= e.seq && claim != FRESH => Some((prev, next(e.seq))),
            // Older than the named copy: a stale registration.
            Some(_) => None,
            // A tombstone at this version: a copy no directory named may come back; the
            // identity given up may not, from the site that gave it up or from any
            // copy older than it.
            None if claim == FRESH => Some((None, next(e.seq))),
            None if e.last != NO_SITE && ((e.last == site && claim <= e.seq) || claim < e.seq) => None,
            // Nobody gave it up (its site was declared failed, perhaps falsely): any copy
            // at this version may be named, the one whose naming answer was lost included.
            None => Some((None, next(e.seq))),
        }
    }

    /// Register `site`'s copy of `page` at `version`, claiming identity `claim` (see
    /// [`Self::check`]): accepted iff the version is at least the entry's and its floor
    /// (or the entry is a provisional one that lapsed), within the lead, not a leap over a
    /// firm named copy, and the claim is not stale. A step is firm; a leap is provisional.
    /// Idempotent.
    pub fn update(&mut self, page: PageId, site: u16, version: Version, claim: u64, now: u64) -> Update {
        let Some((prev, seq)) = self.check(&page, site, version, claim, now) else { return Update::Rejected };
        let step = self.step(&page, version, now);
        // The version is at least the binding floor; a step makes everything up to it firm.
        let (floor, firm) = self.t.get(&page).map_or((Version(0), Version(0)), |e| (e.floor_at(now, self.ttl), e.firm));
        let firm = if step { firm.max(version) } else { firm };
        // A live entry's stamp is when its version was set: a registration of the same
        // version again (the scrub's, a hand-over) does not shrink the page's reach.
        let stamp = self.t.get(&page).filter(|e| e.site != NO_SITE && e.version == version).map_or(now, |e| e.stamp);
        let e = DirEntry { site, version, seq, last: site, floor, firm, stamp };
        match self.put(page, e, now) {
            Ok(()) => {
                if step && version > self.horizon {
                    self.horizon = version;
                    self.horizon_at = now;
                }
                Update::Accepted { prev, seq }
            }
            Err(DirFull) => Update::Full,
        }
    }

    /// The copy `named` (site, version, identity) was not confirmed by its site: if the
    /// entry still names it, name `back` (the copy it displaced: site, version) again, under
    /// a new identity, which is returned. The firm versions and the floor stay (see the
    /// module doc).
    pub fn reinstate(&mut self, page: &PageId, named: Named, back: (u16, Version), now: u64) -> Option<u64> {
        let e = self.t.get_mut(page)?;
        if (e.site, e.version, e.seq) != named || back.1 < e.floor_at(now, self.ttl) {
            return None;
        }
        let seq = e.seq.saturating_add(1);
        *e = DirEntry { site: back.0, version: back.1, seq, last: back.0, stamp: now, ..*e };
        Some(seq)
    }

    /// The leap `named` (site, version, identity) was not confirmed by its site: if the
    /// entry still names it, un-name it as if it had never been named: a tombstone at the
    /// firm version (the page's reach is what it was), its floor that from before the leap.
    /// Returns whether it did.
    pub fn withdraw(&mut self, page: &PageId, named: Named, now: u64) -> bool {
        match self.t.get_mut(page) {
            Some(e) if (e.site, e.version, e.seq) == named && e.provisional() => {
                *e = DirEntry { site: NO_SITE, version: e.firm, last: named.0, stamp: now, ..*e };
                true
            }
            _ => false,
        }
    }

    /// `site` no longer holds `page` up to `version` (at `version`, the copies up to
    /// identity `seq`; [`ANY_SEQ`]: all): tombstone the entry if it names such a copy of
    /// `site`. Returns whether it did.
    pub fn remove(&mut self, page: &PageId, site: u16, version: Version, seq: u64, now: u64) -> bool {
        match self.t.get_mut(page) {
            Some(e) if e.site == site && (e.version < version || (e.version == version && e.seq <= seq)) => {
                // A provisional copy un-named leaves a provisional floor (it lapses).
                if !e.provisional() {
                    e.firm = e.firm.max(e.version);
                }
                e.site = NO_SITE;
                e.floor = e.floor.max(e.version);
                e.stamp = now;
                true
            }
            _ => false,
        }
    }

    /// Forget `page` up to `version`: versions ≤ `version` are refused from now on (those
    /// beyond the newest firm version only for the tombstone ttl). The
    /// entry is tombstoned if it named such a version; returns the site that held it.
    /// `Err` when there was no entry and no room to record the floor.
    pub fn discard(&mut self, page: PageId, version: Version, now: u64) -> Result<Option<(u16, Version)>, DirFull> {
        let floor = version.next();
        let ttl = self.ttl;
        match self.t.get_mut(&page) {
            Some(e) => {
                // What binds now, before this discard moves the stamp.
                let prior = e.floor_at(now, ttl);
                // Firm up to the newest firm version (a provisional one stays provisional).
                let known = if e.version > e.firm { e.firm } else { e.version };
                e.firm = e.firm.max(floor.min(known.next()));
                e.floor = prior.max(floor).max(e.firm);
                let held = e.site().filter(|_| e.version < floor).map(|s| (s, e.version));
                if held.is_some() || e.site == NO_SITE {
                    e.site = NO_SITE;
                    e.stamp = now;
                }
                Ok(held)
            }
            None => {
                let tomb = DirEntry {
                    site: NO_SITE,
                    version: Version(0),
                    seq: 0,
                    last: NO_SITE,
                    floor,
                    firm: Version(0),
                    stamp: now,
                };
                self.put(page, tomb, now).map(|()| None)
            }
        }
    }

    /// A node was declared failed: tombstone every entry naming it. Returns how many.
    /// The node gave no identity up (a declaration may be a false suspicion): if it comes
    /// back holding the named copy, that copy may be named again.
    pub fn site_failed(&mut self, site: u16, now: u64) -> usize {
        let mut n = 0;
        for (_, e) in self.t.iter_mut() {
            if e.site == site {
                if !e.provisional() {
                    e.firm = e.firm.max(e.version);
                }
                e.site = NO_SITE;
                e.last = NO_SITE;
                e.floor = e.floor.max(e.version);
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
    extern crate std;
    use super::*;
    use std::{vec, vec::Vec};

    const P: PageId = PageId::new(1, 1);

    /// Register and return the identity given, or `None` if refused.
    fn up(d: &mut Directory<Vec<DirSlot>>, p: PageId, site: u16, v: u64, claim: u64, now: u64) -> Option<u64> {
        match d.update(p, site, Version(v), claim, now) {
            Update::Accepted { seq, .. } => Some(seq),
            Update::Rejected => None,
            Update::Full => panic!("full"),
        }
    }

    #[test]
    fn versions_only_grow_and_tombstones_keep_the_floor() {
        let mut d = Directory::new(vec![None; 4], 100);
        assert_eq!(d.update(P, 1, Version(5), FRESH, 0), Update::Accepted { prev: None, seq: 1 });
        assert_eq!(up(&mut d, P, 2, 4, FRESH, 1), None, "older version");
        assert_eq!(up(&mut d, P, 2, 5, FRESH, 1), None, "a put of the version named elsewhere");
        assert_eq!(
            d.update(P, 2, Version(5), 1, 2),
            Update::Accepted { prev: Some((1, Version(5), 1)), seq: 2 },
            "same version, handed over"
        );
        assert_eq!(d.update(P, 2, Version(5), 1, 3), Update::Accepted { prev: Some((2, Version(5), 2)), seq: 2 });
        assert_eq!(up(&mut d, P, 2, 5, 2, 3), Some(2), "idempotent");
        assert!(!d.remove(&P, 1, Version(9), ANY_SEQ, 4), "only the named site removes");
        assert!(!d.remove(&P, 2, Version(4), ANY_SEQ, 4), "only up to its version");
        assert!(!d.remove(&P, 2, Version(5), 1, 4), "only up to its identity");
        assert!(d.remove(&P, 2, Version(5), 2, 4));
        assert_eq!(d.lookup(&P), None);
        assert_eq!(up(&mut d, P, 3, 4, FRESH, 5), None, "the tombstone's floor");
        assert_eq!(up(&mut d, P, 2, 5, 2, 5), None, "the identity given up, from its site");
        assert_eq!(up(&mut d, P, 3, 5, 1, 5), None, "an older identity");
        assert_eq!(up(&mut d, P, 3, 5, FRESH, 5), Some(3), "a fresh copy of the same version may come back");
        assert_eq!(d.named(&P), Some((3, Version(5), 3)));
        assert_eq!(up(&mut d, P, 1, 6, FRESH, 6), Some(4), "a newer version: identities keep growing");
    }

    #[test]
    fn a_stale_registration_of_the_previous_holder_is_refused() {
        // Node 1 holds the page; it is handed over to node 2 (movepage or moving read);
        // node 1's re-registration (in flight, or a duplicate) arrives afterwards.
        let mut d = Directory::new(vec![None; 4], 100);
        let s1 = up(&mut d, P, 1, 3, FRESH, 0).unwrap();
        assert_eq!(up(&mut d, P, 1, 3, s1, 1), Some(s1), "re-registration");
        let s2 = up(&mut d, P, 2, 3, s1, 2).unwrap();
        assert!(s2 > s1);
        assert_eq!(up(&mut d, P, 1, 3, s1, 3), None, "the previous holder's registration is stale");
        assert_eq!(up(&mut d, P, 1, 3, FRESH, 3), None, "so is its put's");
        assert_eq!(d.named(&P), Some((2, Version(3), s2)));
        assert_eq!(up(&mut d, P, 2, 3, s1, 4), Some(s2), "the hand-over's duplicate");
        // A moving read: the holder un-names its copy before the reader registers.
        assert!(d.remove(&P, 2, Version(3), s2, 5));
        assert_eq!(up(&mut d, P, 2, 3, s2, 6), None, "the reader's copy: the giver may not come back");
        let s3 = up(&mut d, P, 3, 3, s2, 7).unwrap();
        assert_eq!(d.named(&P), Some((3, Version(3), s3)));
        // A late removal of an older copy of the same site un-names nothing.
        assert!(!d.remove(&P, 3, Version(3), s2, 8));
    }

    #[test]
    fn discard_raises_the_floor_past_the_version() {
        let mut d = Directory::new(vec![None; 4], 100);
        up(&mut d, P, 1, 3, FRESH, 0);
        assert_eq!(d.discard(P, Version(3), 1), Ok(Some((1, Version(3)))));
        assert_eq!(d.lookup(&P), None);
        assert_eq!(up(&mut d, P, 1, 3, FRESH, 2), None);
        assert!(up(&mut d, P, 2, 4, FRESH, 2).is_some());
        // Discarding an older version keeps a newer entry but raises the floor.
        assert_eq!(d.discard(P, Version(2), 3), Ok(None));
        assert_eq!(d.lookup(&P), Some((2, Version(4))));
        // A discard of an unknown page leaves a floor.
        let q = PageId::new(2, 2);
        assert_eq!(d.discard(q, Version(7), 4), Ok(None));
        assert_eq!(up(&mut d, q, 1, 7, FRESH, 5), None);
        assert!(up(&mut d, q, 1, 8, FRESH, 5).is_some());
    }

    #[test]
    fn a_discard_beyond_every_known_version_lapses_after_the_ttl() {
        let mut d = Directory::new(vec![None; 4], 100);
        up(&mut d, P, 1, 3, FRESH, 0);
        // Up to version 3 is known: that part of the floor is firm.
        assert_eq!(d.discard(P, Version(u64::MAX), 10), Ok(Some((1, Version(3)))));
        assert_eq!(up(&mut d, P, 2, 9, FRESH, 50), None, "binds within the ttl");
        assert_eq!(up(&mut d, P, 2, 3, FRESH, 200), None, "the known versions stay discarded");
        assert!(up(&mut d, P, 2, 4, FRESH, 200).is_some(), "lapsed");
        assert_eq!(d.entry(&P).map(|e| (e.floor, e.firm)), Some((Version(4), Version(4))));
        // A page the directory never named: the whole floor is provisional.
        let q = PageId::new(2, 2);
        assert_eq!(d.discard(q, Version(1 << 40), 300), Ok(None));
        assert_eq!(up(&mut d, q, 1, 1, FRESH, 399), None);
        assert!(up(&mut d, q, 1, 1, FRESH, 400).is_some());
        // A discard within what is known is firm for good.
        assert_eq!(d.discard(q, Version(1), 500), Ok(Some((1, Version(1)))));
        assert_eq!(up(&mut d, q, 1, 1, FRESH, 10_000), None);
    }

    #[test]
    fn a_registration_may_lead_the_known_versions_by_the_lead_only() {
        let mut d = Directory::new(vec![None; 4], 100);
        assert_eq!(up(&mut d, P, 1, u64::MAX, FRESH, 0), None, "u64::MAX, even with nothing known");
        assert_eq!(up(&mut d, P, 1, VERSION_LEAD + 1, FRESH, 0), None);
        let s1 = up(&mut d, P, 1, VERSION_LEAD, FRESH, 0).unwrap();
        // A leap: it moved neither the horizon nor the page's firm versions.
        assert!(d.entry(&P).unwrap().provisional());
        let q = PageId::new(2, 2);
        assert_eq!(up(&mut d, q, 2, VERSION_LEAD + 1, FRESH, 1), None, "the horizon did not move");
        // Its holder's next write steps from it: firm, and the horizon moves.
        let s2 = up(&mut d, P, 1, VERSION_LEAD + 16, FRESH, 2).unwrap();
        assert!(s2 > s1 && !d.entry(&P).unwrap().provisional());
        assert_eq!(up(&mut d, q, 2, 2 * VERSION_LEAD + 17, FRESH, 3), None);
        assert!(up(&mut d, q, 2, 2 * VERSION_LEAD + 16, FRESH, 3).is_some());
        assert_eq!(up(&mut d, P, 2, u64::MAX, FRESH, 4), None);
        assert_eq!(d.named(&P), Some((1, Version(VERSION_LEAD + 16), s2)), "the refused ones displaced nothing");
    }

    #[test]
    fn a_leap_never_displaces_a_named_copy_and_a_step_does() {
        let mut d = Directory::new(vec![None; 4], 100);
        let s1 = up(&mut d, P, 1, 5, FRESH, 0).unwrap();
        let leap = 5 + VERSION_STEP + 1;
        assert!(d.leap_over_named(&P, Version(leap), 0));
        assert_eq!(up(&mut d, P, 2, leap, FRESH, 0), None, "a leap over the named copy");
        assert_eq!(up(&mut d, P, 1, leap, s1, 0), None, "its own holder's leap too");
        assert_eq!(d.named(&P), Some((1, Version(5), s1)));
        // The reach grows with the time since it was set (the wall clock's versions do).
        assert!(d.leap_over_named(&P, Version(leap), 0) && !d.leap_over_named(&P, Version(leap), 1));
        assert!(matches!(
            d.update(P, 2, Version(leap), FRESH, 1),
            Update::Accepted { prev: Some((1, Version(5), _)), .. }
        ));
        assert!(!d.entry(&P).unwrap().provisional(), "a step is firm");
        // Registered again at its version, it keeps the time its version was set.
        assert_eq!(up(&mut d, P, 2, leap, FRESH, 50), Some(d.named(&P).unwrap().2));
        assert_eq!(d.entry(&P).unwrap().stamp, 1);
        assert!(!d.leap_over_named(&P, Version(leap + VERSION_STEP + 59), 60));
        assert!(d.leap_over_named(&P, Version(leap + VERSION_STEP + 60), 60));
        // A step above the horizon counts from the horizon too.
        let q = PageId::new(2, 2);
        assert!(up(&mut d, q, 3, leap + VERSION_STEP, FRESH, 1).is_some());
        assert!(!d.entry(&q).unwrap().provisional());
    }

    #[test]
    fn a_provisional_copy_binds_for_the_ttl_only_unless_a_step_confirms_it() {
        let mut d = Directory::new(vec![None; 4], 100);
        up(&mut d, P, 1, 3, FRESH, 0);
        let q = PageId::new(2, 2);
        let leap = 3 + VERSION_STEP + 10;
        let sq = up(&mut d, q, 2, leap, FRESH, 0).expect("a leap over no named copy");
        assert!(d.entry(&q).unwrap().provisional());
        assert_eq!(up(&mut d, q, 1, 4, FRESH, 99), None, "binds within the ttl");
        // After the ttl, a writer moving on below it displaces it (its holder drops it).
        assert_eq!(
            d.update(q, 1, Version(4), FRESH, 100),
            Update::Accepted { prev: Some((2, Version(leap), sq)), seq: sq + 1 }
        );
        assert!(!d.entry(&q).unwrap().provisional());
        // Registered again (a step: its holder's scrub, or its writer's next write), a
        // leap is firm and does not lapse.
        let r = PageId::new(3, 3);
        let sr = up(&mut d, r, 2, leap, FRESH, 0).unwrap();
        assert_eq!(up(&mut d, r, 2, leap, sr, 1), Some(sr));
        assert!(!d.entry(&r).unwrap().provisional());
        assert_eq!(up(&mut d, r, 1, 4, FRESH, 1000), None);
    }

    #[test]
    fn a_provisional_copy_un_named_or_discarded_leaves_a_floor_that_lapses() {
        let mut d = Directory::new(vec![None; 4], 100);
        up(&mut d, P, 1, 3, FRESH, 0);
        let leap = 3 + 2 * VERSION_STEP;
        // Over a tombstone at 3: named, then un-named by its site (it holds nothing).
        assert!(d.remove(&P, 1, Version(3), ANY_SEQ, 1));
        let s = up(&mut d, P, 2, leap, FRESH, 2).unwrap();
        assert!(d.remove(&P, 2, Version(leap), s, 3));
        assert_eq!(up(&mut d, P, 1, 4, FRESH, 50), None, "binds within the ttl");
        assert_eq!(up(&mut d, P, 1, 2, FRESH, 200), None, "the firm versions stay refused");
        assert!(up(&mut d, P, 1, 4, FRESH, 200).is_some(), "lapsed");
        // A discard of a provisional version does not make it firm.
        let q = PageId::new(2, 2);
        up(&mut d, q, 2, leap, FRESH, 300);
        assert_eq!(d.discard(q, Version(leap), 301), Ok(Some((2, Version(leap)))));
        assert_eq!(up(&mut d, q, 1, 7, FRESH, 350), None);
        assert!(up(&mut d, q, 1, 7, FRESH, 401).is_some());
        // Nor does a site declared failed.
        let r = PageId::new(3, 3);
        up(&mut d, r, 2, leap, FRESH, 500);
        assert_eq!(d.site_failed(2, 501), 1);
        assert_eq!(up(&mut d, r, 1, 7, FRESH, 550), None);
        assert!(up(&mut d, r, 1, 7, FRESH, 601).is_some());
    }

    #[test]
    fn an_unconfirmed_copy_gives_way_to_the_one_it_displaced_and_a_leap_is_withdrawn() {
        let mut d = Directory::new(vec![None; 4], 100);
        let s1 = up(&mut d, P, 1, 5, FRESH, 0).unwrap();
        // A step claimed by site 2, not confirmed: site 1's copy is named again.
        let s2 = up(&mut d, P, 2, 21, FRESH, 1).unwrap();
        assert_eq!(d.reinstate(&P, (2, Version(21), s2 - 1), (1, Version(5)), 2), None, "another copy");
        let s3 = d.reinstate(&P, (2, Version(21), s2), (1, Version(5)), 2).unwrap();
        assert!(s3 > s2 && s2 > s1);
        assert_eq!(d.named(&P), Some((1, Version(5), s3)));
        assert_eq!(up(&mut d, P, 1, 5, s1, 3), Some(s3), "its holder learns the new identity");
        assert!(up(&mut d, P, 3, 6, FRESH, 4).is_some(), "the next write is a step from it");
        // A leap over no copy, withdrawn: the page's first put is not bound by it, and the
        // page's reach is what it was.
        let q = PageId::new(2, 2);
        let leap = 2 * VERSION_STEP + 40;
        let sq = up(&mut d, q, 2, leap, FRESH, 5).unwrap();
        assert!(!d.withdraw(&q, (2, Version(leap), sq + 1), 6));
        assert!(d.withdraw(&q, (2, Version(leap), sq), 6));
        assert_eq!(d.lookup(&q), None);
        assert!(!d.step(&q, Version(leap - 20), 6), "no reach left from the leap");
        assert!(up(&mut d, q, 1, 1, FRESH, 7).is_some(), "the first put");
        assert!(!d.entry(&q).unwrap().provisional());
    }

    #[test]
    fn failed_sites_are_tombstoned() {
        let mut d = Directory::new(vec![None; 8], 100);
        for i in 0..6u64 {
            up(&mut d, PageId::new(0, i), (i % 3) as u16, i + 1, FRESH, 0);
        }
        assert_eq!(d.site_failed(1, 10), 2);
        assert_eq!(d.live(), 4);
        assert!(d.iter().all(|(_, e)| e.site != 1));
        assert_eq!(up(&mut d, PageId::new(0, 1), 2, 1, FRESH, 11), None);
        assert!(up(&mut d, PageId::new(0, 1), 2, 2, FRESH, 11).is_some());
        assert_eq!(up(&mut d, PageId::new(0, 4), 2, 4, FRESH, 11), None);
    }

    #[test]
    fn a_site_declared_failed_gave_nothing_up() {
        let mut d = Directory::new(vec![None; 8], 100);
        let s1 = up(&mut d, P, 1, 3, FRESH, 0).unwrap();
        // Handed over to site 2, whose copy's naming answer is lost; then 2 is declared
        // failed (falsely) and comes back registering the claim it knew.
        let s2 = up(&mut d, P, 2, 3, s1, 1).unwrap();
        assert_eq!(d.site_failed(2, 2), 1);
        let s3 = up(&mut d, P, 2, 3, s1, 3).expect("the copy the failed site still holds");
        assert!(s3 > s2);
        assert_eq!(up(&mut d, P, 2, 2, FRESH, 3), None, "older versions stay refused");
        // Given up, the same identity may not come back.
        assert!(d.remove(&P, 2, Version(3), s3, 4));
        assert_eq!(up(&mut d, P, 2, 3, s3, 5), None);
    }

    #[test]
    fn full_table_reclaims_only_expired_tombstones() {
        let mut d = Directory::new(vec![None; 2], 100);
        up(&mut d, PageId::new(0, 1), 1, 1, FRESH, 0);
        up(&mut d, PageId::new(0, 2), 1, 1, FRESH, 0);
        assert_eq!(d.update(PageId::new(0, 3), 1, Version(1), FRESH, 500), Update::Full, "live entries stay");
        d.remove(&PageId::new(0, 1), 1, Version(1), ANY_SEQ, 50);
        assert_eq!(d.update(PageId::new(0, 3), 1, Version(1), FRESH, 120), Update::Full, "tombstone too young");
        assert!(up(&mut d, PageId::new(0, 3), 1, 1, FRESH, 150).is_some());
        assert!(d.entry(&PageId::new(0, 1)).is_none(), "the expired tombstone made room");
        assert_eq!(d.discard(PageId::new(0, 9), Version(1), 150), Err(DirFull));
    }
}
