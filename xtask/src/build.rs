// SPDX-License-Identifier: GPL-2.0-only
//! `cargo xtask build`: build the riscv32imac firmware image, check the ELF against the
//! NIC-memory layout (`iface::layout`, `iface::regs`) and print its size against the
//! budget. [`check_image`] is the check a loader or `flash` command reuses.

use anyhow::{bail, ensure, Context};
use object::elf;
use object::read::elf::{FileHeader, ProgramHeader, SectionHeader, Sym};
use object::{Endianness, FileKind};
use serde_json::json;
use std::path::PathBuf;
use trapeze_firmware::iface::layout::{
    CTRL_BYTES, CTRL_OFF, IMAGE_BUDGET_BYTES, IMAGE_RAM_BYTES, IMAGE_RAM_OFF, IMAGE_TEXT_BYTES,
    IMAGE_TEXT_OFF, IPT_OFF, NIC_MEM_BYTES, SEND_RING_OFF, STAGING_BYTES, STAGING_OFF,
};
use trapeze_firmware::iface::regs::NIC_MEM_BASE;

pub const TARGET: &str = "riscv32imac-unknown-none-elf";
pub const PROFILE: &str = "fw";
pub const BIN: &str = "trapeze-fw";

/// Symbols the image exports (firmware-crate/src/bin/trapeze-fw/hw.rs, memory.x).
const SYM_BUILD_ID: &str = "TRAPEZE_FW_BUILD_ID";
const SYM_VERSION: &str = "TRAPEZE_FW_VERSION";
const SYM_STACK_RESERVE: &str = "_trapeze_stack_reserve";

#[derive(clap::Args)]
pub struct BuildArgs {
    /// Print the report as one JSON object on stdout.
    #[arg(long)]
    json: bool,
    /// Check this ELF instead of building the image.
    #[arg(long, value_name = "PATH")]
    elf: Option<PathBuf>,
    /// defmt log filter compiled into the image (DEFMT_LOG syntax: a level such as
    /// `trace`, `debug`, `info`, `warn`, `error`, `off`, or per-module entries).
    /// Defaults to $DEFMT_LOG, else `info` (defmt alone keeps only errors).
    #[arg(long, value_name = "FILTER")]
    defmt_log: Option<String>,
}

/// The image's log filter when neither `--defmt-log` nor `$DEFMT_LOG` says otherwise.
pub const DEFAULT_DEFMT_LOG: &str = "info";

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
    /// Allocated, non-empty sections.
    pub sections: Vec<SectionInfo>,
}

impl ImageInfo {
    /// Bytes of the text region used: code, rodata and `.data`'s initial image.
    pub fn text_region_used(&self) -> u32 {
        self.text + self.rodata + self.data
    }
    /// Bytes of the RAM region claimed: data, bss and the stack reserve.
    pub fn ram_region_used(&self) -> u32 {
        self.data + self.bss + self.stack_reserve
    }
    pub fn version_string(&self) -> String {
        let v = self.fw_version;
        format!("{}.{}.{}", v >> 16, (v >> 8) & 0xff, v & 0xff)
    }
}

