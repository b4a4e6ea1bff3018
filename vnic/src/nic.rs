// SPDX-License-Identifier: GPL-2.0-only
//! One virtual NIC: NIC memory, the DMA address space, engines, and the processor that
//! runs the firmware (natively, or the flashed riscv32 image on an emulated core).
//!
//! The processor is a thread that owns the engines while it runs; halting it (to reset
//! or to load new firmware) stops the thread at its next loop pass and takes the
//! engines back, so the link and its counters survive a firmware change.

#[cfg(feature = "flashed")]
use crate::cpu::flashed::FlashedCore;
use crate::cpu::flashed::{self, CoreStopper, ImageMemory};
use crate::cpu::FwLog;
use crate::dma::DmaSpace;
use crate::echo::EchoStats;
use crate::engines::{EngineStats, Notifier, SoftEngines, Wakers, BUSY_PARK};
use crate::image::{version_string, ImageInfo, LoadedImage};
use crate::link::{Link, LinkStats};
pub use crate::nicmem::NicMem;
use crate::shm::Mapping;
use anyhow::{bail, Context};
use serde::Serialize;
use std::sync::atomic::Ordering;
use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};
use trapeze_firmware::fw::Firmware;
use trapeze_firmware::iface::layout::{
    ctrl, ctrl_word, Counter, FwState, LINK_KEYED, NIC_MEM_BYTES, NIC_NODE_VALID, SEND_RING_OFF,
};
use trapeze_firmware::iface::mem::NicMemory;

/// What the processor runs.
#[derive(Clone, Debug)]
pub enum FirmwareKind {
    /// The firmware crate linked into this process.
    Native,
    /// A riscv32imac firmware image on the emulated core (`cpu::flashed`).
    Flashed(Arc<LoadedImage>),
}

impl FirmwareKind {
    /// "native" or "flashed".
    pub fn mode(&self) -> &'static str {
        match self {
            FirmwareKind::Native => "native",
            FirmwareKind::Flashed(_) => "flashed",
        }
    }
}

/// The flashed image a NIC runs, as status reports it.
#[derive(Clone, Debug, Serialize)]
pub struct ImageStatus {
    pub build_id: String,
    pub version: String,
    /// CRC-32 of the text region as loaded (`image` module doc).
    pub checksum: String,
    /// The text region the core runs (the NIC's private image memory, `cpu::load`) still
    /// has that checksum.
    pub intact: bool,
    pub load_bytes: u32,
    /// The firmware log is decoded with the image's defmt table.
    pub defmt: bool,
}

/// Everything a status request reports.
#[derive(Clone, Debug, Serialize)]
pub struct NicStatus {
    pub name: String,
    pub mode: String,
    pub running: bool,
    pub fw_state: String,
    pub fw_version: String,
    pub fw_build_id: String,
    /// `ctrl::FW_FAULT` when the firmware is in the Fault state (`cpu::flashed::fault`
    /// lists the NIC's own codes).
    pub fw_fault: Option<String>,
    /// The flashed image running, if any.
    pub image: Option<ImageStatus>,
    /// The most recent firmware log lines (flashed mode: decoded defmt), oldest first.
    pub log: Vec<String>,
    pub heartbeat: u32,
    pub uptime_s: f64,
    pub counters: Vec<(String, u64)>,
    /// The link's medium and this NIC's address on it, e.g. `udp 127.0.0.1:7000 (1 peer)`.
    pub link_address: String,
    /// The peers configured (`--peer`), when the NIC was told them ([`Nic::set_peers`]).
    pub peers: Option<Vec<PeerInfo>>,
    /// Whether the link is under a cluster key (the key itself is never reported).
    pub cluster_key: bool,
    pub link: LinkStats,
    /// The link-level echo's counters ([`crate::echo`]).
    pub echo: EchoStats,
    pub dma_refused: u64,
    pub host_irqs: u64,
    /// Host-RAM bytes the NIC's DMA engine read or wrote.
    pub host_dma_bytes: u64,
    /// Bytes it moved within NIC-local memory (`NIC_LOCAL_DMA_BASE`), touching no host RAM.
    pub nic_local_dma_bytes: u64,
    pub parks: u64,
    /// Received packets whose header claimed another sender (see `EngineStats`).
    pub src_stamped: u64,
    /// Answers sent aborted: their entry changed before link out had read the payload.
    pub answers_torn: u64,
    pub regions: Vec<(String, u64, u64)>,
}

