// SPDX-License-Identifier: GPL-2.0-only
//! `cargo xtask bench nic`: build the firmware image, then run the virtual NIC benchmark
//! (`vnic/examples/bench_nic.rs`, release build with flashed mode) against it.

#[derive(clap::Args)]
pub struct NicArgs {
    /// Print one JSON object instead of a table.
    #[arg(long)]
    json: bool,
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
        "trapeze-vnic",
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
    if a.json {
        args.push("--json");
    }
    crate::cargo(&args)
}
