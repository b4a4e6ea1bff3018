// SPDX-License-Identifier: GPL-2.0-only
//! `cargo xtask build`: build the riscv32imac firmware image, check the ELF against the
//! NIC-memory layout (`iface::layout`, `iface::regs`) and print its size against the
//! budget. [`check_image`] lives in the NIC crate (`trapeze_vnic::image`), where the
//! flashed NIC's loader uses the same check.

use anyhow::{ensure, Context};
use serde_json::json;
use std::path::PathBuf;
use trapeze_firmware::iface::layout::{
    ANSWER_OFF, CTRL_BYTES, CTRL_OFF, IMAGE_BUDGET_BYTES, IMAGE_RAM_BYTES, IMAGE_TEXT_BYTES, IPT_OFF, NIC_MEM_BYTES,
    SEND_RING_OFF, STAGING_BYTES, STAGING_OFF,
};
pub use trapeze_vnic::image::{check_image, size, ImageInfo};

pub const TARGET: &str = "riscv32imac-unknown-none-elf";
pub const PROFILE: &str = "fw";
pub const BIN: &str = "trapeze-fw";

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

/// The defmt filter: `--defmt-log`, else `$DEFMT_LOG`, else [`DEFAULT_DEFMT_LOG`].
pub fn defmt_filter(arg: Option<String>) -> String {
    arg.or_else(|| std::env::var("DEFMT_LOG").ok()).unwrap_or_else(|| DEFAULT_DEFMT_LOG.into())
}

pub fn run(a: BuildArgs) -> anyhow::Result<()> {
    let path = match a.elf {
        Some(p) => p,
        None => {
            build_image(&defmt_filter(a.defmt_log))?;
            image_path()?
        }
    };
    let bytes = std::fs::read(&path).with_context(|| format!("read {}", path.display()))?;
    let info = check_image(&bytes).with_context(|| format!("{}", path.display()))?;
    let shown = path.strip_prefix(crate::workspace_root()).unwrap_or(&path);
    if a.json {
        println!("{}", serde_json::to_string_pretty(&report_json(&shown.display().to_string(), &info))?);
    } else {
        print!("{}", report_text(&shown.display().to_string(), &info));
    }
    Ok(())
}

/// `cargo build` the image with the defmt log filter `filter` (rustc tracks DEFMT_LOG,
/// so changing it rebuilds what logs).
pub fn build_image(filter: &str) -> anyhow::Result<()> {
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
    ensure!(status.success(), "building the firmware image failed ({status})");
    Ok(())
}

/// The image cargo just built: `<target dir>/<TARGET>/<PROFILE>/<BIN>`.
pub fn image_path() -> anyhow::Result<PathBuf> {
    Ok(target_dir()?.join(TARGET).join(PROFILE).join(BIN))
}

/// The workspace's target directory (`CARGO_TARGET_DIR` or `target/`), as cargo says.
pub fn target_dir() -> anyhow::Result<PathBuf> {
    let cargo = std::env::var("CARGO").unwrap_or_else(|_| "cargo".into());
    let out = std::process::Command::new(cargo)
        .args(["metadata", "--format-version", "1", "--no-deps"])
        .current_dir(crate::workspace_root())
        .output()
        .context("cargo metadata")?;
    ensure!(out.status.success(), "cargo metadata failed ({})", out.status);
    let meta: serde_json::Value = serde_json::from_slice(&out.stdout)?;
    let dir = meta["target_directory"].as_str().context("cargo metadata: target_directory")?;
    Ok(PathBuf::from(dir))
}

fn percent(used: u32, of: u32) -> u32 {
    (used as u64 * 100).div_ceil(of as u64) as u32
}

/// NIC memory split, from the layout: (name, bytes), summing to NIC_MEM_BYTES.
fn nic_memory_map() -> [(&'static str, u32); 6] {
    [
        ("image", IMAGE_BUDGET_BYTES),
        ("ctrl", CTRL_BYTES + (SEND_RING_OFF - CTRL_OFF - CTRL_BYTES)),
        ("rings", IPT_OFF - SEND_RING_OFF),
        ("IPT", STAGING_OFF - IPT_OFF),
        ("staging", STAGING_BYTES),
        ("answers", NIC_MEM_BYTES - ANSWER_OFF),
    ]
}

fn report_text(path: &str, i: &ImageInfo) -> String {
    let map = nic_memory_map().iter().map(|(n, b)| format!("{n} {}", size(*b))).collect::<Vec<_>>().join(" + ");
    format!(
        "image      {path}\n\
         build id   {:#010x}, firmware v{}, entry {:#010x}, checksum {:#010x} ({} loaded)\n\
         sections   text {}, rodata {}, data {}, bss {}\n\
         text       text+rodata+data {} of {} ({}%)\n\
         ram        data+bss+stack {} of {} ({}%): stack reserve {}, {} free above bss\n\
         NIC memory {}: {map}\n",
        i.build_id,
        i.version_string(),
        i.entry,
        i.checksum,
        size(i.load_bytes),
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
    let map: serde_json::Map<String, serde_json::Value> =
        nic_memory_map().iter().map(|(n, b)| (n.to_lowercase(), json!(b))).collect();
    json!({
        "image": path,
        "build_id": i.build_id,
        "build_id_hex": format!("{:#010x}", i.build_id),
        "fw_version": i.version_string(),
        "entry": i.entry,
        "checksum": i.checksum,
        "checksum_hex": format!("{:#010x}", i.checksum),
        "load_bytes": i.load_bytes,
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
