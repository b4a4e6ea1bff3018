// SPDX-License-Identifier: GPL-2.0-only
//! The volume's own records, kept in the cluster beside its pages so that a reload (a
//! module reloaded, a daemon restarted, on this node or another) knows what it is:
//!
//! - the **label** (meta page 0): the disk identity, its size, its replica count, the
//!   epoch of the load that last claimed it and the node it runs on. A load reads it,
//!   refuses to start when another live member owns the identity
//!   ([`StoreError::IdentityInUse`]) or the volume would shrink or change its replica count
//!   ([`StoreError::NotThisVolume`]; it may grow), and claims it with the next epoch, above
//!   every epoch a member still knows of ([`super::claim`]): every version this load writes
//!   is above every version an earlier load wrote ([`super::record::Clock`]);
//! - the **floor map** (meta pages 1..): per page, a version below which its copies
//!   are strays ([`super::record`]; 0: never written). A write of a page never written
//!   sets it before it is acknowledged (the write waits for its map page to be stored),
//!   and so does a write that leaves strays ([`super::write`]). So
//!   after a reload a written page whose every copy died fails instead of reading as
//!   zeros, a page never written still reads as zeros without the network, and no copy
//!   older than the floor is taken for the page's. A map page the load could not get
//!   (asked of every member, none has a copy, or the copy read is older than a write of
//!   it a member knows of) takes its pages' floors with it: they are [`FLOOR_LOST`],
//!   written but with no copy known to be theirs, and a read of one fails
//!   ([`StoreError::Lost`]) until a write sets its floor again. Any copy would do instead
//!   only while no stray is left: a stray whose page's newest copies died with the map
//!   page would be read for the page (checker seed 35,002,170). A map page whose copies
//!   may be on a member out of reach for now is read again later, as the label is.
//!
//! Meta pages are volume pages past the user's: the same replicated writes and reads,
//! retries, sites and repair; their GMS page numbers count down from `u64::MAX`, so a
//! volume's meta pages keep their ids if it is ever loaded with another size.
//!
//! A label found during a load whose holder is then declared failed is waited for (the
//! holder may only be suspected), never taken for a missing one; nor is a volume taken for
//! new while a member declared failed during the load has not been heard again, and asked
//! for the label since ([`super::read`]: a member heard again during a read's last pass
//! has the read end `Unreachable`, not `Lost`).
//!
//! A load that started afresh and then meets a newer version of one of the volume's pages
//! (an earlier load's, whose label died) claims a higher epoch and writes on from there
//! ([`Store::outrun_older_load`](super::Store)); the write that met it fails.
//!
//! A meta page whose every copy died while a load held the volume (one copy of each page,
//! its holder failed) is written again from that load's memory
//! ([`Store::rewrite_lost_meta`](super::Store)): the load owns the volume, so its label and
//! map are the volume's.
//!
//! Limits: with every copy of the label gone while no load held the volume, a load starts
//! the volume afresh: the floor map is gone with the label, so the pages the earlier loads
//! wrote read as zeros (the copies they left are below its epoch, [`super::claim`]). With
//! every copy of a map page gone, its pages fail until written again, their data or not.
//! A map page is itself found as its newest copy a reload can reach, checked with every
//! member ([`super::claim`]): one older than a write of it a member knows of counts as
//! unreadable. When every newer copy of a map page died while no load held the volume and
//! no member keeps a trace of its write (its directory node died too), an older copy gives
//! older floors, and a page whose every newest copy died with them may read as an older
//! write's.
//!
//! Cost: the floor map takes 8 bytes per page, `r` copies, in the cluster's memory (1/1024
//! of the volume at 8 KiB pages), all written when the volume is made.

use super::StoreError;

/// A floor lost with every copy of its map page: the page was written, and no copy is
/// known to be its newest (a stray may have outlived every newer one). Kept in the map
/// as it is, so a reload knows it too; below every floor a write sets.
pub const FLOOR_LOST: u64 = u64::MAX;

/// "TPZVOL" and the layout version (2: a floor per page, not a bit).
const MAGIC: u64 = 0x0002_4c4f_565a_5054;
/// Bytes of an encoded label.
pub const LABEL_BYTES: usize = 40;

