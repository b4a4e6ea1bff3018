// SPDX-License-Identifier: GPL-2.0-only
//! Epoch-based global LRU (after GMS): page-age summaries, the coordinator that turns them
//! into per-node weights and an age threshold, and the plan a node evicts by. No `unsafe`.
//!
//! Time is divided into **epochs**. At the start of an epoch every node sends the
//! coordinator an [`AgeSummary`]: its count of resident pages and free frames, and the
//! ages of its oldest pages as (age, count) groups, oldest first. A free frame counts as a
//! page of infinite age ([`AGE_FREE`]): a node with free memory is the best place for an
//! evicted page. The [`Coordinator`] (any node — e.g. the lowest live id) waits for the
//! members' summaries until a deadline (a member silent this epoch is planned by the last
//! summary it sent, one that never reported gets weight 0), then computes
//! an [`EpochPlan`]: the `M` globally oldest pages, each node's **weight** (how many of
//! those `M` it holds; the weights sum to `M`), and the **threshold** (the age of the
//! `M`-th oldest page). It broadcasts the plan ([`EpochPlan::encode`]).
//!
//! During the epoch an evicting node asks [`EpochPlan::should_discard`] first — a page
//! older than the threshold is among the pages the cluster is about to replace anyway, so
//! it is discarded (written back if dirty) rather than put into global memory — and
//! otherwise puts it to [`EpochPlan::choose_target`], drawn in proportion to the weights.
//! The plan counts the budget down ([`EpochPlan::note_put`], [`EpochPlan::note_received`],
//! [`EpochPlan::note_discarded`]); [`EpochPlan::should_end_epoch`] says when the expected
//! `M` replacements have happened as far as this node can see, so it asks for the next
//! epoch early. The epoch's maximum duration is the runtime's timer.
//!
//! Ages are in whatever unit the node's LRU clock uses (larger = older); a coarse clock
//! makes the summaries histograms, a fine one makes them lists of the oldest pages. The
//! plan is exact as long as every node's summary covers at least its `M` oldest pages.
//!
//! ```
//! use gms::lru::{AgeSummary, Coordinator};
//!
//! // Node 0: 10 pages, 2 free frames, oldest pages aged 9, 9, 7. Node 1: 4 pages, the
//! // oldest aged 8, 3. Node 2 never reports.
//! let mut s0 = AgeSummary::<4>::new(0, 7, 10, 2);
//! for age in [9, 9, 7] { s0.add_oldest(age).unwrap(); }
//! let mut s1 = AgeSummary::<4>::new(1, 7, 4, 0);
//! s1.add_pages(8, 1).unwrap();
//! s1.add_pages(3, 1).unwrap();
//!
//! let mut c = Coordinator::<3, 4>::new(0, 5); // 5 oldest pages per epoch
//! c.start_epoch(7, &[0, 1, 2], 1_000);
//! for s in [s0, s1] {
//!     let mut buf = [0u8; 100];
//!     let n = s.encode(&mut buf).unwrap();
//!     c.handle_summary(10, &AgeSummary::decode(&buf[..n]).unwrap()).unwrap();
//! }
//! assert!(c.poll_plan(999).is_none()); // node 2 may still report
//! let plan = c.poll_plan(1_000).unwrap();
//! // The five oldest: node 0's two free frames and pages aged 9, 9; node 1's page aged 8.
//! assert_eq!(plan.weights(), &[4, 1, 0]);
//! assert_eq!(plan.threshold(), 8);
//! assert!(plan.should_discard(9) && !plan.should_discard(8));
//! assert_eq!(plan.choose_target(0), Some(1)); // node 0 excludes itself
//! ```

/// The age of a free frame: older than any page.
pub const AGE_FREE: u32 = u32::MAX;
/// Largest encoded [`AgeSummary`] (it travels in a NetRPC body).
pub const SUMMARY_MAX_BYTES: usize = 100;
/// Bytes of an encoded summary before its groups.
pub const SUMMARY_HEADER_BYTES: usize = 16;
/// Bytes per encoded (age, count) group.
pub const SUMMARY_GROUP_BYTES: usize = 8;
/// Most groups a summary can carry within [`SUMMARY_MAX_BYTES`].
pub const SUMMARY_MAX_GROUPS: usize = (SUMMARY_MAX_BYTES - SUMMARY_HEADER_BYTES) / SUMMARY_GROUP_BYTES;
/// Bytes of an encoded plan before its weights.
pub const PLAN_HEADER_BYTES: usize = 12;
/// Most nodes a plan can carry within a NetRPC body of 100 bytes.
pub const PLAN_MAX_NODES: usize = (100 - PLAN_HEADER_BYTES) / 4;
const WIRE_VERSION: u8 = 1;

