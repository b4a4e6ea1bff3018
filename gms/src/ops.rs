// SPDX-License-Identifier: GPL-2.0-only
//! GMS operations as NetRPC [`Operation`]s and their fixed-layout bodies (little-endian;
//! every decoder checks the exact length and the enum codes, and never panics).
//!
//! | op | kind | request | reply |
//! |----|------|---------|-------|
//! | `GETPAGE` 0x4701 | call, may be delegated once | [`GetReq`] 41 B | [`GetReply`] 36 B + page payload |
//! | `PUTPAGE` 0x4702 | one-way + page payload | [`PutReq`] 47 B | — (answered by `PUTDONE`) |
//! | `MOVEPAGE` 0x4703 | one-way + page payload | [`PutReq`] | — (answered by `PUTDONE`) |
//! | `DISCARDPAGE` 0x4704 | call to the directory | [`DiscardReq`] 24 B | [`DirAck`] 25 B |
//! | `PUTDONE` 0x4705 | one-way, target → putter | [`PutDone`] 45 B | — |
//! | `DIRUPDATE` 0x4706 | call, holder → directory | [`DirUpdateReq`] 42 B | [`DirAck`] |
//! | `DIRREMOVE` 0x4707 | call, ex-holder → directory | [`DirRemoveReq`] 34 B | [`DirAck`] |
//! | `DROPPAGE` 0x4708 | call, directory → stale holder | [`DropReq`] 32 B | [`DirAck`] |
//! | `DIRVERIFY` 0x4709 | call, directory → named holder (scrub; a displacing or leaping registration's confirmation) | [`DropReq`] | [`DirAck`] |
//! | `GETPAGES` 0x470A | call, requester → holder ([`super::getpages`]) | [`GetPagesReq`] 72 B | [`GetPagesReply`] 67 B + the pages, one payload |
//! | `TOPVERSION` 0x470B | call, a loading writer → a member ([`super::top`]) | [`TopReq`] 17 B | [`TopReply`] 16 B |
//!
//! The `seq` fields carry a copy's identity at its version (see [`super::directory`]):
//! the directory assigns it when it accepts a registration (`DirAck::seq`), a hand-over
//! passes the giver's to the taker (`PutReq::seq` of a movepage, `GetReply::seq` of a
//! moving read), and the taker's `DIRUPDATE` claims it, so the directory refuses a stale
//! registration of the previous holder at the same version.

use super::net::wire::{CodecError, Message, Operation};
use super::page::{PageId, Version};
use super::types::{Answer, OpId};

pub const OP_GETPAGE: u16 = 0x4701;
pub const OP_PUTPAGE: u16 = 0x4702;
pub const OP_MOVEPAGE: u16 = 0x4703;
pub const OP_DISCARDPAGE: u16 = 0x4704;
pub const OP_PUTDONE: u16 = 0x4705;
pub const OP_DIRUPDATE: u16 = 0x4706;
pub const OP_DIRREMOVE: u16 = 0x4707;
pub const OP_DROPPAGE: u16 = 0x4708;
pub const OP_DIRVERIFY: u16 = 0x4709;
pub const OP_GETPAGES: u16 = 0x470A;
pub const OP_TOPVERSION: u16 = 0x470B;

/// Whether `op` is one of GMS's (a runtime sharing its NetRPC with other services routes
/// on this).
pub fn is_gms_op(op: u16) -> bool {
    (OP_GETPAGE..=OP_TOPVERSION).contains(&op)
}

// ---- encoding helpers -------------------------------------------------------------------

struct Out<'a> {
    b: &'a mut [u8],
    at: usize,
}

