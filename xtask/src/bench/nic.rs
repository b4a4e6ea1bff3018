// SPDX-License-Identifier: GPL-2.0-only
//! `cargo xtask bench nic`: build the firmware image, then run the virtual NIC benchmark
//! (`node/examples/bench_nic.rs`, release build with flashed mode) against it.

#[derive(clap::Args)]
pub struct NicArgs {
    /// Print one JSON object instead of a table.
    #[arg(long)]
    json: bool,
    /// Also draw the figure into DIR/nic.svg (and keep the JSON lines it was drawn from
    /// in DIR/nic.json); stdout then carries the JSON lines, as with --json.
    #[arg(long, value_name = "DIR")]
    plot: Option<std::path::PathBuf>,
    /// Control-only messages streamed per mode.
    #[arg(long, default_value_t = 20_000, value_parser = clap::value_parser!(u32).range(100..=10_000_000))]
    messages: u32,
    /// 8 KB messages per mode (streamed, and again one at a time for latency).
    #[arg(long, default_value_t = 2_000, value_parser = clap::value_parser!(u32).range(20..=1_000_000))]
    payloads: u32,
}

pub fn run(a: NicArgs) -> anyhow::Result<()> {
    crate::prereq::ensure_emulator_build_deps()?;
    eprintln!("building the firmware image for flashed mode ...");
    crate::build::build_image(&crate::build::defmt_filter(None))?;
    let image = crate::build::image_path()?;
    let image = image.display().to_string();
    let (m, p) = (a.messages.to_string(), a.payloads.to_string());
    let mut args = vec![
        "run",
        "--quiet",
        "--locked",
        "--release",
        "-p",
        "trapeze-node",
        "--example",
        "bench_nic",
        "--",
        "--image",
        &image,
        "--messages",
        &m,
        "--payloads",
        &p,
    ];
    if a.json || a.plot.is_some() {
        args.push("--json");
    }
    if a.plot.is_some() {
        return super::cargo_json(&args, a.plot.as_deref(), "nic", |dir, lines| {
            super::plot::nic::write(dir, lines.first().ok_or_else(|| anyhow::anyhow!("bench_nic printed nothing"))?)
        });
    }
    crate::cargo(&args)
}
