// SPDX-License-Identifier: GPL-2.0-only
//! Tests of the image checks and loading, on small ELF files written here (no riscv32
//! build needed): `check_image` accepts a well-formed image and rejects each kind of bad
//! one; `LoadedImage` extracts the loadable bytes and the checksum.
//! (Moved here with `check_image` from xtask/src/build/tests.rs.)

use super::*;
use object::write::elf::{FileHeader, ProgramHeader, SectionHeader, Sym, Writer};
use trapeze_firmware::iface::layout::{IMAGE_RAM_BYTES, IMAGE_RAM_OFF, IMAGE_TEXT_BYTES, IMAGE_TEXT_OFF};

// ---- check_image on synthetic ELF files -------------------------------------------------

const TEXT: u64 = NIC_MEM_BASE as u64 + IMAGE_TEXT_OFF as u64;
const RAM: u64 = NIC_MEM_BASE as u64 + IMAGE_RAM_OFF as u64;

#[derive(Clone)]
struct Sec {
    name: &'static str,
    flags: u32,
    nobits: bool,
    addr: u64,
    size: u64,
    /// Load address of the file bytes, if not `addr` (`.data`'s image in the text region).
    lma: Option<u64>,
}

const fn text(size: u64) -> Sec {
    Sec { name: ".text", flags: elf::SHF_ALLOC | elf::SHF_EXECINSTR, nobits: false, addr: TEXT, size, lma: None }
}
const fn rodata(addr: u64) -> Sec {
    Sec { name: ".rodata", flags: elf::SHF_ALLOC, nobits: false, addr, size: 8, lma: None }
}
const fn bss(addr: u64, size: u64) -> Sec {
    Sec { name: ".bss", flags: elf::SHF_ALLOC | elf::SHF_WRITE, nobits: true, addr, size, lma: None }
}

#[derive(Clone)]
struct Spec {
    is_64: bool,
    machine: u16,
    e_flags: u32,
    entry: u64,
    secs: Vec<Sec>,
    /// `_trapeze_stack_reserve`, if present.
    stack_reserve: Option<u64>,
    /// Build id stored in `.rodata` instead of [`BUILD_ID`].
    build_id_override: Option<u32>,
}

impl Spec {
    /// A well-formed image: 1 KiB of code, rodata holding build id and version, 256 B bss.
    fn good() -> Self {
        Spec {
            is_64: false,
            machine: elf::EM_RISCV,
            e_flags: elf::EF_RISCV_RVC,
            entry: TEXT,
            secs: vec![text(1024), rodata(TEXT + 1024), bss(RAM, 256)],
            stack_reserve: Some(0x1000),
            build_id_override: None,
        }
    }
}

const BUILD_ID: u32 = 0xfeed_beef;
const VERSION: u32 = 0x0001_0203;

/// File bytes of section `i`: a pattern, so loading can be checked byte by byte.
fn section_bytes(i: usize, size: u64) -> Vec<u8> {
    (0..size).map(|k| (k as usize * 7 + i * 13 + 1) as u8).collect()
}

