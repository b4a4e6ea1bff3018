// SPDX-License-Identifier: GPL-2.0-only
//! Firmware images for the flashed NIC: validation of the riscv32imac ELF against the
//! NIC-memory layout (`iface::layout`, `iface::regs`), and what loading needs — the
//! loadable bytes, entry, build id, version, checksum and the image's defmt table.
//!
//! [`check_image`] is the one validation, shared by `cargo xtask build`/`flash` and the
//! NIC's loader ([`LoadedImage::from_elf`]): a wrong architecture, an image over its
//! budget or a segment outside the image regions is refused with an error saying which.
//!
//! The image **checksum** is the CRC-32 of the text region (`IMAGE_TEXT_OFF`,
//! `IMAGE_TEXT_BYTES`) as loaded: every loadable segment's file bytes at its load address
//! (all of them lie in the text region), zeros elsewhere. The loader writes the text
//! region, zeroes the RAM region, reads the text region back and compares; the text
//! region is never written by a running image, so the checksum stays checkable.

use anyhow::{bail, ensure, Context};
use object::elf;
use object::read::elf::{FileHeader, ProgramHeader, SectionHeader, Sym};
use object::{Endianness, FileKind};
use std::fmt;
use std::sync::Arc;
use trapeze_firmware::iface::layout::{CTRL_OFF, IMAGE_RAM_BYTES, IMAGE_RAM_OFF, IMAGE_TEXT_BYTES, IMAGE_TEXT_OFF};
use trapeze_firmware::iface::regs::NIC_MEM_BASE;

/// Symbols the image exports (firmware-crate/src/bin/trapeze-fw/hw.rs, memory.x).
pub const SYM_BUILD_ID: &str = "TRAPEZE_FW_BUILD_ID";
pub const SYM_VERSION: &str = "TRAPEZE_FW_VERSION";
pub const SYM_STACK_RESERVE: &str = "_trapeze_stack_reserve";

/// Largest ELF file a loader reads (the image itself is at most 48 KiB; the rest is
/// symbols and debug information).
pub const MAX_IMAGE_FILE_BYTES: usize = 64 << 20;

/// Where the image lives in the NIC processor's address space.
#[derive(Clone, Copy, Debug, PartialEq, Eq, serde::Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Region {
    /// Code, read-only data and the initial values of `.data`.
    Text,
    /// Data, bss and stack.
    Ram,
}

impl Region {
    /// `[start, end)` addresses of the region.
    pub const fn range(self) -> (u64, u64) {
        let (off, len) = match self {
            Region::Text => (IMAGE_TEXT_OFF, IMAGE_TEXT_BYTES),
            Region::Ram => (IMAGE_RAM_OFF, IMAGE_RAM_BYTES),
        };
        let start = NIC_MEM_BASE as u64 + off as u64;
        (start, start + len as u64)
    }

    fn holding(addr: u64, size: u64) -> Option<Region> {
        [Region::Text, Region::Ram].into_iter().find(|r| {
            let (start, end) = r.range();
            addr >= start && addr.checked_add(size).is_some_and(|e| e <= end)
        })
    }
}

/// One allocated section of the image.
#[derive(Clone, Debug, serde::Serialize)]
pub struct SectionInfo {
    pub name: String,
    pub addr: u32,
    pub size: u32,
    pub region: Region,
}

/// What [`check_image`] found in a valid image.
#[derive(Clone, Debug, serde::Serialize)]
pub struct ImageInfo {
    pub entry: u32,
    pub build_id: u32,
    /// `ctrl::FW_VERSION` encoding: major << 16 | minor << 8 | patch.
    pub fw_version: u32,
    /// Executable code.
    pub text: u32,
    /// Read-only data (including unwind tables).
    pub rodata: u32,
    /// Initialised writable data: in RAM, with its initial image in the text region.
    pub data: u32,
    /// Zero-initialised and uninitialised data.
    pub bss: u32,
    /// The stack the image reserves (memory.x `_trapeze_stack_reserve`).
    pub stack_reserve: u32,
    /// RAM left above data and bss, where the stack grows down from the top.
    pub stack_free: u32,
    /// Bytes the loader writes (the loadable segments' file bytes).
    pub load_bytes: u32,
    /// CRC-32 of the text region as loaded (module doc).
    pub checksum: u32,
    /// Allocated, non-empty sections.
    pub sections: Vec<SectionInfo>,
}