/// The label of a volume.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Label {
    pub identity: u64,
    pub pages: u64,
    pub replicas: u8,
    /// The owning load's epoch (its versions' top bits) and node.
    pub epoch: u32,
    pub owner: u16,
}

impl Label {
    /// `out` must hold [`LABEL_BYTES`]; the rest of it is left as it is.
    pub fn encode(&self, out: &mut [u8]) {
        let mut b = [0u8; LABEL_BYTES];
        b[0..8].copy_from_slice(&MAGIC.to_le_bytes());
        b[8..16].copy_from_slice(&self.identity.to_le_bytes());
        b[16..24].copy_from_slice(&self.pages.to_le_bytes());
        b[24..28].copy_from_slice(&self.epoch.to_le_bytes());
        b[28..30].copy_from_slice(&self.owner.to_le_bytes());
        b[30] = self.replicas;
        let sum = b[..32].iter().fold(0u64, |h, &x| super::super::page::mix64(h ^ u64::from(x)));
        b[32..40].copy_from_slice(&sum.to_le_bytes());
        if let Some(o) = out.get_mut(..LABEL_BYTES) {
            o.copy_from_slice(&b);
        }
    }

    /// A label, or `None` for bytes that are not one (a torn or foreign page).
    pub fn decode(b: &[u8]) -> Option<Label> {
        let b = b.get(..LABEL_BYTES)?;
        let u64_at = |i: usize| b.get(i..i + 8).and_then(|s| s.try_into().ok()).map(u64::from_le_bytes);
        let sum = b[..32].iter().fold(0u64, |h, &x| super::super::page::mix64(h ^ u64::from(x)));
        if u64_at(0)? != MAGIC || u64_at(32)? != sum {
            return None;
        }
        Some(Label {
            identity: u64_at(8)?,
            pages: u64_at(16)?,
            epoch: u32::from_le_bytes(b[24..28].try_into().ok()?),
            owner: u16::from_le_bytes(b[28..30].try_into().ok()?),
            replicas: b[30],
        })
    }

    /// Whether a load of `want` may take over a volume labelled `self`, with `live`
    /// telling which nodes are members now and `me` the loading node.
    pub fn admit(&self, want: &Label, me: u16, live: impl Fn(u16) -> bool) -> Result<(), StoreError> {
        // A volume may grow (its new pages were never written); it may not shrink (pages
        // written past the new end would be lost), nor change its replica count.
        if self.identity != want.identity || self.pages > want.pages || self.replicas != want.replicas {
            return Err(StoreError::NotThisVolume);
        }
        if self.owner != me && live(self.owner) {
            return Err(StoreError::IdentityInUse { owner: self.owner });
        }
        Ok(())
    }
}

/// Meta pages a volume of `pages` pages needs with `page_bytes`-byte pages: the label and
/// one map page per `page_bytes / 8` pages (a floor of 8 bytes each).
pub const fn meta_pages(pages: u64, page_bytes: u32) -> u64 {
    1 + pages.div_ceil(page_bytes as u64 / 8)
}

/// The page space of the disk named `identity` (a user's name for it, hashed): replica
/// numbers take the top four bits ([`crate::replica`]), so they are left clear.
pub const fn space_of(identity: u64) -> u64 {
    super::super::page::mix64(identity ^ 0x6773_6d2d_6469_736b) & !(0xf << 60)
}

