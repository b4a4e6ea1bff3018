// SPDX-License-Identifier: GPL-2.0-only
//! The one liveness protocol every GMS node speaks — the kernel module's and `gmsd`'s —
//! and the view number that goes with a member set.
//!
//! Each node sends every other member a one-way `HEARTBEAT` (NetRPC op 0x4730, outside
//! [`super::ops::is_gms_op`]'s range, so a runtime serves it through `Host::serve_other`)
//! carrying its node id, an incarnation (a new one every start: a peer that restarted lost
//! its pages) and its memory use. A runtime declares a member failed after it heard nothing
//! from it for its own timeout; how often to send and how long to wait are the runtime's.
//!
//! A heartbeat speaks only for its sender ([`Heartbeat::from_message`]; the NIC stamps the
//! sender). An incarnation only rises while it beats: a member (or a replay) alternating
//! between an old incarnation and a new one restarts once, and the old one's heartbeats
//! are refused and counted (`crate::store::liveness`).
//!
//! Body (24 bytes, little-endian): `u8` wire version (1), `u8` 0, `u16 node`,
//! `u64 incarnation`, `u32 held pages`, `u32 budget pages`, `u32` 0.

use super::net::wire::{CodecError, Message, Operation};

/// The heartbeat's NetRPC operation (one-way).
pub const OP_HEARTBEAT: u16 = 0x4730;
const WIRE_VERSION: u8 = 1;

/// Whether `op` is the heartbeat.
pub fn is_heartbeat_op(op: u16) -> bool {
    op == OP_HEARTBEAT
}

/// One heartbeat.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Heartbeat {
    pub node: u16,
    /// Differs between two runs of the same node (never 0 from a running node).
    pub incarnation: u64,
    /// Pages the sender holds for the cluster, and its budget.
    pub held: u32,
    pub budget: u32,
}

impl Heartbeat {
    pub const WIRE_BYTES: usize = 24;

    /// The body as bytes (for `Rpc::send_oneway`).
    pub fn to_bytes(&self) -> [u8; Self::WIRE_BYTES] {
        let mut b = [0u8; Self::WIRE_BYTES];
        b[0] = WIRE_VERSION;
        b[2..4].copy_from_slice(&self.node.to_le_bytes());
        b[4..12].copy_from_slice(&self.incarnation.to_le_bytes());
        b[12..16].copy_from_slice(&self.held.to_le_bytes());
        b[16..20].copy_from_slice(&self.budget.to_le_bytes());
        b
    }

    /// Parse a body: exactly [`Self::WIRE_BYTES`], wire version 1, reserved bytes 0.
    pub fn from_bytes(b: &[u8]) -> Result<Self, CodecError> {
        let b: &[u8; Self::WIRE_BYTES] = b.try_into().map_err(|_| CodecError)?;
        if b[0] != WIRE_VERSION || b[1] != 0 || b[20..24] != [0; 4] {
            return Err(CodecError);
        }
        let u32_at = |i: usize| u32::from_le_bytes([b[i], b[i + 1], b[i + 2], b[i + 3]]);
        let mut inc = [0u8; 8];
        inc.copy_from_slice(&b[4..12]);
        Ok(Heartbeat {
            node: u16::from_le_bytes([b[2], b[3]]),
            incarnation: u64::from_le_bytes(inc),
            held: u32_at(12),
            budget: u32_at(16),
        })
    }

    /// A heartbeat received from `src`: its body, which must name `src` itself.
    pub fn from_message(src: u16, body: &[u8]) -> Result<Self, CodecError> {
        let hb = Self::from_bytes(body)?;
        if hb.node == src {
            Ok(hb)
        } else {
            Err(CodecError)
        }
    }
}

impl Message for Heartbeat {
    fn encode(&self, out: &mut [u8]) -> Result<usize, CodecError> {
        out.get_mut(..Self::WIRE_BYTES).ok_or(CodecError)?.copy_from_slice(&self.to_bytes());
        Ok(Self::WIRE_BYTES)
    }
    fn decode(b: &[u8]) -> Result<Self, CodecError> {
        Self::from_bytes(b)
    }
}

/// The heartbeat as a NetRPC operation (one-way: the reply type is never used).
pub struct HeartbeatOp;
impl Operation for HeartbeatOp {
    const OP: u16 = OP_HEARTBEAT;
    type Request = Heartbeat;
    type Reply = Heartbeat;
}

/// The view number of a member set (order and duplicates do not matter; never 0): nodes
/// that agree on who is alive agree on the view with no membership service, which GMS
/// needs since it refuses directory updates across views. FNV-1a over the sorted,
/// distinct ids, each little-endian. No allocation: the ids are walked in order by
/// repeated minimum search (member sets are small).
///
/// The same member set gives the same number after a cluster restart, so a message of
/// the earlier run still carries a current view: [`view_of_run`] tells runs apart.
pub fn view_of(ids: &[u16]) -> u64 {
    fold_ids(ids, |_| None)
}