/// A configured peer: its node id and its address on the link, as given.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct PeerInfo {
    pub node: u16,
    pub address: String,
}

/// State shared by the processor thread, the control socket and in-process hosts.
pub struct NicShared {
    pub name: String,
    pub mem: Arc<Mapping>,
    pub dma: Arc<DmaSpace>,
    pub notifier: Arc<Notifier>,
    pub wakers: Arc<Wakers>,
    pub stats: Arc<EngineStats>,
    /// This NIC's node id on the link (hosts must configure the same id).
    pub node: u16,
    /// A host owns the endpoint (one host per NIC, as one endpoint per Myrinet NIC).
    pub host_attached: std::sync::atomic::AtomicBool,
    /// The link's description and whether it is keyed, taken when the NIC was made.
    link_address: String,
    cluster_key: bool,
    peers: Mutex<Option<Vec<PeerInfo>>>,
    started: Instant,
}

enum Cpu {
    Halted(Box<SoftEngines>),
    Running {
        thread: JoinHandle<SoftEngines>,
        kind: FirmwareKind,
        stopper: Option<CoreStopper>,
    },
    /// The native firmware is driven by a host thread ([`Nic::start_inline`]).
    Inline,
    /// Only while a transition is in progress (or after a processor thread panicked).
    Lost,
}

/// A virtual NIC.
pub struct Nic {
    shared: Arc<NicShared>,
    cpu: Mutex<Cpu>,
    /// Firmware log lines (flashed mode), kept across loads.
    fw_log: Arc<FwLog>,
    /// The image region the flashed core runs: private, never in shared NIC memory.
    image_mem: ImageMemory,
    /// The image last started in flashed mode.
    last_image: Mutex<Option<Arc<LoadedImage>>>,
    /// Serialises [`Nic::load_image`] calls.
    loading: Mutex<()>,
}

/// How long the firmware has to publish its ready word after starting.
pub const READY_TIMEOUT: Duration = Duration::from_secs(5);

impl Nic {
    /// A halted NIC with fresh NIC memory on `link`. `spin` is how long an idle
    /// processor polls before parking.
    pub fn new(name: &str, link: Link, spin: Duration) -> anyhow::Result<Nic> {
        Self::with_reply_spin(name, link, spin, Duration::ZERO)
    }

    /// [`Nic::new`], and an idle processor keeps polling for up to `reply_spin` while its
    /// host awaits a reply (an IPT entry armed and not yet delivered).
    pub fn with_reply_spin(name: &str, link: Link, spin: Duration, reply_spin: Duration) -> anyhow::Result<Nic> {
        let mem = Arc::new(Mapping::create_memfd(&format!("trapeze-nic-{name}"), NIC_MEM_BYTES as usize)?);
        // The node id on the link, for hosts that see only NIC memory (a guest driver).
        // And whether its link authenticates (the link counters follow at each park).
        let words = NicMem::new(mem.clone());
        words.store(
            ctrl_word(ctrl::LINK_FLAGS),
            if link.is_authenticated() { LINK_KEYED } else { 0 },
            Ordering::Relaxed,
        );
        words.store(ctrl_word(ctrl::NIC_NODE), NIC_NODE_VALID | link.node() as u32, Ordering::Release);
        let shared = Arc::new(NicShared {
            node: link.node(),
            name: name.into(),
            mem: mem.clone(),
            dma: Arc::new(DmaSpace::new()),
            notifier: Arc::new(Notifier::default()),
            wakers: Arc::new(Wakers::new()?),
            stats: Arc::new(EngineStats::default()),
            host_attached: std::sync::atomic::AtomicBool::new(false),
            link_address: link.backend().describe(),
            cluster_key: link.is_authenticated(),
            peers: Mutex::new(None),
            started: Instant::now(),
        });
        let mut eng = SoftEngines::new(
            mem,
            shared.dma.clone(),
            link,
            shared.notifier.clone(),
            shared.wakers.clone(),
            shared.stats.clone(),
            spin,
        );
        eng.set_reply_spin(reply_spin);
        Ok(Nic {
            shared,
            cpu: Mutex::new(Cpu::Halted(Box::new(eng))),
            fw_log: Arc::new(FwLog::default()),
            image_mem: ImageMemory::new(name)?,
            last_image: Mutex::new(None),
            loading: Mutex::new(()),
        })
    }

