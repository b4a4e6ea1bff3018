// SPDX-License-Identifier: GPL-2.0-only
//! Flashed mode: the riscv32imac firmware image runs on an emulated core (Unicorn, i.e.
//! QEMU's TCG) inside the NIC, against the same engines native mode uses.
//!
//! * **Memory.** NIC memory is mapped at `regs::NIC_MEM_BASE` with `mem_map_ptr` in two
//!   parts. The image region (`..CTRL_OFF`: text read and execute only, firmware RAM read
//!   and write) comes from the NIC's private [`ImageMemory`], which no host or guest maps,
//!   so nobody outside the NIC can change the code or the stack of the running firmware.
//!   The endpoint (`CTRL_OFF..`) is the shared mapping, read and write but never
//!   executed, so the firmware's loads and stores, the engines' DMA and the host's
//!   atomics all touch the same bytes there.
//! * **Registers.** `regs::REGS_BASE..+REGS_BYTES` is an MMIO window whose read and
//!   write callbacks drive [`SoftEngines`] through the register protocol of
//!   `iface::regs`: parameter registers, then a `*_CMD` write starts the engine;
//!   status/progress reads; `WAIT_EVENT` spins for the engines' spin budget (returning
//!   `TIMEOUT` at once, so the firmware re-polls its rings), then parks in `poll(2)` on the
//!   doorbells, the link and the control eventfd and returns what woke it; `HOST_IRQ`,
//!   `TIME_LO/HI`, `LOG_FIFO` (defmt bytes, decoded with the image's own table) and
//!   `HALT` (the firmware's fault code: the core stops and the NIC reports `Fault`).
//! * **Protection.** Engine commands that would write NIC memory (host DMA, link-in
//!   buffers) must stay inside the endpoint (`CTRL_OFF..`): the image cannot be
//!   overwritten by DMA even by a buggy firmware. A refused command completes with an
//!   error status, as `hw.rs` reports its own refusals.
//! * **Stopping.** The processor thread runs `emu_start` in a loop. It ends when
//!   `wakers.stop` is set: `WAIT_EVENT` sees the flag and calls `emu_stop`, and
//!   [`CoreStopper`] lets the halting thread stop a core that never reads a register
//!   (a firmware spinning in a loop). A core that faults (HALT, a CPU exception, reaching
//!   the panic handler or riscv-rt's default trap handler) publishes `FwState::Fault`
//!   and a fault code in `ctrl::FW_FAULT`, then waits for the halt.
//!
//! The `Unicorn` handle is not `Send`: [`run`] creates it on the processor thread.

use crate::cpu::FwLog;
use crate::engines::SoftEngines;
use crate::image::{LoadedImage, TrapKind};
use crate::nicmem::NicMem;
use crate::shm::Mapping;

use std::sync::atomic::Ordering;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};
use trapeze_firmware::hal::{EngineStatus, Engines, HostDir, RxStatus};
use trapeze_firmware::iface::layout::{ctrl, ctrl_word, FwState, CTRL_OFF, IMAGE_TEXT_BYTES, NIC_MEM_BYTES};
use trapeze_firmware::iface::mem::NicMemory;
use trapeze_firmware::iface::regs::{self, event, rx_status, status};
use unicorn_engine::unicorn_const::{Arch, Mode, Prot};
use unicorn_engine::{RegisterRISCV, Unicorn};

pub use super::load::{fault, load, text_checksum, ImageMemory};

/// Stops a running core from another thread.
///
/// `uc_emu_stop` is the call Unicorn's own timeout thread makes on a running engine: it
/// sets the stop request and exits the current translation block. The handle is
/// registered by the processor thread once the engine exists and removed (under the same
/// lock) before the engine is closed, so [`CoreStopper::stop`] never sees a dangling one.
#[derive(Clone, Default)]
pub struct CoreStopper {
    handle: Arc<Mutex<Option<EngineHandle>>>,
}

struct EngineHandle(*mut unicorn_engine::uc_engine);