/// Write `spec` as an ELF executable: one PT_LOAD per section; `.rodata` holds the build
/// id then the version, with their symbols.
fn write_elf(spec: &Spec) -> Vec<u8> {
    let mut buf = Vec::new();
    let mut w = Writer::new(Endianness::Little, spec.is_64, &mut buf);
    w.reserve_file_header();
    w.reserve_program_headers(spec.secs.len() as u32);
    let _ = w.reserve_null_section_index();
    let names: Vec<_> = spec.secs.iter().map(|s| w.add_section_name(s.name.as_bytes())).collect();
    let indices: Vec<_> = spec.secs.iter().map(|_| w.reserve_section_index()).collect();
    let offsets: Vec<usize> =
        spec.secs.iter().map(|s| if s.nobits { w.reserved_len() } else { w.reserve(s.size as usize, 4) }).collect();
    let rodata = spec.secs.iter().position(|s| s.name == ".rodata");
    let _ = w.reserve_null_symbol_index();
    let mut syms = Vec::new();
    if let Some(r) = rodata {
        for (name, off) in [(SYM_BUILD_ID, 0), (SYM_VERSION, 4)] {
            let id = w.add_string(name.as_bytes());
            w.reserve_symbol_index(Some(indices[r]));
            syms.push((id, Some(indices[r]), spec.secs[r].addr + off));
        }
    }
    if let Some(v) = spec.stack_reserve {
        let id = w.add_string(SYM_STACK_RESERVE.as_bytes());
        w.reserve_symbol_index(None);
        syms.push((id, None, v));
    }
    w.reserve_symtab_section_index();
    w.reserve_symtab();
    w.reserve_strtab_section_index();
    w.reserve_strtab();
    w.reserve_shstrtab_section_index();
    w.reserve_shstrtab();
    w.reserve_section_headers();

    w.write_file_header(&FileHeader {
        os_abi: elf::ELFOSABI_NONE,
        abi_version: 0,
        e_type: elf::ET_EXEC,
        e_machine: spec.machine,
        e_entry: spec.entry,
        e_flags: spec.e_flags,
    })
    .unwrap();
    w.write_align_program_headers();
    for (s, &off) in spec.secs.iter().zip(&offsets) {
        w.write_program_header(&ProgramHeader {
            p_type: elf::PT_LOAD,
            p_flags: elf::PF_R,
            p_offset: off as u64,
            p_vaddr: s.addr,
            p_paddr: s.lma.unwrap_or(s.addr),
            p_filesz: if s.nobits { 0 } else { s.size },
            p_memsz: s.size,
            p_align: 4,
        });
    }
    for (i, s) in spec.secs.iter().enumerate() {
        if s.nobits {
            continue;
        }
        w.write_align(4);
        let mut data = section_bytes(i, s.size);
        if Some(i) == rodata {
            data[..4].copy_from_slice(&spec.build_id_override.unwrap_or(BUILD_ID).to_le_bytes());
            data[4..8].copy_from_slice(&VERSION.to_le_bytes());
        }
        w.write(&data);
    }
    w.write_null_symbol();
    for (name, section, value) in syms {
        w.write_symbol(&Sym {
            name: Some(name),
            section,
            st_info: (elf::STB_GLOBAL << 4) | elf::STT_OBJECT,
            st_other: 0,
            st_shndx: if section.is_none() { elf::SHN_ABS } else { 0 },
            st_value: value,
            st_size: 4,
        });
    }
    w.write_strtab();
    w.write_shstrtab();
    w.write_null_section_header();
    for (((s, name), off), _) in spec.secs.iter().zip(&names).zip(&offsets).zip(&indices) {
        w.write_section_header(&SectionHeader {
            name: Some(*name),
            sh_type: if s.nobits { elf::SHT_NOBITS } else { elf::SHT_PROGBITS },
            sh_flags: s.flags as u64,
            sh_addr: s.addr,
            sh_offset: *off as u64,
            sh_size: s.size,
            sh_link: 0,
            sh_info: 0,
            sh_addralign: 4,
            sh_entsize: 0,
        });
    }
    w.write_symtab_section_header(1);
    w.write_strtab_section_header();
    w.write_shstrtab_section_header();
    buf
}

#[track_caller]
fn rejects(spec: &Spec, needle: &str) {
    let err = check_image(&write_elf(spec)).expect_err("image should be rejected");
    let msg = format!("{err:#}");
    assert!(msg.contains(needle), "error {msg:?} should mention {needle:?}");
}

#[test]
fn good_image_is_accepted_and_measured() {
    let info = check_image(&write_elf(&Spec::good())).unwrap();
    assert_eq!(info.entry as u64, TEXT);
    assert_eq!((info.build_id, info.fw_version), (BUILD_ID, VERSION));
    assert_eq!(info.version_string(), "1.2.3");
    assert_eq!((info.text, info.rodata, info.data, info.bss), (1024, 8, 0, 256));
    assert_eq!(info.stack_reserve, 0x1000);
    assert_eq!(info.stack_free, IMAGE_RAM_BYTES - 256);
    assert_eq!(info.text_region_used(), 1032);
    assert_eq!(info.ram_region_used(), 256 + 0x1000);
    assert_eq!(info.load_bytes, 1032);
}

#[test]
fn rejects_wrong_architecture() {
    rejects(&Spec { is_64: true, ..Spec::good() }, "64-bit");
    rejects(&Spec { machine: elf::EM_X86_64, ..Spec::good() }, "not RISC-V");
    rejects(&Spec { machine: elf::EM_ARM, ..Spec::good() }, "not RISC-V");
    rejects(&Spec { e_flags: elf::EF_RISCV_FLOAT_ABI_DOUBLE, ..Spec::good() }, "hard-float");
    let err = check_image(b"\x7fELF garbage").unwrap_err();
    assert!(!format!("{err:#}").is_empty());
    assert!(check_image(b"#!/bin/sh\n").is_err());
}

#[test]
fn rejects_wrong_entry() {
    rejects(&Spec { entry: TEXT + 4, ..Spec::good() }, "entry point");
}

#[test]
fn rejects_sections_outside_their_region() {
    // bss in the endpoint (the control block right after the image).
    let mut s = Spec::good();
    s.secs[2] = bss(NIC_MEM_BASE as u64 + CTRL_OFF as u64, 256);
    rejects(&s, "outside the image regions");
    // bss straddling the end of RAM.
    let mut s = Spec::good();
    s.secs[2] = bss(RAM + IMAGE_RAM_BYTES as u64 - 16, 32);
    rejects(&s, "outside the image regions");
    // code past the text region.
    let mut s = Spec::good();
    s.secs[0] = text(IMAGE_TEXT_BYTES as u64 + 4);
    rejects(&s, "outside the image regions");
    // writable data in the text region.
    let mut s = Spec::good();
    s.secs[2] = bss(TEXT + 2048, 16);
    rejects(&s, "writable section .bss in the text region");
    // code in RAM.
    let mut s = Spec::good();
    s.secs.push(Sec { name: ".ramfunc", addr: RAM + 1024, ..text(64) });
    rejects(&s, "executable section .ramfunc in the RAM region");
}