/// Validate a firmware ELF: a 32-bit little-endian RISC-V soft-float executable whose
/// entry is the start of the text region, every allocated section and loadable segment
/// inside its region (nothing in the endpoint), the build id and stack reserve present,
/// and text and RAM use within budget.
pub fn check_image(bytes: &[u8]) -> anyhow::Result<ImageInfo> {
    match FileKind::parse(bytes) {
        Ok(FileKind::Elf32) => {}
        Ok(FileKind::Elf64) => bail!("64-bit ELF: the NIC processor is riscv32"),
        Ok(kind) => bail!("not an ELF file ({kind:?})"),
        Err(e) => bail!("not an object file: {e}"),
    }
    let hdr = elf::FileHeader32::<Endianness>::parse(bytes).context("ELF header")?;
    let en = hdr.endian().context("ELF header")?;
    ensure!(
        en == Endianness::Little,
        "big-endian ELF: the NIC processor is little-endian"
    );
    let machine = hdr.e_machine(en);
    ensure!(
        machine == elf::EM_RISCV,
        "ELF machine {machine} is not RISC-V ({})",
        elf::EM_RISCV
    );
    ensure!(
        hdr.e_type(en) == elf::ET_EXEC,
        "not an executable (e_type {})",
        hdr.e_type(en)
    );
    let flags = hdr.e_flags(en);
    ensure!(
        flags & elf::EF_RISCV_RVE == 0,
        "RV32E image: the NIC processor is RV32I"
    );
    ensure!(
        flags & elf::EF_RISCV_FLOAT_ABI == elf::EF_RISCV_FLOAT_ABI_SOFT,
        "hard-float ABI (e_flags {flags:#x}): riscv32imac has no FPU"
    );
    let entry = hdr.e_entry(en);
    let (text_start, text_end) = Region::Text.range();
    let (ram_start, ram_end) = Region::Ram.range();
    ensure!(
        entry as u64 == text_start,
        "entry point {entry:#x} is not the start of the image ({text_start:#x})"
    );

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
                ensure!(
                    !write && !nobits,
                    "writable section {name} in the text region"
                );
                if exec {
                    info.text += size;
                } else {
                    info.rodata += size;
                }
            }
            Region::Ram => {
                ensure!(!exec, "executable section {name} in the RAM region");
                // riscv-rt's `.stack` (and an empty `.heap`) stand for the free RAM above bss.
                if name == ".stack" || name == ".heap" {
                    info.sections.push(SectionInfo {
                        name,
                        addr,
                        size,
                        region,
                    });
                    continue;
                }
                if nobits {
                    info.bss += size;
                } else {
                    info.data += size;
                }
                ram_top = ram_top.max(addr as u64 + size as u64);
            }
        }
        info.sections.push(SectionInfo {
            name,
            addr,
            size,
            region,
        });
    }
    ensure!(info.text > 0, "no code in the image");
    info.stack_free = (ram_end - ram_top) as u32;

    // What gets loaded: every PT_LOAD's file bytes go to its physical (load) address, in
    // the text region; its memory image must lie in one region.
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
        }
        if memsz > 0 {
            ensure!(
                Region::holding(vaddr, memsz).is_some(),
                "segment at {vaddr:#x}..{:#x} is outside the image regions",
                vaddr + memsz
            );
        }
    }

    let symbols = sections
        .symbols(en, bytes, elf::SHT_SYMTAB)
        .context("symbol table")?;
    let find = |want: &str| -> anyhow::Result<&elf::Sym32<Endianness>> {
        symbols
            .iter()
            .find(|s| {
                s.name(en, symbols.strings())
                    .is_ok_and(|n| n == want.as_bytes())
            })
            .with_context(|| format!("no symbol {want} in the image"))
    };
    let read_u32 = |name: &str| -> anyhow::Result<u32> {
        let sym = find(name)?;
        let sec = sections.section(object::SectionIndex(sym.st_shndx(en) as usize))?;
        let data = sec
            .data(en, bytes)
            .with_context(|| format!("{name}: section data"))?;
        let off = sym
            .st_value(en)
            .checked_sub(sec.sh_addr(en))
            .context("symbol before section")?;
        let word = data
            .get(off as usize..off as usize + 4)
            .context("symbol past section end")?;
        Ok(u32::from_le_bytes(word.try_into().expect("4 bytes")))
    };
    info.build_id = read_u32(SYM_BUILD_ID)?;
    info.fw_version = read_u32(SYM_VERSION)?;
    let reserve =
        find(SYM_STACK_RESERVE).context("the image was not linked with firmware-crate/memory.x")?;
    ensure!(
        reserve.st_shndx(en) == elf::SHN_ABS,
        "{SYM_STACK_RESERVE} is not an absolute symbol"
    );
    info.stack_reserve = reserve.st_value(en);

    ensure!(
        info.text_region_used() <= IMAGE_TEXT_BYTES,
        "over budget: text+rodata+data {} of {}",
        size(info.text_region_used()),
        size(IMAGE_TEXT_BYTES)
    );
    ensure!(
        info.ram_region_used() <= IMAGE_RAM_BYTES,
        "over budget: data+bss {} + stack reserve {} = {} of {}",
        size(info.data + info.bss),
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
    Ok(info)
}

pub fn run(a: BuildArgs) -> anyhow::Result<()> {
    let path = match a.elf {
        Some(p) => p,
        None => {
            let filter = a
                .defmt_log
                .or_else(|| std::env::var("DEFMT_LOG").ok())
                .unwrap_or_else(|| DEFAULT_DEFMT_LOG.into());
            build_image(&filter)?;
            image_path()?
        }
    };
    let bytes = std::fs::read(&path).with_context(|| format!("read {}", path.display()))?;
    let info = check_image(&bytes).with_context(|| format!("{}", path.display()))?;
    let shown = path.strip_prefix(crate::workspace_root()).unwrap_or(&path);
    if a.json {
        println!(
            "{}",
            serde_json::to_string_pretty(&report_json(&shown.display().to_string(), &info))?
        );
    } else {
        print!("{}", report_text(&shown.display().to_string(), &info));
    }
    Ok(())
}