/// A map page's state: `set` counts the floors raised in it (a generation), `stored` the
/// generation its last stored copy holds, `writing` the one on its way.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct MapPage {
    pub set: u32,
    pub stored: u32,
    pub writing: Option<u32>,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn labels_round_trip_and_torn_ones_are_refused() {
        let l = Label { identity: 9, pages: 1000, replicas: 2, epoch: 4, owner: 3 };
        let mut b = [0u8; 64];
        l.encode(&mut b);
        assert_eq!(Label::decode(&b), Some(l));
        b[20] ^= 1;
        assert_eq!(Label::decode(&b), None);
        assert_eq!(Label::decode(&[0u8; 64]), None);
        assert_eq!(Label::decode(&b[..10]), None);
    }

    #[test]
    fn a_live_owner_or_another_shape_is_refused() {
        let l = Label { identity: 9, pages: 1000, replicas: 2, epoch: 4, owner: 3 };
        assert_eq!(l.admit(&l, 1, |n| n == 3), Err(StoreError::IdentityInUse { owner: 3 }));
        assert_eq!(l.admit(&l, 1, |_| false), Ok(()));
        assert_eq!(l.admit(&l, 3, |_| true), Ok(()), "a reload on the owner's node");
        assert_eq!(l.admit(&Label { pages: 2000, ..l }, 1, |_| false), Ok(()), "a volume may grow");
        assert_eq!(l.admit(&Label { pages: 500, ..l }, 1, |_| false), Err(StoreError::NotThisVolume));
        assert_eq!(l.admit(&Label { replicas: 1, ..l }, 1, |_| false), Err(StoreError::NotThisVolume));
        assert_eq!(meta_pages(512, 4096), 2);
        assert_eq!(meta_pages(513, 4096), 3);
    }
}

mod load {
    //! Loading a volume and keeping its floor map, as the store's steps.

    use super::super::super::net::storage::Storage;
    use super::super::super::page::Version;
    use super::super::read::ReadReq;
    use super::super::record::{Clock, Entry, Replica};
    use super::super::write::WriteReq;
    use super::super::{Outcome, Owner, Phase, Req, Store, StoreError};
    use super::{Label, FLOOR_LOST};

    impl<Io, F: Copy, S: Storage, const M: usize, const Q: usize, const OPS: usize> Store<Io, F, S, M, Q, OPS> {
        pub(in super::super) fn meta_req_running(&self) -> bool {
            self.reqs.iter().any(|r| {
                matches!(
                    r,
                    Req::Read(ReadReq { io: Owner::Meta, .. })
                        | Req::Write(WriteReq { io: Owner::Meta, .. })
                        | Req::Top(_)
                )
            })
        }

        /// Start the next step of loading, or fail what waits on a refused volume.
        pub(in super::super) fn advance_load(&mut self, now: u64) {
            let page = match self.phase {
                Phase::Ready => return,
                Phase::Refused(e) => return self.fail_waiting(e),
                Phase::Top => return self.advance_top(now),
                Phase::MapCheck { m } => return self.advance_map_check(now, m),
                Phase::Claim if self.label.epoch > Clock::MAX_EPOCH => {
                    self.phase = Phase::Refused(StoreError::VersionsExhausted);
                    return self.fail_waiting(StoreError::VersionsExhausted);
                }
                Phase::Label | Phase::Claim => self.pages,
                Phase::Map { m } => self.pages + m,
            };
            if now < self.load_at || self.meta_req_running() {
                return;
            }
            let Some(slot) = self.free_slot() else { return };
            self.reqs[slot] = if self.phase == Phase::Claim {
                Req::Write(WriteReq::new(Owner::Meta, page, now.saturating_add(self.cfg.write_window_ns)))
            } else {
                Req::Read(ReadReq::new(Owner::Meta, page, now))
            };
        }

        /// Fail every user request waiting for the volume to load with `e`.
        pub(in super::super) fn fail_waiting(&mut self, e: StoreError) {
            for i in 0..self.reqs.len() {
                let (owner, page) = match core::mem::replace(&mut self.reqs[i], Req::Free) {
                    Req::Write(w) if matches!(w.io, Owner::User(_)) => (w.io, w.page),
                    Req::Read(r) if matches!(r.io, Owner::User(_)) => (r.io, r.page),
                    other => {
                        self.reqs[i] = other;
                        continue;
                    }
                };
                self.finish_req(i, owner, page, Outcome::Failed(e), 0);
            }
        }

