// SPDX-License-Identifier: GPL-2.0-only
//! `gmblock`: a command-line client of one gmblock server or of a volume striped over
//! several (`--server` repeated, or `--grain` given), and `gmblock export`, which runs
//! nbdkit with gmblock's plugin (the `gmblock-nbdkit` crate) so NBD clients use the same
//! volume: one server's, or the striped one.

use anyhow::{bail, Context};
use clap::{Parser, Subcommand};
use gmblock::client::Client;
use gmblock::station::{Placement, StationConfig};
use gmblock::striped::{StripeConfig, StripedClient};
use gmblock::Volume;
use std::io::Write;
use std::net::SocketAddr;
use std::path::PathBuf;
use std::time::{Duration, Instant};

#[derive(Parser)]
#[command(name = "gmblock")]
struct Args {
    /// This client's node id on the link.
    #[arg(long)]
    node: u16,
    /// This client's UDP link address.
    #[arg(long, value_name = "IP:PORT")]
    listen: SocketAddr,
    /// A server: ID=IP:PORT. Repeated: a volume striped over the servers in this order.
    #[arg(long, value_name = "ID=IP:PORT", value_parser = gmblock::parse_peer, required = true)]
    server: Vec<(u16, SocketAddr)>,
    /// One server: chunks in flight at most.
    #[arg(long, default_value_t = 16)]
    window: usize,
    /// Striped: the stripe unit (bytes, or with a K/M suffix; default 32K). Given with one
    /// server, that server is read through the striping client too.
    #[arg(long, value_parser = gmblock::parse_bytes)]
    grain: Option<u32>,
    /// Striped: chunks in flight per server.
    #[arg(long, default_value_t = 8)]
    depth: u16,
    /// Striped: stripes read ahead of a sequential stream (0: none).
    #[arg(long, default_value_t = gmblock::striped::DEFAULT_READAHEAD_STRIPES)]
    readahead: u16,
    #[command(subcommand)]
    cmd: Cmd,
}

#[derive(Subcommand)]
enum Cmd {
    /// The volume's size and the server's data path.
    Info,
    /// Read LEN bytes at OFFSET to a file (or stdout).
    Read {
        #[arg(long)]
        offset: u64,
        #[arg(long)]
        len: u32,
        #[arg(long)]
        out: Option<PathBuf>,
    },
    /// Write a file's bytes (a multiple of 4 KiB, at most 1 MiB) at OFFSET, then flush.
    Write {
        #[arg(long)]
        offset: u64,
        #[arg(long = "in")]
        input: PathBuf,
    },
    /// Write a seeded pattern over [OFFSET, OFFSET+LEN) in 1 MiB requests, flush, read
    /// it back and compare; print MB/s both ways.
    Verify {
        #[arg(long, default_value_t = 0)]
        offset: u64,
        #[arg(long)]
        len: u64,
        #[arg(long, default_value_t = 1)]
        seed: u64,
    },
    /// Read [OFFSET, OFFSET+LEN) in 1 MiB requests and print MB/s (data discarded).
    Scan {
        #[arg(long, default_value_t = 0)]
        offset: u64,
        #[arg(long)]
        len: u64,
    },
    /// Make every acknowledged write durable.
    Flush,
    /// Deallocate a range (reads back as zeros).
    Trim {
        #[arg(long)]
        offset: u64,
        #[arg(long)]
        len: u32,
    },
    /// Export the volume over NBD: run nbdkit in the foreground with gmblock's plugin,
    /// which takes this command's --node and --listen as its own station, and its
    /// --server list (striped when repeated or --grain is given, with --grain and --depth;
    /// the export reads no stripes ahead).
    Export {
        /// The address nbdkit listens on.
        #[arg(long, default_value = "127.0.0.1")]
        bind: std::net::IpAddr,
        /// The NBD port.
        #[arg(long, default_value_t = 10809)]
        port: u16,
        /// The plugin (default: libgmblock_nbdkit.so beside this program).
        #[arg(long)]
        plugin: Option<PathBuf>,
        /// Offer the export read-only.
        #[arg(long)]
        read_only: bool,
    },
}

/// Replace this process with nbdkit serving the plugin; returns only on failure.
fn export(a: &Args, bind: std::net::IpAddr, port: u16, plugin: Option<PathBuf>, read_only: bool) -> anyhow::Error {
    use std::os::unix::process::CommandExt;
    let plugin = match plugin {
        Some(p) => p,
        None => match std::env::current_exe() {
            Ok(exe) => exe.with_file_name("libgmblock_nbdkit.so"),
            Err(e) => return anyhow::anyhow!("finding the plugin beside this program: {e}"),
        },
    };
    if !plugin.is_file() {
        return anyhow::anyhow!(
            "{}: no such plugin; build it with `cargo build -p trapeze-gmblock-nbdkit` or give --plugin",
            plugin.display()
        );
    }
    let mut cmd = std::process::Command::new("nbdkit");
    cmd.args(["-f", "-i", &bind.to_string(), "-p", &port.to_string()]);
    if read_only {
        cmd.arg("-r");
    }
    cmd.arg(&plugin).args(a.server.iter().map(|s| format!("server={}={}", s.0, s.1))).args([
        format!("node={}", a.node),
        format!("listen={}", a.listen),
        format!("window={}", a.window),
    ]);
    // Striped (several servers, or --grain): the plugin takes the same stripe options.
    if a.server.len() > 1 || a.grain.is_some() {
        if let Some(g) = a.grain {
            cmd.arg(format!("grain={g}"));
        }
        cmd.arg(format!("depth={}", a.depth));
        cmd.arg(format!("readahead={}", a.readahead));
    }
    let e = cmd.exec();
    if e.kind() == std::io::ErrorKind::NotFound {
        anyhow::anyhow!("nbdkit not found: install it (apt-get install nbdkit)")
    } else {
        anyhow::anyhow!("running nbdkit: {e}")
    }
}