/// The global LRU's NetRPC operations, all one-way (outside [`super::ops::is_gms_op`]'s
/// range, so a runtime serves them next to GMS's, through `Host::serve_other`):
///
/// | op | direction | body |
/// |----|-----------|------|
/// | `LRU_START` 0x4720 | coordinator → every member | epoch (u32 LE) |
/// | `LRU_SUMMARY` 0x4721 | member → coordinator | an encoded [`AgeSummary`] |
/// | `LRU_PLAN` 0x4722 | coordinator → every other member | an encoded [`EpochPlan`] |
/// | `LRU_NEXT` 0x4723 | member → coordinator | epoch (u32 LE) whose budget it used up |
pub const OP_LRU_START: u16 = 0x4720;
pub const OP_LRU_SUMMARY: u16 = 0x4721;
pub const OP_LRU_PLAN: u16 = 0x4722;
pub const OP_LRU_NEXT: u16 = 0x4723;

/// Whether `op` is one of the global LRU's operations.
pub fn is_lru_op(op: u16) -> bool {
    (OP_LRU_START..=OP_LRU_NEXT).contains(&op)
}

/// How many values [`quantize_age`] gives: every age it returns is below this.
pub const AGE_LEVELS: usize = 252;

/// Map an age in clock ticks onto a coarse, order-preserving scale (exact below 8 ticks,
/// then 4 steps per doubling), so that an [`AgeSummary`]'s few groups cover many pages.
/// Every node must use the same tick.
pub fn quantize_age(ticks: u64) -> u32 {
    if ticks < 8 {
        return ticks as u32;
    }
    // The leading one's place, >= 3. The age is (e - 1) * 4 plus the two bits below the
    // leading one: 8 for ticks = 8, strictly increasing in steps, at most
    // (63 - 1) * 4 + 3 = 251 (below AGE_LEVELS, and so below AGE_FREE).
    let e = 63 - ticks.leading_zeros();
    (e - 1) * 4 + ((ticks >> (e - 2)) & 3) as u32
}

/// Bytes that are not a valid summary or plan, or an output buffer that is too small.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct WireError;

/// Why [`AgeSummary::add_pages`] refused.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum AddError {
    /// All `K` groups are used and the age is younger than the last: stop feeding pages.
    Full,
    /// Older than a page already added (pages must come oldest first), or [`AGE_FREE`].
    OutOfOrder,
    /// More pages than the summary's resident page count, or a count of 0.
    BadCount,
}

/// `count` of a node's pages have age `age`.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct AgeGroup {
    pub age: u32,
    pub count: u32,
}

/// One node's page ages at the start of an epoch, at most `K` ≤ [`SUMMARY_MAX_GROUPS`]
/// groups.
///
/// Invariants (kept by the builder and checked by [`AgeSummary::decode`]): group ages are
/// strictly decreasing and below [`AGE_FREE`], counts are ≥ 1, and they sum to at most
/// `pages`. The groups are the node's *oldest* pages and each is complete: the node has no
/// unreported page as old as its last group. If they cover every resident page the
/// summary is complete.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct AgeSummary<const K: usize> {
    node: u16,
    epoch: u32,
    pages: u32,
    free_frames: u32,
    len: usize,
    groups: [AgeGroup; K],
}

impl<const K: usize> AgeSummary<K> {
    /// An empty summary of `node` for `epoch`: `pages` resident, `free_frames` free.
    pub fn new(node: u16, epoch: u32, pages: u32, free_frames: u32) -> Self {
        const { assert!(K <= SUMMARY_MAX_GROUPS, "an AgeSummary must fit in 100 bytes") };
        AgeSummary { node, epoch, pages, free_frames, len: 0, groups: [AgeGroup::default(); K] }
    }

    /// Add one page of `age`; pages come oldest first (see [`AgeSummary::add_pages`]).
    pub fn add_oldest(&mut self, age: u32) -> Result<(), AddError> {
        self.add_pages(age, 1)
    }