// SAFETY: the pointer is only used for `uc_emu_stop`, which Unicorn supports calling from
// a thread other than the emulating one (its timeout thread does), and only while the
// engine is alive (see `CoreStopper`).
unsafe impl Send for EngineHandle {}

impl CoreStopper {
    /// Ask the core to stop at the end of its current translation block (no-op if no core
    /// is running).
    pub fn stop(&self) {
        let h = self.handle.lock().unwrap_or_else(|e| e.into_inner());
        if let Some(h) = &*h {
            // SAFETY: `h.0` is a live engine: it is removed from `handle` before the
            // processor thread closes the engine, and we hold the lock. A stop request
            // while no emulation runs is ignored by Unicorn.
            unsafe {
                let _ = unicorn_engine::uc_emu_stop(h.0);
            }
        }
    }

    fn set(&self, h: *mut unicorn_engine::uc_engine) {
        *self.handle.lock().unwrap_or_else(|e| e.into_inner()) = Some(EngineHandle(h));
    }

    fn clear(&self) {
        *self.handle.lock().unwrap_or_else(|e| e.into_inner()) = None;
    }
}

/// What the processor thread needs besides the engines.
pub struct FlashedCore {
    pub name: String,
    pub image: Arc<LoadedImage>,
    pub mem: Arc<Mapping>,
    /// The private image region (text + firmware RAM), loaded by [`load`].
    pub image_mem: Arc<Mapping>,
    pub log: Arc<FwLog>,
    pub stopper: CoreStopper,
}

/// The register file and the devices behind it; the Unicorn engine's user data.
struct Core<'t> {
    /// `None` only before setup finished.
    eng: Option<SoftEngines>,
    mem: NicMem,
    name: String,
    log: Arc<FwLog>,
    decoder: Option<Box<dyn defmt_decoder::StreamDecoder + Send + Sync + 't>>,
    /// Log bytes since the last frame separator.
    log_bytes: Vec<u8>,
    t0: Instant,
    time_hi: u32,
    hdma_host: u64,
    hdma_nic_off: u32,
    hdma_len: u32,
    hdma_refused: bool,
    tx_nic_off: u32,
    tx_len: u32,
    rx_nic_off: u32,
    rx_cap: u32,
    rx_refused: bool,
    /// A link-in buffer is posted and its completion not yet reported.
    rx_armed: bool,
    /// The last RX_STATUS, for RX_BYTES.
    rx_last: RxStatus,
    /// Latched event bits (engine completions) not yet returned by WAIT_EVENT.
    pending: u32,
    /// Set when the core must stop for good (fault already published).
    faulted: bool,
    unknown_access_logged: bool,
}

/// Largest defmt frame buffered while waiting for its separator.
const MAX_LOG_FRAME: usize = 64 * 1024;

/// `off..off + len` lies within the endpoint part of NIC memory.
fn in_endpoint(off: u32, len: u32) -> bool {
    off >= CTRL_OFF && off.checked_add(len).is_some_and(|e| e <= NIC_MEM_BYTES)
}

fn engine_bits(st: EngineStatus, refused: bool) -> u32 {
    if refused {
        return status::ERROR;
    }
    (if st.busy { status::BUSY } else { 0 }) | if st.error { status::ERROR } else { 0 }
}