        /// A meta page's bytes arrived (a read's hit, before its completion).
        pub(in super::super) fn meta_read(&mut self, m: u64, bytes: &[u8]) {
            if m == 0 {
                let members = self.members;
                self.phase = match Label::decode(bytes).ok_or(StoreError::NotThisVolume) {
                    Ok(old) => match old.admit(&self.label, self.me, |n| members.contains(n)) {
                        Ok(()) => {
                            self.label_found = true;
                            self.pages_before = old.pages;
                            // Above the label read and every other copy of one seen (a
                            // newer claim whose copies died may have written).
                            let seen = (0..self.cfg.replicas)
                                .filter_map(|k| self.entry(self.pages, k)?.replica.version())
                                .map(Clock::epoch_of)
                                .max()
                                .unwrap_or(0);
                            self.claim_above(old.epoch.max(seen));
                            Phase::Label
                        }
                        Err(e) => Phase::Refused(e),
                    },
                    Err(e) => Phase::Refused(e),
                };
                return;
            }
            let per = self.map_words();
            let first = usize::try_from(m - 1).unwrap_or(usize::MAX).saturating_mul(per);
            let mut newest = 0;
            for (j, w) in self.floors.iter_mut().skip(first).take(per).enumerate() {
                if let Some(b) = bytes.get(j * 8..j * 8 + 8).and_then(|b| <[u8; 8]>::try_from(b).ok()) {
                    let floor = u64::from_le_bytes(b);
                    newest = newest.max(if floor == FLOOR_LOST { 0 } else { floor });
                    *w = (*w).max(floor);
                }
            }
            self.claim_above(Clock::epoch_of(Version(newest)));
        }

        /// A copy of the volume's written in epoch `epoch` exists: this load claims a later
        /// one. The label read may be older than the volume's last claim (that claim's
        /// copies died, an older copy lived on): the floors and map pages that claim wrote
        /// name its epoch, and reusing it would give new writes versions below its own.
        pub(in super::super) fn claim_above(&mut self, epoch: u32) {
            if epoch >= self.label.epoch {
                self.set_epoch(u64::from(epoch) + 1);
            }
        }

        /// This load's epoch is `epoch`. One past the last a version holds
        /// ([`Clock::MAX_EPOCH`]) has the claim refused rather than its versions wrapped.
        fn set_epoch(&mut self, epoch: u64) {
            self.label.epoch = u32::try_from(epoch).unwrap_or(u32::MAX);
            if self.label.epoch <= Clock::MAX_EPOCH {
                self.clock = Clock::new(self.label.epoch);
            }
        }

        /// Floors per map page.
        fn map_words(&self) -> usize {
            self.cfg.page_bytes as usize / 8
        }

        /// The bytes of meta page `m` as this load writes it.
        pub fn fill_meta(&self, m: u64, buf: &mut [u8]) {
            buf.fill(0);
            if m == 0 {
                return self.label.encode(buf);
            }
            let per = self.map_words();
            let first = usize::try_from(m - 1).unwrap_or(usize::MAX).saturating_mul(per);
            for (w, out) in self.floors.iter().skip(first).take(per).zip(buf.chunks_exact_mut(8)) {
                out.copy_from_slice(&w.to_le_bytes());
            }
        }

