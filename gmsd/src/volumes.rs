// SPDX-License-Identifier: GPL-2.0-only
//! The volumes this daemon writes: one client core (`gms::store`, the policy the kernel's
//! `/dev/gms0` runs too) per volume, opened by the first put into it. A client's page
//! `VOL:PAGE` is page `PAGE` of the volume whose identity is `VOL`; the store decides
//! everything about it — placement with site avoidance, versions from the volume's own
//! clock, retries, re-replication after a failure, and the volume's label and floor map
//! in the cluster, so that a daemon restarted later finds what it wrote.
//!
//! A volume has one writer: a put into a volume another live daemon has open is refused,
//! naming that daemon ([`PutOutcome::NotOwner`]). Any daemon reads any volume: through its
//! store when it has the volume open, else as a reader, through GMS's directory
//! ([`crate::control`]), at [`gms_page`].
//!
//! Pages are whole: a put shorter than a page is stored padded with zeros, and a read
//! returns the whole page.

use crate::proto::{Nodes, PutOutcome, PAGE_BYTES};
use gms::prelude::*;
use gms::store::liveness::Event;
use gms::store::{space_of, Outcome, Phase, StoreConfig, StoreError, StoreStats};
use std::collections::BTreeMap;
use std::time::{Duration, Instant};
use trapeze_node::gms::{GmsPort, StoreFrames, StoreIo, UserStore};

/// Volumes a daemon writes at once.
pub const MAX_VOLUMES: usize = 8;
/// Pages of a volume by default (`--volume-pages`): 1 GiB of 8 KiB pages.
pub const VOLUME_PAGES: u64 = 1 << 17;

/// One page of a client's request, as a store request.
pub struct Item {
    pub job: u64,
    pub idx: usize,
    /// The page in its volume.
    pub page: u64,
    /// A write's data (`None`: a read).
    pub data: Option<Vec<u8>>,
    /// When it was handed to the store.
    pub t0: Instant,
}

impl StoreIo for Item {
    fn key(&self) -> u64 {
        (self.job << 24) | self.idx as u64
    }
    fn data(&self) -> &[u8] {
        self.data.as_deref().unwrap_or_default()
    }
}

/// How a store request ended, for [`crate::control`].
pub enum Done {
    Put {
        job: u64,
        idx: usize,
        outcome: PutOutcome,
    },
    /// `Ok`: the page's bytes at a version (`None`: never written, a miss).
    /// `took`: handed to the store to finished.
    Get {
        job: u64,
        idx: usize,
        got: Result<Option<(Version, Vec<u8>)>, StoreError>,
        took: Duration,
    },
}

/// Why a page was not taken now.
pub enum Refused {
    /// Every request slot is busy: submit it again after a completion.
    Busy(Item),
    /// Ended at once.
    Now(PutOutcome),
}

/// The GMS page replica `k` of `page` is stored as (what a reader asks the directory for).
pub fn gms_page(page: PageId, k: u8) -> PageId {
    gms::replica::replica(PageId::new(space_of(page.space), page.page), k)
}

/// The open volumes.
pub struct Volumes {
    cfg: StoreConfig,
    pages: u64,
    open: BTreeMap<u64, Box<UserStore<Item>>>,
    /// Counters of volumes closed (refused loads) are kept here.
    closed: StoreStats,
}

impl Volumes {
    pub fn new(replicas: u8, pages: u64) -> Volumes {
        // Repairs start at most every 500 µs: 2,000 copies (16.4 MB) a second, the
        // bound gmsd kept before it ran the store (`repair_mb_s`, BENCHMARKS.md).
        // Reads of nearby pages go four at a time: one reply fills the daemon's MTU.
        let (page_bytes, group_pages) = (PAGE_BYTES as u32, trapeze_node::gms::GROUP_PAGES);
        let cfg = StoreConfig { replicas, page_bytes, group_pages, repair_gap_ns: 500_000, ..StoreConfig::DEFAULT };
        Volumes { cfg, pages, open: BTreeMap::new(), closed: StoreStats::ZERO }
    }

    pub fn replicas(&self) -> u8 {
        self.cfg.replicas
    }