    /// Trace the engines' events into `log` ([`crate::trace`]); only before the NIC is
    /// started.
    pub fn set_trace(&self, log: crate::trace::EventLog) -> anyhow::Result<()> {
        match &mut *self.cpu.lock().unwrap_or_else(|e| e.into_inner()) {
            Cpu::Halted(eng) => {
                eng.set_trace(Some(log));
                Ok(())
            }
            _ => bail!("NIC {} is running: a trace starts before the NIC does", self.shared.name),
        }
    }

    /// Tell the NIC which peers its link was opened with, for status and for refusing a
    /// ping to a node that is not one.
    pub fn set_peers(&self, peers: Vec<PeerInfo>) {
        *self.shared.peers.lock().unwrap_or_else(|e| e.into_inner()) = Some(peers);
    }

    /// Send one link-level echo request to node `peer` and wait up to `wait` for its
    /// reply ([`crate::echo`]): the round trip between the two NICs' engines, or `None` if
    /// no reply came in time. Refused at once for this NIC's own id, a node that is not a
    /// configured peer (when the peers are known), a processor that is not running, or too
    /// many pings in flight.
    pub fn ping(&self, peer: u16, wait: Duration) -> anyhow::Result<Option<Duration>> {
        let s = &self.shared;
        if peer == s.node {
            bail!("node {peer} is this NIC's own node id: ping another node (one of its --peer nodes)");
        }
        if let Some(peers) = &*s.peers.lock().unwrap_or_else(|e| e.into_inner()) {
            if !peers.iter().any(|p| p.node == peer) {
                let known: Vec<String> = peers.iter().map(|p| format!("{}={}", p.node, p.address)).collect();
                bail!(
                    "node {peer} is not a peer of NIC {} (its peers: {}): restart it with --peer {peer}=ADDRESS",
                    s.name,
                    if known.is_empty() { "none".to_string() } else { known.join(", ") }
                );
            }
        }
        if !matches!(*self.cpu.lock().unwrap_or_else(|e| e.into_inner()), Cpu::Running { .. } | Cpu::Inline) {
            bail!("NIC {} is not running (its processor is halted): nothing would send or answer", s.name);
        }
        s.stats.echo.probe(peer, wait, || s.wakers.kick()).map_err(|_| {
            anyhow::anyhow!(
                "NIC {} already has {} pings waiting for replies: try again shortly",
                s.name,
                crate::echo::MAX_PROBES_IN_FLIGHT
            )
        })
    }

    pub fn shared(&self) -> &Arc<NicShared> {
        &self.shared
    }
    pub fn mem(&self) -> NicMem {
        NicMem::new(self.shared.mem.clone())
    }

    /// The firmware log (flashed mode).
    pub fn fw_log(&self) -> &Arc<FwLog> {
        &self.fw_log
    }

    /// The image last started in flashed mode, if any.
    pub fn last_image(&self) -> Option<Arc<LoadedImage>> {
        self.last_image.lock().unwrap_or_else(|e| e.into_inner()).clone()
    }