impl Out<'_> {
    fn bytes(&mut self, v: &[u8]) -> Result<(), CodecError> {
        let end = self.at + v.len();
        self.b.get_mut(self.at..end).ok_or(CodecError)?.copy_from_slice(v);
        self.at = end;
        Ok(())
    }
    fn u8(&mut self, v: u8) -> Result<(), CodecError> {
        self.bytes(&[v])
    }
    fn u16(&mut self, v: u16) -> Result<(), CodecError> {
        self.bytes(&v.to_le_bytes())
    }
    fn u32(&mut self, v: u32) -> Result<(), CodecError> {
        self.bytes(&v.to_le_bytes())
    }
    fn u64(&mut self, v: u64) -> Result<(), CodecError> {
        self.bytes(&v.to_le_bytes())
    }
    fn page(&mut self, p: &PageId) -> Result<(), CodecError> {
        self.bytes(&p.to_bytes())
    }
    fn op(&mut self, o: &OpId) -> Result<(), CodecError> {
        self.u16(o.slot)?;
        self.u32(o.generation)
    }
}

struct In<'a> {
    b: &'a [u8],
    at: usize,
}

impl<'a> In<'a> {
    /// A reader over a body that must be exactly `len` bytes.
    fn exact(b: &'a [u8], len: usize) -> Result<Self, CodecError> {
        if b.len() == len {
            Ok(In { b, at: 0 })
        } else {
            Err(CodecError)
        }
    }
    fn take<const N: usize>(&mut self) -> Result<[u8; N], CodecError> {
        let mut a = [0u8; N];
        a.copy_from_slice(self.b.get(self.at..self.at + N).ok_or(CodecError)?);
        self.at += N;
        Ok(a)
    }
    fn u8(&mut self) -> Result<u8, CodecError> {
        Ok(self.take::<1>()?[0])
    }
    fn u16(&mut self) -> Result<u16, CodecError> {
        Ok(u16::from_le_bytes(self.take()?))
    }
    fn u32(&mut self) -> Result<u32, CodecError> {
        Ok(u32::from_le_bytes(self.take()?))
    }
    fn u64(&mut self) -> Result<u64, CodecError> {
        Ok(u64::from_le_bytes(self.take()?))
    }
    fn version(&mut self) -> Result<Version, CodecError> {
        Ok(Version(self.u64()?))
    }
    fn page(&mut self) -> Result<PageId, CodecError> {
        Ok(PageId::from_bytes(&self.take()?))
    }
    fn op(&mut self) -> Result<OpId, CodecError> {
        Ok(OpId { slot: self.u16()?, generation: self.u32()? })
    }
}

