// SPDX-License-Identifier: GPL-2.0-only
//! Tests of `cargo xtask build`: memory.x agrees with the layout, and `check_image`
//! accepts a well-formed image and rejects each kind of bad one (on small ELF files
//! written here, so no riscv32 build is needed).

use super::*;
use object::write::elf::{FileHeader, ProgramHeader, SectionHeader, Sym, Writer};

// ---- memory.x ---------------------------------------------------------------------------

/// `NAME (attrs) : ORIGIN = x, LENGTH = y` lines of a linker script's MEMORY block.
fn memory_regions(script: &str) -> Vec<(String, u64, u64)> {
    let num = |s: &str| -> u64 {
        let s = s.trim().trim_end_matches(',');
        match s.strip_prefix("0x") {
            Some(h) => u64::from_str_radix(h, 16).expect("hex number"),
            None => s.parse().expect("number"),
        }
    };
    script
        .lines()
        .filter(|l| l.contains("ORIGIN") && l.contains("LENGTH") && l.contains(':'))
        .map(|l| {
            let (name, rest) = l.split_once(':').unwrap();
            let name = name.split_whitespace().next().unwrap().to_string();
            let origin = rest
                .split("ORIGIN")
                .nth(1)
                .unwrap()
                .split('=')
                .nth(1)
                .unwrap();
            let origin = num(origin.split(',').next().unwrap());
            let length = num(rest
                .split("LENGTH")
                .nth(1)
                .unwrap()
                .split('=')
                .nth(1)
                .unwrap());
            (name, origin, length)
        })
        .collect()
}

/// `REGION_ALIAS("ALIAS", REGION);` lines.
fn region_aliases(script: &str) -> Vec<(String, String)> {
    script
        .lines()
        .filter_map(|l| l.trim().strip_prefix("REGION_ALIAS("))
        .map(|l| {
            let (alias, region) = l.split_once(',').unwrap();
            let alias = alias.trim().trim_matches('"').to_string();
            (
                alias,
                region
                    .trim()
                    .trim_end_matches(';')
                    .trim_end_matches(')')
                    .trim()
                    .to_string(),
            )
        })
        .collect()
}

#[test]
fn memory_x_matches_layout() {
    let path = crate::workspace_root().join("firmware-crate/memory.x");
    let script = std::fs::read_to_string(&path).expect("read firmware-crate/memory.x");
    let regions = memory_regions(&script);
    let (text_start, text_end) = Region::Text.range();
    let (ram_start, ram_end) = Region::Ram.range();
    assert_eq!(
        regions,
        vec![
            ("IMAGE_TEXT".to_string(), text_start, text_end - text_start),
            ("IMAGE_RAM".to_string(), ram_start, ram_end - ram_start),
        ],
        "memory.x MEMORY block vs iface::layout IMAGE_* + regs::NIC_MEM_BASE"
    );
    // The image ends exactly where the endpoint begins.
    assert_eq!(ram_end, NIC_MEM_BASE as u64 + CTRL_OFF as u64);

    let mut aliases = region_aliases(&script);
    aliases.sort();
    let want = |a: &str, r: &str| (a.to_string(), r.to_string());
    assert_eq!(
        aliases,
        vec![
            want("REGION_BSS", "IMAGE_RAM"),
            want("REGION_DATA", "IMAGE_RAM"),
            want("REGION_HEAP", "IMAGE_RAM"),
            want("REGION_RODATA", "IMAGE_TEXT"),
            want("REGION_STACK", "IMAGE_RAM"),
            want("REGION_TEXT", "IMAGE_TEXT"),
        ]
    );
    assert!(script.contains("_heap_size = 0;"), "the image has no heap");
}

#[test]
fn nic_memory_map_covers_nic_memory() {
    let total: u32 = nic_memory_map().iter().map(|(_, b)| b).sum();
    assert_eq!(total, NIC_MEM_BYTES);
}

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
}

const fn text(size: u64) -> Sec {
    Sec {
        name: ".text",
        flags: elf::SHF_ALLOC | elf::SHF_EXECINSTR,
        nobits: false,
        addr: TEXT,
        size,
    }
}
const fn rodata(addr: u64) -> Sec {
    Sec {
        name: ".rodata",
        flags: elf::SHF_ALLOC,
        nobits: false,
        addr,
        size: 8,
    }
}
const fn bss(addr: u64, size: u64) -> Sec {
    Sec {
        name: ".bss",
        flags: elf::SHF_ALLOC | elf::SHF_WRITE,
        nobits: true,
        addr,
        size,
    }
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
        }
    }
}

