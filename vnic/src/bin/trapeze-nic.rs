// SPDX-License-Identifier: GPL-2.0-only
//! `trapeze-nic`: start a virtual programmable NIC, or ask a running one for its status.
//!
//! ```text
//! trapeze-nic --name n0 --node 0 --link udp:127.0.0.1:7000 --peer 1=127.0.0.1:7001
//! trapeze-nic status n0
//! trapeze-nic ping n0 --peer 1 --count 5                # link-level echoes, NIC to NIC
//! trapeze-nic keygen ~/.config/trapeze/cluster.key    # then --key FILE on every NIC
//! trapeze-nic trace-report n0.trace n1.trace           # from NICs started with --trace
//! ```
//! The NIC boots the native firmware (or, with `--flashed IMAGE`, the riscv32 image on an
//! emulated core), serves its control socket (status, load firmware, attach a host) and
//! runs until SIGINT or SIGTERM, when it removes its sockets and exits 0. With `--key FILE`
//! every packet on its link carries a MAC under the cluster key and packets that fail it
//! are dropped (`link::mac`); without, the link is unauthenticated. Set
//! `RUST_LOG=info` to see the flashed firmware's defmt log.

use anyhow::{bail, Context};
use clap::{Args, Parser, Subcommand};
use serde_json::Value;
use std::io::IsTerminal;
use std::path::{Path, PathBuf};
use std::sync::mpsc;
use std::sync::Arc;
use std::time::Duration;
use trapeze_vnic::control::{
    check_name, create_socket_dir, default_socket_path, human_duration, prepare_socket_path, serve, ControlClient,
    Request,
};
use trapeze_vnic::dma::Machine;
use trapeze_vnic::ivshmem::{register_guest_ram, GuestRam, IvshmemServer};
use trapeze_vnic::key::ClusterKey;
use trapeze_vnic::link::backend::BackendSpec;
use trapeze_vnic::link::{FaultConfig, Link};
use trapeze_vnic::nic::{FirmwareKind, Nic, PeerInfo};
use trapeze_vnic::trace::{EventLog, Report};

// The binary's own modules live in `src/bin/trapeze-nic/`.
#[path = "trapeze-nic/ping.rs"]
mod ping;
use ping::{ping, PingArgs};

const AFTER_HELP: &str = "\
Without a subcommand trapeze-nic starts a NIC (the options above); `trapeze-nic status NAME`
asks a running one; `trapeze-nic ping NAME --peer N` has it exchange test packets with the
NIC of node N; `trapeze-nic keygen PATH` makes a cluster key file for --key;
`trapeze-nic trace-report FILE...` breaks down round trips from --trace files. The NIC
runs until SIGINT or SIGTERM, then removes its control socket
(and its ivshmem socket) and exits 0. It refuses a socket another NIC answers on; a stale
socket file nobody answers on is replaced. RUST_LOG sets the log filter (default info).";

#[derive(Parser)]
#[command(
    name = "trapeze-nic",
    version,
    about = "A virtual programmable NIC running the Trapeze firmware",
    after_help = AFTER_HELP,
    args_conflicts_with_subcommands = true,
    subcommand_negates_reqs = true
)]
struct Cli {
    #[command(subcommand)]
    cmd: Option<Cmd>,
    #[command(flatten)]
    start: StartArgs,
}

#[derive(Subcommand)]
enum Cmd {
    /// Ask a running NIC for its status (firmware, node, link address, peers, key in use,
    /// counters) over its control socket.
    Status(StatusArgs),
    /// Have a running NIC send link-level echo requests to the NIC of another node and
    /// report each round trip (NIC to NIC, no host involved) and a summary. Exits 1 if no
    /// reply came back, naming the likely cause.
    Ping(PingArgs),
    /// Make a cluster key file for --key: 32 bytes from the OS random source, mode 0600.
    /// Refuses to overwrite an existing file. Copy it (keeping mode 0600) to every node.
    Keygen(KeygenArgs),
    /// Where request/reply round trips spent their time, from the --trace files of the
    /// NICs involved (lined up by the host's clock: NICs of one machine).
    TraceReport(TraceReportArgs),
}

#[derive(Args)]
struct TraceReportArgs {
    /// The trace files, one per NIC.
    #[arg(required = true)]
    files: Vec<PathBuf>,
}

#[derive(Args)]
struct KeygenArgs {
    /// Where to write the key (must not exist; its directory must).
    path: PathBuf,
}