/// A `u8`-coded enum on the wire.
macro_rules! wire_enum {
    ($(#[$m:meta])* $name:ident { $($(#[$vm:meta])* $v:ident = $n:literal),* $(,)? }) => {
        $(#[$m])*
        #[derive(Clone, Copy, Debug, PartialEq, Eq)]
        pub enum $name { $($(#[$vm])* $v = $n),* }
        impl $name {
            pub fn from_u8(b: u8) -> Result<$name, CodecError> {
                match b { $($n => Ok($name::$v),)* _ => Err(CodecError) }
            }
        }
    };
}

/// A body type: `$len` bytes, written and read field by field in order.
macro_rules! body {
    ($name:ident, $len:literal, |$s:ident, $o:ident| $enc:block, |$i:ident| $dec:block) => {
        impl $name {
            pub const WIRE_BYTES: usize = $len;
        }
        impl Message for $name {
            fn encode(&self, out: &mut [u8]) -> Result<usize, CodecError> {
                let $s = self;
                let mut $o = Out { b: out, at: 0 };
                $enc
                debug_assert_eq!($o.at, $len);
                Ok($o.at)
            }
            fn decode(body: &[u8]) -> Result<Self, CodecError> {
                let mut $i = In::exact(body, $len)?;
                $dec
            }
        }
    };
}

// ---- GETPAGE ----------------------------------------------------------------------------

/// Getpage flags.
pub const GET_MOVING: u8 = 1;
/// Sent straight to the caching site (the requester is the directory node itself).
pub const GET_DIRECT: u8 = 2;
/// Sent straight to a member the requester believes holds the page at `want` or newer
/// (the member a block device last put it to): served from such a copy, else a miss (the
/// requester asks the directory then). Never a moving read, never repairs the directory.
pub const GET_HINTED: u8 = 4;

/// Requester → directory (hops 0), or directory → caching site (delegated, hops 1) with
/// `want` = the version the directory names and `seq` that copy's identity. From a
/// requester, `want` is the oldest version it takes (the newest it knows was written;
/// 0: any) and `seq` is 0.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct GetReq {
    pub page: PageId,
    pub want: Version,
    pub seq: u64,
    pub view: u64,
    pub flags: u8,
}
body!(
    GetReq,
    41,
    |s, o| {
        o.page(&s.page)?;
        o.u64(s.want.0)?;
        o.u64(s.seq)?;
        o.u64(s.view)?;
        o.u8(s.flags)?;
    },
    |i| { Ok(GetReq { page: i.page()?, want: i.version()?, seq: i.u64()?, view: i.u64()?, flags: i.u8()? }) }
);

wire_enum!(
    /// What a getpage found.
    GetStatus {
        /// The page at `version` is the reply's payload.
        Hit = 1,
        Miss = 2,
        /// The directory names the requester itself as the holder of `version`.
        Local = 3,
        /// The server does not count the requester as a member of its view (it declared
        /// it failed, perhaps only suspecting it): the answer says nothing of the page.
        Refused = 4,
        /// The directory took the page over in a recent membership change and names no
        /// copy yet (its holders may still be registering theirs): ask again.
        Rebuilding = 5,
    }
);

/// Reply flag: the page is dirty (a moving read hands the dirt to the requester).
pub const REPLY_DIRTY: u8 = 1;
/// Reply flag: the caching site handed its copy over (a moving read of a registered
/// copy): the requester becomes the holder. Without it the site kept its copy.
pub const REPLY_MOVED: u8 = 2;

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct GetReply {
    pub status: GetStatus,
    pub page: PageId,
    pub version: Version,
    /// The identity of the copy served (a moving read's reader claims it when it
    /// registers), or the one the directory names (`Local`).
    pub seq: u64,
    /// The node that answered.
    pub server: u16,
    pub flags: u8,
}
body!(
    GetReply,
    36,
    |s, o| {
        o.u8(s.status as u8)?;
        o.page(&s.page)?;
        o.u64(s.version.0)?;
        o.u64(s.seq)?;
        o.u16(s.server)?;
        o.u8(s.flags)?;
    },
    |i| {
        Ok(GetReply {
            status: GetStatus::from_u8(i.u8()?)?,
            page: i.page()?,
            version: i.version()?,
            seq: i.u64()?,
            server: i.u16()?,
            flags: i.u8()?,
        })
    }
);

// ---- GETPAGES -----------------------------------------------------------------------------

/// Pages one `GETPAGES` names at most: one per scatter/gather piece of its reply.
pub const GETPAGES_MAX: usize = 8;
/// Pages of one space a `GETPAGES` may span, from its first (its mask's bits).
pub const GETPAGES_SPAN: u64 = 64;

/// Versions of up to [`GETPAGES_MAX`] pages on the wire: the oldest, and how far each
/// one (in the mask's order) is above it.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Versions {
    pub base: Version,
    pub above: [u32; GETPAGES_MAX],
}

impl Versions {
    /// `v` as [`Versions`], or `None` if there are more than [`GETPAGES_MAX`] or two are
    /// more than `u32::MAX` apart.
    pub fn pack(v: &[Version]) -> Option<Versions> {
        let base = *v.iter().min()?;
        let mut above = [0; GETPAGES_MAX];
        for (a, x) in above.iter_mut().zip(v) {
            *a = u32::try_from(x.0 - base.0).ok()?;
        }
        (v.len() <= GETPAGES_MAX).then_some(Versions { base, above })
    }
    /// The `k`-th version.
    pub fn get(&self, k: usize) -> Version {
        Version(self.base.0.saturating_add(u64::from(self.above.get(k).copied().unwrap_or(0))))
    }
}

/// A mask naming 1 to [`GETPAGES_MAX`] pages: bit `i` is page `first + i`.
fn mask_ok(mask: u64) -> Result<u64, CodecError> {
    if (1..=GETPAGES_MAX as u32).contains(&mask.count_ones()) {
        Ok(mask)
    } else {
        Err(CodecError)
    }
}

/// Requester → a member it believes holds every page named, each at its `want` or newer
/// (as `GET_HINTED`): the pages of `first`'s space at `first.page + i` for each bit `i` of
/// `mask`, their versions in the same order.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct GetPagesReq {
    pub first: PageId,
    pub mask: u64,
    pub want: Versions,
    pub view: u64,
}

/// The holder's answer: `Hit` with every page named, at `versions`, as one payload (the
/// pages in the mask's order, each of the payload's length over their number), or `Miss`
/// (with no payload) when it lacks any of them.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct GetPagesReply {
    pub status: GetStatus,
    pub first: PageId,
    pub mask: u64,
    pub versions: Versions,
    pub server: u16,
}

impl Out<'_> {
    fn versions(&mut self, v: &Versions) -> Result<(), CodecError> {
        self.u64(v.base.0)?;
        v.above.iter().try_for_each(|&a| self.u32(a))
    }
}