        /// A request of the store's own on volume page `page` (a meta page) ended.
        pub(in super::super) fn meta_done(&mut self, page: u64, outcome: Outcome, now: u64) {
            let m = page - self.pages;
            let retry = now.saturating_add(self.cfg.retry_delay_ns);
            match (self.phase, outcome) {
                (Phase::Label, Outcome::Read { .. }) => self.after_map(0),
                // No copy of a label was ever seen: a new volume (nothing to read of its
                // map). One was, on a member now declared failed (perhaps only suspected):
                // it is waited for, not taken for a new volume.
                (Phase::Label, Outcome::Failed(StoreError::Lost)) if self.label_nowhere() => self.end_meta(),
                (Phase::Map { .. }, Outcome::Read { version }) => {
                    self.claim_above(Clock::epoch_of(version));
                    self.map_read = version;
                    self.map_asked = super::super::nodes::NodeSet::EMPTY;
                    self.phase = Phase::MapCheck { m };
                }
                // Every member asked has no copy: the floors are lost with it. Else a copy
                // may be on a member out of reach for now: read again later.
                (Phase::Map { .. }, Outcome::Failed(StoreError::Lost)) => {
                    self.map_unknown(m);
                    self.after_map(m);
                }
                (Phase::Map { .. }, Outcome::Failed(_)) => self.load_at = retry,
                (Phase::Claim, Outcome::Written { .. }) => self.ready(),
                // The cluster holds a newer label than this load's: read it again (it could
                // not be read then), and should it be gone, claim a later epoch (its copies
                // died, but the directory remembers its version).
                (Phase::Claim, Outcome::Failed(StoreError::Superseded)) => {
                    self.load_at = retry;
                    self.set_epoch(u64::from(self.label.epoch) + 1);
                    self.relabel();
                }
                // Tried again later. Users waiting hear why the volume cannot start when it
                // is the cluster's state (too few members, no room); a label not read yet
                // (its holder unreachable for now) keeps them waiting.
                (Phase::Label | Phase::Claim, Outcome::Failed(e)) => {
                    self.load_at = retry;
                    if matches!(e, StoreError::TooFewMembers | StoreError::NoSpace) {
                        self.fail_waiting(e);
                    }
                }
                (Phase::Ready, Outcome::Written { .. }) if m > 0 => {
                    if let Some(p) = self.map_mut(m) {
                        p.stored = p.stored.max(p.writing.take().unwrap_or(0));
                    }
                    self.maps_due = true;
                    for i in 0..self.reqs.len() {
                        if matches!(self.reqs[i], Req::Write(_)) {
                            self.settle_write(i, now);
                        }
                    }
                }
                (Phase::Ready, Outcome::Failed(_)) if m > 0 => {
                    if let Some(p) = self.map_mut(m) {
                        p.writing = None;
                    }
                    (self.load_at, self.maps_due) = (retry, true);
                }
                // The label written again ([`Self::rewrite_lost_meta`]) failed: later.
                (Phase::Ready, Outcome::Failed(_)) => {
                    self.load_at = retry;
                    self.meta_check = true;
                }
                _ => {}
            }
        }

        /// A put was refused as superseded: the cluster holds a newer version of one of this
        /// volume's pages. A load that found the label owns the identity, so that is another
        /// writer's, and the write failed. A load that started the volume afresh (its label
        /// was gone) runs below an earlier load's epoch: it claims a higher one (doubled, so
        /// that a far earlier epoch is passed in a few rounds, by at most
        /// [`super::super::claim::EPOCH_REACH`]: the answer may be a lying member's) and
        /// writes go on from there.
        pub(in super::super) fn outrun_older_load(&mut self, now: u64) {
            if self.label_found || self.phase != Phase::Ready {
                return;
            }
            self.phase = Phase::Claim;
            self.load_at = now;
            let e = u64::from(self.label.epoch);
            self.set_epoch(e + e.min(u64::from(super::super::claim::EPOCH_REACH)));
        }

        /// What is known of meta page `m`'s copies is forgotten: the next read of it asks
        /// every member.
        pub(in super::super) fn forget_meta(&mut self, m: u64) {
            for k in 0..self.cfg.replicas {
                if let Some(at) = self.at(self.pages + m, k) {
                    self.entries[at] = Entry::UNKNOWN;
                }
            }
        }

        /// Start loading again from the label: every meta page's copies unknown.
        fn relabel(&mut self) {
            let first =
                usize::try_from(self.pages).unwrap_or(usize::MAX).saturating_mul(usize::from(self.cfg.replicas));
            for e in self.entries.iter_mut().skip(first) {
                *e = Entry::UNKNOWN;
            }
            self.phase = Phase::Label;
            self.meta_known = false;
        }

        /// Whether a copy of the label was found on a node that is not a member now (declared
        /// failed, perhaps only suspected) and so could not be asked again. A member that
        /// held one was asked, and said it has none.
        fn label_seen(&self) -> bool {
            let entries = (0..self.cfg.replicas).filter_map(|k| self.entry(self.pages, k));
            entries.into_iter().any(|e| !e.sites.minus(self.members).is_empty())
        }

        /// Whether the volume has no label anywhere: none seen, and every member this
        /// load knew is a member now and was asked (one declared failed may only be
        /// suspected, and hold one).
        fn label_nowhere(&self) -> bool {
            !self.label_seen() && self.departed.is_empty()
        }