impl ImageInfo {
    /// Bytes of the text region used: code, rodata and `.data`'s initial image
    /// (saturating: a crafted image's sizes may add up past `u32`, and are then over budget).
    pub fn text_region_used(&self) -> u32 {
        self.text.saturating_add(self.rodata).saturating_add(self.data)
    }
    /// Bytes of the RAM region claimed: data, bss and the stack reserve (saturating).
    pub fn ram_region_used(&self) -> u32 {
        self.data.saturating_add(self.bss).saturating_add(self.stack_reserve)
    }
    pub fn version_string(&self) -> String {
        version_string(self.fw_version)
    }
}

/// `ctrl::FW_VERSION` encoding as "major.minor.patch".
pub fn version_string(v: u32) -> String {
    format!("{}.{}.{}", v >> 16, (v >> 8) & 0xff, v & 0xff)
}

/// "812 B" below 1 KiB, "6.1 KiB" above.
pub fn size(bytes: u32) -> String {
    if bytes < 1024 {
        format!("{bytes} B")
    } else if bytes.is_multiple_of(1024) {
        format!("{} KiB", bytes / 1024)
    } else {
        format!("{:.1} KiB", bytes as f64 / 1024.0)
    }
}

/// Bytes to write into NIC memory.
#[derive(Clone, PartialEq, Eq)]
pub struct LoadSegment {
    /// Offset in NIC memory (the segment's load address − `NIC_MEM_BASE`).
    pub nic_off: u32,
    pub bytes: Vec<u8>,
}

impl fmt::Debug for LoadSegment {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "LoadSegment({:#x}+{})", self.nic_off, self.bytes.len())
    }
}

/// Validate a firmware ELF: a 32-bit little-endian RISC-V soft-float executable whose
/// entry is the start of the text region, every allocated section and loadable segment
/// inside its region (nothing in the endpoint), no two segments overlapping, the build id
/// and stack reserve present, and text and RAM use within budget.
pub fn check_image(bytes: &[u8]) -> anyhow::Result<ImageInfo> {
    Ok(parse(bytes)?.0)
}

/// Reasons a firmware stops for good, recognised by the address it reaches.
#[derive(Clone, Copy, Debug, PartialEq, Eq, serde::Serialize)]
#[serde(rename_all = "snake_case")]
pub enum TrapKind {
    /// The panic handler (`rust_begin_unwind`; panic-halt then loops forever).
    Panic,
    /// riscv-rt's default exception/interrupt handler (loops forever).
    Exception,
}

/// A decoded `.defmt` table (the decoder is part of flashed mode).
#[cfg(feature = "flashed")]
pub type DefmtTable = defmt_decoder::Table;
/// Without flashed mode there is no decoder, so no table can exist.
#[cfg(not(feature = "flashed"))]
#[derive(Debug)]
pub enum DefmtTable {}

/// A validated image, ready to be written into NIC memory and run.
pub struct LoadedImage {
    pub info: ImageInfo,
    pub segments: Vec<LoadSegment>,
    /// The image's defmt table (its `.defmt` section), if it has one the decoder reads.
    pub defmt: Option<Arc<DefmtTable>>,
    /// Why `defmt` is `None`.
    pub defmt_note: Option<String>,
    /// Addresses where the firmware has stopped for good: a core that reaches one is
    /// halted and reported as faulted.
    pub traps: Vec<(u32, TrapKind)>,
}

