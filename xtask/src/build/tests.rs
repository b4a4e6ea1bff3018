// SPDX-License-Identifier: GPL-2.0-only
//! Tests of `cargo xtask build`: memory.x agrees with the layout, and the report. The
//! ELF checks are tested with `check_image` in trapeze_vnic::image.

use super::*;
use trapeze_firmware::iface::regs::NIC_MEM_BASE;
use trapeze_vnic::image::Region;

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
            let origin = rest.split("ORIGIN").nth(1).unwrap().split('=').nth(1).unwrap();
            let origin = num(origin.split(',').next().unwrap());
            let length = num(rest.split("LENGTH").nth(1).unwrap().split('=').nth(1).unwrap());
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
            (alias, region.trim().trim_end_matches(';').trim_end_matches(')').trim().to_string())
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

// ---- the report --------------------------------------------------------------------------
// (`check_image` and its tests on synthetic ELF files moved to trapeze_vnic::image.)

fn info() -> ImageInfo {
    ImageInfo {
        entry: Region::Text.range().0 as u32,
        build_id: 0xfeed_beef,
        fw_version: 0x0001_0203,
        text: 1024,
        rodata: 8,
        data: 0,
        bss: 256,
        stack_reserve: 0x1000,
        stack_free: IMAGE_RAM_BYTES - 256,
        load_bytes: 1032,
        checksum: 0x1234_5678,
        sections: Vec::new(),
    }
}

#[test]
fn report_shows_ids_sizes_and_budget() {
    let i = info();
    let text = report_text("img", &i);
    assert!(text.contains("build id   0xfeedbeef, firmware v1.2.3"), "{text}");
    assert!(text.contains("checksum 0x12345678 (1.0 KiB loaded)"), "{text}");
    assert!(text.contains("text+rodata+data 1.0 KiB of 32 KiB"), "{text}");
    let json = report_json("img", &i);
    assert_eq!(json["sizes"]["text"], 1024);
    assert_eq!(json["checksum"], 0x1234_5678);
    assert_eq!(json["nic_memory"]["regions"]["staging"], STAGING_BYTES);
}