    /// Add `count` pages of `age`, oldest first. Equal ages merge into one group. On
    /// [`AddError::Full`] stop: the summary then covers every page older than `age`.
    pub fn add_pages(&mut self, age: u32, count: u32) -> Result<(), AddError> {
        if age == AGE_FREE {
            return Err(AddError::OutOfOrder);
        }
        if count == 0 || self.covered() + count as u64 > self.pages as u64 {
            return Err(AddError::BadCount);
        }
        match self.groups[..self.len].last_mut() {
            Some(g) if g.age == age => {
                // Cannot overflow: covered + count <= pages <= u32::MAX.
                g.count += count;
                return Ok(());
            }
            Some(g) if g.age < age => return Err(AddError::OutOfOrder),
            _ => {}
        }
        if self.len == K {
            return Err(AddError::Full);
        }
        self.groups[self.len] = AgeGroup { age, count };
        self.len += 1;
        Ok(())
    }

    pub fn node(&self) -> u16 {
        self.node
    }
    pub fn epoch(&self) -> u32 {
        self.epoch
    }
    /// Resident pages on the node (free frames excluded).
    pub fn pages(&self) -> u32 {
        self.pages
    }
    pub fn free_frames(&self) -> u32 {
        self.free_frames
    }
    /// The (age, count) groups, oldest first.
    pub fn groups(&self) -> &[AgeGroup] {
        &self.groups[..self.len]
    }
    /// Pages the groups cover.
    pub fn covered(&self) -> u64 {
        self.groups().iter().map(|g| g.count as u64).sum()
    }
    /// Whether the groups cover every resident page.
    pub fn is_complete(&self) -> bool {
        self.covered() == self.pages as u64
    }
    /// For an incomplete summary, the age down to which it is exact (the last group's age,
    /// or [`AGE_FREE`] without groups); `None` when complete.
    pub fn floor(&self) -> Option<u32> {
        if self.is_complete() {
            None
        } else {
            Some(self.groups().last().map_or(AGE_FREE, |g| g.age))
        }
    }

    /// Encoded size: [`SUMMARY_HEADER_BYTES`] + [`SUMMARY_GROUP_BYTES`] per group.
    pub fn encoded_len(&self) -> usize {
        SUMMARY_HEADER_BYTES + SUMMARY_GROUP_BYTES * self.len
    }

    /// Write the summary into `out` (little-endian: version u8, group count u8, node u16,
    /// epoch u32, pages u32, free frames u32, then per group age u32, count u32). Returns
    /// the length, or [`WireError`] if `out` is too small.
    pub fn encode(&self, out: &mut [u8]) -> Result<usize, WireError> {
        let n = self.encoded_len();
        let out = out.get_mut(..n).ok_or(WireError)?;
        out[0] = WIRE_VERSION;
        out[1] = self.len as u8; // len <= K <= SUMMARY_MAX_GROUPS < 256
        out[2..4].copy_from_slice(&self.node.to_le_bytes());
        out[4..8].copy_from_slice(&self.epoch.to_le_bytes());
        out[8..12].copy_from_slice(&self.pages.to_le_bytes());
        out[12..16].copy_from_slice(&self.free_frames.to_le_bytes());
        for (g, chunk) in self.groups().iter().zip(out[SUMMARY_HEADER_BYTES..].chunks_exact_mut(8)) {
            chunk[..4].copy_from_slice(&g.age.to_le_bytes());
            chunk[4..].copy_from_slice(&g.count.to_le_bytes());
        }
        Ok(n)
    }

    /// Parse an encoded summary (trailing bytes are ignored). Never panics; rejects a
    /// wrong version, more than `K` groups, a short buffer and any broken invariant.
    pub fn decode(bytes: &[u8]) -> Result<Self, WireError> {
        let head = bytes.get(..SUMMARY_HEADER_BYTES).ok_or(WireError)?;
        let n = head[1] as usize;
        if head[0] != WIRE_VERSION || n > K {
            return Err(WireError);
        }
        let mut s = AgeSummary::new(
            u16::from_le_bytes([head[2], head[3]]),
            le32(&head[4..8]),
            le32(&head[8..12]),
            le32(&head[12..16]),
        );
        let body = bytes.get(SUMMARY_HEADER_BYTES..SUMMARY_HEADER_BYTES + n * SUMMARY_GROUP_BYTES);
        for chunk in body.ok_or(WireError)?.chunks_exact(SUMMARY_GROUP_BYTES) {
            let (age, count) = (le32(&chunk[..4]), le32(&chunk[4..]));
            // Strictly decreasing: an equal age would merge and change the encoding.
            if s.groups().last().is_some_and(|g| g.age <= age) {
                return Err(WireError);
            }
            s.add_pages(age, count).map_err(|_| WireError)?;
        }
        Ok(s)
    }
}

