// SPDX-License-Identifier: GPL-2.0-only
//! Putting a firmware image into the processor's image memory and checking it there, and
//! the fault codes a NIC publishes for its processor. Independent of the emulator, so a
//! NIC built without flashed mode still validates and reports images the same way.
//!
//! The image region (text and firmware RAM, `0..CTRL_OFF` of the NIC-memory map) the
//! emulated core runs is **private to the NIC**: [`ImageMemory`], a mapping no other
//! process is given, not the shared NIC memory a host or a QEMU guest maps. A guest can
//! write its BAR's image region (it is zeroed at each load) but that is not what the core
//! fetches or keeps its stack in, so a guest cannot rewrite the running firmware; the
//! image a NIC boots is the one it checked. (Making part of the shared memfd read-only to
//! QEMU is not possible: QEMU maps the whole file as BAR2.)

use crate::image::LoadedImage;
use crate::shm::Mapping;
use anyhow::{bail, ensure};
use std::sync::Arc;
use trapeze_firmware::iface::layout::{
    CTRL_OFF, IMAGE_RAM_BYTES, IMAGE_RAM_OFF, IMAGE_TEXT_BYTES, IMAGE_TEXT_OFF, NIC_MEM_BYTES,
};

/// The image region as the emulated core sees it: `CTRL_OFF` bytes (text, then firmware
/// RAM) in a memfd of this process's own that is never handed to anyone.
pub struct ImageMemory(Arc<Mapping>);

impl ImageMemory {
    pub fn new(name: &str) -> std::io::Result<Self> {
        Ok(ImageMemory(Arc::new(Mapping::create_memfd(&format!("trapeze-nic-{name}-image"), CTRL_OFF as usize)?)))
    }

    /// The private mapping (to map into the emulated core).
    pub fn mapping(&self) -> &Arc<Mapping> {
        &self.0
    }
}

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

/// Write `image` into the private image memory `img`: the text region with the loadable
/// segments (zeros elsewhere) and a zeroed RAM region; then read the text region back and
/// check it against the image checksum. The image region of the shared NIC memory `mem`
/// is zeroed (nothing there is run). The processor must be halted.
pub fn load(mem: &Mapping, img: &ImageMemory, image: &LoadedImage) -> anyhow::Result<()> {
    ensure!(mem.len() >= NIC_MEM_BYTES as usize, "NIC memory is only {} bytes", mem.len());
    ensure!(mem.write(0, &vec![0u8; CTRL_OFF as usize]), "image region outside NIC memory");
    let img = img.mapping();
    let text = image.text_region();
    ensure!(img.write(IMAGE_TEXT_OFF as usize, &text), "text region outside the image memory");
    ensure!(
        img.write(IMAGE_RAM_OFF as usize, &vec![0u8; IMAGE_RAM_BYTES as usize]),
        "RAM region outside the image memory"
    );
    let mut back = vec![0u8; IMAGE_TEXT_BYTES as usize];
    ensure!(img.read(IMAGE_TEXT_OFF as usize, &mut back), "text region outside the image memory");
    let crc = crc32fast::hash(&back);
    if crc != image.info.checksum {
        bail!(
            "image checksum mismatch after loading: NIC memory has {crc:#010x}, the image {:#010x}",
            image.info.checksum
        );
    }
    Ok(())
}

/// CRC-32 of the text region the core runs, as it is now (equals the image checksum while
/// the loaded image is intact).
pub fn text_checksum(img: &ImageMemory) -> u32 {
    let mut back = vec![0u8; IMAGE_TEXT_BYTES as usize];
    img.mapping().read(IMAGE_TEXT_OFF as usize, &mut back);
    crc32fast::hash(&back)
}
