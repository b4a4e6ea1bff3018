// SPDX-License-Identifier: GPL-2.0-only
//! `cargo xtask bench block`'s guest phase (`stripe_md`, issue 35's `stripe_over_md_nbd`):
//! sequential-read MB/s of a volume striped by gmblock over four modelled `gmblockd`,
//! read through the guest kernel's NBD client, over Linux md RAID-0 striping NBD exports
//! of the same four servers in the same guest (`crate::vm::md_bench` runs the guest). Its
//! output: one JSON row per round (`stripe_md_round`) and a summary (`stripe_md`) with the
//! ratio's median and p10–p90, each side's MB/s, the model, N and the guest's ceilings.

use super::vm::spread;
use crate::vm::md_bench::{self, MdPlan, MdReads, GRAIN_KIB};
use serde_json::{json, Value};

/// The md phase's options.
#[derive(clap::Args)]
pub struct MdArgs {
    /// Leave out the guest phase (`stripe_md`: gmblock's striped NBD export against md
    /// RAID-0 over NBD exports in a QEMU guest).
    #[arg(long)]
    no_md: bool,
    /// Only the guest phase.
    #[arg(long, conflicts_with = "no_md")]
    md_only: bool,
    /// MiB each side of the guest phase reads per round (its volumes' size).
    #[arg(long, default_value_t = 32, value_parser = clap::value_parser!(u64).range(4..=1024))]
    md_mib: u64,
    /// The guest phase's modelled disks (each of the four servers): MB/s.
    #[arg(long, default_value_t = 5.0)]
    md_model_mbps: f64,
    /// The guest phase's modelled disks: µs per request.
    #[arg(long, default_value_t = 200)]
    md_model_latency_us: u64,
}

impl MdArgs {
    /// Whether the phase runs.
    pub(super) fn wanted(&self) -> bool {
        !self.no_md
    }

    /// Whether the host bench is left out.
    pub(super) fn only(&self) -> bool {
        self.md_only
    }

    /// What would stop the phase, before anything long runs.
    pub(super) fn check(&self) -> anyhow::Result<()> {
        anyhow::ensure!(
            self.md_model_mbps.is_finite() && self.md_model_mbps > 0.0,
            "--md-model-mbps {}: a positive MB/s",
            self.md_model_mbps
        );
        if let Some(why) = md_bench::missing() {
            anyhow::bail!("the md phase (stripe_md) {why}; or leave it out with --no-md");
        }
        Ok(())
    }
}

/// Build gmblockd in release, run the guest phase and print its rows.
pub(super) fn run(a: &MdArgs, rounds: u32, json: bool) -> anyhow::Result<()> {
    crate::cargo(&["build", "--release", "--locked", "-p", "trapeze-gmblock", "--bin", "gmblockd"])?;
    let plan = MdPlan {
        rounds,
        mib: a.md_mib,
        model_mbps: a.md_model_mbps,
        model_latency_us: a.md_model_latency_us,
        bin: crate::build::target_dir()?.join("release"),
    };
    let reads = md_bench::run(&plan)?;
    let (rows, summary) = report(&plan, &reads)?;
    if json {
        for r in rows {
            println!("{r}");
        }
        println!("{summary}");
    } else {
        let s = &summary;
        println!(
            "stripe_md: gmblock's stripe over md RAID-0 (N=4, {} MB/s + {} µs modelled): {} [{}–{}]; \
             nbd0 {} MB/s, md0 {} MB/s; md over nbd-server (unmodelled) {} MB/s; ceilings: nbdkit memory \
             {} MB/s, unmodelled gmblockd {} MB/s",
            plan.model_mbps,
            plan.model_latency_us,
            s["stripe_over_md_nbd"]["median"],
            s["stripe_over_md_nbd"]["p10"],
            s["stripe_over_md_nbd"]["p90"],
            s["nbd0_mb_s"]["median"],
            s["md0_mb_s"]["median"],
            s["md_over_nbd_server"]["mb_s"]["median"],
            s["ceiling_mb_s"]["nbdkit_memory"],
            s["ceiling_mb_s"]["gmblock_unmodelled"],
        );
    }
    Ok(())
}