impl Core<'_> {
    fn eng(&mut self) -> &mut SoftEngines {
        self.eng.as_mut().expect("engines installed before the core runs")
    }

    /// Publish a fault (state, code) and log why.
    fn fault(&mut self, code: u32, why: &str) {
        self.mem.store_relaxed(ctrl_word(ctrl::FW_FAULT), code);
        self.mem.store(ctrl_word(ctrl::FW_STATE), FwState::Fault as u32, Ordering::Release);
        let line = format!("NIC: firmware stopped: {why} (fault code {code:#010x})");
        tracing::error!(nic = %self.name, "{line}");
        self.log.push(line);
        self.faulted = true;
    }

    fn note_unknown(&mut self, what: &str, off: u32) {
        if !self.unknown_access_logged {
            self.unknown_access_logged = true;
            tracing::warn!(nic = %self.name, "firmware {what} unknown register {off:#x} (ignored; reported once)");
        }
    }

    /// A register read; `true` = stop the core.
    fn read(&mut self, off: u32, size: usize) -> (u64, bool) {
        let (word, stop) = self.read_word(off & !3);
        let v = (word >> (8 * (off & 3))) as u64;
        let v = if size >= 4 { v } else { v & ((1u64 << (8 * size)) - 1) };
        (v, stop)
    }

    fn read_word(&mut self, reg: u32) -> (u32, bool) {
        let v = match reg {
            regs::ID => regs::ID_VALUE,
            regs::WAIT_EVENT => return self.wait_event(),
            regs::TIME_LO => {
                let ns = self.t0.elapsed().as_nanos() as u64;
                self.time_hi = (ns >> 32) as u32;
                ns as u32
            }
            regs::TIME_HI => self.time_hi,
            regs::HDMA_HOST_LO => self.hdma_host as u32,
            regs::HDMA_HOST_HI => (self.hdma_host >> 32) as u32,
            regs::HDMA_NIC_OFF => self.hdma_nic_off,
            regs::HDMA_LEN => self.hdma_len,
            regs::HDMA_DONE => {
                if self.hdma_refused {
                    0
                } else {
                    self.eng().host_dma_status().done
                }
            }
            regs::HDMA_STATUS => {
                let st = self.eng().host_dma_status();
                engine_bits(st, self.hdma_refused)
            }
            regs::TX_NIC_OFF => self.tx_nic_off,
            regs::TX_LEN => self.tx_len,
            regs::TX_DONE => self.eng().link_tx_status().done,
            regs::TX_STATUS => {
                let st = self.eng().link_tx_status();
                engine_bits(st, false)
            }
            regs::RX_NIC_OFF => self.rx_nic_off,
            regs::RX_CAP => self.rx_cap,
            regs::RX_BYTES => self.rx_last.bytes,
            regs::RX_STATUS => {
                let st = if self.rx_refused {
                    RxStatus { posted: false, bytes: 0, complete: true, crc_ok: false }
                } else {
                    self.eng().link_rx_status()
                };
                self.rx_last = st;
                if st.complete {
                    self.rx_armed = false;
                }
                (if st.posted { rx_status::POSTED } else { 0 })
                    | if st.complete { rx_status::COMPLETE } else { 0 }
                    | if st.complete && st.crc_ok { rx_status::CRC_OK } else { 0 }
            }
            _ => {
                self.note_unknown("read", reg);
                0
            }
        };
        (v, false)
    }

    /// A posted link-in buffer that completed since the last look: the RX event.
    fn check_rx(&mut self) -> u32 {
        if !self.rx_armed {
            return 0;
        }
        if self.eng().link_rx_status().complete {
            self.rx_armed = false;
            return event::RX;
        }
        0
    }

    /// WAIT_EVENT: latched events at once; otherwise one idle pass of the engines (spin
    /// budget, then park) and what woke it. `true` = the NIC is halting: stop the core.
    fn wait_event(&mut self) -> (u32, bool) {
        let stopping = |c: &mut Self| c.eng().wakers().stop.load(Ordering::Acquire);
        if stopping(self) {
            return (0, true);
        }
        let ev = std::mem::take(&mut self.pending) | self.check_rx();
        if ev != 0 {
            return (ev, false);
        }
        // The image asks only when it has nothing in hand (with work in hand it polls).
        let Some(wake) = self.eng().idle_wait(false) else {
            return (event::TIMEOUT, false);
        };
        if stopping(self) {
            return (0, true);
        }
        let mut ev = self.check_rx();
        if wake.doorbell {
            ev |= event::DOORBELL;
        }
        (if ev == 0 { event::TIMEOUT } else { ev }, false)
    }

    /// A register write; `true` = stop the core.
    fn write(&mut self, off: u32, size: usize, val: u32) -> bool {
        let reg = off & !3;
        if size < 4 && reg != regs::LOG_FIFO {
            self.note_unknown("sub-word write to", off);
            return false;
        }
        match reg {
            regs::HOST_IRQ => self.eng().raise_host_irq(),
            regs::LOG_FIFO => self.log_byte(val as u8),
            regs::HALT => {
                self.fault(val, "the firmware wrote the HALT register");
                return true;
            }
            regs::HDMA_HOST_LO => self.hdma_host = (self.hdma_host & !0xFFFF_FFFF) | val as u64,
            regs::HDMA_HOST_HI => self.hdma_host = (self.hdma_host & 0xFFFF_FFFF) | (val as u64) << 32,
            regs::HDMA_NIC_OFF => self.hdma_nic_off = val,
            regs::HDMA_LEN => self.hdma_len = val,
            regs::HDMA_CMD => {
                let dir = match val {
                    regs::HDMA_TO_NIC => Some(HostDir::ToNic),
                    regs::HDMA_TO_HOST => Some(HostDir::ToHost),
                    _ => None,
                };
                let (host, off, len) = (self.hdma_host, self.hdma_nic_off, self.hdma_len);
                match dir {
                    Some(dir) if in_endpoint(off, len) => {
                        self.hdma_refused = false;
                        self.eng().host_dma_start(dir, host, off, len);
                    }
                    _ => self.hdma_refused = true,
                }
                self.pending |= event::HDMA;
            }
            regs::TX_NIC_OFF => self.tx_nic_off = val,
            regs::TX_LEN => self.tx_len = val,
            regs::TX_CMD => {
                // Link out only reads NIC memory (bounds-checked by the engine).
                let (off, len) = (self.tx_nic_off, self.tx_len);
                self.eng().link_tx_start(off, len, val);
                self.pending |= event::TX;
            }
            regs::RX_NIC_OFF => self.rx_nic_off = val,
            regs::RX_CAP => self.rx_cap = val,
            regs::RX_CMD => {
                if val & 1 != 0 {
                    let (off, cap) = (self.rx_nic_off, self.rx_cap);
                    self.rx_refused = !in_endpoint(off, cap);
                    if !self.rx_refused {
                        self.eng().link_rx_post(off, cap);
                    }
                    self.rx_armed = true;
                    self.rx_last = RxStatus::default();
                }
            }
            _ => self.note_unknown("write to", reg),
        }
        false
    }

    /// One byte of defmt output: frames end with a zero byte (rzCOBS).
    fn log_byte(&mut self, b: u8) {
        if b != 0 {
            if self.log_bytes.len() < MAX_LOG_FRAME {
                self.log_bytes.push(b);
            }
            return;
        }
        if self.log_bytes.is_empty() {
            return;
        }
        self.log_bytes.push(0);
        let Some(dec) = self.decoder.as_mut() else {
            let line =
                format!("(defmt frame of {} bytes; the image has no usable defmt table)", self.log_bytes.len() - 1);
            self.log_bytes.clear();
            self.log.push(line);
            return;
        };
        dec.received(&self.log_bytes);
        self.log_bytes.clear();
        // Bounded: every decode pops a frame or reports that none is complete.
        for _ in 0..64 {
            let line = match dec.decode() {
                Ok(frame) => {
                    let level = frame.level().map_or("print", |l| l.as_str());
                    let msg = frame.display_message().to_string();
                    let line = match frame.display_timestamp() {
                        Some(ts) => format!("{ts} {level:<5} {msg}"),
                        None => format!("{level:<5} {msg}"),
                    };
                    match level {
                        "error" => tracing::error!(nic = %self.name, "fw: {msg}"),
                        "warn" => tracing::warn!(nic = %self.name, "fw: {msg}"),
                        "debug" => tracing::debug!(nic = %self.name, "fw: {msg}"),
                        "trace" => tracing::trace!(nic = %self.name, "fw: {msg}"),
                        _ => tracing::info!(nic = %self.name, "fw: {msg}"),
                    }
                    line
                }
                Err(defmt_decoder::DecodeError::UnexpectedEof) => break,
                Err(defmt_decoder::DecodeError::Malformed) => {
                    tracing::warn!(nic = %self.name, "fw: malformed defmt frame");
                    "(malformed defmt frame)".to_string()
                }
            };
            self.log.push(line);
        }
    }
}

