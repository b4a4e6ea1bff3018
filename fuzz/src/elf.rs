// SPDX-License-Identifier: GPL-2.0-only
//! Target `elf_image`: the firmware-image checker and loader (`trapeze_vnic::image`).
//!
//! Oracles: checking never panics (whatever the ELF claims: sizes, counts, symbol
//! values); an accepted image's figures are consistent with its budget, and the loader
//! accepts exactly what the checker accepts, with the same checksum.

use trapeze_firmware::iface::layout::{IMAGE_RAM_BYTES, IMAGE_TEXT_BYTES};
use trapeze_vnic::image::{check_image, LoadedImage};

pub fn fuzz(data: &[u8]) {
    let checked = check_image(data);
    let loaded = LoadedImage::from_elf(data);
    assert_eq!(checked.is_ok(), loaded.is_ok(), "checker and loader disagree");
    if let Ok(info) = checked {
        assert!(info.text_region_used() <= IMAGE_TEXT_BYTES);
        assert!(info.ram_region_used() <= IMAGE_RAM_BYTES);
        assert!(info.stack_free >= info.stack_reserve);
        assert!(info.text > 0 && info.load_bytes > 0);
        let _ = info.version_string();
    }
}