/// The per-round rows and the summary.
fn report(plan: &MdPlan, m: &MdReads) -> anyhow::Result<(Vec<Value>, Value)> {
    let mut rows = Vec::new();
    let (mut stripe, mut md, mut ratio) = (Vec::new(), Vec::new(), Vec::new());
    let (mut server, mut over_server) = (Vec::new(), Vec::new());
    for r in 1..=plan.rounds {
        let (Some(a), Some(b)) = (m.of("nbd0", r), m.of("md0", r)) else {
            anyhow::bail!("round {r} of the md phase has no read of nbd0 or md0");
        };
        let Some(c) = m.of("md1", r) else { anyhow::bail!("round {r} of the md phase has no read of md1") };
        let (a, b, c) = (a.mb_s(), b.mb_s(), c.mb_s());
        rows.push(json!({
            "row": "stripe_md_round", "round": r, "first": if r % 2 == 1 { "nbd0" } else { "md0" },
            "nbd0_mb_s": round3(a), "md0_mb_s": round3(b), "ratio": round3(a / b),
            "md_nbd_server_mb_s": round3(c),
        }));
        stripe.push(a);
        md.push(b);
        ratio.push(a / b);
        server.push(c);
        over_server.push(a / c);
    }
    let ceiling = |side: &str| m.of(side, 0).map(|r| round3(r.mb_s()));
    let summary = json!({
        "row": "stripe_md",
        "date": super::plot::today(),
        "rounds": plan.rounds,
        "n": 4,
        "mib": plan.mib,
        "grain_kib": GRAIN_KIB,
        "model": {"mbps": plan.model_mbps, "latency_us": plan.model_latency_us},
        "model_sum_mb_s": plan.model_mbps * 4.0,
        "stripe_over_md_nbd": spread(&ratio, 3),
        "nbd0_mb_s": spread(&stripe, 3),
        "md0_mb_s": spread(&md, 3),
        "md_over_nbd_server": {"mb_s": spread(&server, 3), "nbd0_over_it": spread(&over_server, 3)},
        "ceiling_mb_s": {"nbdkit_memory": ceiling("ceiling_memory"), "gmblock_unmodelled": ceiling("ceiling_plain")},
        "md5": m.md5,
    });
    Ok((rows, summary))
}

fn round3(x: f64) -> f64 {
    (x * 1000.0).round() / 1000.0
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::vm::md_bench::Read;

    fn read(side: &str, round: u32, secs: f64) -> Read {
        Read { side: side.into(), round, bytes: 10_000_000, secs }
    }

    #[test]
    fn the_summary_holds_the_ratio_per_round_and_its_median() {
        let plan =
            MdPlan { rounds: 3, mib: 32, model_mbps: 5.0, model_latency_us: 200, bin: std::path::PathBuf::new() };
        let mut reads = vec![read("ceiling_memory", 0, 0.1), read("ceiling_plain", 0, 0.5)];
        for (r, (a, b)) in [(1.0, 2.0), (1.0, 1.0), (2.0, 1.0)].into_iter().enumerate() {
            let r = r as u32 + 1;
            reads.extend([read("nbd0", r, a), read("md0", r, b), read("md1", r, 0.25)]);
        }
        let m = MdReads { reads, md5: "x".into() };
        let (rows, s) = report(&plan, &m).unwrap();
        assert_eq!(rows.len(), 3);
        assert_eq!(rows[0]["ratio"], 2.0);
        assert_eq!(rows[1]["first"], "md0");
        assert_eq!(s["row"], "stripe_md");
        assert_eq!(s["stripe_over_md_nbd"]["median"], 1.0);
        assert_eq!(s["ceiling_mb_s"]["nbdkit_memory"], 100.0);
        assert_eq!(s["model_sum_mb_s"], 20.0);
        assert_eq!(s["md_over_nbd_server"]["mb_s"]["median"], 40.0);
        let short = MdReads { reads: m.reads[..5].to_vec(), md5: "x".into() };
        assert!(report(&plan, &short).unwrap_err().to_string().contains("round 2"));
    }
}
