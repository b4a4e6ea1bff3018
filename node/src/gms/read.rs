// SPDX-License-Identifier: GPL-2.0-only
//! Reads at a port: getpages through the local page cache and read-ahead, and plain getpages.

pub use super::completions::Source;
use super::completions::{Finished, GetKind, Pending, MISS_TTL};
use super::GmsPort;
use crate::rpc::{Frame, Frames, FRAME_BYTES};
use anyhow::{bail, Context};
use gms::cache::Cached;
use gms::prelude::*;
use gms::readahead::Decision;
use gms::reader::Heard;
use netrpc::prelude::*;

/// The result of a get.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Got {
    /// `data`: exactly the bytes stored with the page (a 4 KiB page reads back as 4 KiB).
    Hit {
        version: Version,
        data: Vec<u8>,
        source: Source,
    },
    Miss,
}

/// The answer of a read into the reader's buffer ([`GmsPort::read_start_into`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ReadInto {
    /// The page's first `min(len, buf.len())` bytes are in the buffer; `len` is the page's
    /// length (a buffer shorter than the page gets only its start).
    Hit { version: Version, len: usize, source: Source },
    /// No copy came back; how the getpage missed ([`gms::reader`]'s input: a miss that
    /// got no answer is not a page nobody has).
    Miss(Heard),
}

/// Where a read's bytes go: a fresh `Vec` ([`Got`]) or the reader's buffer.
enum Sink<'a> {
    Vec(Vec<u8>),
    Buf(&'a mut [u8]),
}

impl Sink<'_> {
    /// Take the first `len` bytes of frame `f` (never more than a frame).
    fn fill(&mut self, frames: &Frames, f: Frame, len: u32) {
        let len = len.min(FRAME_BYTES) as usize;
        match self {
            Sink::Vec(v) => {
                v.resize(len, 0);
                frames.read(f, v);
            }
            Sink::Buf(b) => {
                let n = len.min(b.len());
                frames.read(f, &mut b[..n]);
            }
        }
    }
}

impl GmsPort {
    // ---- the page cache --------------------------------------------------------------------

    pub(super) fn cache_insert(&mut self, page: PageId, version: Version, frame: Frame, len: u32) {
        let frames = &mut self.node.host.frames;
        self.cache.insert(page, Cached { version, frame, len }, |f| frames.free(f));
        self.stats.cache_evictions = self.cache.evictions;
    }

    pub(super) fn cache_remove(&mut self, page: &PageId) {
        if let Some(c) = self.cache.remove(page) {
            self.node.host.frames.free(c.frame);
        }
    }

    /// The first `len` bytes of frame `f` (a page's stored bytes; never more than a frame).
    fn read_frame(&self, f: Frame, len: u32) -> Vec<u8> {
        let mut v = vec![0u8; len.min(FRAME_BYTES) as usize];
        self.node.host.frames.read(f, &mut v);
        v
    }

    /// Issue a getpage of `page` into a fresh solicited frame.
    /// `send`: hand it to the NIC now (else the caller does, after more).
    fn issue_get(&mut self, page: PageId, kind: GetKind, send: bool) -> anyhow::Result<OpId> {
        self.issue_get_for(page, kind, send, None)
    }

    /// [`Self::issue_get`] for the caller of operation `for_op` (a getpage asked again
    /// after a holder's answerable miss), else for its own.
    pub(super) fn issue_get_for(
        &mut self,
        page: PageId,
        kind: GetKind,
        send: bool,
        for_op: Option<OpId>,
    ) -> anyhow::Result<OpId> {
        let reply_to = self.node.host.frames.solicit().context("no free frame or IPT entry for a getpage")?;
        let ReplyTo::Solicited { frame: f, .. } = reply_to else { bail!("a solicited reply without a frame") };
        let now = self.now();
        // Straight to the holder's NIC when it answers for the page (one-sided), else as
        // GMS finds it.
        let answer = self.answers.get(&page).copied();
        let issued = match answer {
            Some((holder, v, a)) => {
                self.node.getpage_hinted(now, &mut self.rpc, page, v, holder, Some(a), reply_to, Mode::NonBlocking)
            }
            None => self.node.getpage(now, &mut self.rpc, page, reply_to, Mode::NonBlocking),
        };
        match issued {
            Ok(op) => {
                // A getpage served locally completes inside the call: handled below.
                let get = Pending::Get {
                    frame: f,
                    issued: now,
                    kind,
                    for_op: for_op.unwrap_or(op),
                    answerable: answer.is_some(),
                };
                self.pending.insert(op, (page, get));
                if kind == GetKind::Prefetch {
                    self.stats.prefetches += 1;
                } else {
                    self.stats.demand_fetches += 1;
                }
                if send {
                    self.after_call();
                }
                Ok(op)
            }
            Err(e) => {
                self.node.host.release(f);
                bail!("getpage: {e:?}")
            }
        }
    }