    /// How this daemon reads, as a reader ([`gms::reader`]), the volumes it does not write:
    /// its own replica count (the daemons of a cluster keep the same `--replicas`), each
    /// getpage asked once — it already waited out GMS's operation timeout — and a second
    /// pass at once while a replica did not answer (a failure may be known by then).
    pub fn reader_config(&self) -> StoreConfig {
        StoreConfig { read_tries: 1, read_passes: 2, retry_delay_ns: 0, ..self.cfg }
    }

    /// Whether this daemon has volume `vol` open (and so reads it through its store).
    pub fn is_open(&self, vol: u64) -> bool {
        self.open.contains_key(&vol)
    }

    /// Write `item` as `page`, opening its volume if this is its first put here.
    pub fn write(&mut self, port: &mut GmsPort, page: PageId, item: Item) -> Result<(), Refused> {
        if !self.open.contains_key(&page.space) {
            self.open_volume(port, page.space)?;
        }
        let store = self.open.get_mut(&page.space).expect("opened above");
        let now = port.now();
        store.write(now, page.page, item).map(drop).map_err(|(item, e)| match e {
            StoreError::Busy => Refused::Busy(item),
            e => Refused::Now(put_outcome(self.cfg.replicas, self.pages, page.space, e, port)),
        })
    }

    /// Read `page` through its volume's store: `None` when this daemon does not have the
    /// volume open (read it as a reader).
    pub fn read(&mut self, port: &GmsPort, page: PageId, item: Item) -> Option<Result<(), Item>> {
        let store = self.open.get_mut(&page.space)?;
        Some(match store.read(port.now(), page.page, item) {
            Ok(_) => Ok(()),
            // Busy, or a refused volume: the caller retries later or answers a miss.
            Err((item, _)) => Err(item),
        })
    }

    fn open_volume(&mut self, port: &GmsPort, vol: u64) -> Result<(), Refused> {
        if self.open.len() >= MAX_VOLUMES {
            tracing::warn!("a put into volume {vol}: this daemon writes {MAX_VOLUMES} volumes already");
            return Err(Refused::Now(PutOutcome::Error));
        }
        let me = port.id();
        let members: Vec<u16> = port.node.members().ids().iter().copied().filter(|&n| n != me).collect();
        match UserStore::new(self.cfg, vol, me, self.pages, &members) {
            Ok(s) => {
                tracing::info!(volume = vol, pages = self.pages, "volume opened for writing");
                self.open.insert(vol, Box::new(s));
                Ok(())
            }
            Err(e) => {
                tracing::warn!("volume {vol}: the store refused its configuration: {e:?}");
                Err(Refused::Now(PutOutcome::Error))
            }
        }
    }

    /// Send what the stores want sent, hand them their completions, and collect what
    /// finished into `done`. Whether anything happened.
    pub fn step(&mut self, port: &mut GmsPort, done: &mut Vec<Done>) -> bool {
        let mut busy = false;
        for store in self.open.values_mut() {
            busy |= port.drive_store(store, &mut StoreFrames);
        }
        busy |= port.complete_stores(self.open.values_mut().map(|s| &mut **s));
        for (&vol, store) in self.open.iter_mut() {
            while let Some((io, outcome, bytes)) = port.poll_store_done(store) {
                busy = true;
                done.push(Self::ended(vol, store, port, (io, outcome, bytes), self.pages));
            }
        }
        self.close_refused();
        busy
    }

    /// A volume whose load was refused (another daemon writes it) is closed once its
    /// requests have been answered: a later put tries to open it again.
    fn close_refused(&mut self) {
        let refused: Vec<(u64, StoreError)> = self
            .open
            .iter()
            .filter_map(|(&v, s)| match s.phase() {
                Phase::Refused(e) if s.user_requests() == 0 => Some((v, e)),
                _ => None,
            })
            .collect();
        for (v, e) in refused {
            if let Some(s) = self.open.remove(&v) {
                tracing::info!(volume = v, "volume closed, its load refused: {e}");
                self.closed.accumulate(&s.stats);
            }
        }
    }