/// The view number of a member set as it runs now: like [`view_of`], with each member's
/// incarnation (its heartbeats', or this node's own; [`Heartbeat::incarnation`]) hashed
/// after its id. A member that restarts, and every member after a cluster restart, has a
/// new incarnation, so the view differs from every earlier run's and a message of an
/// earlier run (a replayed `PUTPAGE` or `DIRUPDATE`) is refused for its view. Nodes agree
/// once each has heard every member's heartbeat; until then they refuse each other's
/// updates as for any view change. `incarnation(id)` gives a member's incarnation.
pub fn view_of_run(ids: &[u16], incarnation: impl Fn(u16) -> u64) -> u64 {
    fold_ids(ids, |n| Some(incarnation(n)))
}

/// FNV-1a over the sorted, distinct `ids`, each followed by its `extra` word if any.
fn fold_ids(ids: &[u16], extra: impl Fn(u16) -> Option<u64>) -> u64 {
    let mut h: u64 = 0xcbf2_9ce4_8422_2325;
    let mut eat = |bytes: &[u8]| {
        for &b in bytes {
            h = (h ^ u64::from(b)).wrapping_mul(0x0100_0000_01b3);
        }
    };
    let mut last: Option<u16> = None;
    loop {
        let next = ids.iter().copied().filter(|&n| last.is_none_or(|l| n > l)).min();
        let Some(n) = next else { break };
        eat(&n.to_le_bytes());
        if let Some(x) = extra(n) {
            eat(&x.to_le_bytes());
        }
        last = Some(n);
    }
    h | 1
}

#[cfg(test)]
mod tests {
    extern crate std;
    use super::*;

    #[test]
    fn heartbeats_round_trip_and_bad_bodies_are_refused() {
        let hb = Heartbeat { node: 3, incarnation: 0x0102_0304_0506_0708, held: 17, budget: 512 };
        let b = hb.to_bytes();
        assert_eq!(Heartbeat::from_bytes(&b), Ok(hb));
        assert_eq!(Heartbeat::from_message(3, &b), Ok(hb));
        assert_eq!(Heartbeat::from_message(4, &b), Err(CodecError), "a heartbeat must name its sender");
        assert_eq!(&b[2..4], &[3, 0]);
        assert_eq!(&b[12..16], &17u32.to_le_bytes());
        assert_eq!(Heartbeat::from_bytes(&b[..23]), Err(CodecError));
        let mut long = [0u8; 25];
        long[..24].copy_from_slice(&b);
        assert_eq!(Heartbeat::from_bytes(&long), Err(CodecError));
        for i in [0usize, 1, 20, 23] {
            let mut bad = b;
            bad[i] ^= 0x40;
            assert_eq!(Heartbeat::from_bytes(&bad), Err(CodecError), "byte {i}");
        }
        let mut out = [0u8; 30];
        assert_eq!(hb.encode(&mut out), Ok(24));
        assert_eq!(Heartbeat::decode(&out[..24]), Ok(hb));
        assert_eq!(hb.encode(&mut [0u8; 10]), Err(CodecError));
        assert!(is_heartbeat_op(OP_HEARTBEAT) && !super::super::ops::is_gms_op(OP_HEARTBEAT));
        assert!(!super::super::lru::is_lru_op(OP_HEARTBEAT));
    }

    #[test]
    fn views_depend_only_on_the_member_set() {
        assert_eq!(view_of(&[2, 0, 1]), view_of(&[0, 1, 2]));
        assert_eq!(view_of(&[0, 1, 1, 2]), view_of(&[0, 1, 2]));
        assert_ne!(view_of(&[0, 1]), view_of(&[0, 1, 2]));
        assert_ne!(view_of(&[0, 2]), view_of(&[0, 1]));
        assert_ne!(view_of(&[]), 0);
        // FNV-1a of the bytes 00 00 01 00 (ids 0 and 1), low bit set: fixed across builds,
        // since a kernel node and a daemon must compute the same number.
        let mut h: u64 = 0xcbf2_9ce4_8422_2325;
        for b in [0u8, 0, 1, 0] {
            h = (h ^ u64::from(b)).wrapping_mul(0x0100_0000_01b3);
        }
        assert_eq!(view_of(&[1, 0]), h | 1);
    }

    #[test]
    fn a_run_s_view_differs_when_any_member_restarts() {
        let first = |n: u16| 100 + u64::from(n);
        let v = view_of_run(&[2, 0, 1], first);
        assert_eq!(v, view_of_run(&[0, 1, 2, 1], first), "order and duplicates do not matter");
        assert_ne!(v, view_of(&[0, 1, 2]));
        // One member restarted; the whole cluster restarted.
        assert_ne!(v, view_of_run(&[0, 1, 2], |n| if n == 1 { 7 } else { first(n) }));
        assert_ne!(v, view_of_run(&[0, 1, 2], |n| 900 + u64::from(n)));
        assert_ne!(view_of_run(&[], first), 0);
        // FNV-1a of id 3 then its incarnation 5, little-endian: fixed across builds.
        let mut h: u64 = 0xcbf2_9ce4_8422_2325;
        for b in [3u8, 0, 5, 0, 0, 0, 0, 0, 0, 0] {
            h = (h ^ u64::from(b)).wrapping_mul(0x0100_0000_01b3);
        }
        assert_eq!(view_of_run(&[3], |_| 5), h | 1);
    }
}