fn le32(b: &[u8]) -> u32 {
    let mut a = [0u8; 4];
    a.copy_from_slice(&b[..4]);
    u32::from_le_bytes(a)
}

/// An epoch's eviction plan, as broadcast by the coordinator and held by each node `me`.
///
/// Nodes are ids `0..NODES` (≤ [`PLAN_MAX_NODES`]). The weights count how many of the
/// epoch's globally oldest pages each node holds; the plan also counts, locally, how much
/// of each node's weight is left this epoch.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct EpochPlan<const NODES: usize> {
    me: u16,
    epoch: u32,
    threshold: u32,
    weights: [u32; NODES],
    remaining: [u32; NODES],
}

impl<const NODES: usize> EpochPlan<NODES> {
    /// A plan for node `me`.
    pub fn new(me: u16, epoch: u32, threshold: u32, weights: [u32; NODES]) -> Self {
        const { assert!(NODES <= PLAN_MAX_NODES, "an EpochPlan must fit in 100 bytes") };
        EpochPlan { me, epoch, threshold, weights, remaining: weights }
    }

    /// A plan with no targets and no threshold: every eviction is a discard.
    pub fn empty(me: u16, epoch: u32) -> Self {
        Self::new(me, epoch, AGE_FREE, [0; NODES])
    }

    /// Compute the plan for `epoch` from `summaries` (those for ids ≥ `NODES` and repeats
    /// of an id are ignored), considering the `oldest_pages` globally oldest pages. Nodes
    /// without a summary get weight 0. If an incomplete summary leaves fewer than
    /// `oldest_pages` pages whose rank is certain, the plan considers only those, so the
    /// weights sum to `min(oldest_pages, pages known)`.
    pub fn from_summaries<const K: usize>(me: u16, epoch: u32, oldest_pages: u32, summaries: &[AgeSummary<K>]) -> Self {
        let mut by_node = [None; NODES];
        for s in summaries {
            if let Some(slot @ None) = by_node.get_mut(s.node as usize) {
                *slot = Some(*s);
            }
        }
        compute(me, epoch, oldest_pages, &by_node)
    }

    pub fn me(&self) -> u16 {
        self.me
    }
    pub fn epoch(&self) -> u32 {
        self.epoch
    }
    /// The age of the epoch's `M`-th oldest page ([`AGE_FREE`] if that is a free frame or
    /// the plan is empty).
    pub fn threshold(&self) -> u32 {
        self.threshold
    }
    pub fn weights(&self) -> &[u32; NODES] {
        &self.weights
    }
    /// `M`: the sum of the weights.
    pub fn total_weight(&self) -> u64 {
        self.weights.iter().map(|&w| w as u64).sum()
    }
    /// What is left of each node's weight as seen by this node.
    pub fn remaining(&self) -> &[u32; NODES] {
        &self.remaining
    }

    /// Whether an evicted page of `age` is discarded (written back if dirty) instead of
    /// being put into global memory: it is older than the threshold.
    pub fn should_discard(&self, age: u32) -> bool {
        age > self.threshold
    }

    /// The target of a putpage for the caller's random number `r` (uniform over `u64`):
    /// node `i ≠ me` with probability `remaining[i] / Σ_{j≠me} remaining[j]` — in a fresh
    /// plan, in proportion to the weights. `None` when no other node has weight left: the
    /// caller discards (or writes back) the page.
    pub fn choose_target(&self, r: u64) -> Option<u16> {
        let total: u64 = self.others().map(|(_, w)| w as u64).sum();
        if total == 0 {
            return None;
        }
        // Multiply-shift maps r onto 0..total without modulo bias (x < total).
        let mut x = ((r as u128 * total as u128) >> 64) as u64;
        for (i, w) in self.others() {
            if x < w as u64 {
                return Some(i as u16);
            }
            x -= w as u64;
        }
        None
    }

