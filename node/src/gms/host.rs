// SPDX-License-Identifier: GPL-2.0-only
//! The runtime's side of a GMS node ([`PortHost`]): its frames, its endpoint, send completions, inboxes.

use super::lru::LruMsg;
use crate::rpc::{Frame, Frames};
use gms::prelude::*;
use netrpc::prelude::*;
use rustc_hash::FxHashMap as HashMap;
use trapeze_runtime::Exported;

/// The runtime's side of a node: the port (endpoint and frames), completions, inboxes.
pub struct PortHost {
    pub frames: Frames,
    /// Nonblocking completions, handled after each poll.
    pub(super) done: Vec<Completion<Frame>>,
    /// Pages GMS dropped on this node (superseded, moved away, lost directory).
    pub pages_dropped: u64,
    /// Global-LRU messages received, handled after each poll.
    pub(super) lru_inbox: Vec<LruMsg>,
    /// Heartbeats received (`gms::heartbeat`), for the runtime's liveness: sender, body.
    pub heartbeats: Vec<(u16, gms::heartbeat::Heartbeat)>,
    /// Heartbeats and global-LRU messages received: they come on their periods whatever
    /// the load ([`super::GmsPort::foreground_messages`] leaves them out).
    pub(super) background: u64,
    /// The frames store requests' reads land in ([`super::store`]).
    pub(super) landing: Landing,
}

impl Host<Frame> for PortHost {
    fn copy_payload(&mut self, from: &Frame, to: &Frame, len: u32) -> bool {
        self.frames.copy(*from, *to, len)
    }
    fn release(&mut self, frame: Frame) {
        if !self.landing.release(&mut self.frames, frame) {
            self.frames.release(frame);
        }
    }
    fn dropped(&mut self, _page: PageId, frame: Frame, _dirty: bool) {
        self.pages_dropped += 1;
        self.frames.retire(frame);
    }
    fn export(&mut self, again: Option<Answer>, frame: &Frame, len: u32, reply: &[u8]) -> Option<Answer> {
        let again = again.map(|a| Exported { index: a.index, key: a.key });
        self.frames.export(again, *frame, len, reply).map(|e| Answer { index: e.index, key: e.key })
    }
    fn retract(&mut self, answer: Answer) {
        self.frames.retract(answer.index);
    }
    /// A group of the region's frames, within the NIC's MTU; it ends once its reply left.
    fn gather(&mut self, frames: &[Frame], piece: u32) -> Option<Frame> {
        self.frames.frames_mut().group(frames, piece)
    }
    fn completed(&mut self, done: Completion<Frame>) {
        self.done.push(done);
    }
    fn serve_other(&mut self, inc: &Incoming<'_, Frame>) -> Action<Frame> {
        if let InPayload::Buffer { frame, .. } = inc.payload {
            self.release(frame);
        }
        if gms::heartbeat::is_heartbeat_op(inc.op) && inc.one_way {
            self.background += 1;
            // A malformed one is dropped: it says nothing about its sender.
            if let Ok(hb) = gms::heartbeat::Heartbeat::from_message(inc.src, inc.body) {
                self.heartbeats.push((inc.src, hb));
            }
            return Action::Done;
        }
        if !gms::lru::is_lru_op(inc.op) || !inc.one_way {
            return Action::Error(RpcError::UnknownOp);
        }
        self.background += 1;
        let mut body = [0u8; 104];
        let len = inc.body.len().min(body.len());
        body[..len].copy_from_slice(&inc.body[..len]);
        self.lru_inbox.push(LruMsg { src: inc.src, op: inc.op, len, body });
        Action::Done
    }
}

/// The frames the stores of a port hold for their requests' reads (kept by the port's
/// host, which NetRPC hands a failed call's frame back to).
#[derive(Default)]
pub struct Landing {
    /// Request key → the frame its read lands in, and back.
    pub(super) landing: HashMap<u64, Frame>,
    pub(super) owner: HashMap<Frame, u64>,
    /// A page of bytes on its way into or out of a frame.
    pub(super) buf: Vec<u8>,
}

impl Landing {
    /// NetRPC or GMS is done with `f`: a request's landing frame is only disarmed (it
    /// stays the request's); any other goes back to the pool. `false`: not a landing frame.
    pub(super) fn release(&mut self, pool: &mut crate::rpc::Frames, f: Frame) -> bool {
        let Some(&key) = self.owner.get(&f) else { return false };
        if !pool.unarm(f) {
            // The NIC would not let go of it: the request's no more (its read fails).
            self.owner.remove(&f);
            self.landing.remove(&key);
        }
        true
    }
}
