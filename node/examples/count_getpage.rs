// SPDX-License-Identifier: GPL-2.0-only
//! Random getpages for an instruction count: three in-process nodes on virtual NICs, all
//! driven from this one thread (so a count does not depend on how two threads interleave),
//! `PAGES` pages put from node 0 onto the two others, then `READS` random getpages from
//! node 0, each page's bytes checked. Instructions per getpage: run it under callgrind at
//! two values of `READS` and divide the difference of the counts by the reads between them
//! (`bench_gms` itself cannot run under valgrind: its thread-CPU clock goes through
//! rustix's vDSO lookup, which crashes there).
//!
//! `valgrind --tool=callgrind target/release/examples/count_getpage 1000 3000`
//!
//! GMS's timers (the global LRU's epochs, the directory's scrub) run on the wall clock,
//! which valgrind slows: their share of a count grows with the machine's load. Compare
//! interleaved runs, and libc's `memcpy` apart (its instructions for the same bytes
//! depend on the addresses' alignment).

use anyhow::bail;
use gms::prelude::*;
use trapeze_node::gms::{on_big_stack, page_pattern, Cluster, Got};

const SPACE: u64 = 5;

fn main() -> anyhow::Result<()> {
    let mut args = std::env::args().skip(1).map(|a| a.parse::<u64>());
    let pages = args.next().unwrap_or(Ok(1000))?.max(1);
    let reads = args.next().unwrap_or(Ok(1000))?;
    on_big_stack(move || run(pages, reads))?
}

fn run(pages: u64, reads: u64) -> anyhow::Result<()> {
    let cfg = GmsConfig { op_timeout: 500_000_000, ..GmsConfig::default() };
    let budget = usize::try_from(pages)?.max(4096);
    let mut c = Cluster::with_firmware(3, budget, cfg, None, Default::default())?;
    c.ports[0].node.set_budget(0); // the reader lends nothing: every getpage crosses the network
    let data: Vec<Vec<u8>> = (0..pages).map(|n| page_pattern(PageId::new(SPACE, n), Version(0))).collect();
    for (n, d) in data.iter().enumerate() {
        while c.ports[0].in_flight() >= 32 {
            c.poll();
        }
        c.ports[0].put(PageId::new(SPACE, n as u64), Version(1), d, None)?;
    }
    c.settle(0)?;
    let mut x = 0x2545_f491_4f6c_dd1du64;
    for _ in 0..reads {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        let n = x % pages;
        match c.get_wait(0, PageId::new(SPACE, n))? {
            Got::Hit { data: d, .. } if d == data[n as usize] => {}
            _ => bail!("random getpage of page {n} failed"),
        }
    }
    println!("{reads} getpages of {pages} pages, every one checked");
    Ok(())
}