        /// Map page `m`'s floors are lost (no copy of it is left, or the one read is older
        /// than its last write): all of its pages count as written, none of their copies as
        /// theirs ([`FLOOR_LOST`]). The page is written so once the volume is loaded, and
        /// later loads read it so.
        pub(in super::super) fn map_unknown(&mut self, m: u64) {
            let per = self.map_words();
            let first = usize::try_from(m - 1).unwrap_or(usize::MAX).saturating_mul(per);
            self.floors.iter_mut().skip(first).take(per).for_each(|w| *w = FLOOR_LOST);
            if let Some(p) = self.map_mut(m) {
                p.set = p.set.max(p.stored + 1);
            }
            self.maps_due = true;
            self.stats.lost_maps += 1;
        }

        /// Map page `m` (0: the label) was read: the next one, or the last question round.
        pub(in super::super) fn after_map(&mut self, m: u64) {
            // The map pages the volume had: a volume grown since has none beyond them.
            let had = super::meta_pages(self.pages_before.min(self.pages), self.cfg.page_bytes);
            self.map_again = false;
            if m + 1 < had {
                self.phase = Phase::Map { m: m + 1 };
            } else {
                self.end_meta();
            }
        }

        /// The label and map are read: members that joined meanwhile are asked
        /// ([`super::super::claim`]), then the claim.
        fn end_meta(&mut self) {
            self.meta_known = true;
            self.phase = Phase::Top;
        }

        /// The volume is this load's: pages the map says were written are known as such,
        /// their copies' places unknown. The map pages no earlier load wrote (a new
        /// volume's, a grown one's new ones) are written now, all floors 0, so that a
        /// reload tells a map page never written from one whose every copy died.
        fn ready(&mut self) {
            let had = if self.label_found {
                usize::try_from(super::meta_pages(self.pages_before.min(self.pages), self.cfg.page_bytes) - 1)
                    .unwrap_or(usize::MAX)
            } else {
                0
            };
            for p in self.maps.iter_mut().skip(had) {
                p.set = p.set.max(p.stored + 1);
            }
            self.maps_due = true;
            let r = usize::from(self.cfg.replicas);
            for p in 0..self.pages {
                if self.is_written(p) {
                    let i = usize::try_from(p).unwrap_or(usize::MAX).saturating_mul(r);
                    for e in self.entries.iter_mut().skip(i).take(r) {
                        if e.replica == Replica::Unwritten {
                            *e = Entry::UNKNOWN;
                        }
                    }
                }
            }
            self.phase = Phase::Ready;
        }

        /// Whether this load found the volume's label (else it started the volume afresh,
        /// or has not read it yet).
        pub fn label_found(&self) -> bool {
            self.label_found
        }

        /// Whether volume page `page` was ever written (by this load or an earlier one).
        pub fn is_written(&self, page: u64) -> bool {
            self.floor(page) != Version(0)
        }

        /// Volume page `page`'s floor: copies older than it are strays (0: never written;
        /// meta pages have none; [`FLOOR_LOST`]: every copy).
        pub fn floor(&self, page: u64) -> Version {
            let i = usize::try_from(page).unwrap_or(usize::MAX);
            Version(self.floors.get(i).copied().unwrap_or(0))
        }

        /// Whether volume page `page`'s floor was lost with its map page: a read of it
        /// fails until a write sets it again.
        pub fn floor_lost(&self, page: u64) -> bool {
            self.floor(page) == Version(FLOOR_LOST)
        }

        /// Raise `page`'s floor to `v`; `Some`: it was lower, and the map page must be
        /// stored at the returned generation before the write is acknowledged.
        pub(in super::super) fn raise_floor(&mut self, page: u64, v: Version) -> Option<super::super::write::MapWait> {
            let f = self.floors.get_mut(usize::try_from(page).ok()?)?;
            if *f >= v.0 && *f != FLOOR_LOST {
                return None;
            }
            *f = v.0;
            let m = 1 + page / (u64::from(self.cfg.page_bytes) / 8);
            let p = self.map_mut(m)?;
            p.set += 1;
            let gen = p.set;
            self.maps_due = true;
            Some(super::super::write::MapWait::Until { m, gen })
        }

        /// The generation of map page `m` stored last.
        pub(in super::super) fn map_stored(&self, m: u64) -> u32 {
            self.map_index(m).and_then(|i| self.maps.get(i)).map_or(u32::MAX, |p| p.stored)
        }