    fn ended(
        vol: u64,
        store: &UserStore<Item>,
        port: &GmsPort,
        end: (Item, Outcome, Option<Vec<u8>>),
        pages: u64,
    ) -> Done {
        let (io, outcome, bytes) = end;
        let read = io.data.is_none();
        let (job, idx, page, took) = (io.job, io.idx, io.page, io.t0.elapsed());
        match outcome {
            Outcome::Written { .. } => {
                let holders: Vec<u16> = (0..store.config().replicas)
                    .filter_map(|k| store.entry(page, k).and_then(|e| e.replica.holder()))
                    .collect();
                let version = store.entry(page, 0).and_then(|e| e.replica.version()).map_or(0, |v| v.0);
                Done::Put { job, idx, outcome: PutOutcome::Stored { targets: Nodes::new(&holders), version } }
            }
            Outcome::Read { version } => match bytes {
                Some(b) if b.len() == PAGE_BYTES => Done::Get { job, idx, got: Ok(Some((version, b))), took },
                _ => Done::Get { job, idx, got: Err(StoreError::NotSent), took },
            },
            Outcome::Zero => Done::Get { job, idx, got: Ok(None), took },
            Outcome::Failed(e) if read => Done::Get { job, idx, got: Err(e), took },
            Outcome::Failed(e) => {
                Done::Put { job, idx, outcome: put_outcome(store.config().replicas, pages, vol, e, port) }
            }
        }
    }

    /// A membership change from the daemon's liveness table.
    pub fn handle_member(&mut self, now: u64, event: Event) {
        for s in self.open.values_mut() {
            s.handle_member(now, event);
        }
    }

    /// A member's free room, from its heartbeat.
    pub fn handle_room(&mut self, node: u16, free_pages: u64) {
        for s in self.open.values_mut() {
            s.handle_room(node, free_pages);
        }
    }

    /// When a store next has timed work (port clock, ns → an instant).
    pub fn poll_timeout(&self, port: &GmsPort) -> Option<Instant> {
        let at = self.open.values().filter_map(|s| s.poll_timeout()).min()?;
        let now = port.now();
        Some(Instant::now() + Duration::from_nanos(at.saturating_sub(now)))
    }

    /// Lost copies not made again yet: those the last repair pass of each volume met and
    /// could not make (no member to put them on, no copy to read), and one more while a
    /// pass or a repair is under way (0 only once re-replication is done).
    pub fn repair_pending(&self) -> u64 {
        self.open.values().map(|s| s.stats.repair_short + u64::from(s.repair_pending())).sum()
    }

    /// The stores' counters, summed.
    pub fn stats(&self) -> StoreStats {
        let mut t = self.closed;
        for s in self.open.values() {
            t.accumulate(&s.stats);
        }
        t
    }

    /// The volumes open: (identity, phase).
    pub fn list(&self) -> Vec<(u64, Phase)> {
        self.open.iter().map(|(&v, s)| (v, s.phase())).collect()
    }
}

/// What a client is told of a write the store refused or failed.
fn put_outcome(replicas: u8, pages: u64, vol: u64, e: StoreError, port: &GmsPort) -> PutOutcome {
    let me = port.id();
    match e {
        StoreError::TooFewMembers => {
            let live: Vec<u16> = port.node.members().ids().iter().copied().filter(|&n| n != me).collect();
            if live.is_empty() {
                PutOutcome::NoTarget
            } else {
                PutOutcome::TooFewTargets { replicas, live: Nodes::new(&live) }
            }
        }
        StoreError::NoSpace => PutOutcome::Refused,
        StoreError::Superseded => PutOutcome::Superseded,
        StoreError::Unreachable | StoreError::NotSent => PutOutcome::Failed { targets: Nodes::default() },
        StoreError::IdentityInUse { owner } => PutOutcome::NotOwner { owner },
        StoreError::OutOfRange => PutOutcome::OutOfRange { pages },
        StoreError::NotThisVolume | StoreError::VersionsExhausted | StoreError::Lost | StoreError::Busy => {
            tracing::warn!("volume {vol}: a put failed: {e}");
            PutOutcome::Error
        }
    }
}