#[derive(Args)]
struct StartArgs {
    /// Name of this NIC: 1-64 of A-Z a-z 0-9 . _ - (not starting with '.'); its control
    /// socket is NAME.sock in the default socket directory unless --control is given.
    #[arg(long, required = true)]
    name: Option<String>,
    /// This NIC's node id on the link (0-65535).
    #[arg(long, required = true)]
    node: Option<u16>,
    /// Link backend: udp:IP:PORT (the local address to bind) or ether:IFNAME (raw Ethernet,
    /// needs root or CAP_NET_RAW).
    #[arg(long, required = true)]
    link: Option<BackendSpec>,
    /// A peer: NODE=IP:PORT for udp, NODE=MAC for ether. Repeat for each peer.
    #[arg(long = "peer", value_name = "PEER")]
    peers: Vec<String>,
    /// Cluster key file (32 bytes, owned by this user, mode 0600; `trapeze-nic keygen`):
    /// every packet on the link carries a MAC under it, and packets whose MAC fails are
    /// dropped and counted (mac_rejected). Every NIC of the link needs the same key.
    /// Without it the link is unauthenticated.
    #[arg(long, value_name = "FILE")]
    key: Option<PathBuf>,
    /// Link faults and wire delay, e.g. drop=1%,dup=0.5%,reorder=1%,corrupt=0.1%,seed=7,delay=20us.
    #[arg(long, default_value = "none")]
    faults: FaultConfig,
    /// Control socket path (default: $XDG_RUNTIME_DIR/trapeze/NAME.sock or
    /// /tmp/trapeze-UID/NAME.sock; only that default directory is created, an explicit
    /// path's directory must exist).
    #[arg(long, value_name = "PATH")]
    control: Option<PathBuf>,
    /// How long an idle processor polls before sleeping on its doorbell, µs (0-1000000).
    #[arg(long, default_value_t = 50, value_parser = clap::value_parser!(u64).range(0..=1_000_000))]
    spin_us: u64,
    /// How long an idle processor keeps polling while its host awaits a reply (an IPT
    /// entry armed), µs (0-1000000): the reply finds it awake instead of paying a wakeup.
    #[arg(long, default_value_t = 1000, value_parser = clap::value_parser!(u64).range(0..=1_000_000))]
    reply_spin_us: u64,
    /// Run this firmware image (riscv32 ELF, e.g. from `cargo xtask build`) on the emulated
    /// core instead of the native firmware.
    #[arg(long, value_name = "IMAGE")]
    flashed: Option<PathBuf>,
    /// Record the engines' events (packets sent and received, echoes, host interrupts,
    /// parks that something woke: an idle NIC writes nothing) in FILE, for `trapeze-nic
    /// trace-report`. The file is created (or truncated).
    #[arg(long, value_name = "FILE")]
    trace: Option<PathBuf>,
    /// Serve a QEMU guest: listen on this Unix socket (its directory must exist) as an
    /// ivshmem-doorbell server (start the NIC before QEMU; `-chardev socket,path=PATH,id=n
    /// -device ivshmem-doorbell,chardev=n,vectors=V`).
    #[arg(long, value_name = "PATH")]
    ivshmem: Option<PathBuf>,
    /// MSI-X vectors offered to the guest, 1-64 (must match the device's `vectors=`).
    #[arg(long, default_value_t = 1, value_parser = clap::value_parser!(u32).range(1..=64))]
    vectors: u32,
    /// The guest's RAM (a `memory-backend-file,share=on` file of this user, mode 0600):
    /// guest-physical addresses become DMA addresses while the guest is connected.
    #[arg(long, value_name = "PATH")]
    guest_ram: Option<PathBuf>,
    /// The guest's QEMU machine type, for the RAM layout above 3 GiB (with --guest-ram).
    #[arg(long, default_value = "pc", value_parser = ["pc", "q35"])]
    machine: String,
    /// Print a status line to stderr every SECS seconds (1-86400).
    #[arg(long, value_name = "SECS", value_parser = clap::value_parser!(u64).range(1..=86_400))]
    status_every: Option<u64>,
}

#[derive(Args)]
struct StatusArgs {
    /// The NIC's name (its control socket is NAME.sock in the default socket directory).
    #[arg(required_unless_present = "control", conflicts_with = "control")]
    name: Option<String>,
    /// The NIC's control socket, for a NIC started with --control PATH (`--socket`, as
    /// `gms` spells it, is accepted too).
    #[arg(long, alias = "socket", value_name = "PATH")]
    control: Option<PathBuf>,
    /// How long to wait for the answer, seconds (1-600); `gms` spells it the same way.
    #[arg(
        long,
        alias = "timeout",
        value_name = "SECS",
        default_value_t = 5,
        value_parser = clap::value_parser!(u64).range(1..=600)
    )]
    timeout_s: u64,
    /// Print the NIC's answer as JSON instead of the human summary.
    #[arg(long)]
    json: bool,
}

