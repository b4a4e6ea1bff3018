// SPDX-License-Identifier: GPL-2.0-only
//! The history of a simulated GMS run (every operation issued and how it ended, every
//! fault, with simulated time and step) and the checker that judges it.
//!
//! Pages carry content derived from (page, version), so a read's bytes say which write
//! they came from. With one copy per page (replication `r` = 1), the checker's rules:
//!
//! - **(a) never stale, never foreign**: a getpage hit returns the bytes of its own page
//!   at the version it claims, a version some write produced, never older than the
//!   version its reader knew (passed with the getpage: the reader's own acknowledged
//!   writes and discards and its own reads), and no older than the newest put/move
//!   acknowledged (`Stored`) — or one past the newest discard acknowledged (`Done`) —
//!   before the getpage was issued. The one exception, counted (`stale_after_move`): a
//!   reader that did not know of that write may read an older version if the page's
//!   directory node changed since (a copy superseded while the old directory's word to
//!   drop it died with it registers again with the new one).
//! - **(b) nothing acknowledged lost**: after the faults stop and the cluster settles,
//!   every page whose last acknowledged write is still in custody of nodes that never
//!   crashed reads back at that version or newer — a membership change moving the page's
//!   directory is no excuse (survivors register their copies with the new directory). A
//!   page may read as a miss only for a cause the r = 1 design allows ([`Cause`]): a node
//!   that held or may have held it crashed (a newer write's target, or one of a write whose
//!   outcome is unknown: `Failed`, or answered other than `Stored` after the network
//!   duplicated its request, each delivery answered); a discard covering that version was
//!   issued after the write, raced it, has an unknown outcome (`Failed`: its request may
//!   still arrive), or was acknowledged before it (the version came back through a
//!   directory that never heard of the discard, its own having died); the runtime took the
//!   copy back; or a moving read took the copy and did not keep it.
//! - **(c)** those legitimate losses are counted by cause.

use super::{OpKind, MOVING_SPACE};
use gms::members::Members;
use gms::prelude::*;
use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::fmt::Write as _;

/// When something happened: its place in the history, the simulated clock, the step.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct At {
    pub seq: usize,
    pub t: u64,
    /// The workload step (`usize::MAX`: while the cluster settles or is read back).
    pub step: usize,
}

impl std::fmt::Display for At {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self.step {
            usize::MAX => write!(f, "#{} t={} (settling)", self.seq, self.t),
            s => write!(f, "#{} t={} step {s}", self.seq, self.t),
        }
    }
}

/// How an operation ended.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Outcome {
    /// A put or move acknowledged: the target holds it and the directory names it.
    Stored,
    /// A put or move that ended otherwise (its effect may or may not have happened).
    NotStored(PutResult),
    /// A getpage hit: the version GMS claimed, what the frame holds, and whether the
    /// reader became the page's holder (a moving read).
    Hit {
        version: u64,
        data: Option<(PageId, u64)>,
        held: bool,
    },
    Miss(MissReason),
    Discard(DiscardResult),
}

/// One operation: who issued it, on what, and how it ended (`None`: never, e.g. its
/// node crashed first).
#[derive(Clone, Debug)]
pub struct Op {
    pub node: u16,
    pub kind: OpKind,
    pub page: PageId,
    /// Put/move: the version written; discard: the version discarded; getpage: the
    /// version its reader knew (the oldest it takes).
    pub version: u64,
    pub target: u16,
    /// A getpage in a space with moving reads.
    pub moving: bool,
    /// A put or move whose request the network delivered more than once (each delivery
    /// is answered: the answer that ends it may be a later delivery's refusal while an
    /// earlier one stored the copy).
    pub duplicated: bool,
    pub issued: At,
    pub end: Option<(At, Outcome)>,
}

#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Ev {
    Issue(usize),
    End(usize),
    /// The node stopped (its memory is gone).
    Crash(u16),
    /// The survivors declared it failed.
    Declared(u16),
    /// It started again as a new incarnation and rejoined.
    Restart(u16),
    /// False suspicion: the others are about to declare it failed while it is up (it
    /// keeps its state; a `Declared` follows).
    Suspect(u16),
    /// A node falsely declared failed was heard again and rejoined with its state.
    HeardAgain(u16),
    /// The member set after a view change (and at the start).
    View(Vec<u16>),
    /// Messages between nodes on different sides (index = node) are lost.
    Partition(Vec<u8>),
    Heal,
    /// The runtime registered a page it had (a write nobody acknowledges).
    Hold {
        node: u16,
        page: PageId,
        version: u64,
    },
    /// The runtime took a held page back.
    DropLocal {
        node: u16,
        page: PageId,
    },
    /// Faults are over and the cluster has settled: what follows is the read-back.
    Settled,
}

