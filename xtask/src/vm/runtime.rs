// SPDX-License-Identifier: GPL-2.0-only
//! The host side of a run: its runtime directory, free UDP ports, the target directory, programs on PATH.

use anyhow::{ensure, Context};
use std::fs;
use std::net::UdpSocket;
use std::path::{Path, PathBuf};
use std::process::Command;

/// `n` UDP ports on 127.0.0.1 that were free a moment ago.
pub(super) fn free_udp_ports(n: usize) -> anyhow::Result<Vec<u16>> {
    let socks: Vec<UdpSocket> =
        (0..n).map(|_| UdpSocket::bind("127.0.0.1:0")).collect::<Result<_, _>>().context("finding free UDP ports")?;
    socks.iter().map(|s| Ok(s.local_addr()?.port())).collect()
}

/// `$XDG_RUNTIME_DIR/trapeze`, else `/dev/shm/trapeze-UID`, else `/tmp/trapeze-UID`:
/// made mode 0700, or checked to be this user's and private
/// ([`trapeze_vnic::local::ensure_private_dir`]), as it holds the guests' RAM files and
/// their NICs' sockets.
pub(super) fn runtime_base() -> anyhow::Result<PathBuf> {
    let uid = rustix::process::geteuid().as_raw();
    let base = match std::env::var_os("XDG_RUNTIME_DIR").filter(|v| !v.is_empty()) {
        Some(d) => PathBuf::from(d).join("trapeze"),
        None if Path::new("/dev/shm").is_dir() => PathBuf::from(format!("/dev/shm/trapeze-{uid}")),
        None => PathBuf::from(format!("/tmp/trapeze-{uid}")),
    };
    trapeze_vnic::local::ensure_private_dir(&base)?;
    Ok(base)
}

/// Remove `vm-PID` directories whose xtask is gone (their logs, and any RAM files a killed
/// run left behind).
pub(super) fn prune_stale(base: &Path) {
    let Ok(entries) = fs::read_dir(base) else { return };
    for e in entries.flatten() {
        let name = e.file_name().to_string_lossy().into_owned();
        let Some(pid) = name.strip_prefix("vm-").and_then(|p| p.parse::<u32>().ok()) else { continue };
        let gone = pid != std::process::id() && !Path::new(&format!("/proc/{pid}")).exists();
        if gone && fs::remove_dir_all(e.path()).is_ok() {
            eprintln!("  removed the previous run's {}", e.path().display());
        }
    }
}

/// The workspace's cargo target directory.
pub(super) fn target_dir() -> anyhow::Result<PathBuf> {
    let cargo = std::env::var("CARGO").unwrap_or_else(|_| "cargo".into());
    let out = Command::new(cargo)
        .args(["metadata", "--format-version", "1", "--no-deps"])
        .current_dir(crate::workspace_root())
        .output()
        .context("cargo metadata")?;
    ensure!(out.status.success(), "cargo metadata failed ({})", out.status);
    let meta: serde_json::Value = serde_json::from_slice(&out.stdout)?;
    Ok(PathBuf::from(meta["target_directory"].as_str().context("cargo metadata: target_directory")?))
}

pub(super) fn which(cmd: &str) -> Option<PathBuf> {
    std::env::var_os("PATH").and_then(|p| std::env::split_paths(&p).map(|d| d.join(cmd)).find(|p| p.is_file()))
}