/// The pattern byte at volume offset `at` for `seed`.
fn pattern(seed: u64, at: u64, out: &mut [u8]) {
    for (i, b) in out.iter_mut().enumerate() {
        let x = (at + i as u64).wrapping_mul(0x9E37_79B9_7F4A_7C15) ^ seed;
        *b = (x >> 29) as u8;
    }
}

const STEP: u64 = 1 << 20;

fn verify(c: &mut dyn Volume, offset: u64, len: u64, seed: u64) -> anyhow::Result<()> {
    let mut buf = vec![0u8; STEP as usize];
    let t = Instant::now();
    for at in (offset..offset + len).step_by(STEP as usize) {
        let n = STEP.min(offset + len - at) as usize;
        pattern(seed, at, &mut buf[..n]);
        c.write(at, &buf[..n]).with_context(|| format!("write at {at}"))?;
    }
    c.flush()?;
    let w = t.elapsed();
    let t = Instant::now();
    let mut want = vec![0u8; STEP as usize];
    for at in (offset..offset + len).step_by(STEP as usize) {
        let n = STEP.min(offset + len - at) as usize;
        c.read(at, &mut buf[..n]).with_context(|| format!("read at {at}"))?;
        pattern(seed, at, &mut want[..n]);
        if let Some(i) = (0..n).find(|&i| buf[i] != want[i]) {
            bail!("mismatch at byte {}: read {:#04x}, wrote {:#04x}", at + i as u64, buf[i], want[i]);
        }
    }
    let r = t.elapsed();
    let mb = len as f64 / 1e6;
    println!("verified {len} bytes: write {:.1} MB/s, read {:.1} MB/s", mb / w.as_secs_f64(), mb / r.as_secs_f64());
    Ok(())
}

fn scan(c: &mut dyn Volume, offset: u64, len: u64) -> anyhow::Result<()> {
    let mut buf = vec![0u8; STEP as usize];
    let t = Instant::now();
    for at in (offset..offset + len).step_by(STEP as usize) {
        let n = STEP.min(offset + len - at) as usize;
        c.read(at, &mut buf[..n]).with_context(|| format!("read at {at}"))?;
    }
    let s = t.elapsed().as_secs_f64();
    println!("{{\"bytes\": {len}, \"seconds\": {s:.6}, \"mb_s\": {:.1}}}", len as f64 / 1e6 / s);
    Ok(())
}

/// Connect to the one server, or to the striped volume.
fn open(a: &Args) -> anyhow::Result<Box<dyn Volume>> {
    let cfg = StationConfig {
        node: a.node,
        listen: a.listen,
        peers: a.server.clone(),
        region_bytes: 0,
        placement: Placement::HostRam,
        call_timeout: Duration::from_secs(2),
    };
    if a.server.len() == 1 && a.grain.is_none() {
        return Ok(Box::new(Client::connect(cfg, a.server[0].0, a.window)?));
    }
    let sc = StripeConfig {
        grain: a.grain.unwrap_or(StripeConfig::default().grain),
        depth: a.depth,
        readahead_stripes: a.readahead,
        ..StripeConfig::default()
    };
    let ids: Vec<u16> = a.server.iter().map(|s| s.0).collect();
    Ok(Box::new(StripedClient::connect(cfg, &ids, sc)?))
}

fn main() -> anyhow::Result<()> {
    let a = Args::parse();
    if let Cmd::Export { bind, port, ref plugin, read_only } = a.cmd {
        // The plugin binds --listen itself: this process must not.
        return Err(export(&a, bind, port, plugin.clone(), read_only));
    }
    let mut c = open(&a)?;
    match a.cmd {
        Cmd::Info => println!("{}", c.describe()),
        Cmd::Read { offset, len, out } => {
            let mut buf = vec![0u8; len as usize];
            c.read(offset, &mut buf)?;
            match out {
                Some(p) => std::fs::write(&p, &buf).with_context(|| format!("{}", p.display()))?,
                None => std::io::stdout().write_all(&buf)?,
            }
        }
        Cmd::Write { offset, input } => {
            let data = std::fs::read(&input).with_context(|| format!("{}", input.display()))?;
            c.write(offset, &data)?;
            c.flush()?;
        }
        Cmd::Verify { offset, len, seed } => verify(c.as_mut(), offset, len, seed)?,
        Cmd::Scan { offset, len } => scan(c.as_mut(), offset, len)?,
        Cmd::Flush => c.flush()?,
        Cmd::Trim { offset, len } => c.trim(offset, len)?,
        // Ran nbdkit (or failed) before connecting, above.
        Cmd::Export { .. } => {}
    }
    Ok(())
}