    /// Start the processor on `kind` and wait for the firmware's ready word. A flashed
    /// image is first written into NIC memory and checked against its checksum; its
    /// firmware must then report the image's build id.
    pub fn start(&self, kind: FirmwareKind) -> anyhow::Result<()> {
        let mut cpu = self.cpu.lock().unwrap_or_else(|e| e.into_inner());
        let mut eng = match std::mem::replace(&mut *cpu, Cpu::Lost) {
            Cpu::Halted(e) => e,
            other => {
                *cpu = other;
                bail!("NIC {} is already running", self.shared.name);
            }
        };
        eng.reset();
        self.shared.wakers.stop.store(false, Ordering::Release);
        let mem = NicMem::new(self.shared.mem.clone());
        mem.store(ctrl_word(ctrl::FW_STATE), FwState::Halted as u32, Ordering::Release);
        #[cfg_attr(not(feature = "flashed"), allow(unused_mut))]
        let mut stopper = None;
        let thread = match &kind {
            FirmwareKind::Native => std::thread::Builder::new()
                .name(format!("nic-{}", self.shared.name))
                .spawn(move || run_native(mem, *eng))
                .context("spawning the NIC processor thread")?,
            #[cfg(not(feature = "flashed"))]
            FirmwareKind::Flashed(_) => {
                *cpu = Cpu::Halted(eng);
                bail!("this trapeze-vnic was built without the `flashed` feature (the riscv32 emulator): rebuild it with default features to run firmware images");
            }
            #[cfg(feature = "flashed")]
            FirmwareKind::Flashed(image) => {
                if let Err(e) = flashed::load(&self.shared.mem, &self.image_mem, image) {
                    *cpu = Cpu::Halted(eng);
                    return Err(e);
                }
                let i = &image.info;
                self.fw_log.push(format!(
                    "NIC: loaded image v{} build {:#010x}: {} bytes, checksum {:#010x}",
                    i.version_string(),
                    i.build_id,
                    i.load_bytes,
                    i.checksum
                ));
                *self.last_image.lock().unwrap_or_else(|e| e.into_inner()) = Some(image.clone());
                let st = CoreStopper::default();
                stopper = Some(st.clone());
                let core = FlashedCore {
                    name: self.shared.name.clone(),
                    image: image.clone(),
                    mem: self.shared.mem.clone(),
                    image_mem: self.image_mem.mapping().clone(),
                    log: self.fw_log.clone(),
                    stopper: st,
                };
                std::thread::Builder::new()
                    .name(format!("nic-{}", self.shared.name))
                    .spawn(move || flashed::run(core, *eng))
                    .context("spawning the NIC processor thread")?
            }
        };
        // The native firmware reports the firmware crate's build id (a hash of its sources,
        // as an image built from them would).
        let want_build_id = match &kind {
            FirmwareKind::Native => Some(trapeze_firmware::BUILD_ID),
            FirmwareKind::Flashed(image) => Some(image.info.build_id),
        };
        *cpu = Cpu::Running { thread, kind, stopper };
        drop(cpu);
        self.wait_ready(READY_TIMEOUT, want_build_id)
    }

    /// Validate the ELF image `bytes`, then replace the running firmware with it: halt,
    /// load, verify the checksum, start, and wait for the firmware's ready word carrying
    /// the image's build id. An image that fails validation is refused before anything
    /// is touched: the running firmware keeps running. If the new image is loaded but its
    /// firmware does not come up, the previous firmware is restarted (if one ran) and the
    /// error says so.
    pub fn load_image(&self, bytes: &[u8]) -> anyhow::Result<ImageInfo> {
        let image = Arc::new(LoadedImage::from_elf(bytes).context("image refused")?);
        let _one = self.loading.lock().unwrap_or_else(|e| e.into_inner());
        let previous = match &*self.cpu.lock().unwrap_or_else(|e| e.into_inner()) {
            Cpu::Running { kind, .. } => Some(kind.clone()),
            _ => None,
        };
        self.halt()?;
        match self.start(FirmwareKind::Flashed(image.clone())) {
            Ok(()) => Ok(image.info.clone()),
            Err(e) => {
                let _ = self.halt();
                let Some(prev) = previous else {
                    return Err(e.context("the new image did not start; the NIC is halted"));
                };
                let mode = prev.mode();
                match self.start(prev) {
                    Ok(()) => Err(e.context(format!("the new image did not start; the previous {mode} firmware was restarted"))),
                    Err(e2) => Err(e.context(format!(
                        "the new image did not start, and restarting the previous {mode} firmware failed too ({e2:#}); the NIC is halted"
                    ))),
                }
            }
        }
    }

