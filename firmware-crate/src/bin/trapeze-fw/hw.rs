// SPDX-License-Identifier: GPL-2.0-only
//! The image's only `unsafe`: the NIC processor's MMIO registers, the `&'static` atomic
//! view of the endpoint, the defmt logger and the exported entry/info symbols.
//!
//! Everything is offered as safe functions whose soundness does not depend on callers:
//!
//! * Registers are reached only through the private [`read`]/[`write`], with offsets that
//!   are constants of [`regs`]. The engine parameters and their `*_CMD` write are one
//!   function each ([`hdma_start`], [`tx_start`], [`rx_post`]), so no other code can
//!   leave a half-written command behind.
//! * Every DMA command is checked to stay inside the endpoint part of NIC memory
//!   (`layout::CTRL_OFF..NIC_MEM_BYTES`) and refused otherwise. memory.x links nothing
//!   there (the image ends at `CTRL_OFF`, checked by `cargo xtask build`), and Rust sees
//!   the endpoint only as the `AtomicU32`s of [`endpoint`], so an engine writing there
//!   never modifies memory that Rust code holds a non-atomic reference to.
//!
//! The core is a single hart and the image enables no interrupts: nothing here is
//! re-entered except through the defmt logger, which guards itself.

use core::cell::UnsafeCell;
use core::sync::atomic::{AtomicBool, AtomicU32, Ordering};
use trapeze_firmware::hal::HostDir;
use trapeze_firmware::iface::layout::{CTRL_OFF, NIC_MEM_BYTES};
use trapeze_firmware::iface::regs::{self, NIC_MEM_BASE, REGS_BASE, REGS_BYTES};

/// A DMA command that would touch NIC memory outside the endpoint; nothing was started.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Refused;

// Registers and the endpoint are word-aligned in the processor's address space.
const _: () = assert!(REGS_BASE.is_multiple_of(4) && (NIC_MEM_BASE + CTRL_OFF).is_multiple_of(4));

/// Volatile read of the register at `off`.
#[inline(always)]
fn read(off: u32) -> u32 {
    assert!(off.is_multiple_of(4) && off < REGS_BYTES);
    let reg = (REGS_BASE + off) as usize as *const u32;
    // SAFETY: `reg` is an aligned word inside the NIC processor's register window
    // (REGS_BASE..+REGS_BYTES, checked above), which is device memory, not any Rust
    // object. Reads have no effect on memory (WAIT_EVENT blocks and clears event bits).
    unsafe { reg.read_volatile() }
}

/// Volatile write of `val` to the register at `off`. Private: the only callers are the
/// functions below, which check DMA parameters before any `*_CMD` write.
#[inline(always)]
fn write(off: u32, val: u32) {
    assert!(off.is_multiple_of(4) && off < REGS_BYTES);
    let reg = (REGS_BASE + off) as usize as *mut u32;
    // SAFETY: as in `read`, `reg` is an aligned register word, not Rust memory. The write
    // can only start an engine through a `*_CMD` register, and every such write below is
    // preceded by `check_endpoint` on the parameters written just before it (single hart,
    // no interrupts: nothing runs in between).
    unsafe { reg.write_volatile(val) }
}

/// `off..off + len` lies within the endpoint part of NIC memory.
fn check_endpoint(off: u32, len: u32) -> Result<(), Refused> {
    match off.checked_add(len) {
        Some(end) if off >= CTRL_OFF && end <= NIC_MEM_BYTES => Ok(()),
        _ => Err(Refused),
    }
}

/// The endpoint (control block, rings, IPT, staging): NIC offsets `CTRL_OFF..NIC_MEM_BYTES`
/// as atomic words; `words[0]` is NIC offset `CTRL_OFF` (use `AtomicWords::with_base`).
pub fn endpoint() -> &'static [AtomicU32] {
    const WORDS: usize = ((NIC_MEM_BYTES - CTRL_OFF) / 4) as usize;
    let base = (NIC_MEM_BASE + CTRL_OFF) as usize as *const AtomicU32;
    // SAFETY: NIC memory is mapped at NIC_MEM_BASE for the whole life of the core, so the
    // range is valid for 'static and 4-byte aligned (asserted at the top of this module).
    // It is not part of any Rust object: memory.x ends the image (code, data, bss, stack)
    // at CTRL_OFF. Every access Rust makes to it goes through these AtomicU32s (shared
    // references only, so several views may coexist); the host and the DMA engines modify
    // it concurrently, which is what atomics permit, and the engines are kept inside it by
    // `check_endpoint`.
    unsafe { core::slice::from_raw_parts(base, WORDS) }
}

/// The NIC's identification register (should read `regs::ID_VALUE`).
pub fn id() -> u32 {
    read(regs::ID)
}

/// Block until a doorbell or engine event (or the hardware's short timeout); returns the
/// `regs::event` bits, which the read clears.
pub fn wait_event() -> u32 {
    read(regs::WAIT_EVENT)
}

pub fn raise_host_irq() {
    write(regs::HOST_IRQ, 1);
}

/// Nanoseconds since the core started.
pub fn now_ns() -> u64 {
    let lo = read(regs::TIME_LO); // LO first: it latches HI.
    let hi = read(regs::TIME_HI);
    (hi as u64) << 32 | lo as u64
}