/// The processor thread of a flashed NIC: load nothing (the image is already in NIC
/// memory, see [`load`]), boot the core at the image entry and run it until the NIC
/// halts it; return the engines.
pub fn run(core: FlashedCore, mut eng: SoftEngines) -> SoftEngines {
    eng.reset();
    // The image reads and writes NIC memory itself and reports no released staging.
    eng.set_defer_reads(false);
    let FlashedCore { name, image, mem, image_mem, log, stopper } = core;
    let table = image.defmt.clone();
    if let Some(note) = &image.defmt_note {
        tracing::warn!(nic = %name, "firmware log not decoded: {note}");
    }
    let nic_mem = NicMem::new(mem.clone());
    let wakers = eng.wakers().clone();
    let data = Core {
        eng: None,
        mem: nic_mem.clone(),
        name: name.clone(),
        log: log.clone(),
        decoder: table.as_deref().map(|t| t.new_stream_decoder()),
        log_bytes: Vec::new(),
        t0: Instant::now(),
        time_hi: 0,
        hdma_host: 0,
        hdma_nic_off: 0,
        hdma_len: 0,
        hdma_refused: false,
        tx_nic_off: 0,
        tx_len: 0,
        rx_nic_off: 0,
        rx_cap: 0,
        rx_refused: false,
        rx_armed: false,
        rx_last: RxStatus::default(),
        pending: 0,
        faulted: false,
        unknown_access_logged: false,
    };
    let mut uc = match setup(&mem, &image_mem, &image, data) {
        Ok(uc) => uc,
        Err(e) => {
            let why = format!("the emulated core could not be set up: {e}");
            nic_mem.store_relaxed(ctrl_word(ctrl::FW_FAULT), fault::EMULATOR);
            nic_mem.store(ctrl_word(ctrl::FW_STATE), FwState::Fault as u32, Ordering::Release);
            tracing::error!(nic = %name, "{why}");
            log.push(format!("NIC: {why}"));
            return wait_for_halt(eng);
        }
    };
    uc.get_data_mut().eng = Some(eng);
    stopper.set(uc.get_handle());
    let mut pc = image.info.entry as u64;
    loop {
        let r = uc.emu_start(pc, 0, 0, 0);
        if uc.get_data_mut().faulted {
            break;
        }
        if wakers.stop.load(Ordering::Acquire) {
            break;
        }
        let at = uc.pc_read().unwrap_or(0);
        match r {
            // Stopped without a reason of ours (a stop request racing a restart): resume.
            Ok(()) => pc = at,
            Err(e) => {
                let cause = uc.reg_read(RegisterRISCV::MCAUSE).unwrap_or(0);
                uc.get_data_mut()
                    .fault(fault::CPU, &format!("CPU exception {e:?} at pc {at:#010x} (mcause {cause:#x})"));
                break;
            }
        }
    }
    stopper.clear();
    let eng = uc.get_data_mut().eng.take().expect("engines installed");
    drop(uc);
    wait_for_halt(eng)
}