        /// Map page `m`'s state (`m` ≥ 1: page 0 is the label).
        pub(in super::super) fn map_mut(&mut self, m: u64) -> Option<&mut super::MapPage> {
            self.map_index(m).and_then(|i| self.maps.get_mut(i))
        }

        fn map_index(&self, m: u64) -> Option<usize> {
            usize::try_from(m.checked_sub(1)?).ok()
        }

        /// Whether meta page `page` has a copy on a live member.
        fn meta_held(&self, page: u64) -> bool {
            (0..self.cfg.replicas)
                .any(|k| self.entry(page, k).and_then(|e| e.replica.holder()).is_some_and(|h| self.members.contains(h)))
        }

        /// Write again every meta page with no copy on a live member (after a member
        /// failed or restarted): a loaded volume's label and floor map are this load's
        /// own, so it writes them from memory where no copy is left to make them again
        /// from. Else a reload would find no label and start the volume afresh (every
        /// written page read as zeros), or no map page and take every page it covers for
        /// written. The label goes as a write of its own; a map page gets a newer
        /// generation for [`Self::start_map_writes`] to store.
        pub(in super::super) fn rewrite_lost_meta(&mut self, now: u64) {
            if !self.meta_check || now < self.load_at {
                return;
            }
            let mut pending = false;
            for m in 0..self.meta {
                let page = self.pages + m;
                if self.meta_held(page) {
                    continue;
                }
                if m > 0 {
                    if let Some(p) = self.map_mut(m) {
                        // A write on its way stores a copy (or fails, and is made again).
                        if p.writing.is_none() && p.set <= p.stored {
                            p.set = p.stored + 1;
                            self.maps_due = true;
                        }
                    }
                    continue;
                }
                match self.free_slot() {
                    Some(slot) if self.page_free(page, true) => {
                        let deadline = now.saturating_add(self.cfg.write_window_ns);
                        self.reqs[slot] = Req::Write(WriteReq::new(Owner::Meta, page, deadline));
                    }
                    // A request on the label, or no slot: looked at again next time.
                    _ => pending = true,
                }
            }
            self.meta_check = pending;
        }

        /// The loaded volume's meta pages with a replica lost and no copy on a live
        /// member: 0 once the writes `rewrite_lost_meta` made are stored (a reload then
        /// finds the volume as this load knows it).
        pub fn meta_lost(&self) -> u64 {
            if self.phase != Phase::Ready {
                return 0;
            }
            let lost = |p: u64| {
                (0..self.cfg.replicas)
                    .any(|k| self.entry(p, k).is_some_and(|e| matches!(e.replica, Replica::Lost { .. })))
            };
            (self.pages..self.pages.saturating_add(self.meta)).filter(|&p| lost(p) && !self.meta_held(p)).count() as u64
        }

        /// Start writing the map pages with bits not yet stored (looked for only when a
        /// generation moved, or one could not start last time).
        pub(in super::super) fn start_map_writes(&mut self, now: u64) {
            if !self.maps_due || now < self.load_at {
                return;
            }
            self.maps_due = false;
            for c in 0..self.maps.len() {
                let p = self.maps[c];
                if p.set <= p.stored || p.writing.is_some() {
                    continue;
                }
                let page = self.pages + 1 + c as u64;
                // A repair of the page runs to its end first: its put would land beside
                // this write's (the store makes one request on a page at a time).
                if !self.page_free(page, true) {
                    self.maps_due = true;
                    continue;
                }
                let Some(slot) = self.free_slot() else {
                    self.maps_due = true;
                    return;
                };
                self.reqs[slot] =
                    Req::Write(WriteReq::new(Owner::Meta, page, now.saturating_add(self.cfg.write_window_ns)));
                self.maps[c].writing = Some(p.set);
            }
        }

        /// Whether `op`'s completion should come with its frame's bytes
        /// ([`Self::handle_get_bytes`]): a read of a meta page.
        pub fn wants_bytes(&self, op: super::super::super::types::OpId) -> bool {
            let Some(r) = self.op_rec(op) else { return false };
            matches!(self.reqs.get(usize::from(r.req.0)), Some(Req::Read(ReadReq { io: Owner::Meta, .. })))
        }
    }
}