impl fmt::Debug for LoadedImage {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("LoadedImage")
            .field("build_id", &format_args!("{:#010x}", self.info.build_id))
            .field("version", &self.info.version_string())
            .field("checksum", &format_args!("{:#010x}", self.info.checksum))
            .field("segments", &self.segments)
            .field("defmt", &self.defmt.is_some())
            .finish_non_exhaustive()
    }
}

impl LoadedImage {
    /// Validate `bytes` ([`check_image`]) and extract what loading needs.
    pub fn from_elf(bytes: &[u8]) -> anyhow::Result<LoadedImage> {
        let (info, segments, traps) = parse(bytes)?;
        #[cfg(not(feature = "flashed"))]
        let (defmt, defmt_note) = (None, Some("built without flashed mode: defmt logs are not decoded".to_string()));
        #[cfg(feature = "flashed")]
        let (defmt, defmt_note) = match defmt_decoder::Table::parse(bytes) {
            Ok(Some(t)) => (Some(Arc::new(t)), None),
            Ok(None) => (None, Some("the image has no .defmt section".to_string())),
            Err(e) => (None, Some(format!("the image's defmt table is unreadable: {e:#}"))),
        };
        Ok(LoadedImage { info, segments, defmt, defmt_note, traps })
    }

    /// The text region as loaded: `IMAGE_TEXT_BYTES` bytes, segments placed, zeros
    /// elsewhere. Its CRC-32 is `info.checksum`.
    pub fn text_region(&self) -> Vec<u8> {
        text_region(&self.segments)
    }
}

fn text_region(segments: &[LoadSegment]) -> Vec<u8> {
    let mut text = vec![0u8; IMAGE_TEXT_BYTES as usize];
    for s in segments {
        let at = (s.nic_off - IMAGE_TEXT_OFF) as usize;
        text[at..at + s.bytes.len()].copy_from_slice(&s.bytes);
    }
    text
}

/// What [`parse`] extracts: the checked info, the loadable segments, the trap addresses.
type Parsed = (ImageInfo, Vec<LoadSegment>, Vec<(u32, TrapKind)>);