const BUILD_ID: u32 = 0xfeed_beef;
const VERSION: u32 = 0x0001_0203;

/// Write `spec` as an ELF executable: one PT_LOAD per section; `.rodata` holds the build
/// id then the version, with their symbols.
fn write_elf(spec: &Spec) -> Vec<u8> {
    let mut buf = Vec::new();
    let mut w = Writer::new(Endianness::Little, spec.is_64, &mut buf);
    w.reserve_file_header();
    w.reserve_program_headers(spec.secs.len() as u32);
    let _ = w.reserve_null_section_index();
    let names: Vec<_> = spec
        .secs
        .iter()
        .map(|s| w.add_section_name(s.name.as_bytes()))
        .collect();
    let indices: Vec<_> = spec
        .secs
        .iter()
        .map(|_| w.reserve_section_index())
        .collect();
    let offsets: Vec<usize> = spec
        .secs
        .iter()
        .map(|s| {
            if s.nobits {
                w.reserved_len()
            } else {
                w.reserve(s.size as usize, 4)
            }
        })
        .collect();
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
            p_paddr: s.addr,
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
        let mut data = vec![0u8; s.size as usize];
        if Some(i) == rodata {
            data[..4].copy_from_slice(&BUILD_ID.to_le_bytes());
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
            sh_type: if s.nobits {
                elf::SHT_NOBITS
            } else {
                elf::SHT_PROGBITS
            },
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
    assert!(
        msg.contains(needle),
        "error {msg:?} should mention {needle:?}"
    );
}

#[test]
fn good_image_is_accepted_and_measured() {
    let info = check_image(&write_elf(&Spec::good())).unwrap();
    assert_eq!(info.entry as u64, TEXT);
    assert_eq!((info.build_id, info.fw_version), (BUILD_ID, VERSION));
    assert_eq!(info.version_string(), "1.2.3");
    assert_eq!(
        (info.text, info.rodata, info.data, info.bss),
        (1024, 8, 0, 256)
    );
    assert_eq!(info.stack_reserve, 0x1000);
    assert_eq!(info.stack_free, IMAGE_RAM_BYTES - 256);
    assert_eq!(info.text_region_used(), 1032);
    assert_eq!(info.ram_region_used(), 256 + 0x1000);
    let text = report_text("img", &info);
    assert!(
        text.contains("build id   0xfeedbeef, firmware v1.2.3"),
        "{text}"
    );
    assert!(
        text.contains("text+rodata+data 1.0 KiB of 32 KiB"),
        "{text}"
    );
    let json = report_json("img", &info);
    assert_eq!(json["sizes"]["text"], 1024);
    assert_eq!(json["nic_memory"]["regions"]["staging"], STAGING_BYTES);
}

#[test]
fn rejects_wrong_architecture() {
    rejects(
        &Spec {
            is_64: true,
            ..Spec::good()
        },
        "64-bit",
    );
    rejects(
        &Spec {
            machine: elf::EM_X86_64,
            ..Spec::good()
        },
        "not RISC-V",
    );
    rejects(
        &Spec {
            machine: elf::EM_ARM,
            ..Spec::good()
        },
        "not RISC-V",
    );
    rejects(
        &Spec {
            e_flags: elf::EF_RISCV_FLOAT_ABI_DOUBLE,
            ..Spec::good()
        },
        "hard-float",
    );
    let err = check_image(b"\x7fELF garbage").unwrap_err();
    assert!(!format!("{err:#}").is_empty());
    assert!(check_image(b"#!/bin/sh\n").is_err());
}

#[test]
fn rejects_wrong_entry() {
    rejects(
        &Spec {
            entry: TEXT + 4,
            ..Spec::good()
        },
        "entry point",
    );
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
    s.secs.push(Sec {
        name: ".ramfunc",
        addr: RAM + 1024,
        ..text(64)
    });
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
    rejects(
        &Spec {
            stack_reserve: None,
            ..Spec::good()
        },
        "memory.x",
    );
    let mut s = Spec::good();
    s.secs.remove(1);
    rejects(&s, SYM_BUILD_ID);
}
