// SPDX-License-Identifier: GPL-2.0-only
//! The flashable firmware image for the NIC processor (riscv32imac): boots with riscv-rt,
//! views the endpoint part of NIC memory, and runs [`Firmware`] over the MMIO engines.
//! Logs go out through defmt on the MMIO log FIFO. All `unsafe` is in [`hw`].
//!
//! Build it with `cargo xtask build` (`--features image --target
//! riscv32imac-unknown-none-elf --profile fw`). Built for any other target (e.g. by
//! `cargo test --all-features`) it is a stub that says so.

#![cfg_attr(target_arch = "riscv32", no_std, no_main)]
#![deny(unsafe_code)]
#![deny(unsafe_op_in_unsafe_fn)]
#![forbid(clippy::undocumented_unsafe_blocks)]

// The bin's modules live in `src/bin/trapeze-fw/` (a crate root's `mod` would look in
// `src/bin/`).
#[cfg(target_arch = "riscv32")]
#[path = "trapeze-fw/engines.rs"]
mod engines;
#[cfg(target_arch = "riscv32")]
#[path = "trapeze-fw/hw.rs"]
#[allow(unsafe_code)]
mod hw;

#[cfg(target_arch = "riscv32")]
use panic_halt as _;

/// Hash of this crate's sources, published in `ctrl::FW_BUILD_ID` (the native firmware of
/// the same sources reports the same id).
pub use trapeze_firmware::BUILD_ID;

/// Boot: view the endpoint, start the firmware (it publishes version, build id and the
/// `Ready` state in the control block), and run its main loop forever.
#[cfg(target_arch = "riscv32")]
fn run() -> ! {
    use trapeze_firmware::fw::FW_VERSION;
    use trapeze_firmware::iface::layout::{ctrl, ctrl_word, CTRL_OFF, NIC_NODE_VALID};
    use trapeze_firmware::iface::mem::{AtomicWords, NicMemory};
    use trapeze_firmware::iface::regs::ID_VALUE;
    use trapeze_firmware::Firmware;

    let id = hw::id();
    if id != ID_VALUE {
        defmt::warn!("NIC id register reads {=u32:#x}, expected {=u32:#x}", id, ID_VALUE);
    }
    let mem = AtomicWords::with_base(hw::endpoint(), CTRL_OFF);
    let mut engines = engines::MmioEngines::new();
    let build_id = hw::build_id();
    let mut fw = Firmware::new(mem, build_id);
    let cfg = *fw.config();
    // The node is the NIC's (published by the device, as a burnt-in address): until a host
    // configures one, the firmware's own config says node 0, which is not where it is.
    let nic = fw.mem().load_relaxed(ctrl_word(ctrl::NIC_NODE));
    let node = if nic & NIC_NODE_VALID != 0 { nic as u16 } else { cfg.node_id };
    defmt::info!(
        "firmware v{=u32}.{=u32}.{=u32} build {=u32:#010x} ready: node {=u16}, mtu {=u32}",
        FW_VERSION >> 16,
        (FW_VERSION >> 8) & 0xff,
        FW_VERSION & 0xff,
        build_id,
        node,
        cfg.mtu,
    );
    fw.run(&mut engines)
}

#[cfg(not(target_arch = "riscv32"))]
fn main() {
    eprintln!("trapeze-fw {BUILD_ID:#010x} is the riscv32imac NIC image; build it with `cargo xtask build`");
    std::process::exit(2);
}
