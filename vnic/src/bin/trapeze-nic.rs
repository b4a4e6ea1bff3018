// SPDX-License-Identifier: GPL-2.0-only
//! `trapeze-nic`: start a virtual programmable NIC.
//!
//! ```text
//! trapeze-nic --name n0 --node 0 --link udp:127.0.0.1:7000 --peer 1=127.0.0.1:7001
//! ```
//! The NIC boots the native firmware (or, with `--flashed IMAGE`, the riscv32 image on an
//! emulated core), serves its control socket (status, load firmware, attach a host) and
//! runs until interrupted. Set `RUST_LOG=info` to see the flashed firmware's defmt log.

use anyhow::Context;
use clap::Parser;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;
use trapeze_vnic::control::{default_socket_path, serve};
use trapeze_vnic::dma::Machine;
use trapeze_vnic::ivshmem::{register_guest_ram, IvshmemServer};
use trapeze_vnic::link::backend::BackendSpec;
use trapeze_vnic::link::{FaultConfig, Link};
use trapeze_vnic::nic::{FirmwareKind, Nic};

#[derive(Parser)]
#[command(name = "trapeze-nic", about = "A virtual programmable NIC running the Trapeze firmware")]
struct Args {
    /// Name of this NIC (its control socket is NAME.sock in the socket directory).
    #[arg(long)]
    name: String,
    /// This NIC's node id on the link.
    #[arg(long)]
    node: u16,
    /// Link backend: udp:IP:PORT (local bind address) or ether:IFNAME (raw Ethernet, root).
    #[arg(long)]
    link: BackendSpec,
    /// A peer: NODE=IP:PORT for udp, NODE=MAC for ether. Repeat for each peer.
    #[arg(long = "peer")]
    peers: Vec<String>,
    /// Link faults and wire delay, e.g. drop=1%,dup=0.5%,reorder=1%,corrupt=0.1%,seed=7,delay=20us
    /// (default none).
    #[arg(long, default_value = "none")]
    faults: FaultConfig,
    /// Control socket path (default: $XDG_RUNTIME_DIR/trapeze/NAME.sock or /tmp/trapeze-UID/NAME.sock).
    #[arg(long)]
    control: Option<PathBuf>,
    /// How long an idle processor polls before sleeping on its doorbell, µs.
    #[arg(long, default_value_t = 50, value_parser = clap::value_parser!(u64).range(0..=1_000_000))]
    spin_us: u64,
    /// Run this firmware image (riscv32 ELF, e.g. from `cargo xtask build`) on the emulated
    /// core instead of the native firmware.
    #[arg(long, value_name = "IMAGE")]
    flashed: Option<PathBuf>,
    /// Serve a QEMU guest: listen on this Unix socket as an ivshmem-doorbell server (start
    /// the NIC before QEMU; `-chardev socket,path=PATH,id=n -device ivshmem-doorbell,chardev=n,vectors=V`).
    #[arg(long, value_name = "PATH")]
    ivshmem: Option<PathBuf>,
    /// MSI-X vectors offered to the guest (must match the device's `vectors=`).
    #[arg(long, default_value_t = 1, value_parser = clap::value_parser!(u32).range(1..=64))]
    vectors: u32,
    /// The guest's RAM (a `memory-backend-file,share=on` file): guest-physical addresses
    /// become DMA addresses.
    #[arg(long, value_name = "PATH")]
    guest_ram: Option<PathBuf>,
    /// The guest's QEMU machine type, for the RAM layout above 3 GiB.
    #[arg(long, default_value = "pc", value_parser = ["pc", "q35"])]
    machine: String,
    /// Print a status line every SECS seconds.
    #[arg(long, value_name = "SECS", value_parser = clap::value_parser!(u64).range(1..))]
    status_every: Option<u64>,
}

fn main() {
    tracing_subscriber::fmt()
        .with_env_filter(tracing_subscriber::EnvFilter::try_from_default_env().unwrap_or_else(|_| "info".into()))
        .with_writer(std::io::stderr)
        .init();
    if let Err(e) = run(Args::parse()) {
        eprintln!("trapeze-nic: error: {e:#}");
        std::process::exit(1);
    }
}

fn run(a: Args) -> anyhow::Result<()> {
    let backend = a.link.open(&a.peers).with_context(|| format!("opening link {}", a.link))?;
    let link = Link::new(a.node, backend, a.faults);
    let nic = Arc::new(Nic::new(&a.name, link, Duration::from_micros(a.spin_us))?);
    match &a.flashed {
        None => nic.start(FirmwareKind::Native)?,
        Some(path) => {
            let bytes = std::fs::read(path).with_context(|| format!("reading firmware image {}", path.display()))?;
            nic.load_image(&bytes).with_context(|| format!("flashing {}", path.display()))?;
        }
    }
    if let Some(ram) = &a.guest_ram {
        let machine = if a.machine == "q35" { Machine::Q35 } else { Machine::Pc };
        register_guest_ram(&nic, ram, machine).with_context(|| format!("mapping guest RAM {}", ram.display()))?;
    }
    let _ivshmem = match &a.ivshmem {
        Some(p) => Some(IvshmemServer::start(nic.clone(), p, a.vectors)?),
        None => None,
    };
    let path = a.control.unwrap_or_else(|| default_socket_path(&a.name));
    let _server = serve(nic.clone(), &path)?;
    let st = nic.status();
    eprintln!(
        "trapeze-nic {}: node {} on {}, firmware {} ({}), control socket {}{}",
        a.name,
        a.node,
        a.link,
        st.fw_version,
        st.mode,
        path.display(),
        a.ivshmem.as_ref().map_or(String::new(), |p| format!(", ivshmem server {}", p.display()))
    );
    loop {
        std::thread::sleep(Duration::from_secs(a.status_every.unwrap_or(3600)));
        if a.status_every.is_some() {
            let s = nic.status();
            let c = |n: &str| s.counters.iter().find(|(k, _)| k == n).map_or(0, |x| x.1);
            eprintln!(
                "{}: fw {} {} tx {} rx {} drops(ring {} crc {}) bad-token {} dma-refused {} link tx {} rx {} crc-err {}",
                s.name,
                s.fw_state,
                s.mode,
                c("tx_packets"),
                c("rx_packets"),
                c("rx_drop_ring_full"),
                c("rx_drop_crc"),
                c("rx_bad_token"),
                s.dma_refused,
                s.link.packets_sent,
                s.link.packets_received,
                s.link.crc_errors
            );
        }
    }
}
