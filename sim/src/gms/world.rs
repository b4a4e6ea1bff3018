// SPDX-License-Identifier: GPL-2.0-only
//! The world the simulated runtimes share: frames and their contents, each node's NIC
//! payload table (IPT), and the host callbacks GMS makes into its runtime.

use super::{Frame, PAGE_LEN};
use gms::ops::{GetPagesReply, GetStatus, OP_GETPAGES};
use gms::prelude::*;
use netrpc::wire::{Header, Kind};
use std::cell::RefCell;
use std::collections::HashMap;
use std::rc::Rc;

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum FState {
    Live,
    /// GMS dropped it: freed once the transmits it may be attached to are drained.
    Dropped,
    Freed,
}

#[derive(Clone, Copy, Debug)]
pub struct FrameInfo {
    pub node: u16,
    pub contents: Option<(PageId, u64)>,
    pub state: FState,
}

pub struct World {
    pub ctx: String,
    pub frames: HashMap<Frame, FrameInfo>,
    pub next_frame: Frame,
    pub ipt: Vec<HashMap<u64, Frame>>,
    pub completions: Vec<(u16, Completion<Frame>)>,
    /// Frames GMS dropped since the last drain.
    pub dropped: Vec<Frame>,
    pub trace: bool,
    /// Gather frames a host made: the frames each names, in order.
    pub gathers: HashMap<Frame, Vec<Frame>>,
    /// Group frames a requester made: the page-sized pieces each owns, in order.
    pub groups: HashMap<Frame, Vec<Frame>>,
    /// Nodes whose host does not gather (as `Host::gather`'s default: `None`).
    pub no_gather: std::collections::HashSet<u16>,
}

impl World {
    pub fn alloc(&mut self, node: u16, contents: Option<(PageId, u64)>) -> Frame {
        self.next_frame += 1;
        self.frames.insert(self.next_frame, FrameInfo { node, contents, state: FState::Live });
        self.next_frame
    }

    pub fn frame(&mut self, f: Frame) -> &mut FrameInfo {
        let ctx = &self.ctx;
        self.frames.get_mut(&f).unwrap_or_else(|| panic!("{ctx}: unknown frame {f}"))
    }

    /// The runtime frees a frame of `node` (disarming its IPT entry).
    pub fn free(&mut self, node: u16, f: Frame) {
        let ctx = self.ctx.clone();
        let info = self.frame(f);
        assert_eq!((info.node, info.state), (node, FState::Live), "{ctx}: free of frame {f}: {info:?}");
        info.state = FState::Freed;
        self.ipt[node as usize].retain(|_, fr| *fr != f);
        // A group frame owns its pieces.
        if let Some(pieces) = self.groups.remove(&f) {
            for p in pieces {
                self.free(node, p);
            }
        }
    }

    /// A group frame of `node` over `pieces` fresh empty page-sized frames.
    pub fn group(&mut self, node: u16, pieces: usize) -> Frame {
        let list = (0..pieces).map(|_| self.alloc(node, None)).collect();
        let g = self.alloc(node, None);
        self.groups.insert(g, list);
        g
    }
}

pub struct TestHost {
    pub id: u16,
    pub w: Rc<RefCell<World>>,
}

impl Host<Frame> for TestHost {
    fn copy_payload(&mut self, from: &Frame, to: &Frame, len: u32) -> bool {
        let mut w = self.w.borrow_mut();
        let ctx = w.ctx.clone();
        let src = *w.frame(*from);
        let dst = w.frame(*to);
        assert_eq!((src.node, src.state), (self.id, FState::Live), "{ctx}: copy from frame {from}");
        assert_eq!((dst.node, dst.state), (self.id, FState::Live), "{ctx}: copy into frame {to}");
        assert_eq!(len, PAGE_LEN, "{ctx}: copy length");
        dst.contents = src.contents;
        true
    }
    fn release(&mut self, frame: Frame) {
        let mut w = self.w.borrow_mut();
        if w.trace {
            eprintln!("  node {}: release frame {frame}", self.id);
        }
        w.free(self.id, frame);
    }
    fn dropped(&mut self, page: PageId, frame: Frame, _dirty: bool) {
        let mut w = self.w.borrow_mut();
        if w.trace {
            eprintln!("  node {}: dropped {page:?} frame {frame}", self.id);
        }
        let ctx = w.ctx.clone();
        let info = w.frame(frame);
        assert_eq!((info.node, info.state), (self.id, FState::Live), "{ctx}: GMS dropped frame {frame}: {info:?}");
        assert_eq!(info.contents.map(|c| c.0), Some(page), "{ctx}: GMS dropped frame {frame} as page {page:?}");
        info.state = FState::Dropped;
        w.dropped.push(frame);
    }
    fn completed(&mut self, done: Completion<Frame>) {
        self.w.borrow_mut().completions.push((self.id, done));
    }
    fn gather(&mut self, frames: &[Frame], _piece: u32) -> Option<Frame> {
        let mut w = self.w.borrow_mut();
        if w.no_gather.contains(&self.id) {
            return None;
        }
        let ctx = w.ctx.clone();
        for f in frames {
            let info = *w.frame(*f);
            assert_eq!((info.node, info.state), (self.id, FState::Live), "{ctx}: gather of frame {f}");
            assert!(info.contents.is_some(), "{ctx}: gather of empty frame {f}");
        }
        let g = w.alloc(self.id, None);
        w.gathers.insert(g, frames.to_vec());
        Some(g)
    }
}

/// The pages a `GETPAGES` reply's gather frame `g` carries, read from the frames it names
/// as the NIC sends them; checked against the reply's body (a hit naming each page at its
/// version, in the mask's order) and its length. `None`: `g` is no gather frame.
pub(crate) fn gathered_payload(w: &World, node: u16, g: Frame, len: u32, ctrl: &[u8]) -> Option<Vec<(PageId, u64)>> {
    let ctx = &w.ctx;
    let list = w.gathers.get(&g)?;
    let contents: Vec<(PageId, u64)> = list
        .iter()
        .map(|f| {
            let info = w.frames.get(f).unwrap_or_else(|| panic!("{ctx}: gather of unknown frame {f}"));
            assert_eq!(info.node, node, "{ctx}: node {node} gathered frame {f} of node {}", info.node);
            assert!(info.state != FState::Freed, "{ctx}: node {node} sent freed frame {f} in a gather");
            info.contents.unwrap_or_else(|| panic!("{ctx}: node {node} gathered empty frame {f}"))
        })
        .collect();
    let (h, body) = Header::parse(ctrl).unwrap_or_else(|e| panic!("{ctx}: bad ctrl from {node}: {e:?}"));
    assert_eq!((h.op, h.kind), (OP_GETPAGES, Kind::Reply), "{ctx}: a gather frame goes with a GETPAGES reply");
    let rep: GetPagesReply = netrpc::wire::Message::decode(body).unwrap();
    assert_eq!(rep.status, GetStatus::Hit, "{ctx}: pages sent with a miss");
    let pages: Vec<PageId> =
        (0..64).filter(|i| rep.mask >> i & 1 == 1).map(|i| PageId::new(rep.first.space, rep.first.page + i)).collect();
    let named: Vec<(PageId, u64)> = pages.iter().enumerate().map(|(k, p)| (*p, rep.versions.get(k).0)).collect();
    assert_eq!(contents, named, "{ctx}: the gathered pages are not the ones the reply names");
    assert_eq!(len, PAGE_LEN * list.len() as u32, "{ctx}: gathered payload length");
    Some(contents)
}
