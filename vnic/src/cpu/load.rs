// SPDX-License-Identifier: GPL-2.0-only
//! Putting a firmware image into NIC memory and checking it there, and the fault codes a
//! NIC publishes for its processor. Independent of the emulator, so a NIC built without
//! flashed mode still validates and reports images the same way.

use crate::image::LoadedImage;
use crate::shm::Mapping;
use anyhow::{bail, ensure};
use trapeze_firmware::iface::layout::{
    IMAGE_RAM_BYTES, IMAGE_RAM_OFF, IMAGE_TEXT_BYTES, IMAGE_TEXT_OFF, NIC_MEM_BYTES,
};

/// Fault codes the NIC itself publishes in `ctrl::FW_FAULT` (a firmware's own `HALT`
/// codes are whatever it writes).
pub mod fault {
    /// The emulated core could not be set up.
    pub const EMULATOR: u32 = 0xFA00_0001;
    /// The core stopped on an exception the emulator could not deliver (unmapped or
    /// misaligned access, invalid instruction, …).
    pub const CPU: u32 = 0xFA00_0002;
    /// The firmware reached its panic handler.
    pub const PANIC: u32 = 0xFA00_0003;
    /// The firmware reached riscv-rt's default exception/interrupt handler.
    pub const TRAP: u32 = 0xFA00_0004;
}

/// Write `image` into NIC memory: the text region with the loadable segments (zeros
/// elsewhere) and a zeroed RAM region; then read the text region back and check it
/// against the image checksum. The processor must be halted.
pub fn load(mem: &Mapping, image: &LoadedImage) -> anyhow::Result<()> {
    ensure!(mem.len() >= NIC_MEM_BYTES as usize, "NIC memory is only {} bytes", mem.len());
    let text = image.text_region();
    ensure!(mem.write(IMAGE_TEXT_OFF as usize, &text), "text region outside NIC memory");
    ensure!(mem.write(IMAGE_RAM_OFF as usize, &vec![0u8; IMAGE_RAM_BYTES as usize]), "RAM region outside NIC memory");
    let mut back = vec![0u8; IMAGE_TEXT_BYTES as usize];
    ensure!(mem.read(IMAGE_TEXT_OFF as usize, &mut back), "text region outside NIC memory");
    let crc = crc32fast::hash(&back);
    if crc != image.info.checksum {
        bail!(
            "image checksum mismatch after loading: NIC memory has {crc:#010x}, the image {:#010x}",
            image.info.checksum
        );
    }
    Ok(())
}

/// CRC-32 of the text region as it is in NIC memory now (equals the image checksum while
/// the loaded image is intact).
pub fn text_checksum(mem: &Mapping) -> u32 {
    let mut back = vec![0u8; IMAGE_TEXT_BYTES as usize];
    mem.read(IMAGE_TEXT_OFF as usize, &mut back);
    crc32fast::hash(&back)
}
