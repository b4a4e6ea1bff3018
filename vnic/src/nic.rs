// SPDX-License-Identifier: GPL-2.0-only
//! One virtual NIC: NIC memory, the DMA address space, engines, and the processor that
//! runs the firmware (natively, or the flashed riscv32 image on an emulated core).
//!
//! The processor is a thread that owns the engines while it runs; halting it (to reset
//! or to load new firmware) stops the thread at its next loop pass and takes the
//! engines back, so the link and its counters survive a firmware change.

use crate::dma::DmaSpace;
use crate::engines::{EngineStats, Notifier, SoftEngines, Wakers};
use crate::link::{Link, LinkStats};
use crate::shm::Mapping;
use anyhow::{bail, Context};
use serde::Serialize;
use std::sync::atomic::Ordering;
use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};
use trapeze_firmware::fw::Firmware;
use trapeze_firmware::iface::layout::{ctrl, ctrl_word, Counter, FwState, NIC_MEM_BYTES};
use trapeze_firmware::iface::mem::{AtomicWords, NicMemory};

/// NIC memory as the firmware and host API see it.
#[derive(Clone)]
pub struct NicMem(pub Arc<Mapping>);

impl NicMemory for NicMem {
    #[inline]
    fn load(&self, off: u32, order: Ordering) -> u32 {
        AtomicWords::new(self.0.words()).load(off, order)
    }
    #[inline]
    fn store(&self, off: u32, val: u32, order: Ordering) {
        AtomicWords::new(self.0.words()).store(off, val, order)
    }
    fn len_bytes(&self) -> u32 {
        self.0.len() as u32
    }
}

/// What the processor runs.
#[derive(Clone, Debug)]
pub enum FirmwareKind {
    /// The firmware crate linked into this process.
    Native,
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
    pub heartbeat: u32,
    pub uptime_s: f64,
    pub counters: Vec<(String, u64)>,
    pub link: LinkStats,
    pub dma_refused: u64,
    pub host_irqs: u64,
    pub host_dma_bytes: u64,
    pub parks: u64,
    pub regions: Vec<(String, u64, u64)>,
}

/// State shared by the processor thread, the control socket and in-process hosts.
pub struct NicShared {
    pub name: String,
    pub mem: Arc<Mapping>,
    pub dma: Arc<DmaSpace>,
    pub notifier: Arc<Notifier>,
    pub wakers: Arc<Wakers>,
    pub stats: Arc<EngineStats>,
    started: Instant,
}

enum Cpu {
    Halted(Box<SoftEngines>),
    Running { thread: JoinHandle<SoftEngines>, kind: FirmwareKind },
    /// Only while a transition is in progress (or after a processor thread panicked).
    Lost,
}

/// A virtual NIC.
pub struct Nic {
    shared: Arc<NicShared>,
    cpu: Mutex<Cpu>,
}

/// How long the firmware has to publish its ready word after starting.
pub const READY_TIMEOUT: Duration = Duration::from_secs(5);

impl Nic {
    /// A halted NIC with fresh NIC memory on `link`. `spin` is how long an idle
    /// processor polls before parking.
    pub fn new(name: &str, link: Link, spin: Duration) -> anyhow::Result<Nic> {
        let mem = Arc::new(Mapping::create_memfd(&format!("trapeze-nic-{name}"), NIC_MEM_BYTES as usize)?);
        let shared = Arc::new(NicShared {
            name: name.into(),
            mem: mem.clone(),
            dma: Arc::new(DmaSpace::new()),
            notifier: Arc::new(Notifier::default()),
            wakers: Arc::new(Wakers::new()?),
            stats: Arc::new(EngineStats::default()),
            started: Instant::now(),
        });
        let eng = SoftEngines::new(
            mem,
            shared.dma.clone(),
            link,
            shared.notifier.clone(),
            shared.wakers.clone(),
            shared.stats.clone(),
            spin,
        );
        Ok(Nic { shared, cpu: Mutex::new(Cpu::Halted(Box::new(eng))) })
    }

    pub fn shared(&self) -> &Arc<NicShared> {
        &self.shared
    }
    pub fn mem(&self) -> NicMem {
        NicMem(self.shared.mem.clone())
    }

    /// Start the processor on `kind` and wait for the firmware's ready word.
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
        let mem = NicMem(self.shared.mem.clone());
        mem.store(ctrl_word(ctrl::FW_STATE), FwState::Halted as u32, Ordering::Release);
        let thread = match &kind {
            FirmwareKind::Native => std::thread::Builder::new()
                .name(format!("nic-{}", self.shared.name))
                .spawn(move || run_native(mem, *eng))
                .context("spawning the NIC processor thread")?,
        };
        *cpu = Cpu::Running { thread, kind };
        drop(cpu);
        self.wait_ready(READY_TIMEOUT)
    }

    fn wait_ready(&self, timeout: Duration) -> anyhow::Result<()> {
        let mem = self.mem();
        let t0 = Instant::now();
        loop {
            let st = mem.load(ctrl_word(ctrl::FW_STATE), Ordering::Acquire);
            if st == FwState::Ready as u32 {
                return Ok(());
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
            Cpu::Running { thread, .. } => {
                self.shared.wakers.stop.store(true, Ordering::Release);
                self.shared.wakers.kick();
                match thread.join() {
                    Ok(eng) => *cpu = Cpu::Halted(Box::new(eng)),
                    Err(_) => bail!("the NIC processor thread panicked; the NIC must be recreated"),
                }
            }
            other => *cpu = other,
        }
        self.mem().store(ctrl_word(ctrl::FW_STATE), FwState::Halted as u32, Ordering::Release);
        Ok(())
    }

    pub fn is_running(&self) -> bool {
        matches!(*self.cpu.lock().unwrap_or_else(|e| e.into_inner()), Cpu::Running { .. })
    }

    pub fn status(&self) -> NicStatus {
        let mem = self.mem();
        let w = |rel| mem.load_relaxed(ctrl_word(rel));
        let (running, mode) = match &*self.cpu.lock().unwrap_or_else(|e| e.into_inner()) {
            Cpu::Running { kind: FirmwareKind::Native, .. } => (true, "native".to_string()),
            Cpu::Halted(_) => (false, "halted".to_string()),
            Cpu::Lost => (false, "lost".to_string()),
        };
        let v = w(ctrl::FW_VERSION);
        let s = &self.shared;
        NicStatus {
            name: s.name.clone(),
            mode,
            running,
            fw_state: format!("{:?}", FwState::from_u32(w(ctrl::FW_STATE))),
            fw_version: format!("{}.{}.{}", v >> 16, (v >> 8) & 0xFF, v & 0xFF),
            fw_build_id: format!("{:08x}", w(ctrl::FW_BUILD_ID)),
            heartbeat: w(ctrl::FW_HEARTBEAT),
            uptime_s: s.started.elapsed().as_secs_f64(),
            counters: Counter::ALL.iter().map(|c| (c.name().to_string(), mem.load_u64(c.offset()))).collect(),
            link: *s.stats.link.lock().unwrap_or_else(|e| e.into_inner()),
            dma_refused: s.dma.refused(),
            host_irqs: s.notifier.raised(),
            host_dma_bytes: s.stats.host_dma_bytes.load(Ordering::Relaxed),
            parks: s.stats.parks.load(Ordering::Relaxed),
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
    let mut fw = Firmware::new(mem, 0);
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

/// Read the link statistics a NIC last published.
pub fn link_stats(n: &Nic) -> LinkStats {
    *n.shared.stats.link.lock().unwrap_or_else(|e| e.into_inner())
}
