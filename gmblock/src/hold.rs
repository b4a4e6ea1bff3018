// SPDX-License-Identifier: GPL-2.0-only
//! A call's frames once the call is over: when each may be handed out again.
//!
//! A frame goes back to the pool only when nothing can touch it any more: no transmit
//! still to read it and no reply still to land in it. A call ends by its reply, its
//! timeout or a cancel, and two things can outlive it:
//!
//! - **a transmit** — a write's payload frame is read by the NIC when it sends the
//!   request (the virtual NIC reads the bytes when the packet leaves, not when the send
//!   was posted). The port's limbo keeps the frame until every send posted so far has
//!   completed ([`Ending::AfterSends`]). Freeing it when the call ended would let the
//!   next write's data, or a reply, reach the frame before its request left.
//! - **a reply's delivery** — a read's reply frames are named by one group armed in an
//!   IPT entry. When the call ends the port disarms the entry; if the NIC has claimed it
//!   (a late reply is landing), it cannot, and keeps the group live. The frames then wait
//!   here ([`Ending::AfterDelivery`]), and every pass of the client asks the NIC again
//!   ([`Holds::poll`]): once it has finished the delivery (or backed off), the entry and
//!   the frames go back. Freed at once, the late reply would finish into whatever took
//!   them next — a write's payload, issue 35; kept for ever, every idle gap with a
//!   read-ahead fetch in flight cost an IPT entry and a group's frames.
//!
//! Every read's reply frames are a group, even a single frame, so that one rule covers
//! them all: a group the port kept live after the call released it is a delivery in
//! progress. The port counts each such entry in `PortStats::leaked` when it gives up
//! disarming it; [`Holds::recovered`] counts those whose frames came back here.

use netrpc::prelude::CallId;
use trapeze_iface::ipt::{CancelState, PayloadToken};
use trapeze_node::rpc::{Frame, Frames};

/// What a call's frames carry, and so what they may still be waiting for.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Carries {
    /// A read's reply: the frames are `group`'s, armed in the IPT under `token`.
    Reply { group: Frame, token: PayloadToken },
    /// A write's payload, sent with the request.
    Payload,
}

/// A call on its way and the frames it holds.
pub(crate) struct Flight {
    pub call: CallId,
    pub frames: Vec<Frame>,
    pub carries: Carries,
}

/// When a finished call's frames go back to the pool.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Ending {
    /// Now: nothing can touch them.
    Free,
    /// Once every send posted so far has completed (the port's limbo).
    AfterSends,
    /// Once the NIC has finished delivering a reply into them (IPT entry `token`).
    AfterDelivery { group: Frame, token: PayloadToken },
}

/// A reply's frames waiting for the NIC to finish a delivery that outlived the call.
struct Delivering {
    group: Frame,
    token: PayloadToken,
    frames: Vec<Frame>,
}

/// The frames this client's finished calls still wait for the NIC with.
#[derive(Default)]
pub(crate) struct Holds {
    delivering: Vec<Delivering>,
    /// Deliveries that outlived their call and whose frames came back.
    pub recovered: u64,
}

impl Holds {
    /// Deliveries still running into frames of finished calls.
    #[cfg(test)]
    pub fn delivering(&self) -> usize {
        self.delivering.len()
    }

    /// What `f`'s frames wait for, its call being over (`ok`: it succeeded, so its reply
    /// landed and the caller still holds the group; a failed call's group was released
    /// by NetRPC). Releases the group of a successful read first.
    fn ending(frames: &mut Frames, f: &Flight, ok: bool) -> Ending {
        match f.carries {
            Carries::Payload => Ending::AfterSends,
            Carries::Reply { group, token } => {
                if ok {
                    frames.release(group);
                }
                // Still live and still naming our frames: the port could not disarm the
                // entry. (Ended, its number may already name another call's group.)
                if frames.frames().group_frames(group) == Some(&f.frames) {
                    Ending::AfterDelivery { group, token }
                } else {
                    Ending::Free
                }
            }
        }
    }

    /// `f`'s call is over: its frames go back now, or once nothing can touch them.
    pub fn end(&mut self, frames: &mut Frames, f: Flight, ok: bool) {
        match Self::ending(frames, &f, ok) {
            Ending::Free => {
                for &fr in &f.frames {
                    frames.free(fr);
                }
            }
            Ending::AfterSends => {
                for &fr in &f.frames {
                    frames.retire(fr);
                }
                frames.tag_limbo();
            }
            Ending::AfterDelivery { group, token } => {
                self.delivering.push(Delivering { group, token, frames: f.frames });
            }
        }
    }

    /// Ask the NIC about the deliveries still running into finished calls' frames; give
    /// back the entry, the group and the frames of each it has finished. Whether any
    /// came back.
    pub fn poll(&mut self, frames: &mut Frames) -> bool {
        if self.delivering.is_empty() {
            return false;
        }
        let before = self.delivering.len();
        self.delivering.retain(|d| {
            // The entry is still ours: the port left it marked in use when it could not
            // disarm it, so no other call was given its number.
            if frames.ep.disarm(d.token) == CancelState::InFlight {
                return true;
            }
            // Ends the group (its frames are not the pool's through it).
            frames.free(d.group);
            for &fr in &d.frames {
                frames.free(fr);
            }
            false
        });
        let back = before - self.delivering.len();
        self.recovered += back as u64;
        back > 0
    }
}