/// [`check_image`] plus the loadable segments and trap addresses.
fn parse(bytes: &[u8]) -> anyhow::Result<Parsed> {
    match FileKind::parse(bytes) {
        Ok(FileKind::Elf32) => {}
        Ok(FileKind::Elf64) => bail!("64-bit ELF: the NIC processor is riscv32"),
        Ok(kind) => bail!("not an ELF file ({kind:?})"),
        Err(e) => bail!("not an object file: {e}"),
    }
    ensure!(
        bytes.len() <= MAX_IMAGE_FILE_BYTES,
        "image file is {} bytes, over the {} MiB limit",
        bytes.len(),
        MAX_IMAGE_FILE_BYTES >> 20
    );
    let hdr = elf::FileHeader32::<Endianness>::parse(bytes).context("ELF header")?;
    let en = hdr.endian().context("ELF header")?;
    ensure!(en == Endianness::Little, "big-endian ELF: the NIC processor is little-endian");
    let machine = hdr.e_machine(en);
    ensure!(machine == elf::EM_RISCV, "ELF machine {machine} is not RISC-V ({})", elf::EM_RISCV);
    ensure!(hdr.e_type(en) == elf::ET_EXEC, "not an executable (e_type {})", hdr.e_type(en));
    let flags = hdr.e_flags(en);
    ensure!(flags & elf::EF_RISCV_RVE == 0, "RV32E image: the NIC processor is RV32I");
    ensure!(
        flags & elf::EF_RISCV_FLOAT_ABI == elf::EF_RISCV_FLOAT_ABI_SOFT,
        "hard-float ABI (e_flags {flags:#x}): riscv32imac has no FPU"
    );
    let entry = hdr.e_entry(en);
    let (text_start, text_end) = Region::Text.range();
    let (ram_start, ram_end) = Region::Ram.range();
    ensure!(entry as u64 == text_start, "entry point {entry:#x} is not the start of the image ({text_start:#x})");

    let sections = hdr.sections(en, bytes).context("section headers")?;
    let mut info = ImageInfo {
        entry,
        build_id: 0,
        fw_version: 0,
        text: 0,
        rodata: 0,
        data: 0,
        bss: 0,
        stack_reserve: 0,
        stack_free: 0,
        load_bytes: 0,
        checksum: 0,
        sections: Vec::new(),
    };
    let mut ram_top = ram_start; // end of the highest data/bss section in RAM
    for sec in sections.iter() {
        let sh_flags = sec.sh_flags(en);
        let size = sec.sh_size(en);
        if sh_flags & elf::SHF_ALLOC == 0 || size == 0 {
            continue;
        }
        let name = String::from_utf8_lossy(sections.section_name(en, sec)?).into_owned();
        let addr = sec.sh_addr(en);
        let Some(region) = Region::holding(addr as u64, size as u64) else {
            bail!(
                "section {name} at {addr:#x}..{:#x} is outside the image regions \
                 (text {text_start:#x}..{text_end:#x}, ram {ram_start:#x}..{ram_end:#x})",
                addr as u64 + size as u64
            );
        };
        let exec = sh_flags & elf::SHF_EXECINSTR != 0;
        let write = sh_flags & elf::SHF_WRITE != 0;
        let nobits = sec.sh_type(en) == elf::SHT_NOBITS;
        match region {
            Region::Text => {
                ensure!(!write && !nobits, "writable section {name} in the text region");
                if exec {
                    info.text = info.text.saturating_add(size);
                } else {
                    info.rodata = info.rodata.saturating_add(size);
                }
            }
            Region::Ram => {
                ensure!(!exec, "executable section {name} in the RAM region");
                // riscv-rt's `.stack` (and an empty `.heap`) stand for the free RAM above bss.
                if name == ".stack" || name == ".heap" {
                    info.sections.push(SectionInfo { name, addr, size, region });
                    continue;
                }
                if nobits {
                    info.bss = info.bss.saturating_add(size);
                } else {
                    info.data = info.data.saturating_add(size);
                }
                ram_top = ram_top.max(addr as u64 + size as u64);
            }
        }
        info.sections.push(SectionInfo { name, addr, size, region });
    }
    ensure!(info.text > 0, "no code in the image");
    info.stack_free = (ram_end - ram_top) as u32;
    ensure!(
        info.text_region_used() <= IMAGE_TEXT_BYTES,
        "over budget: text+rodata+data {} of {}",
        size(info.text_region_used()),
        size(IMAGE_TEXT_BYTES)
    );

    // What gets loaded: every PT_LOAD's file bytes go to its physical (load) address, in
    // the text region; its memory image must lie in one region.
    let mut segments: Vec<LoadSegment> = Vec::new();
    for ph in hdr.program_headers(en, bytes).context("program headers")? {
        if ph.p_type(en) != elf::PT_LOAD {
            continue;
        }
        let (vaddr, paddr) = (ph.p_vaddr(en) as u64, ph.p_paddr(en) as u64);
        let (filesz, memsz) = (ph.p_filesz(en) as u64, ph.p_memsz(en) as u64);
        if filesz > 0 {
            ensure!(
                Region::holding(paddr, filesz) == Some(Region::Text),
                "loadable segment bytes at {paddr:#x}..{:#x} are outside the text region",
                paddr + filesz
            );
            let data = ph
                .data(en, bytes)
                .map_err(|()| anyhow::anyhow!("segment at {paddr:#x}: file bytes past the end of the file"))?;
            let nic_off = (paddr - NIC_MEM_BASE as u64) as u32;
            if let Some(o) = segments.iter().find(|s| {
                let (a, b) = (s.nic_off as u64, s.nic_off as u64 + s.bytes.len() as u64);
                (nic_off as u64) < b && a < nic_off as u64 + filesz
            }) {
                bail!(
                    "loadable segment at {paddr:#x}..{:#x} overlaps the one at {:#x}",
                    paddr + filesz,
                    NIC_MEM_BASE as u64 + o.nic_off as u64
                );
            }
            segments.push(LoadSegment { nic_off, bytes: data.to_vec() });
        }
        if memsz > 0 {
            ensure!(
                Region::holding(vaddr, memsz).is_some(),
                "segment at {vaddr:#x}..{:#x} is outside the image regions",
                vaddr + memsz
            );
        }
    }
    ensure!(!segments.is_empty(), "no loadable bytes in the image");

    let symbols = sections.symbols(en, bytes, elf::SHT_SYMTAB).context("symbol table")?;
    let find = |want: &str| -> anyhow::Result<&elf::Sym32<Endianness>> {
        symbols
            .iter()
            .find(|s| s.name(en, symbols.strings()).is_ok_and(|n| n == want.as_bytes()))
            .with_context(|| format!("no symbol {want} in the image"))
    };
    let read_u32 = |name: &str| -> anyhow::Result<u32> {
        let sym = find(name)?;
        let sec = sections.section(object::SectionIndex(sym.st_shndx(en) as usize))?;
        let data = sec.data(en, bytes).with_context(|| format!("{name}: section data"))?;
        let off = sym.st_value(en).checked_sub(sec.sh_addr(en)).context("symbol before section")?;
        let word = data.get(off as usize..off as usize + 4).context("symbol past section end")?;
        Ok(u32::from_le_bytes(word.try_into().expect("4 bytes")))
    };
    info.build_id = read_u32(SYM_BUILD_ID)?;
    info.fw_version = read_u32(SYM_VERSION)?;
    let reserve = find(SYM_STACK_RESERVE).context("the image was not linked with firmware-crate/memory.x")?;
    ensure!(reserve.st_shndx(en) == elf::SHN_ABS, "{SYM_STACK_RESERVE} is not an absolute symbol");
    info.stack_reserve = reserve.st_value(en);

    ensure!(
        info.ram_region_used() <= IMAGE_RAM_BYTES,
        "over budget: data+bss {} + stack reserve {} = {} of {}",
        size(info.data.saturating_add(info.bss)),
        size(info.stack_reserve),
        size(info.ram_region_used()),
        size(IMAGE_RAM_BYTES)
    );
    ensure!(
        info.stack_free >= info.stack_reserve,
        "only {} of RAM left for the stack, below the reserve of {}",
        size(info.stack_free),
        size(info.stack_reserve)
    );

    // Where a stopped-for-good firmware ends up (best effort: by symbol name).
    let mut traps = Vec::new();
    for s in symbols.iter() {
        let Ok(name) = s.name(en, symbols.strings()) else { continue };
        let kind = if name.ends_with(b"rust_begin_unwind") {
            TrapKind::Panic
        } else if name == b"DefaultHandler" || name == b"ExceptionHandler" {
            TrapKind::Exception
        } else {
            continue;
        };
        let addr = s.st_value(en) & !1;
        if Region::holding(addr as u64, 2) == Some(Region::Text) && !traps.iter().any(|t: &(u32, TrapKind)| t.0 == addr)
        {
            traps.push((addr, kind));
        }
    }

    info.load_bytes = segments.iter().map(|s| s.bytes.len() as u32).sum();
    info.checksum = crc32fast::hash(&text_region(&segments));
    Ok((info, segments, traps))
}

/// The image region of NIC memory (`0..CTRL_OFF`) must hold exactly this many bytes.
const _: () = assert!(IMAGE_TEXT_OFF == 0 && IMAGE_RAM_OFF + IMAGE_RAM_BYTES == CTRL_OFF);

#[cfg(test)]
mod tests;