#[derive(Default)]
pub struct History {
    pub events: Vec<(At, Ev)>,
    pub ops: Vec<Op>,
    open: HashMap<(u16, OpId), usize>,
    /// Every operation of a node's incarnation by id, ended or not.
    ids: HashMap<(u16, OpId), usize>,
}

impl History {
    pub fn at(&self, t: u64, step: usize) -> At {
        At { seq: self.events.len(), t, step }
    }

    pub fn push(&mut self, t: u64, step: usize, ev: Ev) {
        let at = self.at(t, step);
        self.events.push((at, ev));
    }

    #[allow(clippy::too_many_arguments)]
    pub fn issue(
        &mut self,
        t: u64,
        step: usize,
        node: u16,
        id: OpId,
        kind: OpKind,
        page: PageId,
        version: u64,
        target: u16,
    ) {
        let i = self.ops.len();
        let moving = kind == OpKind::Get && page.space == MOVING_SPACE;
        let issued = self.at(t, step);
        self.ops.push(Op { node, kind, page, version, target, moving, duplicated: false, issued, end: None });
        self.open.insert((node, id), i);
        self.ids.insert((node, id), i);
        self.push(t, step, Ev::Issue(i));
    }

    pub fn end(&mut self, t: u64, step: usize, node: u16, id: OpId, outcome: Outcome) {
        let Some(i) = self.open.remove(&(node, id)) else { return };
        let at = self.at(t, step);
        self.ops[i].end = Some((at, outcome));
        self.push(t, step, Ev::End(i));
    }

    /// A node restarted: its unfinished operations never end (their ids may be reused).
    pub fn forget(&mut self, node: u16) {
        self.open.retain(|(n, _), _| *n != node);
        self.ids.retain(|(n, _), _| *n != node);
    }

    /// The network delivered `node`'s put or move request `id` once more.
    pub fn duplicated(&mut self, node: u16, id: OpId) {
        if let Some(&i) = self.ids.get(&(node, id)) {
            self.ops[i].duplicated = true;
        }
    }

    /// Every event that concerns `page` (faults included), for a violation's report.
    pub fn trail(&self, page: PageId, limit: usize) -> String {
        let mut lines: Vec<String> = Vec::new();
        for (at, ev) in &self.events {
            let line = match ev {
                Ev::Issue(i) | Ev::End(i) if self.ops[*i].page != page => continue,
                Ev::Issue(i) => {
                    let o = &self.ops[*i];
                    format!("node {} issues {:?} v{} target {}", o.node, o.kind, o.version, o.target)
                }
                Ev::End(i) => {
                    let o = &self.ops[*i];
                    format!("node {} {:?} (issued {}) ends {:?}", o.node, o.kind, o.issued, o.end.unwrap().1)
                }
                Ev::Hold { page: p, .. } | Ev::DropLocal { page: p, .. } if *p != page => continue,
                e => format!("{e:?}"),
            };
            lines.push(format!("    {at}: {line}"));
        }
        let skip = lines.len().saturating_sub(limit);
        let mut s = String::new();
        if skip > 0 {
            let _ = writeln!(s, "    … {skip} earlier events");
        }
        for l in &lines[skip..] {
            let _ = writeln!(s, "{l}");
        }
        s
    }
}

/// Why a page acknowledged at some version may legitimately read as a miss (r = 1).
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub enum Cause {
    HolderCrashed,
    Discarded,
    TakenBack,
    MovingRead,
}

#[derive(Clone, Debug)]
pub struct Violation {
    pub at: At,
    pub page: PageId,
    pub what: String,
}

