// SPDX-License-Identifier: GPL-2.0-only
//! `cargo xtask test`: every test the project has, fast ones first.

#[derive(clap::Args)]
pub struct TestArgs {}

pub fn run(_a: TestArgs) -> anyhow::Result<()> {
    crate::cargo(&["test", "--workspace", "--all-features"])
}