    /// Nonblocking read of `page` through the cache and read-ahead: `Some` if it is
    /// answered now (cache hit, or a fetch that already finished), else the fetch (or the
    /// pending prefetch) is under way: poll and ask again. Issues read-ahead.
    pub fn read_start(&mut self, page: PageId) -> Option<Got> {
        self.read_start_heard(page).map(|(got, _)| got)
    }

    /// [`Self::read_start`], with what the read heard (see [`Self::get_poll_heard`]).
    pub fn read_start_heard(&mut self, page: PageId) -> Option<(Got, Heard)> {
        let mut sink = Sink::Vec(Vec::new());
        let r = self.read_start_to(page, &mut sink);
        r.map(|r| Self::got(r, sink))
    }

    /// Like [`Self::read_start`], the page's bytes copied into `buf` (no allocation):
    /// what a reader with a buffer of its own (a block device, a file read) uses.
    pub fn read_start_into(&mut self, page: PageId, buf: &mut [u8]) -> Option<ReadInto> {
        self.read_start_to(page, &mut Sink::Buf(buf))
    }

    /// Like [`Self::read_poll`], into `buf` (see [`Self::read_start_into`]).
    pub fn read_poll_into(&mut self, page: PageId, buf: &mut [u8]) -> Option<ReadInto> {
        self.read_poll_to(page, &mut Sink::Buf(buf))
    }

    fn got(r: ReadInto, sink: Sink<'_>) -> (Got, Heard) {
        match (r, sink) {
            (ReadInto::Hit { version, source, .. }, Sink::Vec(data)) => {
                (Got::Hit { version, data, source }, Heard::Hit(version))
            }
            (ReadInto::Miss(heard), _) => (Got::Miss, heard),
            (ReadInto::Hit { .. }, Sink::Buf(_)) => (Got::Miss, Heard::NoAnswer),
        }
    }

    fn read_start_to(&mut self, page: PageId, sink: &mut Sink<'_>) -> Option<ReadInto> {
        // The maps are usually empty on the read-ahead path: skip hashing then.
        if !self.finished.is_empty() {
            if let Some(fin) = self.finished.remove(&page) {
                return Some(self.take_finished(page, fin, sink));
            }
        }
        let cached = self.cache.get(&page);
        if !self.missed.is_empty() {
            if let Some(t) = self.missed.remove(&page) {
                if self.now().saturating_sub(t) < MISS_TTL && cached.is_none() {
                    self.stats.reads += 1;
                    return Some(ReadInto::Miss(Heard::NotFound));
                }
            }
        }
        let d = self.ra.on_access(page.space, page.page, cached.is_some());
        let r = match d {
            Decision::Hit => {
                self.stats.reads += 1;
                // Read-ahead answers a hit only for a page said to be cached.
                let Some(Cached { version, frame, len }) = cached else { return Some(ReadInto::Miss(Heard::NotFound)) };
                self.stats.cache_hits += 1;
                sink.fill(&self.node.host.frames, frame, len);
                Some(ReadInto::Hit { version, len: len as usize, source: Source::Cache })
            }
            Decision::WaitFor(_) => {
                self.stats.waited_pending += 1;
                None
            }
            Decision::Fetch(id) => {
                if self.issue_get(page, GetKind::Reader, true).is_err() {
                    if id.is_some() {
                        self.ra.complete(page.space, page.page, false);
                    }
                    self.stats.reads += 1;
                    Some(ReadInto::Miss(Heard::NoAnswer))
                } else {
                    None
                }
            }
        };
        self.issue_prefetches(page.space);
        r
    }