fn main() {
    let cli = Cli::parse();
    tracing_subscriber::fmt()
        .with_env_filter(tracing_subscriber::EnvFilter::try_from_default_env().unwrap_or_else(|_| "info".into()))
        .with_writer(std::io::stderr)
        .with_ansi(std::io::stderr().is_terminal())
        .init();
    let result = match cli.cmd {
        Some(Cmd::Status(s)) => status(s),
        Some(Cmd::Ping(p)) => ping(p),
        Some(Cmd::Keygen(k)) => ClusterKey::generate(&k.path).map(|_| {
            println!("trapeze-nic: wrote a new cluster key to {} (mode 0600)", k.path.display());
        }),
        Some(Cmd::TraceReport(t)) => trace_report(&t.files),
        None => run(cli.start),
    };
    if let Err(e) = result {
        eprintln!("trapeze-nic: error: {e:#}");
        std::process::exit(1);
    }
}

/// `trapeze-nic trace-report`: the traces read, lined up, the breakdown printed.
fn trace_report(files: &[PathBuf]) -> anyhow::Result<()> {
    let traces = files
        .iter()
        .map(|f| trapeze_vnic::trace::read(f).with_context(|| format!("reading {}", f.display())))
        .collect::<anyhow::Result<Vec<_>>>()?;
    print!("{}", Report::new(&traces).text());
    Ok(())
}

/// The control socket a subcommand names: `--control PATH`, or NAME's default socket.
pub(crate) fn control_path(control: &Option<PathBuf>, name: &Option<String>) -> anyhow::Result<PathBuf> {
    Ok(match (control, name) {
        (Some(p), _) => p.clone(),
        (None, Some(n)) => {
            check_name(n)?;
            default_socket_path(n)
        }
        (None, None) => bail!("give a NIC name or --control PATH"),
    })
}

/// `trapeze-nic status`: one status request, printed.
fn status(a: StatusArgs) -> anyhow::Result<()> {
    let path = control_path(&a.control, &a.name)?;
    let client = ControlClient::connect(&path)?;
    let (v, _) = client
        .request_with_fds(&Request::Status, &[], Duration::from_secs(a.timeout_s))
        .with_context(|| format!("asking the NIC at {} for its status", path.display()))?;
    if a.json {
        println!("{}", serde_json::to_string_pretty(&v["status"])?);
    } else {
        print!("{}", describe(&v["status"], &path));
    }
    Ok(())
}