/// What the checker found.
#[derive(Clone, Debug, Default)]
pub struct Report {
    pub violations: Vec<Violation>,
    /// Pages acknowledged, then read back as a miss for a cause the design allows.
    pub lost: BTreeMap<Cause, u64>,
    /// Pages acknowledged and read back at that version or newer after the faults.
    pub kept: u64,
    /// Of those, pages read back although a cause would have excused a miss.
    pub kept_at_risk: u64,
    pub reads_checked: u64,
    pub acked_writes: u64,
    /// Reads older than a write acknowledged to another node, by a reader that did not
    /// know of it, after the page's directory node changed (rule (a)'s exception).
    pub stale_after_move: u64,
}

/// Custody of one page's last acknowledged write.
#[derive(Default)]
struct PageState {
    /// (a): the newest acknowledged version (+1 after an acknowledged discard), and when
    /// the write or discard that set it was issued (history index: a directory that
    /// moved while it was on its way may have recorded it and died).
    floor: u64,
    floor_seq: usize,
    max_written: u64,
    /// The last acknowledged write: version, where it was acknowledged.
    acked: Option<(u64, At)>,
    /// Nodes that hold or may hold the page since that write.
    holders: BTreeSet<u16>,
    risk: BTreeSet<Cause>,
    /// Writes (puts, moves) and discards not yet ended.
    open_writes: BTreeSet<usize>,
    open_discards: BTreeSet<usize>,
    /// Every put and move issued.
    writes: Vec<usize>,
    /// Every page the runtime registered itself: (node, history index, version).
    newer: Vec<(u16, usize, u64)>,
    open_moving_gets: BTreeSet<usize>,
    /// Every time a runtime took the page back: (node, history index).
    drops: Vec<(u16, usize)>,
    read_back: bool,
}

