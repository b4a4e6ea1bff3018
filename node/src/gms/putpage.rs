// SPDX-License-Identifier: GPL-2.0-only
//! Putpages from a port: the target (`gms::placement`), put, and evict.

use super::completions::{Finished, Pending};
use super::GmsPort;
use anyhow::{bail, Context};
use gms::prelude::*;
use netrpc::prelude::*;

impl GmsPort {
    /// The target of a putpage: by the global LRU's plan over the other members that
    /// take puts now, else the least loaded ([`gms::placement`]).
    pub fn choose_target(&mut self) -> Option<u16> {
        self.choose_target_apart(&[])
    }

    /// [`Self::choose_target`] among the members not in `apart` (the holders of a page's
    /// other copies, as the store places replicas): `None` when none of the others takes
    /// a put now.
    pub fn choose_target_apart(&mut self, apart: &[u16]) -> Option<u16> {
        let me = self.id();
        let others = || self.node.members().ids().iter().copied().filter(move |&n| n != me);
        if !self.placement.targets().eq(others()) {
            let nodes: Vec<u16> = others().collect();
            self.placement.set_targets(nodes);
        }
        let (now, c) = (self.now(), self.coordinator());
        self.placement.pick_avoiding(now, &mut self.lru, c, apart).map(|(t, _)| t)
    }

    /// Start a putpage of `data` as `page` at `version` to `target` (default: by the
    /// global LRU, [`Self::choose_target`]). The page leaves the local cache (it may be
    /// stale now).
    pub fn put(&mut self, page: PageId, version: Version, data: &[u8], target: Option<u16>) -> anyhow::Result<OpId> {
        self.put_with(page, version, data, target, false)
    }

    /// [`Self::put`] of a page that is `dirty` (its writer has not written it to its
    /// block server: the holder keeps it until a newer version or a discard supersedes
    /// it, `gms::cached`).
    pub fn put_with(
        &mut self,
        page: PageId,
        version: Version,
        data: &[u8],
        target: Option<u16>,
        dirty: bool,
    ) -> anyhow::Result<OpId> {
        let target = match target {
            Some(t) => t,
            None => self.choose_target().context("no put target")?,
        };
        self.cache_remove(&page);
        if let Some(Finished::Hit { frame, .. }) = self.finished.remove(&page) {
            self.node.host.frames.free(frame);
        }
        self.missed.remove(&page);
        let f = self.node.host.frames.alloc().context("no free frame")?;
        self.node.host.frames.write(f, data);
        let now = self.now();
        match self.node.putpage(
            now,
            &mut self.rpc,
            page,
            version,
            f,
            data.len() as u32,
            target,
            dirty,
            Mode::NonBlocking,
        ) {
            Ok(op) => {
                self.pending.insert(op, (page, Pending::Put { frame: f, target, version }));
                self.stats.puts += 1;
                self.after_input();
                Ok(op)
            }
            Err(e) => {
                self.node.host.frames.free(f);
                bail!("putpage: {e:?}")
            }
        }
    }

    /// Start a discard of `page` up to `version` (the directory forgets those versions;
    /// the holder drops its copy): poll, then [`Self::discard_poll`].
    pub fn discard_start(&mut self, page: PageId, version: Version) -> anyhow::Result<OpId> {
        let now = self.now();
        let op = self.node.discard(now, &mut self.rpc, page, version, Mode::Wait);
        let op = op.map_err(|e| anyhow::anyhow!("discard: {e:?}"))?;
        self.after_input();
        Ok(op)
    }

    /// How a discard started with [`Self::discard_start`] ended, once it did: whether the
    /// directory forgot the page.
    pub fn discard_poll(&mut self, op: OpId) -> Option<bool> {
        let c = self.node.take(op)?;
        Some(c.result == OpResult::Discard(DiscardResult::Done))
    }

    /// Evict a page this node last used at `last_used` (ns of [`Self::now`]): discarded
    /// (`Ok(None)`, counted in the LRU's `evictions_discarded`) if it is older than the
    /// plan's threshold, else put like [`Self::put`].
    pub fn evict(
        &mut self,
        page: PageId,
        version: Version,
        data: &[u8],
        last_used: u64,
    ) -> anyhow::Result<Option<OpId>> {
        let age = self.lru.age_at_plan(self.lru.tick(last_used));
        let c = self.coordinator();
        if self.lru.should_discard(age, c) {
            self.cache_remove(&page);
            return Ok(None);
        }
        self.put(page, version, data, None).map(Some)
    }
}
