// SPDX-License-Identifier: GPL-2.0-only
//! Running cargo for `xtask test`: the test binaries' build, `cargo test` with its output
//! echoed and tallied, and the fmt and doc checks.

use super::report::{Parser, Tally};
use anyhow::{ensure, Context};
use std::collections::HashMap;
use std::io::{BufRead, BufReader};
use std::process::{Command, Stdio};

fn cargo_cmd() -> Command {
    let mut c = Command::new(std::env::var("CARGO").unwrap_or_else(|_| "cargo".into()));
    c.current_dir(crate::workspace_root());
    c
}

/// A test binary: how to select it again with `cargo test`.
#[derive(Clone, Debug)]
pub struct Binary {
    /// `--lib`, `--test NAME`, `--bin NAME`, … — cargo's selector for this target.
    pub selector: Vec<String>,
}

/// Build every test binary (`cargo test --no-run`) and map each executable's file name
/// (`flashed-1a2b…`, as the test output names it) to its target.
pub fn test_binaries() -> anyhow::Result<HashMap<String, Binary>> {
    eprintln!("$ cargo test --workspace --locked --no-run");
    let out = cargo_cmd()
        .args(["test", "--workspace", "--locked", "--no-run", "--message-format=json-render-diagnostics"])
        .stderr(Stdio::inherit())
        .output()
        .context("running cargo test --no-run")?;
    ensure!(out.status.success(), "building the tests failed ({})", out.status);
    let mut map = HashMap::new();
    for v in
        String::from_utf8_lossy(&out.stdout).lines().filter_map(|l| serde_json::from_str::<serde_json::Value>(l).ok())
    {
        let (Some(exe), Some(name)) = (v["executable"].as_str(), v["target"]["name"].as_str()) else { continue };
        let kind = v["target"]["kind"][0].as_str().unwrap_or_default();
        let selector = match kind {
            "lib" | "rlib" | "proc-macro" | "cdylib" | "staticlib" => vec!["--lib".to_string()],
            "bin" | "test" | "bench" | "example" => vec![format!("--{kind}"), name.to_string()],
            _ => continue,
        };
        let file = exe.rsplit('/').next().unwrap_or(exe).to_string();
        map.insert(file, Binary { selector });
    }
    Ok(map)
}

/// `cargo test --locked --no-fail-fast ARGS -- TEST_ARGS`, its stdout and stderr echoed as
/// one stream and tallied. A failing test is in the tally, not an error; an error is
/// cargo itself failing to run.
pub fn cargo_test(args: &[&str], test_args: &[&str]) -> anyhow::Result<Tally> {
    let mut cmd = cargo_cmd();
    cmd.args(["test", "--locked", "--no-fail-fast"]).args(args);
    if !test_args.is_empty() {
        cmd.arg("--").args(test_args);
    }
    eprintln!("$ cargo test --locked --no-fail-fast {}{}", args.join(" "), shown_test_args(test_args));
    // One pipe for both streams keeps cargo's `Running` lines (stderr) in order with the
    // binaries' results (stdout).
    let (reader, writer) = std::io::pipe().context("creating a pipe")?;
    cmd.stdout(writer.try_clone()?).stderr(writer);
    let mut child = cmd.spawn().context("running cargo test")?;
    drop(cmd); // close our copies of the write end, so the reader sees the end
    let mut parser = Parser::default();
    for line in BufReader::new(reader).lines() {
        let line = line.context("reading cargo test's output")?;
        println!("{line}");
        parser.line(&line);
    }
    let status = child.wait()?;
    let tally = parser.finish();
    // A test failure makes cargo exit 101 with the failures in the tally; a non-zero exit
    // with nothing failed in it is cargo failing (a build error, a bad argument).
    ensure!(status.success() || !tally.failed.is_empty(), "cargo test failed ({status}) with no test failing");
    Ok(tally)
}

fn shown_test_args(test_args: &[&str]) -> String {
    if test_args.len() > 6 {
        format!(" -- {} … ({} names)", test_args[..2].join(" "), test_args.len() - 2)
    } else if test_args.is_empty() {
        String::new()
    } else {
        format!(" -- {}", test_args.join(" "))
    }
}

/// `cargo fmt --check` over the workspace, and rustfmt over kernel-crate (not a member),
/// both with the workspace's rustfmt.toml.
pub fn fmt_check() -> anyhow::Result<()> {
    crate::cargo(&["fmt", "--all", "--check"])?;
    let root = crate::workspace_root();
    eprintln!("$ rustfmt --check --edition 2021 kernel-crate/src/trapeze.rs");
    let st = Command::new("rustfmt")
        .args(["--check", "--edition", "2021", "--config-path"])
        .arg(root.join("rustfmt.toml"))
        .arg(root.join("kernel-crate/src/trapeze.rs"))
        .current_dir(&root)
        .status()
        .context("running rustfmt")?;
    ensure!(st.success(), "kernel-crate is not formatted: run `rustfmt --edition 2021 kernel-crate/src/trapeze.rs`");
    Ok(())
}

/// `cargo doc --workspace --no-deps` with broken intra-doc links denied.
pub fn doc_check() -> anyhow::Result<()> {
    let flags = "-D rustdoc::broken_intra_doc_links -D rustdoc::private_intra_doc_links";
    eprintln!("$ RUSTDOCFLAGS='{flags}' cargo doc --workspace --no-deps --locked");
    let st = cargo_cmd()
        .args(["doc", "--workspace", "--no-deps", "--locked"])
        .env("RUSTDOCFLAGS", flags)
        .status()
        .context("running cargo doc")?;
    ensure!(st.success(), "cargo doc failed ({st})");
    Ok(())
}
