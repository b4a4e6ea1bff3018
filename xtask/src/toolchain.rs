// SPDX-License-Identifier: GPL-2.0-only
//! The pinned toolchain's targets and components (`rust-toolchain.toml`), checked before
//! any subcommand runs and added with rustup when missing.
//!
//! rustup adds what the toolchain file names when it installs the toolchain, but not to a
//! toolchain that is already there, and not at all where `RUSTUP_AUTO_INSTALL=0`: such a
//! machine builds the host crates and then fails on the riscv32 image with "can't find
//! crate for `core`". So every `cargo xtask` run compares the file with what the active
//! toolchain has and runs (and prints) `rustup target add` / `rustup component add` for
//! the difference. Without rustup it stops with the commands to run.

use anyhow::{bail, Context};
use std::process::Command;

#[derive(serde::Deserialize)]
struct ToolchainFile {
    toolchain: Toolchain,
}

#[derive(serde::Deserialize)]
struct Toolchain {
    channel: String,
    #[serde(default)]
    targets: Vec<String>,
    #[serde(default)]
    components: Vec<String>,
}

/// What `rust-toolchain.toml` pins.
fn pinned() -> anyhow::Result<Toolchain> {
    let path = crate::workspace_root().join("rust-toolchain.toml");
    let text = std::fs::read_to_string(&path).with_context(|| format!("reading {}", path.display()))?;
    let file: ToolchainFile = toml::from_str(&text).with_context(|| format!("parsing {}", path.display()))?;
    Ok(file.toolchain)
}

/// Run rustup in the workspace (so the toolchain file applies) and return its stdout.
fn rustup(args: &[&str]) -> anyhow::Result<String> {
    let out = Command::new("rustup")
        .args(args)
        .current_dir(crate::workspace_root())
        .output()
        .with_context(|| format!("running rustup {}", args.join(" ")))?;
    if !out.status.success() {
        bail!("`rustup {}` failed: {}", args.join(" "), String::from_utf8_lossy(&out.stderr).trim());
    }
    Ok(String::from_utf8_lossy(&out.stdout).into_owned())
}

/// Is `name` among rustup's installed list? Components may be listed with the host
/// triple appended (`clippy-x86_64-unknown-linux-gnu`), targets as themselves.
fn listed(installed: &str, name: &str, host: &str) -> bool {
    let suffixed = format!("{name}-{host}");
    installed.lines().map(str::trim).any(|l| l == name || l == suffixed)
}

/// Make sure the active toolchain has every target and component the toolchain file
/// names, adding what is missing.
pub fn ensure() -> anyhow::Result<()> {
    let want = pinned()?;
    let Ok(active) = rustup(&["show", "active-toolchain"]) else {
        return no_rustup(&want);
    };
    // "1.95.0-x86_64-unknown-linux-gnu (overridden by '…/rust-toolchain.toml')"
    let active = active.split_whitespace().next().unwrap_or_default().to_string();
    if !active.starts_with(&want.channel) {
        eprintln!(
            "xtask: note: the active toolchain is {active}, not the pinned {} (RUSTUP_TOOLCHAIN or an override?)",
            want.channel
        );
    }
    // The host triple is the toolchain name after its channel.
    let host = active.strip_prefix(&want.channel).and_then(|h| h.strip_prefix('-')).unwrap_or("");
    let targets = rustup(&["target", "list", "--installed", "--toolchain", &active])?;
    let components = rustup(&["component", "list", "--installed", "--toolchain", &active])?;
    let missing_targets: Vec<&str> =
        want.targets.iter().map(String::as_str).filter(|t| !listed(&targets, t, host)).collect();
    let missing_components: Vec<&str> =
        want.components.iter().map(String::as_str).filter(|c| !listed(&components, c, host)).collect();
    for (kind, missing) in [("target", &missing_targets), ("component", &missing_components)] {
        if missing.is_empty() {
            continue;
        }
        let mut args = vec![kind, "add", "--toolchain", &active];
        args.extend(missing.iter());
        eprintln!("xtask: the toolchain lacks what rust-toolchain.toml names; running: rustup {}", args.join(" "));
        let st = Command::new("rustup").args(&args).current_dir(crate::workspace_root()).status()?;
        if !st.success() {
            bail!("`rustup {}` failed ({st}); run it by hand and try again", args.join(" "));
        }
    }
    Ok(())
}

/// Does the workspace's rustc have the standard library (`core`) of `target`?
pub fn target_installed(target: &str) -> bool {
    Command::new("rustc")
        .args(["--print", "target-libdir", "--target", target])
        .current_dir(crate::workspace_root())
        .output()
        .is_ok_and(|o| o.status.success() && std::path::Path::new(String::from_utf8_lossy(&o.stdout).trim()).is_dir())
}

/// No rustup: the toolchain came some other way. Check the one thing the build cannot do
/// without (each target's `core`) and name the commands if it is missing.
fn no_rustup(want: &Toolchain) -> anyhow::Result<()> {
    for t in &want.targets {
        if !target_installed(t) {
            bail!(
                "the Rust target {t} is not installed and rustup is not available to add it. Install rustup \
                 (https://rustup.rs, or Debian's `rustup` package) and run `rustup toolchain install` in this \
                 directory, or install {t}'s standard library for your rustc by other means"
            );
        }
    }
    eprintln!(
        "xtask: note: no rustup; assuming the toolchain has the components rust-toolchain.toml names ({})",
        want.components.join(", ")
    );
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::listed;

    #[test]
    fn listed_matches_whole_names_and_host_suffixed_components() {
        let host = "x86_64-unknown-linux-gnu";
        let installed = "cargo-x86_64-unknown-linux-gnu\nclippy-x86_64-unknown-linux-gnu\nrust-src\n";
        assert!(listed(installed, "clippy", host));
        assert!(listed(installed, "rust-src", host));
        assert!(!listed(installed, "rust", host), "a prefix of another name is not that name");
        assert!(!listed(installed, "llvm-tools", host));
        assert!(listed("riscv32imac-unknown-none-elf\n", "riscv32imac-unknown-none-elf", host));
        assert!(!listed("x86_64-unknown-linux-gnu\n", "riscv32imac-unknown-none-elf", host));
    }

    #[test]
    fn the_toolchain_file_parses() {
        let t = super::pinned().unwrap();
        assert!(!t.channel.is_empty());
        assert!(t.targets.iter().any(|x| x == "riscv32imac-unknown-none-elf"));
    }
}
