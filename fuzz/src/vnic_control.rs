// SPDX-License-Identifier: GPL-2.0-only
//! Target `vnic_control`: the virtual NIC's control requests (`trapeze_vnic::control`)
//! and the DMA regions they register (`trapeze_vnic::dma`).
//!
//! The input is one or more JSON requests, one per line, as a control socket receives
//! them. Oracles: parsing never panics; an accepted request serialises and parses back
//! equal; `register_region` / `unregister_region` applied to a NIC's DMA space (over a
//! small mapping standing in for the passed memfd) keep its regions inside their memory
//! and disjoint, and a translation answers only inside one region.

use std::sync::{Arc, OnceLock};
use trapeze_vnic::control::Request;
use trapeze_vnic::dma::DmaSpace;
use trapeze_vnic::shm::Mapping;

const MAP_BYTES: usize = 64 << 10;

fn mapping() -> Arc<Mapping> {
    static MAP: OnceLock<Arc<Mapping>> = OnceLock::new();
    MAP.get_or_init(|| Arc::new(Mapping::create_memfd("fuzz-region", MAP_BYTES).expect("memfd for the fuzz region")))
        .clone()
}

pub fn fuzz(data: &[u8]) {
    let dma = DmaSpace::new();
    for line in data.split(|&b| b == b'\n').take(16) {
        let Ok(req) = serde_json::from_slice::<Request>(line) else { continue };
        let text = serde_json::to_vec(&req).expect("a request serialises");
        assert_eq!(serde_json::from_slice::<Request>(&text).expect("a serialised request parses"), req);
        match req {
            Request::RegisterRegion { name, dma_base, len } => {
                let ok = dma.register(&name, dma_base, mapping(), 0, len).is_ok();
                if ok {
                    assert!(len > 0 && len <= MAP_BYTES as u64 && dma_base.checked_add(len).is_some());
                    // Its first and last bytes translate; the byte past it only if another region has it.
                    assert!(dma.translate(dma_base, 1).is_some() && dma.translate(dma_base + len - 1, 1).is_some());
                    assert!(dma.translate(dma_base, len).is_some());
                }
            }
            Request::UnregisterRegion { name } => {
                dma.unregister(&name);
            }
            _ => {}
        }
        let mut regions = dma.regions();
        regions.sort_by_key(|r| r.1);
        for w in regions.windows(2) {
            assert!(w[0].1 + w[0].2 <= w[1].1, "regions overlap: {w:?}");
        }
        for (_, base, len) in &regions {
            assert!(*len > 0 && *len <= MAP_BYTES as u64);
            // A range reaching past the end of every region is refused.
            if dma.translate(base + len, 1).is_none() {
                assert!(dma.translate(*base, len + 1).is_none(), "translation past a region's end");
            }
        }
    }
}