    fn others(&self) -> impl Iterator<Item = (usize, u32)> + '_ {
        let me = self.me as usize;
        self.remaining.iter().copied().enumerate().filter(move |&(i, _)| i != me)
    }

    /// This node put a page to `target`.
    pub fn note_put(&mut self, target: u16) {
        if let Some(r) = self.remaining.get_mut(target as usize) {
            *r = r.saturating_sub(1);
        }
    }

    /// This node received a putpage (one of its old pages makes room for it).
    pub fn note_received(&mut self) {
        self.note_put(self.me);
    }

    /// This node discarded one of its own pages older than the threshold.
    pub fn note_discarded(&mut self) {
        self.note_put(self.me);
    }

    /// Whether the epoch's budget is used up as far as this node sees: it has absorbed its
    /// whole weight (received or discarded that many pages), or it has put the whole weight
    /// of the other nodes. The runtime then starts (or asks for) the next epoch; it also
    /// ends the epoch when the epoch's maximum duration has passed.
    pub fn should_end_epoch(&self) -> bool {
        let me = self.me as usize;
        let own = (self.weights.get(me).copied().unwrap_or(0), self.remaining.get(me).copied().unwrap_or(0));
        let others_weight: u64 = self.total_weight() - own.0 as u64;
        let others_left: u64 = self.others().map(|(_, w)| w as u64).sum();
        (own.0 > 0 && own.1 == 0) || (others_weight > 0 && others_left == 0)
    }

    /// Encoded size: [`PLAN_HEADER_BYTES`] + 4 per node.
    pub const fn encoded_len(&self) -> usize {
        PLAN_HEADER_BYTES + 4 * NODES
    }

    /// Write the broadcast part (little-endian: version u8, node count u8, 0u16, epoch u32,
    /// threshold u32, weights u32 each). Returns the length, or [`WireError`] if `out` is
    /// too small.
    pub fn encode(&self, out: &mut [u8]) -> Result<usize, WireError> {
        let n = self.encoded_len();
        let out = out.get_mut(..n).ok_or(WireError)?;
        out[0] = WIRE_VERSION;
        out[1] = NODES as u8; // NODES <= PLAN_MAX_NODES < 256
        out[2..4].fill(0);
        out[4..8].copy_from_slice(&self.epoch.to_le_bytes());
        out[8..12].copy_from_slice(&self.threshold.to_le_bytes());
        for (w, chunk) in self.weights.iter().zip(out[PLAN_HEADER_BYTES..].chunks_exact_mut(4)) {
            chunk.copy_from_slice(&w.to_le_bytes());
        }
        Ok(n)
    }

    /// Parse a broadcast plan as node `me`, with the whole weights left. Never panics; a
    /// plan for more than `NODES` nodes is rejected, one for fewer leaves the rest at 0.
    pub fn decode(bytes: &[u8], me: u16) -> Result<Self, WireError> {
        let head = bytes.get(..PLAN_HEADER_BYTES).ok_or(WireError)?;
        let n = head[1] as usize;
        if head[0] != WIRE_VERSION || n > NODES || head[2..4] != [0, 0] {
            return Err(WireError);
        }
        let body = bytes.get(PLAN_HEADER_BYTES..PLAN_HEADER_BYTES + 4 * n).ok_or(WireError)?;
        let mut weights = [0; NODES];
        for (w, chunk) in weights.iter_mut().zip(body.chunks_exact(4)) {
            *w = le32(chunk);
        }
        Ok(Self::new(me, le32(&head[4..8]), le32(&head[8..12]), weights))
    }
}

/// The `c`-th (age, count) level of a summary: first its free frames at [`AGE_FREE`],
/// then its groups; only levels at least `floor` old and non-empty count.
fn level<const K: usize>(s: &AgeSummary<K>, c: usize, floor: u32) -> Option<AgeGroup> {
    let g = if c == 0 { AgeGroup { age: AGE_FREE, count: s.free_frames } } else { *s.groups().get(c - 1)? };
    (g.age >= floor).then_some(g)
}

