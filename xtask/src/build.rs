// SPDX-License-Identifier: GPL-2.0-only
//! `cargo xtask build`: the riscv32imac firmware image.

#[derive(clap::Args)]
pub struct BuildArgs {}

pub fn run(_a: BuildArgs) -> anyhow::Result<()> {
    anyhow::bail!("not yet implemented")
}
