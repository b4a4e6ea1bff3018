// SPDX-License-Identifier: GPL-2.0-only
//! A testbed: virtual NICs in this process, each with a host attached in process, on an
//! in-process switch or UDP, and the flashable firmware image built on demand. Used by the
//! device's integration tests and `cargo xtask bench nic`.

use crate::host::{random_seed, HostPort, DEFAULT_REGION_BASE};
use std::sync::Arc;
use std::time::{Duration, Instant};
use trapeze_firmware::iface::layout::Policy;
use trapeze_host::endpoint::EndpointConfig;
use trapeze_vnic::engines::new_eventfd;
use trapeze_vnic::key::ClusterKey;
use trapeze_vnic::link::backend::{InProcSwitch, UdpBackend};
use trapeze_vnic::link::{FaultConfig, Link, LinkBackend};
use trapeze_vnic::nic::{FirmwareKind, Nic};
use trapeze_vnic::shm::Mapping;

/// Which processor runs the firmware.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Mode {
    Native,
    Flashed,
}

/// Which link the NICs share.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum LinkKind {
    InProc,
    Udp,
}

pub const REGION_BYTES: usize = 8 << 20;

/// A NIC with its in-process host.
pub struct Node {
    pub nic: Arc<Nic>,
    pub host: HostPort,
    /// The host's frame region (DMA base [`DEFAULT_REGION_BASE`]).
    pub region: Arc<Mapping>,
}

/// Start `nic` in `mode`; flashed mode needs the image (ELF bytes).
pub fn start(nic: &Nic, mode: Mode, image: Option<&[u8]>) -> anyhow::Result<()> {
    match mode {
        Mode::Native => nic.start(FirmwareKind::Native),
        Mode::Flashed => {
            let image = image.ok_or_else(|| anyhow::anyhow!("flashed mode needs a firmware image"))?;
            nic.load_image(image).map(|_| ())
        }
    }
}

fn backends(kind: LinkKind, n: usize) -> anyhow::Result<Vec<Box<dyn LinkBackend>>> {
    Ok(match kind {
        LinkKind::InProc => {
            let sw = InProcSwitch::new();
            (0..n).map(|i| Box::new(sw.port(i as u16)) as Box<dyn LinkBackend>).collect()
        }
        LinkKind::Udp => {
            let mut b = Vec::with_capacity(n);
            for _ in 0..n {
                b.push(UdpBackend::bind(std::net::SocketAddr::from(([127, 0, 0, 1], 0)))?);
            }
            let addrs: Vec<_> = b.iter().map(|u| u.local_addr()).collect();
            for u in b.iter_mut() {
                for (i, a) in addrs.iter().enumerate() {
                    u.add_peer(i as u16, *a);
                }
            }
            b.into_iter().map(|u| Box::new(u) as Box<dyn LinkBackend>).collect()
        }
    })
}

/// Testbed options beyond mode and link.
#[derive(Clone, Debug)]
pub struct Options {
    /// Per-node link faults (missing entries: none).
    pub faults: Vec<FaultConfig>,
    pub mtu: u32,
    /// How long an idle NIC processor spins before parking.
    pub spin: Duration,
    /// The flashed image (ELF bytes), for [`Mode::Flashed`].
    pub image: Option<Vec<u8>>,
    /// Per-node cluster keys: a node's link authenticates every packet under its key
    /// (`trapeze_vnic::link::mac`); a missing entry or `None`: unauthenticated.
    pub keys: Vec<Option<ClusterKey>>,
}

impl Default for Options {
    fn default() -> Self {
        Options { faults: Vec::new(), mtu: 8192, spin: Duration::from_micros(50), image: None, keys: Vec::new() }
    }
}

