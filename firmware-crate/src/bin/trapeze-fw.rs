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

/// Hash of this crate's sources (see build.rs), published in `ctrl::FW_BUILD_ID`.
pub const BUILD_ID: u32 = parse_hex_u32(env!("TRAPEZE_FW_BUILD_ID"));

/// Parse build.rs's `0x%08x` at compile time.
const fn parse_hex_u32(s: &str) -> u32 {
    let b = s.as_bytes();
    assert!(b.len() == 10 && b[0] == b'0' && b[1] == b'x', "TRAPEZE_FW_BUILD_ID: want 0x%08x");
    let mut v = 0u32;
    let mut i = 2;
    while i < b.len() {
        let d = match b[i] {
            c @ b'0'..=b'9' => c - b'0',
            c @ b'a'..=b'f' => c - b'a' + 10,
            c @ b'A'..=b'F' => c - b'A' + 10,
            _ => panic!("TRAPEZE_FW_BUILD_ID: not a hex digit"),
        };
        v = v << 4 | d as u32;
        i += 1;
    }
    v
}

/// Boot: view the endpoint, start the firmware (it publishes version, build id and the
/// `Ready` state in the control block), and run its main loop forever.
#[cfg(target_arch = "riscv32")]
fn run() -> ! {
    use trapeze_firmware::fw::FW_VERSION;
    use trapeze_firmware::iface::layout::CTRL_OFF;
    use trapeze_firmware::iface::mem::AtomicWords;
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
    defmt::info!(
        "firmware v{=u32}.{=u32}.{=u32} build {=u32:#010x} ready: node {=u16}, mtu {=u32}",
        FW_VERSION >> 16,
        (FW_VERSION >> 8) & 0xff,
        FW_VERSION & 0xff,
        build_id,
        cfg.node_id,
        cfg.mtu,
    );
    fw.run(&mut engines)
}

#[cfg(not(target_arch = "riscv32"))]
fn main() {
    eprintln!("trapeze-fw {BUILD_ID:#010x} is the riscv32imac NIC image; build it with `cargo xtask build`");
    std::process::exit(2);
}