/// A status answer for people.
fn describe(s: &Value, path: &Path) -> String {
    use std::fmt::Write;
    let str_of = |v: &Value| v.as_str().map_or_else(|| v.to_string(), String::from);
    let mut o = String::new();
    let _ = writeln!(o, "NIC {} (control socket {})", str_of(&s["name"]), path.display());
    let _ = writeln!(o, "  node          {}", str_of(&s["node"]));
    let _ = writeln!(o, "  link address  {}", str_of(&s["link_address"]));
    let peers = match s["peers"].as_array() {
        None => "not known (a NIC not started by trapeze-nic)".to_string(),
        Some(ps) if ps.is_empty() => "none (give --peer NODE=ADDRESS)".to_string(),
        Some(ps) => ps
            .iter()
            .map(|p| format!("{}={}", str_of(&p["node"]), str_of(&p["address"])))
            .collect::<Vec<_>>()
            .join(", "),
    };
    let _ = writeln!(o, "  peers         {peers}");
    let _ = writeln!(
        o,
        "  cluster key   {}",
        if s["cluster_key"] == Value::Bool(true) {
            "in use: packets carry a MAC and a stamp; those failing the MAC are dropped (mac_rejected), \
             replays too (replayed, replay_stale_epoch, trailer_forged)"
        } else {
            "none: packets are not authenticated"
        }
    );
    let _ = writeln!(
        o,
        "  firmware      version {}, build id {}, mode {}, state {}{}",
        str_of(&s["fw_version"]),
        str_of(&s["fw_build_id"]),
        str_of(&s["mode"]),
        str_of(&s["fw_state"]),
        s["fw_fault"].as_str().map_or(String::new(), |f| format!(", fault {f}"))
    );
    if let Some(img) = s["image"].as_object() {
        let _ = writeln!(
            o,
            "  image         version {}, build id {}, checksum {} ({}), {} bytes loaded",
            str_of(&img["version"]),
            str_of(&img["build_id"]),
            str_of(&img["checksum"]),
            if img["intact"] == Value::Bool(true) { "intact" } else { "CHANGED in NIC memory" },
            str_of(&img["load_bytes"])
        );
    }
    let up = s["uptime_s"].as_f64().map_or_else(|| "?".into(), |u| human_duration(Duration::from_secs_f64(u.max(0.0))));
    let _ = writeln!(o, "  uptime        {up}, heartbeat {}", str_of(&s["heartbeat"]));
    let _ = writeln!(
        o,
        "  host          irqs {}, DMA bytes {}, DMA refused {}, parks {}",
        str_of(&s["host_irqs"]),
        str_of(&s["host_dma_bytes"]),
        str_of(&s["dma_refused"]),
        str_of(&s["parks"])
    );
    if let Some(link) = s["link"].as_object() {
        let _ = writeln!(o, "  link");
        for (k, v) in link {
            let _ = writeln!(o, "    {k:<24} {}", str_of(v));
        }
    }
    if let Some(echo) = s["echo"].as_object() {
        let _ = writeln!(o, "  echo (ping)");
        for (k, v) in echo {
            let _ = writeln!(o, "    {k:<24} {}", str_of(v));
        }
    }
    if let Some(counters) = s["counters"].as_array() {
        let _ = writeln!(o, "  counters");
        for c in counters {
            let _ = writeln!(o, "    {:<24} {}", str_of(&c[0]), str_of(&c[1]));
        }
    }
    if let Some(regions) = s["regions"].as_array().filter(|r| !r.is_empty()) {
        let _ = writeln!(o, "  DMA regions");
        for r in regions {
            let _ = writeln!(o, "    {:<24} base {} length {}", str_of(&r[0]), str_of(&r[1]), str_of(&r[2]));
        }
    }
    if let Some(log) = s["log"].as_array().filter(|l| !l.is_empty()) {
        let _ = writeln!(o, "  firmware log (latest last)");
        for l in log {
            let _ = writeln!(o, "    {}", str_of(l));
        }
    }
    o
}

/// Refuse a `--peer` with this NIC's own node id, or a node id given twice (as gmsd does);
/// the rest of each peer is checked when the link is opened.
fn check_peer_ids(node: u16, peers: &[String]) -> anyhow::Result<()> {
    let mut seen: Vec<(u16, &str)> = Vec::new();
    for p in peers {
        let Some(id) = p.split_once('=').and_then(|(n, _)| n.trim().parse::<u16>().ok()) else {
            continue;
        };
        if id == node {
            bail!("--peer {p}: {id} is this NIC's own node id (--node {node}); a peer is another node");
        }
        if let Some((_, first)) = seen.iter().find(|(n, _)| *n == id) {
            bail!("--peer {p}: node {id} is already a peer (--peer {first}); give each node once");
        }
        seen.push((id, p));
    }
    Ok(())
}