    fn wait_ready(&self, timeout: Duration, build_id: Option<u32>) -> anyhow::Result<()> {
        let mem = self.mem();
        let t0 = Instant::now();
        loop {
            let st = mem.load(ctrl_word(ctrl::FW_STATE), Ordering::Acquire);
            if st == FwState::Ready as u32 {
                let have = mem.load_relaxed(ctrl_word(ctrl::FW_BUILD_ID));
                match build_id {
                    Some(want) if have != want => {
                        bail!("the firmware reports build id {have:#010x}, the image has {want:#010x}")
                    }
                    _ => return Ok(()),
                }
            }
            if st == FwState::Fault as u32 {
                bail!("firmware faulted while starting (code {:#x})", mem.load_relaxed(ctrl_word(ctrl::FW_FAULT)));
            }
            if t0.elapsed() > timeout {
                bail!("firmware did not publish its ready word within {timeout:?}");
            }
            std::thread::sleep(Duration::from_millis(1));
        }
    }

    /// Stop the processor (at its next loop pass) and keep the engines.
    pub fn halt(&self) -> anyhow::Result<()> {
        let mut cpu = self.cpu.lock().unwrap_or_else(|e| e.into_inner());
        match std::mem::replace(&mut *cpu, Cpu::Lost) {
            Cpu::Running { thread, stopper, .. } => {
                self.shared.wakers.stop.store(true, Ordering::Release);
                self.shared.wakers.kick();
                // A flashed core stops in WAIT_EVENT; one that never reads a register (a
                // firmware spinning) is stopped from here, repeatedly until it is gone (a
                // stop request between two emulation runs would otherwise be lost).
                if let Some(st) = stopper {
                    while !thread.is_finished() {
                        st.stop();
                        self.shared.wakers.kick();
                        std::thread::sleep(Duration::from_millis(2));
                    }
                }
                match thread.join() {
                    Ok(eng) => {
                        // A host reading the link counters after HALT sees them current.
                        eng.publish_link_stats();
                        *cpu = Cpu::Halted(Box::new(eng));
                    }
                    Err(_) => bail!("the NIC processor thread panicked; the NIC must be recreated"),
                }
            }
            other => *cpu = other,
        }
        self.mem().store(ctrl_word(ctrl::FW_STATE), FwState::Halted as u32, Ordering::Release);
        Ok(())
    }

    /// What the NIC does when its host leaves (a guest's QEMU, a host attached through the
    /// control socket): halt the processor, so no DMA is in flight after this, and zero
    /// the rings, the IPT and the staging buffers, so nothing of the departed host's is
    /// acted on. The next host starts the firmware afresh.
    pub fn halt_and_clear(&self) -> anyhow::Result<()> {
        self.halt()?;
        let zeros = vec![0u8; (NIC_MEM_BYTES - SEND_RING_OFF) as usize];
        anyhow::ensure!(
            self.shared.mem.write(SEND_RING_OFF as usize, &zeros),
            "NIC memory too small to clear its rings"
        );
        Ok(())
    }

    /// Halt and start the same firmware again (native, or the image last flashed); a
    /// halted NIC starts native firmware unless an image was flashed before.
    pub fn reset(&self) -> anyhow::Result<()> {
        let kind = match &*self.cpu.lock().unwrap_or_else(|e| e.into_inner()) {
            Cpu::Running { kind, .. } => Some(kind.clone()),
            _ => None,
        };
        let kind = match (kind, self.last_image()) {
            (Some(k), _) => k,
            (None, Some(img)) => FirmwareKind::Flashed(img),
            (None, None) => FirmwareKind::Native,
        };
        self.halt()?;
        self.start(kind)
    }

    pub fn is_running(&self) -> bool {
        matches!(*self.cpu.lock().unwrap_or_else(|e| e.into_inner()), Cpu::Running { .. })
    }

