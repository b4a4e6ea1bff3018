// SPDX-License-Identifier: GPL-2.0-only
//! `cargo xtask bench <what>`: benchmarks that print figures and ratios against a
//! baseline measured in the same run.

#[derive(clap::Args)]
pub struct BenchArgs {}

pub fn run(_a: BenchArgs) -> anyhow::Result<()> {
    anyhow::bail!("not yet implemented")
}