/// `n` NICs on one link, node ids 0..n, each started in `mode` with a host attached.
pub fn cluster(n: usize, mode: Mode, link: LinkKind, opt: &Options) -> anyhow::Result<Vec<Node>> {
    let mut nodes = Vec::with_capacity(n);
    for (i, b) in backends(link, n)?.into_iter().enumerate() {
        let f = opt.faults.get(i).copied().unwrap_or_default();
        let mut link = Link::new(i as u16, b, f);
        link.set_key(opt.keys.get(i).and_then(Option::as_ref));
        let nic = Arc::new(Nic::new(&format!("t{i}"), link, opt.spin)?);
        start(&nic, mode, opt.image.as_deref())?;
        let region = Arc::new(Mapping::create_memfd("testbed-frames", REGION_BYTES)?);
        nic.shared()
            .dma
            .register("host", DEFAULT_REGION_BASE, region.clone(), 0, REGION_BYTES as u64)
            .map_err(|e| anyhow::anyhow!("{e}"))?;
        let db = Arc::new(new_eventfd()?);
        let irq = Arc::new(new_eventfd()?);
        nic.shared().wakers.add_doorbell(db.clone());
        nic.shared().notifier.add(irq.clone());
        let cfg =
            EndpointConfig { node_id: i as u16, policy: Policy::Eager, mtu: opt.mtu, ..EndpointConfig::default() };
        let host = HostPort::new(nic.mem(), region.clone(), DEFAULT_REGION_BASE, db, irq, cfg, random_seed())?;
        nodes.push(Node { nic, host, region });
    }
    Ok(nodes)
}

/// Wait (bounded) until `f` holds; panics naming `what` on timeout (tests only).
pub fn eventually(what: &str, timeout: Duration, mut f: impl FnMut() -> bool) {
    let t0 = Instant::now();
    while !f() {
        assert!(t0.elapsed() < timeout, "timed out after {timeout:?} waiting for {what}");
        std::thread::sleep(Duration::from_millis(1));
    }
}

/// A firmware counter of `n`'s NIC, by name.
pub fn counter(n: &Node, name: &str) -> u64 {
    n.nic.status().counters.iter().find(|(k, _)| k == name).map_or(0, |x| x.1)
}

/// Deterministic test data for message `id`.
pub fn data(id: u32, len: usize) -> Vec<u8> {
    let mut x = (id as u64 + 1).wrapping_mul(0x9E37_79B9_7F4A_7C15);
    (0..len)
        .map(|_| {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            x as u8
        })
        .collect()
}

/// Build the flashable image (or read `$TRAPEZE_FW_IMAGE`) and return its bytes. The
/// path comes from cargo's own report, so any target directory works.
pub fn build_image() -> Result<Vec<u8>, String> {
    use std::path::{Path, PathBuf};
    if let Some(p) = std::env::var_os("TRAPEZE_FW_IMAGE") {
        return std::fs::read(&p).map_err(|e| format!("TRAPEZE_FW_IMAGE={}: {e}", Path::new(&p).display()));
    }
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).parent().expect("the crate has a parent").to_path_buf();
    let cargo = std::env::var("CARGO").unwrap_or_else(|_| "cargo".into());
    let out = std::process::Command::new(cargo)
        .args(["build", "-p", "trapeze-firmware", "--bin", "trapeze-fw", "--features", "image"])
        .args(["--target", "riscv32imac-unknown-none-elf", "--profile", "fw"])
        .arg("--message-format=json-render-diagnostics")
        .env("DEFMT_LOG", "info")
        .current_dir(root)
        .stderr(std::process::Stdio::inherit())
        .output()
        .map_err(|e| format!("running cargo: {e}"))?;
    if !out.status.success() {
        return Err(format!("building the firmware image failed ({})", out.status));
    }
    let exe = String::from_utf8_lossy(&out.stdout)
        .lines()
        .filter_map(|l| serde_json::from_str::<serde_json::Value>(l).ok())
        .filter(|v| v["reason"] == "compiler-artifact" && v["target"]["name"] == "trapeze-fw")
        .find_map(|v| v["executable"].as_str().map(PathBuf::from))
        .ok_or("cargo reported no trapeze-fw executable")?;
    std::fs::read(&exe).map_err(|e| format!("{}: {e}", exe.display()))
}