fn compute<const NODES: usize, const K: usize>(
    me: u16,
    epoch: u32,
    oldest_pages: u32,
    sums: &[Option<AgeSummary<K>>; NODES],
) -> EpochPlan<NODES> {
    // Pages at least `floor` old are all reported, so their ranks are exact.
    let floor = sums.iter().flatten().filter_map(|s| s.floor()).max().unwrap_or(0);
    // Level 0 (free frames) is skipped when empty, so every level has a count >= 1.
    let mut cursor = [0usize; NODES];
    for (c, s) in cursor.iter_mut().zip(sums) {
        *c = s.map_or(0, |s| usize::from(s.free_frames == 0));
    }
    let known: u64 = sums
        .iter()
        .flatten()
        .map(|s| (0..=s.len).filter_map(|c| level(s, c, floor)).map(|g| g.count as u64).sum::<u64>())
        .sum();
    let m = (oldest_pages as u64).min(known);
    let mut weights = [0u32; NODES];
    let mut taken = 0u64;
    while taken < m {
        // The next-oldest age among the nodes' current levels, and how many pages have it.
        let heads: [Option<AgeGroup>; NODES] =
            core::array::from_fn(|i| sums[i].as_ref().and_then(|s| level(s, cursor[i], floor)));
        let Some(age) = heads.iter().flatten().map(|g| g.age).max() else {
            break; // unreachable: m <= known pages
        };
        let counts: [u32; NODES] = core::array::from_fn(|i| heads[i].filter(|g| g.age == age).map_or(0, |g| g.count));
        let at: u64 = counts.iter().map(|&c| c as u64).sum();
        if taken + at >= m {
            share_out(m - taken, at, &counts, &mut weights);
            return EpochPlan::new(me, epoch, age, weights);
        }
        for i in 0..NODES {
            if counts[i] > 0 {
                weights[i] += counts[i]; // <= m <= oldest_pages: no overflow
                cursor[i] += 1;
            }
        }
        taken += at;
    }
    EpochPlan::empty(me, epoch)
}

/// Split `slots` (≤ `total` = Σ counts) among the nodes tied at the threshold age in
/// proportion to their counts (largest remainder, ties to the lower id).
fn share_out<const NODES: usize>(slots: u64, total: u64, counts: &[u32; NODES], weights: &mut [u32; NODES]) {
    let mut rem = [0u64; NODES];
    let mut given = 0u64;
    for i in 0..NODES {
        let p = slots * counts[i] as u64; // both <= u32::MAX: fits in u64
        weights[i] += (p / total) as u32;
        given += p / total;
        rem[i] = p % total;
    }
    for _ in given..slots {
        // Fewer leftover slots than nodes with a remainder, so one is always found.
        let Some(best) = (0..NODES).filter(|&i| rem[i] > 0).max_by_key(|&i| (rem[i], core::cmp::Reverse(i))) else {
            break;
        };
        weights[best] += 1;
        rem[best] = 0;
    }
}

/// Why the coordinator refused a summary.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Rejected {
    /// No epoch is being collected (none started, or its plan was already made).
    NotCollecting,
    /// The summary is for another epoch.
    WrongEpoch,
    /// The node is not a member of this epoch (or its id is ≥ `NODES`).
    NotMember,
    /// It came after the epoch's plan was made: kept as the member's latest summary (a
    /// member silent in the next epoch is planned by it), not used in this plan.
    Late,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Phase {
    Idle,
    Collecting,
    Planned,
}

/// Collects the members' summaries for one epoch and computes its plan.
///
/// Call order: [`Coordinator::start_epoch`], then [`Coordinator::handle_summary`] for
/// each summary that arrives (the coordinator's own included), and
/// [`Coordinator::poll_plan`] after each of them and when [`Coordinator::poll_timeout`]
/// passes; it returns the plan once, when every member has reported or at the deadline.
#[derive(Clone, Debug)]
pub struct Coordinator<const NODES: usize, const K: usize> {
    me: u16,
    oldest_pages: u32,
    epoch: u32,
    deadline: u64,
    phase: Phase,
    expected: [bool; NODES],
    /// Each member's latest summary; `fresh`: received for the epoch being collected.
    summaries: [Option<AgeSummary<K>>; NODES],
    fresh: [bool; NODES],
}

impl<const NODES: usize, const K: usize> Coordinator<NODES, K> {
    /// A coordinator on node `me` planning `oldest_pages` (`M`) replacements per epoch.
    /// The plan is exact when each summary covers at least `M` pages (`M` ≤ `K` suffices
    /// when every age is distinct).
    pub const fn new(me: u16, oldest_pages: u32) -> Self {
        Coordinator {
            me,
            oldest_pages,
            epoch: 0,
            deadline: 0,
            phase: Phase::Idle,
            expected: [false; NODES],
            summaries: [None; NODES],
            fresh: [false; NODES],
        }
    }