impl In<'_> {
    fn versions(&mut self) -> Result<Versions, CodecError> {
        let base = self.version()?;
        let mut above = [0; GETPAGES_MAX];
        for a in above.iter_mut() {
            *a = self.u32()?;
        }
        Ok(Versions { base, above })
    }
}

body!(
    GetPagesReq,
    72,
    |s, o| {
        o.page(&s.first)?;
        o.u64(s.mask)?;
        o.versions(&s.want)?;
        o.u64(s.view)?;
    },
    |i| { Ok(GetPagesReq { first: i.page()?, mask: mask_ok(i.u64()?)?, want: i.versions()?, view: i.u64()? }) }
);
body!(
    GetPagesReply,
    67,
    |s, o| {
        o.u8(s.status as u8)?;
        o.page(&s.first)?;
        o.u64(s.mask)?;
        o.versions(&s.versions)?;
        o.u16(s.server)?;
    },
    |i| {
        Ok(GetPagesReply {
            status: GetStatus::from_u8(i.u8()?)?,
            first: i.page()?,
            mask: mask_ok(i.u64()?)?,
            versions: i.versions()?,
            server: i.u16()?,
        })
    }
);

// ---- PUTPAGE / MOVEPAGE / PUTDONE ---------------------------------------------------------

/// Put flag: the page is dirty.
pub const PUT_DIRTY: u8 = 1;

/// Putter → target, one-way, with the page as payload. `tag` names the putter's
/// operation; the target answers with `PUTDONE` once the directory decided. `seq`: the
/// mover's identity for the copy (a movepage; the target claims it when it registers),
/// 0 for a putpage.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct PutReq {
    pub page: PageId,
    pub version: Version,
    pub seq: u64,
    pub view: u64,
    pub tag: OpId,
    pub flags: u8,
}
body!(
    PutReq,
    47,
    |s, o| {
        o.page(&s.page)?;
        o.u64(s.version.0)?;
        o.u64(s.seq)?;
        o.u64(s.view)?;
        o.op(&s.tag)?;
        o.u8(s.flags)?;
    },
    |i| {
        Ok(PutReq {
            page: i.page()?,
            version: i.version()?,
            seq: i.u64()?,
            view: i.u64()?,
            tag: i.op()?,
            flags: i.u8()?,
        })
    }
);

wire_enum!(
    /// A putpage's outcome as the target reports it (`Busy`: busy with an earlier copy of
    /// the page, registering or removing it; `Refused`: no room).
    PutStatus { Stored = 1, Refused = 2, Superseded = 3, WrongView = 4, Failed = 5, Busy = 6 }
);

/// Target → putter, one-way.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct PutDone {
    pub page: PageId,
    pub version: Version,
    pub tag: OpId,
    pub status: PutStatus,
    pub site: u16,
    /// `Stored`: where the site's NIC answers hinted getpages of the copy (key 0: nowhere).
    pub answer: Option<Answer>,
}
body!(
    PutDone,
    45,
    |s, o| {
        o.page(&s.page)?;
        o.u64(s.version.0)?;
        o.op(&s.tag)?;
        o.u8(s.status as u8)?;
        o.u16(s.site)?;
        let a = s.answer.unwrap_or_default();
        o.u32(a.index)?;
        o.u64(a.key)?;
    },
    |i| {
        Ok(PutDone {
            page: i.page()?,
            version: i.version()?,
            tag: i.op()?,
            status: PutStatus::from_u8(i.u8()?)?,
            site: i.u16()?,
            // Key 0 is "no answer entry", and then the index is 0 too: one encoding each.
            answer: match (Answer { index: i.u32()?, key: i.u64()? }) {
                Answer { key: 0, index: 0 } => None,
                Answer { key: 0, .. } => return Err(CodecError),
                a => Some(a),
            },
        })
    }
);

