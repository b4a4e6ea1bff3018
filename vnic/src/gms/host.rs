// SPDX-License-Identifier: GPL-2.0-only
//! The runtime's side of a GMS node ([`PortHost`]): its frames, its endpoint, send completions, inboxes.

use super::lru::LruMsg;
use crate::nic::NicMem;
use crate::rpc::{Frame, Frames, FRAME_BYTES};
use gms::prelude::*;
use netrpc::prelude::*;
use std::collections::VecDeque;
use trapeze_firmware::iface::ipt::CancelState;
use trapeze_firmware::iface::layout::{ctrl, ctrl_word};
use trapeze_firmware::iface::mem::NicMemory;
use trapeze_host::endpoint::Endpoint;

/// The runtime's side of a node: frames, the endpoint, completions.
pub struct PortHost {
    pub frames: Frames,
    pub(super) ep: Endpoint<NicMem, Option<Frame>>,
    pub(super) base: u64,
    /// Nonblocking completions, handled after each poll.
    pub(super) done: Vec<Completion<Frame>>,
    /// Frames GMS stopped holding, waiting for the sends posted so far to complete:
    /// (frame, send serial to wait for; `u64::MAX` until the next flush tags it).
    pub(super) limbo: VecDeque<(Frame, u64)>,
    pub(super) posted: u64,
    pub(super) reaped: u64,
    /// Pages GMS dropped on this node (superseded, moved away, lost directory).
    pub pages_dropped: u64,
    /// Global-LRU messages received, handled after each poll.
    pub(super) lru_inbox: Vec<LruMsg>,
    /// Heartbeats received (`gms::heartbeat`), for the runtime's liveness: sender, body.
    pub heartbeats: Vec<(u16, gms::heartbeat::Heartbeat)>,
    /// The firmware's send-completion sequence when the send ring was last reaped.
    pub(super) tx_seq_seen: u32,
}

impl PortHost {
    /// Disarm `frame`'s IPT entry if it has one (the frame stays allocated).
    pub(super) fn unarm(&mut self, frame: Frame) {
        if let Some(i) = self.frames.armed.iter().position(|a| a.0 == frame) {
            let (_, token) = self.frames.armed.swap_remove(i);
            // The NIC may be writing into it right now: wait (bounded by one packet).
            let mut st = self.ep.disarm(token);
            while st == CancelState::InFlight {
                std::hint::spin_loop();
                st = self.ep.disarm(token);
            }
        }
    }

    pub(super) fn reap(&mut self) -> bool {
        let seq = self.ep.mem().load(ctrl_word(ctrl::FW_TX_SEQ), std::sync::atomic::Ordering::Acquire);
        if seq == self.tx_seq_seen {
            // No send completed since the last scan of the ring.
            return false;
        }
        // Completions published before `seq` are visible now; later ones move it again.
        self.tx_seq_seen = seq;
        let n = self.ep.reap_sends(|_, _| {}) as u64;
        self.reaped += n;
        while let Some(&(f, serial)) = self.limbo.front() {
            if serial > self.reaped {
                break;
            }
            self.limbo.pop_front();
            self.frames.free(f);
        }
        n > 0
    }
}

impl Host<Frame> for PortHost {
    fn copy_payload(&mut self, from: &Frame, to: &Frame, len: u32) -> bool {
        len <= FRAME_BYTES
            && self.frames.region.copy_from(*to as usize, &self.frames.region, *from as usize, len as usize)
    }
    fn release(&mut self, frame: Frame) {
        self.unarm(frame);
        self.frames.free(frame);
    }
    fn dropped(&mut self, _page: PageId, frame: Frame, _dirty: bool) {
        self.pages_dropped += 1;
        self.limbo.push_back((frame, u64::MAX));
    }
    fn completed(&mut self, done: Completion<Frame>) {
        self.done.push(done);
    }
    fn serve_other(&mut self, inc: &Incoming<'_, Frame>) -> Action<Frame> {
        if let InPayload::Buffer { frame, .. } = inc.payload {
            self.release(frame);
        }
        if gms::heartbeat::is_heartbeat_op(inc.op) && inc.one_way {
            // A malformed one is dropped: it says nothing about its sender.
            if let Ok(hb) = gms::heartbeat::Heartbeat::from_message(inc.src, inc.body) {
                self.heartbeats.push((inc.src, hb));
            }
            return Action::Done;
        }
        if !gms::lru::is_lru_op(inc.op) || !inc.one_way {
            return Action::Error(RpcError::UnknownOp);
        }
        let mut body = [0u8; 104];
        let len = inc.body.len().min(body.len());
        body[..len].copy_from_slice(&inc.body[..len]);
        self.lru_inbox.push(LruMsg { src: inc.src, op: inc.op, len, body });
        Action::Done
    }
}