/// Judge a history against rules (a)–(c).
pub fn check(h: &History) -> Report {
    let mut r = Report::default();
    let mut pages: BTreeMap<PageId, PageState> = BTreeMap::new();
    let mut floor_at_issue: HashMap<usize, (u64, usize)> = HashMap::new();
    // Every view: (history index, members).
    let mut views: Vec<(usize, Vec<u16>)> = Vec::new();
    let mut settled = false;
    // When each node last crashed (history index).
    let mut last_crash: HashMap<u16, usize> = HashMap::new();
    for (at, ev) in &h.events {
        match ev {
            Ev::Issue(i) => {
                let o = &h.ops[*i];
                let st = pages.entry(o.page).or_default();
                match o.kind {
                    OpKind::Get => {
                        floor_at_issue.insert(*i, (st.floor, st.floor_seq));
                        if o.moving {
                            st.open_moving_gets.insert(*i);
                            if st.acked.is_some() {
                                st.holders.insert(o.node);
                            }
                        }
                    }
                    OpKind::Put | OpKind::Move => {
                        st.max_written = st.max_written.max(o.version);
                        st.open_writes.insert(*i);
                        st.writes.push(*i);
                        if st.acked.is_some() {
                            st.holders.insert(o.target);
                        }
                    }
                    OpKind::Discard => {
                        st.open_discards.insert(*i);
                        if st.acked.is_some_and(|(v, _)| o.version >= v) {
                            st.risk.insert(Cause::Discarded);
                        }
                    }
                }
            }
            Ev::End(i) => {
                let o = &h.ops[*i];
                let outcome = o.end.expect("an End event has its outcome").1;
                let st = pages.get_mut(&o.page).expect("issued before it ended");
                match (o.kind, outcome) {
                    (OpKind::Get, out) => {
                        st.open_moving_gets.remove(i);
                        if let Outcome::Hit { version, data, held } = out {
                            r.reads_checked += 1;
                            let (floor, floor_seq) = floor_at_issue[i];
                            let moved_since = moved(&views, &o.page, floor_seq);
                            let mut bad = |what: String| r.violations.push(Violation { at: *at, page: o.page, what });
                            if data != Some((o.page, version)) {
                                bad(format!(
                                    "node {} read {:?} as version {version}, but the bytes are {data:?}",
                                    o.node, o.page
                                ));
                            }
                            if version < o.version {
                                bad(format!(
                                    "STALE: node {} read {:?} at version {version} (issued {}), \
                                     older than version {} it knew of",
                                    o.node, o.page, o.issued, o.version
                                ));
                            } else if version < floor && moved_since {
                                r.stale_after_move += 1;
                            } else if version < floor {
                                bad(format!(
                                    "STALE: node {} read {:?} at version {version} (issued {}), \
                                     but version {floor} was acknowledged before",
                                    o.node, o.page, o.issued
                                ));
                            }
                            if version > st.max_written {
                                bad(format!("node {} read {:?} at version {version}, never written", o.node, o.page));
                            }
                            if o.moving && !held {
                                st.risk.insert(Cause::MovingRead);
                            }
                            if o.moving && held && st.acked.is_some_and(|(v, _)| version >= v) {
                                // The copy moved to the reader (and any write still open).
                                st.holders = [o.node].into_iter().collect();
                                st.holders.extend(st.open_writes.iter().map(|&w| h.ops[w].target));
                            }
                        } else if o.moving {
                            st.risk.insert(Cause::MovingRead);
                        }
                        if settled && !st.read_back {
                            st.read_back = true;
                            judge_read_back(h, &mut r, st, *i, *at, &out);
                        }
                    }
                    (OpKind::Put | OpKind::Move, Outcome::Stored) => {
                        st.open_writes.remove(i);
                        r.acked_writes += 1;
                        if o.version > st.floor {
                            st.floor = o.version;
                            st.floor_seq = o.issued.seq;
                        }
                        match st.acked {
                            Some((v, _)) if o.version < v => {}
                            Some((v, _)) if o.version == v => {
                                // The same version acknowledged again (a put, and a move
                                // of it): one more node that may hold it.
                                let (holders, risk) = custody(h, st, *i, &last_crash);
                                st.holders.extend(holders);
                                st.risk.extend(risk);
                            }
                            _ => {
                                let (holders, risk) = custody(h, st, *i, &last_crash);
                                st.acked = Some((o.version, *at));
                                st.holders = holders;
                                st.risk = risk;
                            }
                        }
                    }
                    (OpKind::Put | OpKind::Move, _) => {
                        st.open_writes.remove(i);
                    }
                    (OpKind::Discard, out) => {
                        // A failed discard's outcome is unknown: its request may still be
                        // on its way and applied at any time, so it stays open.
                        if out != Outcome::Discard(DiscardResult::Failed) {
                            st.open_discards.remove(i);
                        }
                        if out == Outcome::Discard(DiscardResult::Done) && o.version + 1 > st.floor {
                            st.floor = o.version + 1;
                            st.floor_seq = o.issued.seq;
                        }
                    }
                }
            }
            Ev::Crash(n) => {
                last_crash.insert(*n, at.seq);
                for st in pages.values_mut() {
                    if st.acked.is_some() && st.holders.contains(n) {
                        st.risk.insert(Cause::HolderCrashed);
                    }
                }
            }
            Ev::View(ids) => views.push((at.seq, ids.clone())),
            Ev::Hold { node, page, version } => {
                let st = pages.entry(*page).or_default();
                st.max_written = st.max_written.max(*version);
                st.newer.push((*node, at.seq, *version));
                if st.acked.is_some() {
                    st.holders.insert(*node);
                }
            }
            Ev::DropLocal { node, page } => {
                if let Some(st) = pages.get_mut(page) {
                    if st.acked.is_some() && st.holders.contains(node) {
                        st.risk.insert(Cause::TakenBack);
                    }
                    st.drops.push((*node, at.seq));
                }
            }
            Ev::Settled => {
                settled = true;
                for st in pages.values_mut() {
                    if !st.open_moving_gets.is_empty() {
                        st.risk.insert(Cause::MovingRead);
                    }
                }
            }
            Ev::Declared(_) | Ev::Restart(_) | Ev::Suspect(_) | Ev::HeardAgain(_) | Ev::Partition(_) | Ev::Heal => {}
        }
    }
    for (p, st) in &pages {
        if settled && st.acked.is_some() && !st.read_back {
            let at = h.events.last().map(|e| e.0).unwrap();
            r.violations.push(Violation { at, page: *p, what: format!("{p:?} was never read back") });
        }
    }
    r
}

/// Whether a view change after history index `since` moved `p`'s directory node.
fn moved(views: &[(usize, Vec<u16>)], p: &PageId, since: usize) -> bool {
    let first = views.iter().rposition(|(seq, _)| *seq <= since).unwrap_or(0);
    views[first..].windows(2).any(|w| dir(&w[0].1, p) != dir(&w[1].1, p))
}