// ---- directory maintenance ----------------------------------------------------------------

/// Requester → directory: forget the page up to `version`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct DiscardReq {
    pub page: PageId,
    pub version: Version,
}
body!(
    DiscardReq,
    24,
    |s, o| {
        o.page(&s.page)?;
        o.u64(s.version.0)?;
    },
    |i| { Ok(DiscardReq { page: i.page()?, version: i.version()? }) }
);

/// Holder → directory: "`site` (the sender) holds `page` at `version`; name it". `seq`
/// is the registration's claim: the identity of the copy it descends from (the giver's
/// after a hand-over, its own when it registers again), or 0 for a copy no directory
/// named (a put).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct DirUpdateReq {
    pub page: PageId,
    pub version: Version,
    pub seq: u64,
    pub view: u64,
    pub site: u16,
}
body!(
    DirUpdateReq,
    42,
    |s, o| {
        o.page(&s.page)?;
        o.u64(s.version.0)?;
        o.u64(s.seq)?;
        o.u64(s.view)?;
        o.u16(s.site)?;
    },
    |i| { Ok(DirUpdateReq { page: i.page()?, version: i.version()?, seq: i.u64()?, view: i.u64()?, site: i.u16()? }) }
);

/// Ex-holder → directory: "`site` no longer holds `page` up to `version`" (at `version`,
/// the copies up to identity `seq`; `u64::MAX`: any).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct DirRemoveReq {
    pub page: PageId,
    pub version: Version,
    pub seq: u64,
    pub site: u16,
}
body!(
    DirRemoveReq,
    34,
    |s, o| {
        o.page(&s.page)?;
        o.u64(s.version.0)?;
        o.u64(s.seq)?;
        o.u16(s.site)?;
    },
    |i| { Ok(DirRemoveReq { page: i.page()?, version: i.version()?, seq: i.u64()?, site: i.u16()? }) }
);

/// Directory → a holder it no longer names: drop `page` if held at an older version, or
/// at `version` with identity up to `seq` (`u64::MAX`: any). Also the scrub's question to
/// a named holder: "do you hold `page` at `version`?"
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct DropReq {
    pub page: PageId,
    pub version: Version,
    pub seq: u64,
}
body!(
    DropReq,
    32,
    |s, o| {
        o.page(&s.page)?;
        o.u64(s.version.0)?;
        o.u64(s.seq)?;
    },
    |i| { Ok(DropReq { page: i.page()?, version: i.version()?, seq: i.u64()? }) }
);

wire_enum!(
    /// A directory-maintenance answer.
    AckStatus {
        /// Applied (or nothing to do).
        Ok = 1,
        /// Refused: an equal-or-newer version, a discard floor, or a dead site.
        Rejected = 2,
        /// The sender is in another view: retry in the current one.
        WrongView = 3,
        /// This node is not the page's directory in its view.
        NotDirectory = 4,
        /// No room now: retry later.
        Busy = 5,
    }
);

/// `seq`: for a `DIRUPDATE` answered `Ok`, the identity the directory gave the copy (0
/// otherwise).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct DirAck {
    pub status: AckStatus,
    pub page: PageId,
    pub seq: u64,
}
body!(
    DirAck,
    25,
    |s, o| {
        o.u8(s.status as u8)?;
        o.page(&s.page)?;
        o.u64(s.seq)?;
    },
    |i| { Ok(DirAck { status: AckStatus::from_u8(i.u8()?)?, page: i.page()?, seq: i.u64()? }) }
);