/// `cargo build` the image with the defmt log filter `filter` (rustc tracks DEFMT_LOG,
/// so changing it rebuilds what logs).
fn build_image(filter: &str) -> anyhow::Result<()> {
    let args = [
        "build",
        "-p",
        "trapeze-firmware",
        "--bin",
        BIN,
        "--features",
        "image",
        "--target",
        TARGET,
        "--profile",
        PROFILE,
    ];
    let cargo = std::env::var("CARGO").unwrap_or_else(|_| "cargo".into());
    eprintln!("$ DEFMT_LOG={filter} cargo {}", args.join(" "));
    let status = std::process::Command::new(cargo)
        .args(args)
        .env("DEFMT_LOG", filter)
        .current_dir(crate::workspace_root())
        .status()
        .context("run cargo")?;
    ensure!(
        status.success(),
        "building the firmware image failed ({status})"
    );
    Ok(())
}

/// The image cargo just built: `<target dir>/<TARGET>/<PROFILE>/<BIN>`.
fn image_path() -> anyhow::Result<PathBuf> {
    let cargo = std::env::var("CARGO").unwrap_or_else(|_| "cargo".into());
    let out = std::process::Command::new(cargo)
        .args(["metadata", "--format-version", "1", "--no-deps"])
        .current_dir(crate::workspace_root())
        .output()
        .context("cargo metadata")?;
    ensure!(
        out.status.success(),
        "cargo metadata failed ({})",
        out.status
    );
    let meta: serde_json::Value = serde_json::from_slice(&out.stdout)?;
    let dir = meta["target_directory"]
        .as_str()
        .context("cargo metadata: target_directory")?;
    Ok(PathBuf::from(dir).join(TARGET).join(PROFILE).join(BIN))
}

/// "812 B" below 1 KiB, "6.1 KiB" above.
fn size(bytes: u32) -> String {
    if bytes < 1024 {
        format!("{bytes} B")
    } else if bytes.is_multiple_of(1024) {
        format!("{} KiB", bytes / 1024)
    } else {
        format!("{:.1} KiB", bytes as f64 / 1024.0)
    }
}

fn percent(used: u32, of: u32) -> u32 {
    (used as u64 * 100).div_ceil(of as u64) as u32
}

/// NIC memory split, from the layout: (name, bytes), summing to NIC_MEM_BYTES.
fn nic_memory_map() -> [(&'static str, u32); 5] {
    [
        ("image", IMAGE_BUDGET_BYTES),
        ("ctrl", CTRL_BYTES + (SEND_RING_OFF - CTRL_OFF - CTRL_BYTES)),
        ("rings", IPT_OFF - SEND_RING_OFF),
        ("IPT", STAGING_OFF - IPT_OFF),
        ("staging", STAGING_BYTES),
    ]
}

fn report_text(path: &str, i: &ImageInfo) -> String {
    let map = nic_memory_map()
        .iter()
        .map(|(n, b)| format!("{n} {}", size(*b)))
        .collect::<Vec<_>>()
        .join(" + ");
    format!(
        "image      {path}\n\
         build id   {:#010x}, firmware v{}, entry {:#010x}\n\
         sections   text {}, rodata {}, data {}, bss {}\n\
         text       text+rodata+data {} of {} ({}%)\n\
         ram        data+bss+stack {} of {} ({}%): stack reserve {}, {} free above bss\n\
         NIC memory {}: {map}\n",
        i.build_id,
        i.version_string(),
        i.entry,
        size(i.text),
        size(i.rodata),
        size(i.data),
        size(i.bss),
        size(i.text_region_used()),
        size(IMAGE_TEXT_BYTES),
        percent(i.text_region_used(), IMAGE_TEXT_BYTES),
        size(i.ram_region_used()),
        size(IMAGE_RAM_BYTES),
        percent(i.ram_region_used(), IMAGE_RAM_BYTES),
        size(i.stack_reserve),
        size(i.stack_free),
        size(NIC_MEM_BYTES),
    )
}

fn report_json(path: &str, i: &ImageInfo) -> serde_json::Value {
    let map: serde_json::Map<String, serde_json::Value> = nic_memory_map()
        .iter()
        .map(|(n, b)| (n.to_lowercase(), json!(b)))
        .collect();
    json!({
        "image": path,
        "build_id": i.build_id,
        "build_id_hex": format!("{:#010x}", i.build_id),
        "fw_version": i.version_string(),
        "entry": i.entry,
        "sizes": {
            "text": i.text,
            "rodata": i.rodata,
            "data": i.data,
            "bss": i.bss,
            "stack_reserve": i.stack_reserve,
            "stack_free": i.stack_free,
        },
        "budget": {
            "text_region": { "used": i.text_region_used(), "bytes": IMAGE_TEXT_BYTES },
            "ram_region": { "used": i.ram_region_used(), "bytes": IMAGE_RAM_BYTES },
        },
        "nic_memory": { "bytes": NIC_MEM_BYTES, "regions": map },
        "sections": i.sections,
    })
}

#[cfg(test)]
mod tests;
