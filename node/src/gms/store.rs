// SPDX-License-Identifier: GPL-2.0-only
//! The client core (`gms::store`) on a user-space port: the store's frames are the port's
//! pool ([`StoreFrames`]), its operations go through the port's node with the store's own
//! loop ([`gms::store::drive`]), and their completions are handed back by
//! [`GmsPort::complete_stores`]. The store decides everything about a page (placement,
//! versions, retries, repair, recovery); this file only moves bytes between a request's
//! buffer and the pool's frames.
//!
//! A write's data is copied into a pool frame for each replica's put (a page shorter than
//! a frame is padded with zeros: the store keeps whole pages). A read's reply lands in a
//! pool frame armed for the request, which stays the request's until it finishes
//! ([`GmsPort::poll_store_done`]), even when NetRPC gives it back after a failed call
//! ([`Landing::release`]): the host keeps the landing frames' record ([`Landing`]).

use super::host::{Landing, PortHost};
use super::GmsPort;
use crate::rpc::{Frame, Frames, FRAME_BYTES};
use gms::ops::GETPAGES_MAX;
use gms::prelude::*;
use gms::store::drive::{Frames as StoreFramesTrait, FramesIn};
use gms::store::{Finished, Outcome};
use netrpc::prelude::ReplyTo;
use trapeze_runtime::storage::Heap;

/// Reads a user-space store asks in one `GETPAGES` at most (`StoreConfig::group_pages`):
/// as many frames as one reply carries on gmsd's and the test cluster's NICs (MTU four
/// frames).
pub const GROUP_PAGES: u8 = 4;

/// Requests a user-space store runs at once (two kept for its meta pages).
pub const STORE_REQUESTS: usize = 34;

/// A client core on a port: `Io` the runtime's request handle.
pub type UserStore<Io> = gms::store::Store<Io, Frame, Heap, 16, STORE_REQUESTS, { super::OPS }>;

/// What the store needs of a runtime's request.
pub trait StoreIo {
    /// A key naming the request while it runs (unique among the requests in flight).
    fn key(&self) -> u64;
    /// A write's data (at most a frame; a read's is empty).
    fn data(&self) -> &[u8];
}

/// The stores' frames: the port's pool and its host's record of landing frames, reached
/// through the node's host while the store's loop drives the node.
#[derive(Clone, Copy, Debug, Default)]
pub struct StoreFrames;

/// The pool and the landing frames, borrowed for one step.
struct PortFrames<'a> {
    pool: &'a mut Frames,
    st: &'a mut Landing,
}

impl<Io: StoreIo> FramesIn<Io, Frame, PortHost> for StoreFrames {
    fn frames<'a>(&'a mut self, host: &'a mut PortHost) -> impl StoreFramesTrait<Io, Frame> + 'a {
        PortFrames { pool: &mut host.frames, st: &mut host.landing }
    }
}

impl PortFrames<'_> {
    /// A group that could not be armed: the group `g` ended, the frames taken for it
    /// (`fresh`) freed. `None`.
    fn unwind(&mut self, frames: &[Frame], fresh: &[bool], g: Option<Frame>) -> Option<ReplyTo<Frame>> {
        if let Some(g) = g {
            self.pool.free(g);
        }
        for (&f, _) in frames.iter().zip(fresh).filter(|(_, &new)| new) {
            self.pool.free(f);
        }
        None
    }

    /// A pool frame holding `write`'s bytes (the rest of the page zeros).
    fn filled(&mut self, write: impl FnOnce(&mut [u8])) -> Option<Frame> {
        let f = self.pool.alloc()?;
        self.st.buf.clear();
        self.st.buf.resize(FRAME_BYTES as usize, 0);
        write(&mut self.st.buf);
        if self.pool.write(f, &self.st.buf) {
            Some(f)
        } else {
            self.pool.free(f);
            None
        }
    }
}

impl<Io: StoreIo> StoreFramesTrait<Io, Frame> for PortFrames<'_> {
    const PAGE_BYTES: u32 = FRAME_BYTES;

    fn lend(&mut self, io: &Io, _page: PageId, _version: Version) -> Option<Frame> {
        let data = io.data();
        let n = data.len().min(FRAME_BYTES as usize);
        self.filled(|b| b[..n].copy_from_slice(&data[..n]))
    }

    fn arm(&mut self, io: &Io) -> Option<ReplyTo<Frame>> {
        let key = io.key();
        let (f, fresh) = match self.st.landing.get(&key) {
            Some(&f) => (f, false),
            None => (self.pool.alloc()?, true),
        };
        match self.pool.arm(f) {
            Ok(token) => {
                self.st.landing.insert(key, f);
                self.st.owner.insert(f, key);
                Some(ReplyTo::Solicited { token: token.0, frame: f })
            }
            Err(_) => {
                if fresh {
                    self.pool.free(f);
                }
                None
            }
        }
    }

    fn scratch(&mut self) -> Option<ReplyTo<Frame>> {
        self.pool.solicit()
    }

    /// The requests' landing frames (each request's own, as for [`Self::arm`]) as one
    /// group of the region's, armed for a `GETPAGES` reply; the group ends when it is
    /// given back, the frames staying the requests'.
    fn group(&mut self, ios: &[&Io]) -> Option<ReplyTo<Frame>> {
        let n = ios.len();
        if n > GETPAGES_MAX {
            return None;
        }
        let (mut frames, mut fresh) = ([0 as Frame; GETPAGES_MAX], [false; GETPAGES_MAX]);
        for (i, io) in ios.iter().enumerate() {
            match self.st.landing.get(&io.key()).copied().or_else(|| self.pool.alloc().inspect(|_| fresh[i] = true)) {
                Some(f) => frames[i] = f,
                None => return self.unwind(&frames[..i], &fresh[..i], None),
            }
        }
        let Some(g) = self.pool.frames_mut().group(&frames[..n], FRAME_BYTES) else {
            return self.unwind(&frames[..n], &fresh[..n], None);
        };
        let Ok(token) = self.pool.arm(g) else { return self.unwind(&frames[..n], &fresh[..n], Some(g)) };
        for (io, &f) in ios.iter().zip(&frames[..n]) {
            self.st.landing.insert(io.key(), f);
            self.st.owner.insert(f, io.key());
        }
        Some(ReplyTo::Solicited { token: token.0, frame: g })
    }

    fn give_back(&mut self, frame: Frame) {
        if self.st.release(self.pool, frame) {
            // A request's landing frame: its own until the request finishes.
        } else if self.pool.unarm(frame) {
            // A put's send may still be in the ring: freed once the sends so far are reaped.
            self.pool.retire(frame);
        }
    }

    fn fill(&mut self, _page: PageId, _version: Version, write: impl FnOnce(&mut [u8])) -> Option<Frame> {
        self.filled(write)
    }

    fn bytes(&mut self, frame: &Frame, read: impl FnOnce(&[u8])) {
        self.st.buf.clear();
        self.st.buf.resize(FRAME_BYTES as usize, 0);
        if !self.pool.read(*frame, &mut self.st.buf) {
            self.st.buf.fill(0);
        }
        read(&self.st.buf);
    }
}