/// Start a host-bus transfer between host memory and `nic_off..nic_off + len`.
pub fn hdma_start(dir: HostDir, host_addr: u64, nic_off: u32, len: u32) -> Result<(), Refused> {
    check_endpoint(nic_off, len)?;
    write(regs::HDMA_HOST_LO, host_addr as u32);
    write(regs::HDMA_HOST_HI, (host_addr >> 32) as u32);
    write(regs::HDMA_NIC_OFF, nic_off);
    write(regs::HDMA_LEN, len);
    let cmd = match dir {
        HostDir::ToNic => regs::HDMA_TO_NIC,
        HostDir::ToHost => regs::HDMA_TO_HOST,
    };
    write(regs::HDMA_CMD, cmd);
    Ok(())
}

/// Host-bus engine: (`regs::status` bits, bytes done). Status is read first, so a
/// not-busy status means the byte count is final.
pub fn hdma_state() -> (u32, u32) {
    let st = read(regs::HDMA_STATUS);
    (st, read(regs::HDMA_DONE))
}

/// Start a link-out transfer of `nic_off..nic_off + len` with `regs::tx_flags`.
pub fn tx_start(nic_off: u32, len: u32, flags: u32) -> Result<(), Refused> {
    check_endpoint(nic_off, len)?;
    write(regs::TX_NIC_OFF, nic_off);
    write(regs::TX_LEN, len);
    write(regs::TX_CMD, flags);
    Ok(())
}

/// Link-out engine: (`regs::status` bits, bytes done), status first.
pub fn tx_state() -> (u32, u32) {
    let st = read(regs::TX_STATUS);
    (st, read(regs::TX_DONE))
}

/// Post `nic_off..nic_off + cap` for the next incoming packet (the engine writes at most
/// `cap` bytes and discards the rest, `regs::rx_status::OVERFLOW`).
pub fn rx_post(nic_off: u32, cap: u32) -> Result<(), Refused> {
    check_endpoint(nic_off, cap)?;
    write(regs::RX_NIC_OFF, nic_off);
    write(regs::RX_CAP, cap);
    write(regs::RX_CMD, 1);
    Ok(())
}

/// Link-in engine: (`regs::rx_status` bits, bytes so far), status first.
pub fn rx_state() -> (u32, u32) {
    let st = read(regs::RX_STATUS);
    (st, read(regs::RX_BYTES))
}

// ---- exported symbols ------------------------------------------------------------------

/// The build id, exported so `cargo xtask build` (and a loader) can read it from the ELF.
#[no_mangle]
#[used]
static TRAPEZE_FW_BUILD_ID: u32 = crate::BUILD_ID;

/// The firmware version (`ctrl::FW_VERSION` encoding), exported like the build id.
#[no_mangle]
#[used]
static TRAPEZE_FW_VERSION: u32 = trapeze_firmware::fw::FW_VERSION;

/// The build id as linked. Reading through `black_box(&…)` keeps both symbols in the
/// image even with LTO and section garbage collection.
pub fn build_id() -> u32 {
    let _ = core::hint::black_box(&TRAPEZE_FW_VERSION);
    *core::hint::black_box(&TRAPEZE_FW_BUILD_ID)
}

/// The reset entry riscv-rt jumps to once RAM is initialised. Kept here because
/// `#[entry]` exports a symbol (an `unsafe` attribute).
#[riscv_rt::entry]
fn entry() -> ! {
    crate::run()
}

// ---- defmt logger over the MMIO log FIFO ------------------------------------------------

/// Push encoded log bytes into the FIFO, one byte per write.
fn log_bytes(bytes: &[u8]) {
    for &b in bytes {
        write(regs::LOG_FIFO, b as u32);
    }
}

/// Set between `acquire` and `release`: the logger is in use.
static LOG_TAKEN: AtomicBool = AtomicBool::new(false);

/// The frame encoder, used only by whoever holds `LOG_TAKEN`.
struct EncoderCell(UnsafeCell<defmt::Encoder>);

// SAFETY: the encoder is only reached through `Logger`'s methods, and only by the context
// that set LOG_TAKEN (acquire..release), so there is never more than one `&mut` to it.
unsafe impl Sync for EncoderCell {}

static ENCODER: EncoderCell = EncoderCell(UnsafeCell::new(defmt::Encoder::new()));

#[defmt::global_logger]
struct Logger;

// SAFETY: `acquire` takes LOG_TAKEN with an atomic swap and panics if it was already taken
// (a log call from inside the logger, e.g. from a panic while logging), so frames never
// interleave; `release` gives it back. The encoder is only touched while it is held.
unsafe impl defmt::Logger for Logger {
    fn acquire() {
        if LOG_TAKEN.swap(true, Ordering::Acquire) {
            panic!("defmt logger re-entered");
        }
        // SAFETY: we just set LOG_TAKEN, so this is the only reference to the encoder
        // until `release` clears it.
        let enc = unsafe { &mut *ENCODER.0.get() };
        enc.start_frame(log_bytes);
    }

    unsafe fn flush() {
        // Every byte is written to the FIFO synchronously: nothing is buffered here.
    }

    unsafe fn release() {
        // SAFETY: defmt calls `release` once per `acquire`, in the same context, so the
        // caller holds LOG_TAKEN and no other reference to the encoder exists.
        let enc = unsafe { &mut *ENCODER.0.get() };
        enc.end_frame(log_bytes);
        LOG_TAKEN.store(false, Ordering::Release);
    }

    unsafe fn write(bytes: &[u8]) {
        // SAFETY: defmt calls `write` only between `acquire` and `release`, so the caller
        // holds LOG_TAKEN and no other reference to the encoder exists.
        let enc = unsafe { &mut *ENCODER.0.get() };
        enc.write(bytes, log_bytes);
    }
}

defmt::timestamp!("{=u64:us}", now_ns() / 1000);