#[test]
fn rejects_over_budget() {
    let mut s = Spec::good();
    s.secs[2] = bss(RAM, IMAGE_RAM_BYTES as u64 - 0x800);
    rejects(&s, "over budget: data+bss");
    // Text and rodata each fit, together they do not (overlapping on purpose).
    let mut s = Spec::good();
    s.secs[0] = text(IMAGE_TEXT_BYTES as u64 - 4);
    s.secs[1] = rodata(TEXT + IMAGE_TEXT_BYTES as u64 - 8);
    rejects(&s, "over budget: text+rodata+data");
}

#[test]
fn rejects_missing_symbols() {
    rejects(&Spec { stack_reserve: None, ..Spec::good() }, "memory.x");
    let mut s = Spec::good();
    s.secs.remove(1);
    rejects(&s, SYM_BUILD_ID);
}

// ---- loading -----------------------------------------------------------------------------

#[test]
fn loaded_image_places_segments_and_checksums_the_text_region() {
    // Code, rodata, and `.data` whose initial image sits in the text region after rodata.
    let mut s = Spec::good();
    s.secs.push(Sec {
        name: ".data",
        flags: elf::SHF_ALLOC | elf::SHF_WRITE,
        nobits: false,
        addr: RAM + 256,
        size: 64,
        lma: Some(TEXT + 2048),
    });
    let img = LoadedImage::from_elf(&write_elf(&s)).unwrap();
    assert_eq!((img.info.build_id, img.info.fw_version), (BUILD_ID, VERSION));
    assert_eq!(img.info.load_bytes, 1024 + 8 + 64);
    // Every segment is loaded at its load address (the .data image in the text region).
    let offs: Vec<(u32, usize)> = img.segments.iter().map(|s| (s.nic_off, s.bytes.len())).collect();
    assert_eq!(offs, vec![(IMAGE_TEXT_OFF, 1024), (IMAGE_TEXT_OFF + 1024, 8), (IMAGE_TEXT_OFF + 2048, 64)]);
    assert_eq!(img.segments[0].bytes, section_bytes(0, 1024));
    assert_eq!(img.segments[2].bytes, section_bytes(3, 64));
    let text = img.text_region();
    assert_eq!(text.len(), IMAGE_TEXT_BYTES as usize);
    assert_eq!(&text[2048..2048 + 64], &section_bytes(3, 64)[..]);
    assert!(text[2048 + 64..].iter().all(|&b| b == 0));
    assert_eq!(img.info.checksum, crc32fast::hash(&text));
    // Changing one loaded byte changes the checksum.
    let mut s2 = s.clone();
    s2.build_id_override = Some(BUILD_ID ^ 1);
    let img2 = LoadedImage::from_elf(&write_elf(&s2)).unwrap();
    assert_ne!(img2.info.checksum, img.info.checksum);
    // No defmt section in these images: loading still works, without log decoding.
    assert!(img.defmt.is_none() && img.defmt_note.is_some());
}

#[test]
fn rejects_overlapping_and_unloadable_segments() {
    // Two loadable segments writing the same bytes.
    let mut s = Spec::good();
    s.secs.push(Sec {
        name: ".data",
        flags: elf::SHF_ALLOC | elf::SHF_WRITE,
        nobits: false,
        addr: RAM + 256,
        size: 64,
        lma: Some(TEXT + 1000),
    });
    let err = LoadedImage::from_elf(&write_elf(&s)).unwrap_err();
    assert!(format!("{err:#}").contains("overlaps"), "{err:#}");
    // `.data` whose initial image would be loaded into RAM (or the endpoint).
    let mut s = Spec::good();
    s.secs.push(Sec {
        name: ".data",
        flags: elf::SHF_ALLOC | elf::SHF_WRITE,
        nobits: false,
        addr: RAM + 256,
        size: 64,
        lma: None,
    });
    let err = check_image(&write_elf(&s)).unwrap_err();
    assert!(format!("{err:#}").contains("outside the text region"), "{err:#}");
}

#[test]
fn rejects_truncated_and_oversized_files() {
    let good = write_elf(&Spec::good());
    for cut in [16, 52, good.len() / 2, good.len() - 1] {
        assert!(check_image(&good[..cut]).is_err(), "truncated to {cut} bytes");
    }
    let mut huge = good.clone();
    huge.resize(MAX_IMAGE_FILE_BYTES + 1, 0);
    let err = check_image(&huge).unwrap_err();
    assert!(format!("{err:#}").contains("limit"), "{err:#}");
}