    /// Issue the prefetches read-ahead wants now for `space`'s stream, in batches of
    /// half the depth sent together: one send-and-poll of the NIC per batch instead of
    /// per page, and the servers answer a batch per pass. (Half the depth keeps the other
    /// half in flight while a batch waits to fill; a quarter sent twice as many small
    /// batches and measured ~20 % slower at depth 16, the whole depth ~25 % slower.)
    fn issue_prefetches(&mut self, space: u64) {
        let batch = (self.ra.config().depth as u64 / 2).max(1);
        if self.ra.wanted(space) < batch {
            return;
        }
        let mut issued = false;
        loop {
            let (cache, missed) = (&self.cache, &self.missed);
            // Skip pages cached, and pages a recent prefetch found missing (a miss resets
            // the stream, whose new window may cover them again).
            let skip = |s, n| {
                let p = PageId::new(s, n);
                cache.contains(&p) || missed.contains_key(&p)
            };
            let Some(p) = self.ra.poll_prefetch(skip) else { break };
            let page = PageId::new(p.space, p.page);
            if self.issue_get(page, GetKind::Prefetch, false).is_err() {
                self.stats.prefetch_failed += 1;
                self.ra.complete(p.space, p.page, false);
                break;
            }
            issued = true;
        }
        if issued {
            self.after_call();
        }
    }

    /// Continue a read started with [`Self::read_start`]: the answer once the fetch it
    /// waits for finished (a prefetch lands in the cache; a reader's fetch is kept for it).
    pub fn read_poll(&mut self, page: PageId) -> Option<Got> {
        self.read_poll_heard(page).map(|(got, _)| got)
    }

    /// [`Self::read_poll`], with what the read heard (see [`Self::get_poll_heard`]).
    pub fn read_poll_heard(&mut self, page: PageId) -> Option<(Got, Heard)> {
        let mut sink = Sink::Vec(Vec::new());
        let r = self.read_poll_to(page, &mut sink);
        r.map(|r| Self::got(r, sink))
    }

    fn read_poll_to(&mut self, page: PageId, sink: &mut Sink<'_>) -> Option<ReadInto> {
        if !self.finished.is_empty() {
            if let Some(fin) = self.finished.remove(&page) {
                return Some(self.take_finished(page, fin, sink));
            }
        }
        if self.ra.pending_id(page.space, page.page).is_some() {
            return None;
        }
        if !self.missed.is_empty() && self.missed.remove(&page).is_some() {
            // The prefetch this reader waited for found nothing.
            self.stats.reads += 1;
            return Some(ReadInto::Miss(Heard::NotFound));
        }
        if let Some(Cached { version, frame, len }) = self.cache.get(&page) {
            self.stats.reads += 1;
            sink.fill(&self.node.host.frames, frame, len);
            return Some(ReadInto::Hit { version, len: len as usize, source: Source::Cache });
        }
        // The prefetch it waited for missed: fetch it ourselves (or report the miss).
        self.read_start_to(page, sink)
    }

    fn take_finished(&mut self, page: PageId, fin: Finished, sink: &mut Sink<'_>) -> ReadInto {
        self.stats.reads += 1;
        match fin {
            Finished::Hit { version, frame, len, source } => {
                sink.fill(&self.node.host.frames, frame, len);
                // The page goes into the local cache (a reader's fetch is cached too).
                self.cache_insert(page, version, frame, len);
                ReadInto::Hit { version, len: len as usize, source }
            }
            Finished::Miss(heard) => ReadInto::Miss(heard),
        }
    }

    /// Start a plain getpage (no cache, no read-ahead): poll, then [`Self::get_poll`]
    /// (a result never taken keeps its frame).
    pub fn get_start(&mut self, page: PageId) -> anyhow::Result<OpId> {
        self.issue_get(page, GetKind::Plain, true)
    }

    /// The result of a getpage started with [`Self::get_start`], once finished (the
    /// local cache is left alone).
    pub fn get_poll(&mut self, op: OpId) -> Option<Got> {
        self.get_poll_heard(op).map(|(got, _)| got)
    }

    /// [`Self::get_poll`], with what the getpage heard ([`gms::reader`]'s input: a miss
    /// that got no answer is not a page nobody has).
    pub fn get_poll_heard(&mut self, op: OpId) -> Option<(Got, Heard)> {
        Some(match self.plain.remove(&op)? {
            Finished::Hit { version, frame, len, source } => {
                let data = self.read_frame(frame, len);
                self.node.host.frames.free(frame);
                (Got::Hit { version, data, source }, Heard::Hit(version))
            }
            Finished::Miss(heard) => (Got::Miss, heard),
        })
    }
}