/// Which pages of a family a `TOPVERSION` asks about.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum TopScope {
    /// Every page, scanning the node's tables from slot `from` on.
    Tables { from: u64 },
    /// Page number `page` (of every space of the family: each replica of one page).
    Page(u64),
}

/// "The newest version you know of the pages `scope` names of the spaces in `family`" (a
/// volume's replicas: [`super::top::family`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct TopReq {
    pub family: u64,
    pub scope: TopScope,
}
body!(
    TopReq,
    17,
    |s, o| {
        o.u64(s.family)?;
        let (tag, v) = match s.scope {
            TopScope::Tables { from } => (1, from),
            TopScope::Page(p) => (2, p),
        };
        o.u8(tag)?;
        o.u64(v)?;
    },
    |i| {
        let family = i.u64()?;
        let scope = match (i.u8()?, i.u64()?) {
            (1, from) => TopScope::Tables { from },
            (2, p) => TopScope::Page(p),
            _ => return Err(CodecError),
        };
        Ok(TopReq { family, scope })
    }
);

/// The newest version found in the slots scanned, and the slot to ask from next (0: the
/// scan reached the end of the tables).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct TopReply {
    pub top: Version,
    pub next: u64,
}
body!(
    TopReply,
    16,
    |s, o| {
        o.u64(s.top.0)?;
        o.u64(s.next)?;
    },
    |i| { Ok(TopReply { top: i.version()?, next: i.u64()? }) }
);

// ---- the operations -----------------------------------------------------------------------