/// After a fault (or on a stop): keep the engines parked until the NIC halts the core.
fn wait_for_halt(mut eng: SoftEngines) -> SoftEngines {
    let wakers = eng.wakers().clone();
    while !wakers.stop.load(Ordering::Acquire) {
        eng.park(Duration::from_millis(100));
    }
    // Back to the native firmware's terms for whoever drives the engines next.
    eng.set_defer_reads(true);
    eng
}

/// Create the core, map NIC memory and the registers, and hook the image's trap
/// addresses. `data` comes back inside the engine.
fn setup<'t>(
    mem: &Mapping,
    image_mem: &Mapping,
    image: &LoadedImage,
    data: Core<'t>,
) -> Result<Unicorn<'t, Core<'t>>, String> {
    let mut uc = Unicorn::new_with_data(Arch::RISCV, Mode::RISCV32, data).map_err(|e| format!("uc_open: {e:?}"))?;
    ensure_len(mem, image_mem)?;
    let base = regs::NIC_MEM_BASE as u64;
    let text = IMAGE_TEXT_BYTES as u64;
    // SAFETY: `image_mem` is page-aligned and CTRL_OFF long (checked above); the text part
    // (IMAGE_TEXT_BYTES, a page multiple) and the RAM part after it lie inside it. It
    // outlives the engine: the NIC holds the Arc'd Mapping for its whole life and `run`
    // holds a clone until after the engine is dropped. Only the core and the NIC's own
    // loader (while the core is halted) touch these bytes, never through Rust references.
    unsafe {
        uc.mem_map_ptr(base, text, Prot::READ | Prot::EXEC, image_mem.as_mut_ptr().cast())
            .map_err(|e| format!("mapping the image text: {e:?}"))?;
        uc.mem_map_ptr(
            base + text,
            CTRL_OFF as u64 - text,
            Prot::READ | Prot::WRITE,
            image_mem.as_mut_ptr().add(IMAGE_TEXT_BYTES as usize).cast(),
        )
        .map_err(|e| format!("mapping the image RAM: {e:?}"))?;
    }
    // SAFETY: the mapping is page-aligned and NIC_MEM_BYTES long (checked above), so the
    // endpoint part from CTRL_OFF (a page multiple) to its end lies inside it; it outlives
    // the engine: `mem` is an Arc'd Mapping held by the NIC for its whole life and by
    // `run`'s caller until after the engine is dropped. The bytes are shared with the host
    // and the DMA engines by design (see shm.rs): the emulated core reaches them only
    // through guest loads and stores, never through Rust references.
    unsafe {
        uc.mem_map_ptr(
            base + CTRL_OFF as u64,
            (NIC_MEM_BYTES - CTRL_OFF) as u64,
            Prot::READ | Prot::WRITE,
            mem.as_mut_ptr().add(CTRL_OFF as usize).cast(),
        )
    }
    .map_err(|e| format!("mapping NIC memory: {e:?}"))?;
    uc.mmio_map(
        regs::REGS_BASE as u64,
        regs::REGS_BYTES as u64,
        Some(|uc: &mut Unicorn<'_, Core<'t>>, off: u64, size: usize| -> u64 {
            let (v, stop) = uc.get_data_mut().read(off as u32, size);
            if stop {
                let _ = uc.emu_stop();
            }
            v
        }),
        Some(|uc: &mut Unicorn<'_, Core<'t>>, off: u64, size: usize, val: u64| {
            if uc.get_data_mut().write(off as u32, size, val as u32) {
                let _ = uc.emu_stop();
            }
        }),
    )
    .map_err(|e| format!("mapping the registers: {e:?}"))?;
    for &(addr, kind) in &image.traps {
        uc.add_code_hook(addr as u64, addr as u64, move |uc: &mut Unicorn<'_, Core<'t>>, at: u64, _size: u32| {
            let (code, why) = match kind {
                TrapKind::Panic => {
                    (fault::PANIC, format!("the firmware panicked (reached the panic handler at {at:#010x})"))
                }
                TrapKind::Exception => {
                    let cause = uc.reg_read(RegisterRISCV::MCAUSE).unwrap_or(0);
                    let epc = uc.reg_read(RegisterRISCV::MEPC).unwrap_or(0);
                    (fault::TRAP, format!("unhandled trap: mcause {cause:#x} at mepc {epc:#010x}"))
                }
            };
            uc.get_data_mut().fault(code, &why);
            let _ = uc.emu_stop();
        })
        .map_err(|e| format!("hooking the trap handler at {addr:#x}: {e:?}"))?;
    }
    Ok(uc)
}

fn ensure_len(mem: &Mapping, image_mem: &Mapping) -> Result<(), String> {
    if mem.len() != NIC_MEM_BYTES as usize {
        return Err(format!("NIC memory is {} bytes, expected {NIC_MEM_BYTES}", mem.len()));
    }
    if image_mem.len() != CTRL_OFF as usize {
        return Err(format!("the image memory is {} bytes, expected {CTRL_OFF}", image_mem.len()));
    }
    Ok(())
}

const _: () = assert!(IMAGE_TEXT_BYTES.is_multiple_of(4096) && CTRL_OFF.is_multiple_of(4096));