/// The directory node of `p` among `ids`.
fn dir(ids: &[u16], p: &PageId) -> Option<u16> {
    let mut m = Members::<16>::new();
    m.set(1, ids).expect("at most 16 members");
    m.directory_of(p)
}

/// Who may hold page `o.page` once write `i` is acknowledged, and which causes already
/// excuse its loss: the write's target, the targets of writes still open and of writes of
/// this version or newer whose outcome is unknown (a move of this very copy that ended
/// `Failed` may have handed it over; a newer write supersedes it wherever it went; a write
/// whose request was duplicated and that ended otherwise than `Stored` may have been stored
/// by another delivery than the one answered), pages
/// the runtime registered at a newer version, readers of moving reads in flight; each
/// of them may have crashed or had the page taken back by its runtime since its write
/// began (the acknowledgement was on its way), or a discard may cover the version.
fn custody(
    h: &History,
    st: &PageState,
    i: usize,
    last_crash: &HashMap<u16, usize>,
) -> (BTreeSet<u16>, BTreeSet<Cause>) {
    let o = &h.ops[i];
    let unknown = |w: &Op| {
        w.end.is_none_or(|e| e.1 == Outcome::NotStored(PutResult::Failed) || (w.duplicated && e.1 != Outcome::Stored))
    };
    let mut may: Vec<(u16, usize)> = vec![(o.target, o.issued.seq)];
    may.extend(st.open_writes.iter().map(|&w| (h.ops[w].target, h.ops[w].issued.seq)));
    may.extend(st.open_moving_gets.iter().map(|&g| (h.ops[g].node, h.ops[g].issued.seq)));
    may.extend(st.newer.iter().filter(|w| w.2 > o.version).map(|w| (w.0, w.1)));
    may.extend(
        st.writes
            .iter()
            .map(|&w| &h.ops[w])
            .filter(|w| w.version >= o.version && w.issued.seq != o.issued.seq && unknown(w))
            .map(|w| (w.target, w.issued.seq)),
    );
    let mut risk = BTreeSet::new();
    if may.iter().any(|&(n, seq)| last_crash.get(&n).is_some_and(|&c| c > seq)) {
        risk.insert(Cause::HolderCrashed);
    }
    if may.iter().any(|&(n, seq)| st.drops.iter().any(|&(d, at)| d == n && at > seq)) {
        risk.insert(Cause::TakenBack);
    }
    // A discard of this version or newer, whenever it was issued: one that had not ended
    // when the write was issued raced it (the directory may have applied it after the
    // write's registration), one that failed may still arrive, and one acknowledged before
    // the write was issued discarded the version already — the write was accepted only
    // because the directory that kept the discard's floor died meanwhile (the survivors
    // registered their copies, a discarded one among them, with a new directory that
    // never heard of the discard) or the floor was provisional and lapsed; a reader that
    // knows of the discard refuses the version.
    let covering = |d: &Op| d.kind == OpKind::Discard && d.page == o.page && d.version >= o.version;
    if st.open_discards.iter().any(|&d| h.ops[d].version >= o.version) || h.ops.iter().any(covering) {
        risk.insert(Cause::Discarded);
    }
    if !st.open_moving_gets.is_empty() {
        risk.insert(Cause::MovingRead);
    }
    (may.into_iter().map(|m| m.0).collect(), risk)
}

/// Rule (b) on the first read of a page after the cluster settled.
fn judge_read_back(h: &History, r: &mut Report, st: &PageState, i: usize, at: At, out: &Outcome) {
    let Some((v, acked_at)) = st.acked else { return };
    match out {
        Outcome::Hit { version, .. } if *version >= v => {
            r.kept += 1;
            if !st.risk.is_empty() {
                r.kept_at_risk += 1;
            }
        }
        // A stale hit is (a)'s violation already.
        Outcome::Hit { .. } => {}
        _ => match st.risk.first() {
            Some(&cause) => *r.lost.entry(cause).or_default() += 1,
            None => {
                let o = &h.ops[i];
                let holders: Vec<u16> = st.holders.iter().copied().collect();
                r.violations.push(Violation {
                    at,
                    page: o.page,
                    what: format!(
                        "LOST: {:?} version {v} was acknowledged at {acked_at} (held by {holders:?}, none of \
                         which crashed), but node {} read it back as {out:?}",
                        o.page, o.node
                    ),
                });
            }
        },
    }
}