    /// Make this (fresh) coordinator node `me`'s, in place (it is ~2 KiB: a kernel stack
    /// should not hold a new one).
    pub fn set_node(&mut self, me: u16) {
        self.me = me;
    }

    /// Start collecting summaries for `epoch` from `members` (ids ≥ `NODES` are ignored)
    /// until `deadline`. Keeps each member's latest summary from earlier epochs (a member
    /// silent this epoch is planned by it), forgets those of non-members. Returns how many
    /// members it expects.
    pub fn start_epoch(&mut self, epoch: u32, members: &[u16], deadline: u64) -> usize {
        self.epoch = epoch;
        self.deadline = deadline;
        self.phase = Phase::Collecting;
        self.expected = [false; NODES];
        self.fresh = [false; NODES];
        for &m in members {
            if let Some(e) = self.expected.get_mut(m as usize) {
                *e = true;
            }
        }
        for (s, &e) in self.summaries.iter_mut().zip(&self.expected) {
            if !e {
                *s = None;
            }
        }
        self.expected.iter().filter(|&&e| e).count()
    }

    /// Take a member's summary. A repeat replaces the earlier one. Any summary of the
    /// epoch taken before its plan is made counts, also one the runtime gets to after the
    /// deadline (a descheduled coordinator must not refuse what arrived in time); one that
    /// comes after the plan is kept for the next ([`Rejected::Late`]). `_now` is unused:
    /// the deadline is judged by [`Self::poll_plan`].
    pub fn handle_summary(&mut self, _now: u64, s: &AgeSummary<K>) -> Result<(), Rejected> {
        if self.phase == Phase::Idle {
            return Err(Rejected::NotCollecting);
        }
        if s.epoch() != self.epoch {
            return Err(Rejected::WrongEpoch);
        }
        if !self.expected.get(s.node() as usize).copied().unwrap_or(false) {
            return Err(Rejected::NotMember);
        }
        self.summaries[s.node() as usize] = Some(*s);
        if self.phase != Phase::Collecting {
            return Err(Rejected::Late);
        }
        self.fresh[s.node() as usize] = true;
        Ok(())
    }

    /// Whether every member has reported for this epoch.
    pub fn is_complete(&self) -> bool {
        self.expected.iter().zip(&self.fresh).all(|(&e, &f)| !e || f)
    }

    /// When [`Coordinator::poll_plan`] must be called at the latest, while collecting.
    pub fn poll_timeout(&self) -> Option<u64> {
        (self.phase == Phase::Collecting).then_some(self.deadline)
    }

    /// The epoch's plan (for this node), once: when every member has reported, or at
    /// `now` ≥ the deadline with the summaries received so far (and, for a member not
    /// heard this epoch, its latest earlier one).
    pub fn poll_plan(&mut self, now: u64) -> Option<EpochPlan<NODES>> {
        if self.phase != Phase::Collecting || !(self.is_complete() || now >= self.deadline) {
            return None;
        }
        self.phase = Phase::Planned;
        Some(compute(self.me, self.epoch, self.oldest_pages, &self.summaries))
    }
}

#[cfg(test)]
mod tests {
    extern crate std;
    use super::*;

    #[test]
    fn quantized_ages_keep_order_and_merge_old_ones() {
        let mut prev = 0;
        for t in 0..100_000u64 {
            let q = quantize_age(t);
            assert!(q >= prev, "quantize_age({t}) = {q} < {prev}");
            prev = q;
        }
        assert_eq!((0..8).map(quantize_age).collect::<std::vec::Vec<_>>(), [0, 1, 2, 3, 4, 5, 6, 7]);
        // Four steps per doubling: 1000..2000 ticks fall into four groups.
        let mut steps: std::vec::Vec<u32> = (1024..2048).map(quantize_age).collect();
        steps.dedup();
        assert_eq!(steps.len(), 4);
        assert_eq!(quantize_age(u64::MAX) as usize, AGE_LEVELS - 1);
    }

    #[test]
    fn lru_ops_are_not_gms_ops() {
        for op in OP_LRU_START..=OP_LRU_NEXT {
            assert!(is_lru_op(op) && !super::super::ops::is_gms_op(op));
        }
    }
}
