// SPDX-License-Identifier: GPL-2.0-only
//! Does a getpage cost more when the cluster holds more? Two 3-node clusters side by side
//! in one process: a small one holding `small` pages and a large one holding `large`
//! (8 GiB by default: 1 Mi pages of 8 KiB, half on each lender, its tables sized at
//! start-up). Random getpages from node 0 alternate between them in rounds, so both see
//! the same phases of this VM; every node of both clusters runs on the calling thread, so
//! an idle cluster takes no core from the measured one. Every page read is checked
//! against its pattern (outside the timed call). `scale_inproc_p50_ratio` is the large
//! cluster's p50 over the small one's. Here a getpage is a few µs of CPU, so the 8 KiB
//! page's own read from DRAM (about 0.8 µs more than from L3, timed as `page_copy_p50_us`)
//! is most of any difference.

use super::{pct, put_round, Rand, SPACE};
use anyhow::bail;
use gms::prelude::*;
use std::borrow::Cow;
use std::time::Instant;
use trapeze_node::gms::{page_pattern, Cluster, Got};

/// Random getpages per round on each cluster.
const ROUND: u64 = 500;

/// The two clusters' p50 and p99 getpage latencies (µs) and the pages each held, and
/// the p50 of one plain 8 KiB copy out of a random page a lender of each holds (µs): the
/// part of a getpage no protocol can save, as costly as the memory the page sits in.
pub struct Scale {
    pub small: (u64, f64, f64),
    pub large: (u64, f64, f64),
    pub copy_p50: (f64, f64),
}

impl Scale {
    pub fn p50_ratio(&self) -> f64 {
        self.large.1 / self.small.1
    }
}

/// A cluster holding pages `0..pages` of [`SPACE`] (version 1), all on its two lenders.
fn filled(pages: u64) -> anyhow::Result<Cluster> {
    // Each lender takes half, with room for an uneven split.
    let budget = (pages / 2 + pages / 8 + 64) as usize;
    let gms_cfg = GmsConfig { op_timeout: 500_000_000, ..GmsConfig::default() };
    let mut c = Cluster::with_firmware(3, budget, gms_cfg, None, Default::default())?;
    c.ports[0].node.set_budget(0);
    let mut todo: Vec<u64> = (0..pages).collect();
    let mut last = Vec::new();
    for _round in 0..5 {
        // Each page's contents made as it is put: 8 GiB of them would not fit beside the cluster.
        last = put_round(&mut c, &todo, |n| Cow::Owned(page_pattern(PageId::new(SPACE, n), Version(1))))?;
        c.ports[0].put_log.clear();
        // A put whose answer was lost may have stored the page after all (a retry then
        // finds it `Superseded`): what reads back right is stored.
        todo.clear();
        for &(p, _, _) in &last {
            match c.get_wait(0, p)? {
                Got::Hit { data, .. } if data == page_pattern(p, Version(1)) => {}
                _ => todo.push(p.page),
            }
        }
        if todo.is_empty() {
            return Ok(c);
        }
    }
    let why: Vec<String> = last.iter().take(5).map(|l| format!("page {}: {:?}", l.0.page, l.2)).collect();
    bail!("{} of {pages} pages could not be stored ({})", todo.len(), why.join(", "))
}

/// `reads` random getpages on each of a `small`-page and a `large`-page cluster,
/// alternating in rounds of [`ROUND`].
pub fn run(small: u64, large: u64, reads: u64) -> anyhow::Result<Scale> {
    let t = Instant::now();
    let mut cs = filled(small)?;
    let mut cl = filled(large)?;
    eprintln!("bench_gms scale: {small} and {large} pages stored in {:.1} s", t.elapsed().as_secs_f64());
    let (mut ls, mut ll) = (Vec::new(), Vec::new());
    let mut r = Rand(0x9e37_79b9_7f4a_7c15);
    let mut done = 0;
    while done < reads {
        let n = ROUND.min(reads - done);
        for (c, pages, lat) in [(&mut cs, small, &mut ls), (&mut cl, large, &mut ll)] {
            for _ in 0..n {
                let p = PageId::new(SPACE, r.next() % pages);
                let t = Instant::now();
                let g = c.get_wait(0, p)?;
                lat.push(t.elapsed().as_secs_f64() * 1e6);
                match g {
                    Got::Hit { data, .. } if data == page_pattern(p, Version(1)) => {}
                    _ => bail!("scale: getpage of page {} of {pages} failed", p.page),
                }
            }
        }
        done += n;
    }
    Ok(Scale {
        small: (small, pct(&mut ls, 0.5), pct(&mut ls, 0.99)),
        large: (large, pct(&mut ll, 0.5), pct(&mut ll, 0.99)),
        copy_p50: (copy_p50(&cs, reads, &mut r)?, copy_p50(&cl, reads, &mut r)?),
    })
}

/// p50 (µs) of copying one random page lender 1 of `c` holds into a buffer: the payload's
/// own memory cost, measured on the same frames the getpages read.
fn copy_p50(c: &Cluster, reads: u64, r: &mut Rand) -> anyhow::Result<f64> {
    let port = &c.ports[1];
    let frames: Vec<_> = port.node.holdings().map(|(_, h)| h.frame).collect();
    anyhow::ensure!(!frames.is_empty(), "scale: lender 1 holds no page");
    let mut buf = vec![0u8; trapeze_node::rpc::FRAME_BYTES as usize];
    let mut lat = Vec::with_capacity(reads as usize);
    for _ in 0..reads {
        let f = frames[(r.next() % frames.len() as u64) as usize];
        let t = Instant::now();
        let ok = port.node.host.frames.read(f, &mut buf);
        lat.push(t.elapsed().as_secs_f64() * 1e6);
        anyhow::ensure!(ok, "scale: frame {f} of lender 1 could not be read");
        std::hint::black_box(&buf);
    }
    Ok(pct(&mut lat, 0.5))
}