macro_rules! operation {
    ($(#[$m:meta])* $name:ident, $op:expr, $req:ty, $rep:ty) => {
        $(#[$m])*
        pub struct $name;
        impl Operation for $name {
            const OP: u16 = $op;
            type Request = $req;
            type Reply = $rep;
        }
    };
}

operation!(
    /// Fetch a page through its directory node (2-way or delegated 3-way).
    GetPage, OP_GETPAGE, GetReq, GetReply
);
operation!(
    /// Fetch several pages of one space from the member that holds them (2-way).
    GetPages, OP_GETPAGES, GetPagesReq, GetPagesReply
);
operation!(
    /// Put a copy of a page into another node's memory (one-way + payload).
    PutPage, OP_PUTPAGE, PutReq, ()
);
operation!(
    /// Move this node's held copy of a page to another node (one-way + payload).
    MovePage, OP_MOVEPAGE, PutReq, ()
);
operation!(
    /// Forget a page cluster-wide.
    DiscardPage, OP_DISCARDPAGE, DiscardReq, DirAck
);
operation!(
    /// The target's answer to a putpage/movepage (one-way).
    PutDoneOp, OP_PUTDONE, PutDone, ()
);
operation!(
    /// Name a holder in the directory.
    DirUpdate, OP_DIRUPDATE, DirUpdateReq, DirAck
);
operation!(
    /// Remove a holder from the directory.
    DirRemove, OP_DIRREMOVE, DirRemoveReq, DirAck
);
operation!(
    /// Make a superseded holder drop its copy.
    DropPage, OP_DROPPAGE, DropReq, DirAck
);
operation!(
    /// Ask a named holder whether it still holds the page (`Ok`) or not (`Rejected`).
    DirVerify, OP_DIRVERIFY, DropReq, DirAck
);
operation!(
    /// The newest version a member knows of a volume's pages ([`super::top`]).
    TopVersion, OP_TOPVERSION, TopReq, TopReply
);

#[cfg(test)]
mod tests {
    use super::super::net::wire::MAX_BODY;
    use super::*;

    fn round_trip<M: Message + PartialEq + core::fmt::Debug>(m: M, len: usize) {
        let mut buf = [0u8; MAX_BODY];
        let n = m.encode(&mut buf).unwrap();
        assert_eq!(n, len);
        assert_eq!(M::decode(&buf[..n]).unwrap(), m);
        assert!(M::decode(&buf[..n - 1]).is_err(), "short body accepted");
        let mut long = [0u8; MAX_BODY];
        long[..n].copy_from_slice(&buf[..n]);
        assert!(M::decode(&long[..n + 1]).is_err(), "long body accepted");
        assert!(m.encode(&mut buf[..n - 1]).is_err(), "encode into a short buffer");
    }

    #[test]
    fn bodies_round_trip_and_reject_bad_lengths() {
        let page = PageId::new(7, 0xdead_beef);
        let tag = OpId { slot: 3, generation: 0x0102_0304 };
        let v = Version(42);
        round_trip(GetReq { page, want: v, seq: 5, view: 9, flags: GET_MOVING }, GetReq::WIRE_BYTES);
        let rep = GetReply { status: GetStatus::Local, page, version: v, seq: 6, server: 4, flags: 1 };
        round_trip(rep, GetReply::WIRE_BYTES);
        round_trip(PutReq { page, version: v, seq: 7, view: 2, tag, flags: PUT_DIRTY }, PutReq::WIRE_BYTES);
        round_trip(
            PutDone { page, version: v, tag, status: PutStatus::Superseded, site: 2, answer: None },
            PutDone::WIRE_BYTES,
        );
        let answer = Some(Answer { index: 12_287, key: u64::MAX });
        round_trip(PutDone { page, version: v, tag, status: PutStatus::Stored, site: 2, answer }, PutDone::WIRE_BYTES);
        // No answer entry (key 0) with an index is not an encoding of anything.
        let mut b = [0u8; PutDone::WIRE_BYTES];
        PutDone { page, version: v, tag, status: PutStatus::Stored, site: 2, answer: None }.encode(&mut b).unwrap();
        b[PutDone::WIRE_BYTES - 12] = 1;
        assert!(PutDone::decode(&b).is_err(), "an index without a key accepted");
        round_trip(DiscardReq { page, version: v }, DiscardReq::WIRE_BYTES);
        round_trip(DirUpdateReq { page, version: v, seq: 8, view: 3, site: 1 }, DirUpdateReq::WIRE_BYTES);
        round_trip(DirRemoveReq { page, version: v, seq: 9, site: 1 }, DirRemoveReq::WIRE_BYTES);
        round_trip(DropReq { page, version: v, seq: u64::MAX }, DropReq::WIRE_BYTES);
        round_trip(DirAck { status: AckStatus::Busy, page, seq: 10 }, DirAck::WIRE_BYTES);
        round_trip(TopReq { family: 7, scope: TopScope::Tables { from: 1 << 33 } }, TopReq::WIRE_BYTES);
        round_trip(TopReq { family: 7, scope: TopScope::Page(u64::MAX - 1) }, TopReq::WIRE_BYTES);
        round_trip(TopReply { top: v, next: 0 }, TopReply::WIRE_BYTES);
    }

    #[test]
    fn bad_enum_codes_are_rejected() {
        let mut buf = [0u8; MAX_BODY];
        let n = DirAck { status: AckStatus::Ok, page: PageId::new(1, 1), seq: 0 }.encode(&mut buf).unwrap();
        for bad in [0u8, 6, 255] {
            buf[0] = bad;
            assert!(DirAck::decode(&buf[..n]).is_err());
        }
        assert!(GetStatus::from_u8(0).is_err() && PutStatus::from_u8(7).is_err());
        let n = TopReq { family: 1, scope: TopScope::Page(2) }.encode(&mut buf).unwrap();
        for bad in [0u8, 3, 255] {
            buf[8] = bad;
            assert!(TopReq::decode(&buf[..n]).is_err(), "TOPVERSION scope {bad}");
        }
    }

    #[test]
    fn op_codes() {
        assert!(is_gms_op(OP_GETPAGE) && is_gms_op(OP_DROPPAGE) && is_gms_op(OP_DIRVERIFY));
        assert!(is_gms_op(OP_GETPAGES), "GETPAGES is routed to GMS");
        assert!(is_gms_op(OP_TOPVERSION), "TOPVERSION is routed to GMS");
        assert!(!is_gms_op(0x0101) && !is_gms_op(OP_GETPAGE - 1) && !is_gms_op(OP_TOPVERSION + 1));
        assert_eq!(<GetPage as Operation>::OP, OP_GETPAGE);
        assert_eq!(<GetPages as Operation>::OP, OP_GETPAGES);
    }
}