    pub fn status(&self) -> NicStatus {
        let mem = self.mem();
        let w = |rel| mem.load_relaxed(ctrl_word(rel));
        let (running, mode, image) = match &*self.cpu.lock().unwrap_or_else(|e| e.into_inner()) {
            Cpu::Running { kind: FirmwareKind::Native, .. } => (true, "native".to_string(), None),
            Cpu::Running { kind: FirmwareKind::Flashed(img), .. } => {
                let i = &img.info;
                let image = ImageStatus {
                    build_id: format!("{:08x}", i.build_id),
                    version: i.version_string(),
                    checksum: format!("{:08x}", i.checksum),
                    intact: flashed::text_checksum(&self.image_mem) == i.checksum,
                    load_bytes: i.load_bytes,
                    defmt: img.defmt.is_some(),
                };
                (true, "flashed".to_string(), Some(image))
            }
            Cpu::Halted(_) => (false, "halted".to_string(), None),
            Cpu::Inline => (true, "native-inline".to_string(), None),
            Cpu::Lost => (false, "lost".to_string(), None),
        };
        let state = w(ctrl::FW_STATE);
        let v = w(ctrl::FW_VERSION);
        let s = &self.shared;
        NicStatus {
            name: s.name.clone(),
            mode,
            running,
            fw_state: FwState::from_u32(state).map_or_else(|| format!("invalid ({state:#x})"), |s| format!("{s:?}")),
            fw_version: version_string(v),
            fw_build_id: format!("{:08x}", w(ctrl::FW_BUILD_ID)),
            fw_fault: (state == FwState::Fault as u32).then(|| format!("{:#010x}", w(ctrl::FW_FAULT))),
            image,
            log: self.fw_log.recent(),
            heartbeat: w(ctrl::FW_HEARTBEAT),
            uptime_s: s.started.elapsed().as_secs_f64(),
            counters: Counter::ALL.iter().map(|c| (c.name().to_string(), mem.load_u64(c.offset()))).collect(),
            link_address: s.link_address.clone(),
            peers: s.peers.lock().unwrap_or_else(|e| e.into_inner()).clone(),
            cluster_key: s.cluster_key,
            link: *s.stats.link.lock().unwrap_or_else(|e| e.into_inner()),
            echo: s.stats.echo.stats(),
            dma_refused: s.dma.refused(),
            host_irqs: s.notifier.raised(),
            host_dma_bytes: s.stats.host_dma_bytes.load(Ordering::Relaxed),
            nic_local_dma_bytes: s.stats.nic_local_dma_bytes.load(Ordering::Relaxed),
            parks: s.stats.parks.load(Ordering::Relaxed),
            src_stamped: s.stats.src_stamped.load(Ordering::Relaxed),
            answers_torn: s.stats.answers_torn.load(Ordering::Relaxed),
            regions: s.dma.regions(),
        }
    }
}

impl Drop for Nic {
    fn drop(&mut self) {
        let _ = self.halt();
    }
}

/// The native processor: the firmware crate's main loop against the soft engines.
fn run_native(mem: NicMem, mut eng: SoftEngines) -> SoftEngines {
    let mut fw = Firmware::new(mem, trapeze_firmware::BUILD_ID);
    let wakers = eng.wakers().clone();
    loop {
        if wakers.stop.load(Ordering::Acquire) {
            return eng;
        }
        if !fw.poll(&mut eng) {
            trapeze_firmware::hal::Engines::idle(&mut eng, !fw.is_quiet());
        }
    }
}

/// The native firmware and the engines of a NIC, driven by the caller's thread instead of
/// a processor thread of their own: [`InlineNative::poll`] runs one pass of the firmware's
/// main loop. Same firmware, engines and link; only who schedules them differs. Used
/// where one thread per node must do everything (benchmarks on few cores: spinning
/// threads beyond the core count would measure the scheduler). Dropping it halts the
/// NIC and gives the engines back.
pub struct InlineNative {
    nic: Arc<Nic>,
    fw: Firmware<NicMem>,
    eng: Option<SoftEngines>,
}