/// Start the NIC and serve it until SIGINT or SIGTERM.
fn run(a: StartArgs) -> anyhow::Result<()> {
    let (Some(name), Some(node), Some(link_spec)) = (a.name, a.node, a.link) else {
        bail!("starting a NIC needs --name, --node and --link (see --help)");
    };
    check_name(&name)?;
    check_peer_ids(node, &a.peers)?;
    // A bad key file is refused before anything is opened.
    let key = a.key.as_deref().map(ClusterKey::load).transpose()?;
    // Installed before any socket exists, so a signal from now on ends in the cleanup below.
    let (sig_tx, signals) = mpsc::channel();
    ctrlc::set_handler(move || {
        let _ = sig_tx.send(());
    })
    .context("installing the SIGINT/SIGTERM handler")?;

    let path = match a.control {
        Some(p) => p,
        None => {
            create_socket_dir()?;
            default_socket_path(&name)
        }
    };
    // Refuse a busy or impossible socket path before opening the link or loading firmware.
    prepare_socket_path(&path, rustix::net::SocketType::SEQPACKET, "control socket")?;
    if let Some(p) = &a.ivshmem {
        prepare_socket_path(p, rustix::net::SocketType::STREAM, "ivshmem socket")?;
    }

    let backend = link_spec.open(&a.peers).with_context(|| format!("opening link {link_spec}"))?;
    let mut link = Link::new(node, backend, a.faults);
    link.set_key(key.as_ref());
    let nic = Arc::new(Nic::with_reply_spin(
        &name,
        link,
        Duration::from_micros(a.spin_us),
        Duration::from_micros(a.reply_spin_us),
    )?);
    // As the link checked them: NODE=ADDRESS each.
    nic.set_peers(
        a.peers
            .iter()
            .filter_map(|p| p.split_once('='))
            .filter_map(|(n, addr)| Some(PeerInfo { node: n.trim().parse().ok()?, address: addr.trim().to_string() }))
            .collect(),
    );
    if let Some(path) = &a.trace {
        let log = EventLog::create(path, node).with_context(|| format!("creating trace file {}", path.display()))?;
        nic.set_trace(log)?;
    }
    match &a.flashed {
        None => nic.start(FirmwareKind::Native)?,
        Some(image) => {
            let bytes = std::fs::read(image).with_context(|| format!("reading firmware image {}", image.display()))?;
            nic.load_image(&bytes).with_context(|| format!("flashing {}", image.display()))?;
        }
    }
    let machine = if a.machine == "q35" { Machine::Q35 } else { Machine::Pc };
    if let Some(ram) = &a.guest_ram {
        // Checked and mapped now, so a bad file is an error at start-up; mapped afresh for
        // each guest the ivshmem server admits, and forgotten when that guest leaves.
        register_guest_ram(&nic, ram, machine).with_context(|| format!("mapping guest RAM {}", ram.display()))?;
    }
    let server = serve(nic.clone(), &path)?;
    let ivshmem = match &a.ivshmem {
        Some(p) => {
            let ram = a.guest_ram.clone().map(|path| GuestRam { path, machine });
            Some(IvshmemServer::start_with_ram(nic.clone(), p, a.vectors, ram)?)
        }
        None => None,
    };
    let st = nic.status();
    eprintln!(
        "trapeze-nic {name}: node {node} on {link_spec} ({}), firmware {} ({}), control socket {}{}",
        match &a.key {
            Some(k) => format!("packets authenticated, key {}", k.display()),
            None => "unauthenticated: no --key".into(),
        },
        st.fw_version,
        st.mode,
        path.display(),
        a.ivshmem.as_ref().map_or(String::new(), |p| format!(", ivshmem server {}", p.display()))
    );

    let period = Duration::from_secs(a.status_every.unwrap_or(3600));
    loop {
        match signals.recv_timeout(period) {
            Ok(()) | Err(mpsc::RecvTimeoutError::Disconnected) => break,
            Err(mpsc::RecvTimeoutError::Timeout) if a.status_every.is_some() => eprintln!("{}", status_line(&nic)),
            Err(mpsc::RecvTimeoutError::Timeout) => {}
        }
    }
    eprintln!(
        "trapeze-nic {name}: SIGINT/SIGTERM: removing the control socket {}{} and exiting",
        path.display(),
        a.ivshmem.as_ref().map_or(String::new(), |p| format!(" and the ivshmem socket {}", p.display()))
    );
    drop(ivshmem);
    drop(server);
    Ok(())
}

/// The `--status-every` line.
fn status_line(nic: &Nic) -> String {
    let s = nic.status();
    let c = |n: &str| s.counters.iter().find(|(k, _)| k == n).map_or(0, |x| x.1);
    format!(
        "{}: up {}, fw {} {} tx {} rx {} ring-waits {} crc-drops {} bad-token {} dma-refused {} link tx {} rx {} crc-err {} mac-rejected {}{}",
        s.name,
        human_duration(Duration::from_secs_f64(s.uptime_s.max(0.0))),
        s.fw_state,
        s.mode,
        c("tx_packets"),
        c("rx_packets"),
        c("rx_ring_wait"),
        c("rx_drop_crc"),
        c("rx_bad_token"),
        s.dma_refused,
        s.link.packets_sent,
        s.link.packets_received,
        s.link.crc_errors,
        s.link.mac_rejected,
        replay_refusals(&s.link)
    )
}

/// The status line's replay refusals, if there were any (a keyed link's `replay`).
fn replay_refusals(l: &trapeze_vnic::link::LinkStats) -> String {
    let stale = l.replay_stale_epoch;
    if l.replayed + stale + l.replay_table_full + l.trailer_forged == 0 {
        return String::new();
    }
    format!(
        " replayed {} stale-epoch {} replay-table-full {} trailer-forged {}",
        l.replayed, stale, l.replay_table_full, l.trailer_forged
    )
}