impl GmsPort {
    /// Run `store`'s timers and send what it wants sent now. Whether anything was sent.
    pub fn drive_store<Io: StoreIo>(&mut self, store: &mut UserStore<Io>, frames: &mut StoreFrames) -> bool {
        let now = self.now();
        self.store_done.get_or_insert_with(Vec::new);
        store.handle_timeout(now);
        let sent = store.issue(now, &mut self.node, &mut self.rpc, &mut self.lru, frames);
        if sent {
            self.flush();
        }
        sent
    }

    /// Hand each completion of a store's operation to the store among `stores` it belongs
    /// to; one no store claims gives its frame back. Whether there were any.
    pub fn complete_stores<'s, Io: StoreIo + 's>(
        &mut self,
        stores: impl IntoIterator<Item = &'s mut UserStore<Io>>,
    ) -> bool {
        let Some(done) = self.store_done.as_mut().filter(|d| !d.is_empty()) else { return false };
        let mut done = std::mem::take(done);
        let now = self.now();
        for s in stores {
            let host = &mut self.node.host;
            done.retain(|c| !s.complete(now, c, &mut FramesIn::<Io, Frame, PortHost>::frames(&mut StoreFrames, host)));
        }
        for c in done.drain(..) {
            self.release_completion(&c);
        }
        // The vector goes back, empty, for the next completions.
        self.store_done = Some(done);
        true
    }

    /// A completion no one claims: its frame goes back.
    pub(super) fn release_completion(&mut self, c: &Completion<Frame>) {
        let frame = match c.result {
            OpResult::Get(GetResult::Hit { frame, .. }) => Some(frame),
            OpResult::Get(GetResult::Miss { frame, .. }) => frame,
            _ => None,
        };
        if let Some(f) = frame {
            self.node.host.release(f);
        }
    }

    /// The next request `store` finished: its handle, how it ended, and a read's page
    /// (`None`: a write, or a read that brought no bytes). Frames the store gives back go
    /// to the pool.
    pub fn poll_store_done<Io: StoreIo>(
        &mut self,
        store: &mut UserStore<Io>,
    ) -> Option<(Io, Outcome, Option<Vec<u8>>)> {
        loop {
            match store.poll_done()? {
                Finished::Request { io, outcome } => {
                    let l = &mut self.node.host.landing;
                    let bytes = l.landing.remove(&io.key()).map(|frame| {
                        l.owner.remove(&frame);
                        let mut b = vec![0; FRAME_BYTES as usize];
                        if !self.node.host.frames.read(frame, &mut b) {
                            b.clear();
                        }
                        self.node.host.frames.release(frame);
                        b
                    });
                    return Some((io, outcome, bytes));
                }
                Finished::Scratch(frame) => self.node.host.frames.release(frame),
                // A copy read ahead: its frame's bytes are the page.
                Finished::Copy { io, frame, version } => {
                    let mut b = vec![0; FRAME_BYTES as usize];
                    if !self.node.host.frames.read(frame, &mut b) {
                        b.clear();
                    }
                    self.node.host.frames.release(frame);
                    return Some((io, Outcome::Read { version }, Some(b)));
                }
            }
        }
    }

    /// Frames held for store requests' reads.
    pub fn landing_frames(&self) -> usize {
        self.node.host.landing.landing.len()
    }
}

impl super::Cluster {
    /// One pass of the in-process cluster and of `store` on node `at`: the store's sends
    /// and completions; the requests it finished go to `out` ([`GmsPort::poll_store_done`]).
    pub fn store_step<Io: StoreIo>(
        &mut self,
        at: usize,
        store: &mut UserStore<Io>,
        out: &mut Vec<(Io, Outcome, Option<Vec<u8>>)>,
    ) {
        self.poll();
        let port = &mut self.ports[at];
        port.drive_store(store, &mut StoreFrames);
        port.complete_stores([&mut *store]);
        while let Some(done) = port.poll_store_done(store) {
            out.push(done);
        }
    }
}
