// SPDX-License-Identifier: GPL-2.0-only
//! `cargo xtask run`: the main demonstration.

#[derive(clap::Args)]
pub struct RunArgs {}

pub fn run(_a: RunArgs) -> anyhow::Result<()> {
    anyhow::bail!("not yet implemented")
}
