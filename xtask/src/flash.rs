// SPDX-License-Identifier: GPL-2.0-only
//! `cargo xtask flash`: build the firmware image (or take `--elf`) and load it into
//! running virtual NICs through their control sockets (`load` request: the NIC reads the
//! ELF file, validates it, loads it, checks its checksum and waits for the firmware's
//! ready word). Prints, for each NIC, the firmware version and build id it now runs.
//!
//! Each NIC validates the image itself and refuses a bad one without disturbing the
//! firmware it runs; a refusal (or an unreachable NIC) is printed with the NIC's error,
//! the other NICs are still flashed, and the command exits non-zero.

use anyhow::{bail, Context};
use std::path::{Path, PathBuf};
use std::time::Duration;
use trapeze_vnic::control::{default_socket_path, socket_dir, ControlClient, Request};

#[derive(clap::Args)]
pub struct FlashArgs {
    /// NIC to flash, by name (its control socket is `<socket dir>/NAME.sock`); repeatable.
    #[arg(long = "nic", value_name = "NAME", required_unless_present_any = ["all", "socket"])]
    nics: Vec<String>,
    /// Flash every NIC whose control socket in the socket directory answers.
    #[arg(long, conflicts_with = "nics")]
    all: bool,
    /// Flash the NIC serving this control socket; repeatable.
    #[arg(long, value_name = "PATH")]
    socket: Vec<PathBuf>,
    /// Load this ELF instead of building the image.
    #[arg(long, value_name = "PATH")]
    elf: Option<PathBuf>,
    /// defmt log filter compiled into the image (as for `cargo xtask build`).
    #[arg(long, value_name = "FILTER")]
    defmt_log: Option<String>,
    /// Print one JSON object per NIC on stdout.
    #[arg(long)]
    json: bool,
}

/// How long a NIC may take to answer `load` (halt, load, verify, boot, ready word).
const LOAD_TIMEOUT: Duration = Duration::from_secs(30);
/// How long a socket found by `--all` may take to answer `status`.
const PROBE_TIMEOUT: Duration = Duration::from_secs(2);

pub fn run(a: FlashArgs) -> anyhow::Result<()> {
    let path = match a.elf {
        Some(p) => p,
        None => {
            crate::build::build_image(&crate::build::defmt_filter(a.defmt_log))?;
            crate::build::image_path()?
        }
    };
    // The NICs read the file themselves, possibly from another working directory.
    let path = std::fs::canonicalize(&path).with_context(|| format!("image {}", path.display()))?;
    match std::fs::read(&path).map_err(anyhow::Error::from).and_then(|b| crate::build::check_image(&b)) {
        Ok(i) => eprintln!(
            "image {}: firmware v{}, build {:#010x}, checksum {:#010x}",
            path.display(),
            i.version_string(),
            i.build_id,
            i.checksum
        ),
        // Still sent: each NIC reports its own refusal.
        Err(e) => eprintln!("image {}: fails the local check: {e:#}", path.display()),
    }

    let targets: Vec<(String, PathBuf)> = if a.all {
        let found = discover(&socket_dir())?;
        if found.is_empty() {
            bail!("no running NIC answers in {}", socket_dir().display());
        }
        found
    } else {
        a.nics
            .iter()
            .map(|n| (n.clone(), default_socket_path(n)))
            .chain(a.socket.iter().map(|p| (p.display().to_string(), p.clone())))
            .collect()
    };

    let mut failed = 0;
    for (name, sock) in &targets {
        match flash_one(sock, &path) {
            Ok(v) => {
                let st = &v["status"];
                if a.json {
                    println!("{}", serde_json::json!({ "nic": name, "ok": true, "status": st, "image": v["image"] }));
                } else {
                    println!(
                        "{name}: firmware v{} build {} ({}, checksum {})",
                        st["fw_version"].as_str().unwrap_or("?"),
                        st["fw_build_id"].as_str().map_or("?".to_string(), |b| format!("0x{b}")),
                        st["fw_state"].as_str().unwrap_or("?"),
                        st["image"]["checksum"].as_str().map_or("?".to_string(), |c| format!("0x{c}")),
                    );
                }
            }
            Err(e) => {
                failed += 1;
                if a.json {
                    println!("{}", serde_json::json!({ "nic": name, "ok": false, "error": format!("{e:#}") }));
                } else {
                    println!("{name}: error: {e:#}");
                }
            }
        }
    }
    if failed > 0 {
        bail!("{failed} of {} NIC(s) not flashed", targets.len());
    }
    Ok(())
}

/// Send `load` to the NIC at `sock`; its answer (with `status` and `image`).
fn flash_one(sock: &Path, image: &Path) -> anyhow::Result<serde_json::Value> {
    let client = ControlClient::connect(sock)?;
    let req = Request::Load { path: image.display().to_string() };
    Ok(client.request_with_fds(&req, &[], LOAD_TIMEOUT)?.0)
}

/// Every `*.sock` in `dir` that answers a status request, as (NIC name, socket), by name.
fn discover(dir: &Path) -> anyhow::Result<Vec<(String, PathBuf)>> {
    let entries = match std::fs::read_dir(dir) {
        Ok(e) => e,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(Vec::new()),
        Err(e) => return Err(e).with_context(|| format!("listing {}", dir.display())),
    };
    let mut found = Vec::new();
    for entry in entries {
        let path = entry?.path();
        if path.extension().is_none_or(|e| e != "sock") {
            continue;
        }
        let answer =
            ControlClient::connect(&path).and_then(|c| Ok(c.request_with_fds(&Request::Status, &[], PROBE_TIMEOUT)?.0));
        match answer {
            Ok(v) => {
                let name = v["status"]["name"]
                    .as_str()
                    .map(String::from)
                    .unwrap_or_else(|| path.file_stem().map_or_else(String::new, |s| s.to_string_lossy().into_owned()));
                found.push((name, path));
            }
            Err(e) => eprintln!("skipping {}: {e:#}", path.display()),
        }
    }
    found.sort();
    Ok(found)
}