impl InlineNative {
    /// One pass of the firmware's main loop; whether anything changed. A pass that could
    /// find nothing ([`Firmware::has_work`]: no packet in flight, no new send entry or
    /// configuration, nothing on the link) is skipped: the caller polls in a tight loop,
    /// and those passes were a large part of a round trip's cost. (The firmware's
    /// heartbeat then counts only passes that ran.)
    pub fn poll(&mut self) -> bool {
        match self.eng.as_mut() {
            Some(e) => self.fw.has_work(e) && self.fw.poll(e),
            None => false,
        }
    }

    /// Poll until the firmware has nothing more to do now (at most [`Self::RUN_PASSES`]
    /// passes), so a message just posted leaves in this call, or until `landed` says a
    /// message for the host has arrived: under a stream of replies, running to the bound
    /// first held each one back behind up to 16 payload DMAs. Whether any pass did
    /// something.
    pub fn run(&mut self, landed: impl Fn() -> bool) -> bool {
        let mut any = false;
        for _ in 0..Self::RUN_PASSES {
            if !self.poll() {
                break;
            }
            any = true;
            if landed() {
                break;
            }
        }
        any
    }

    /// The most passes [`Self::run`] makes.
    pub const RUN_PASSES: u32 = 16;

    /// Publish the link's statistics now ([`link_stats`] reads them), as parking does: an
    /// inline NIC that never parks would otherwise show none.
    pub fn publish_link_stats(&self) {
        if let Some(e) = &self.eng {
            e.publish_link_stats();
        }
    }

    /// When the link next needs a pass for its timers ([`SoftEngines::link_deadline`]):
    /// a caller about to sleep must come back by then.
    pub fn link_deadline(&self) -> Option<std::time::Instant> {
        self.eng.as_ref().and_then(SoftEngines::link_deadline)
    }

    /// When the caller must poll again although no frame arrives, if ever: the link's
    /// timers ([`Self::link_deadline`]), and [`BUSY_PARK`] from `now` while the firmware
    /// holds a packet it cannot move yet (the NIC's own processor parks no longer then).
    pub fn poll_timeout(&self, now: Instant) -> Option<Instant> {
        let busy = (!self.fw.is_quiet()).then(|| now + BUSY_PARK);
        match (busy, self.link_deadline()) {
            (Some(a), Some(b)) => Some(a.min(b)),
            (a, b) => a.or(b),
        }
    }

    /// Before the caller sleeps on the link's descriptor: whether it may (`false`: a
    /// packet already waits in the link, so poll instead). After the sleep,
    /// [`Self::end_wait`].
    pub fn prepare_wait(&self) -> bool {
        self.eng.as_ref().is_none_or(SoftEngines::prepare_wait)
    }

    /// The sleep [`Self::prepare_wait`] allowed is over.
    pub fn end_wait(&self) {
        if let Some(e) = &self.eng {
            e.end_wait();
        }
    }
}

impl Drop for InlineNative {
    fn drop(&mut self) {
        if let Some(e) = self.eng.take() {
            e.publish_link_stats();
            *self.nic.cpu.lock().unwrap_or_else(|e| e.into_inner()) = Cpu::Halted(Box::new(e));
            self.nic.mem().store(ctrl_word(ctrl::FW_STATE), FwState::Halted as u32, Ordering::Release);
        }
    }
}

impl Nic {
    /// Halt the processor thread (if running) and boot the native firmware for the
    /// caller to drive with [`InlineNative::poll`].
    pub fn start_inline(self: &Arc<Self>) -> anyhow::Result<InlineNative> {
        self.halt()?;
        let mut cpu = self.cpu.lock().unwrap_or_else(|e| e.into_inner());
        let Cpu::Halted(mut eng) = std::mem::replace(&mut *cpu, Cpu::Inline) else {
            *cpu = Cpu::Lost;
            bail!("NIC {} has no engines to drive (lost)", self.shared.name);
        };
        eng.reset();
        let fw = Firmware::new(self.mem(), trapeze_firmware::BUILD_ID);
        Ok(InlineNative { nic: self.clone(), fw, eng: Some(*eng) })
    }
}

/// Read the link statistics a NIC last published.
pub fn link_stats(n: &Nic) -> LinkStats {
    *n.shared.stats.link.lock().unwrap_or_else(|e| e.into_inner())
}
