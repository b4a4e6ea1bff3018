// SPDX-License-Identifier: GPL-2.0-only
//! `cargo xtask` — the one entry point: build the firmware image, flash it into running
//! virtual NICs, run the tests, run the benchmarks, run the demonstration, build the guest
//! kernel and its module, and boot QEMU guests. Each command lives in its own module.

mod bench;
mod build;
mod flash;
mod fuzz;
mod kernel;
mod module;
mod prereq;
mod run;
mod test;
mod tidy;
mod toolchain;
mod vm;

use clap::{Parser, Subcommand};

#[derive(Parser)]
#[command(name = "cargo xtask", version, about = "Trapeze-rs build, test and benchmark driver")]
struct Cli {
    #[command(subcommand)]
    cmd: Cmd,
}

#[derive(Subcommand)]
enum Cmd {
    /// Build the riscv32imac firmware image; print its path and size against the NIC budget.
    Build(build::BuildArgs),
    /// Build the firmware image and load it into running virtual NICs (flashed mode);
    /// print the firmware version and build id each NIC now runs.
    Flash(flash::FlashArgs),
    /// Run every test: lint stages, unit, property and integration tests, the firmware
    /// image and the QEMU guest stages (the README's test command); ends with
    /// `summary: N passed, M failed, K skipped` and every skip's reason.
    Test(test::TestArgs),
    /// Check file headers, SAFETY comments, file sizes and that no crate's modules import
    /// each other in a circle (a stage of `test`).
    Tidy,
    /// Run a benchmark and print its table (or JSON with --json).
    Bench(bench::BenchArgs),
    /// The main demonstration: the most complete real run that exists.
    Run(run::RunArgs),
    /// Build the guest kernel (linux-source-6.12, Rust enabled) into ~/.cache/trapeze,
    /// installing what is missing; steps already done are skipped.
    Kernel(kernel::KernelArgs),
    /// Build the kernel module trapeze.ko (kernel-crate/) against the cached kernel;
    /// `--clippy` lints it with the kernel's clippy settings.
    Module(module::ModuleArgs),
    /// Boot QEMU guests (TCG) on the cached kernel, each with a virtual NIC as an
    /// ivshmem-doorbell PCI device, and run a test or given commands in them.
    #[command(subcommand)]
    Vm(vm::VmCmd),
    /// Fuzz the parsers with cargo-fuzz (libFuzzer, nightly): one target or all in turn;
    /// prints executions, coverage and crashes per target, fails on a crash.
    Fuzz(fuzz::FuzzArgs),
}

fn main() {
    let cli = Cli::parse();
    // Every subcommand builds with the pinned toolchain: give it what rust-toolchain.toml
    // names before anything else runs.
    if let Err(e) = toolchain::ensure() {
        eprintln!("error: the pinned toolchain: {e:#}");
        std::process::exit(1);
    }
    let result = match cli.cmd {
        Cmd::Build(a) => build::run(a),
        Cmd::Flash(a) => flash::run(a),
        Cmd::Test(a) => test::run(a),
        Cmd::Tidy => tidy::run(),
        Cmd::Bench(a) => bench::run(a),
        Cmd::Run(a) => run::run(a),
        Cmd::Kernel(a) => kernel::run(a),
        Cmd::Module(a) => module::run(a),
        Cmd::Vm(a) => vm::run(a),
        Cmd::Fuzz(a) => fuzz::run(a),
    };
    if let Err(e) = result {
        eprintln!("error: {e:#}");
        std::process::exit(1);
    }
}

/// The workspace root (xtask lives one level below it).
pub fn workspace_root() -> std::path::PathBuf {
    std::path::Path::new(env!("CARGO_MANIFEST_DIR")).parent().expect("xtask has a parent directory").to_path_buf()
}

/// Run a command in the workspace root, echoing it; fail with its exit status.
pub fn cargo(args: &[&str]) -> anyhow::Result<()> {
    let cargo = std::env::var("CARGO").unwrap_or_else(|_| "cargo".into());
    eprintln!("$ cargo {}", args.join(" "));
    let status = std::process::Command::new(cargo).args(args).current_dir(workspace_root()).status()?;
    anyhow::ensure!(status.success(), "`cargo {}` failed ({status})", args.join(" "));
    Ok(())
}

/// Run another xtask subcommand in its own process (`cargo run -p xtask -- ARGS`).
pub fn xtask(args: &[&str]) -> anyhow::Result<()> {
    let mut all = vec!["run", "--quiet", "--locked", "-p", "xtask", "--"];
    all.extend_from_slice(args);
    cargo(&all)
}
