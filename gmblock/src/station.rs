// SPDX-License-Identifier: GPL-2.0-only
//! One end of the block protocol on its own virtual NIC: the NIC on a UDP link
//! ([`trapeze_vnic`]'s backend, peers by id), driven inline from the owner's thread, a
//! frame region registered with it for DMA, and NetRPC over it ([`RpcPort`]).
//!
//! Where the region sits is the data path: in host RAM at the runtime's usual DMA base,
//! or in NIC-local memory at [`NIC_LOCAL_DMA_BASE`] — a bank on the NIC's side of the bus
//! that the owner maps, so blocks read into it and sent from it never touch host RAM (the
//! NIC counts the two apart: [`NicBytes`]).

use crate::proto::MTU_BYTES;
use anyhow::Context;
use std::net::SocketAddr;
use std::os::fd::OwnedFd;
use std::sync::Arc;
use std::time::Duration;
use trapeze_host::endpoint::EndpointConfig;
use trapeze_iface::layout::NIC_LOCAL_DMA_BASE;
use trapeze_node::host::DEFAULT_REGION_BASE;
use trapeze_node::rpc::{Attach, RpcPort, Service};
use trapeze_vnic::link::backend::{LinkBackend, UdpBackend};
use trapeze_vnic::link::{FaultConfig, Link};
use trapeze_vnic::nic::Nic;
use trapeze_vnic::shm::Mapping;

/// Where an end's frames live.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Placement {
    HostRam,
    NicLocal,
}

/// How to open an end.
#[derive(Clone, Debug)]
pub struct StationConfig {
    pub node: u16,
    pub listen: SocketAddr,
    pub peers: Vec<(u16, SocketAddr)>,
    pub region_bytes: usize,
    pub placement: Placement,
    /// A call not answered after this long fails with `Timeout`.
    pub call_timeout: Duration,
}

/// Bytes the NIC's host DMA engine moved, by where they were.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, serde::Serialize)]
pub struct NicBytes {
    pub host_ram: u64,
    pub nic_local: u64,
}

/// An open end: the port, its NIC and the link's descriptor (to sleep on).
pub struct Station<S: Service> {
    pub port: RpcPort<S>,
    pub nic: Arc<Nic>,
    pub link_fd: OwnedFd,
    pub medium: String,
}

impl<S: Service> Station<S> {
    pub fn open(cfg: &StationConfig, service: S) -> anyhow::Result<Station<S>> {
        let mut backend = UdpBackend::bind(cfg.listen).with_context(|| format!("--listen {}", cfg.listen))?;
        for &(n, a) in &cfg.peers {
            backend.add_peer(n, a);
        }
        let link_fd = backend.readable_fd().context("the UDP backend has no descriptor")?.try_clone_to_owned()?;
        let medium = backend.describe();
        let link = Link::new(cfg.node, Box::new(backend), FaultConfig::NONE);
        let nic = Arc::new(Nic::new(&format!("gmblock{}", cfg.node), link, Duration::ZERO)?);
        let inline = nic.start_inline()?;
        let bytes = cfg.region_bytes.next_power_of_two();
        let (name, base) = match cfg.placement {
            Placement::HostRam => ("gmblock-host-ram", DEFAULT_REGION_BASE),
            Placement::NicLocal => ("gmblock-nic-local", NIC_LOCAL_DMA_BASE),
        };
        let region = Arc::new(Mapping::create_memfd(name, bytes).with_context(|| format!("a {bytes}-byte region"))?);
        nic.shared()
            .dma
            .register(name, base, region.clone(), 0, bytes as u64)
            .map_err(|e| anyhow::anyhow!("registering the frame region: {e}"))?;
        let ecfg = EndpointConfig { node_id: cfg.node, mtu: MTU_BYTES, ..EndpointConfig::default() };
        let at = Attach {
            mem: nic.mem(),
            region,
            base,
            cfg: ecfg,
            seed: trapeze_node::host::random_seed(),
            cpu: Some(inline),
            doorbell: None,
        };
        let ns = cfg.call_timeout.as_nanos() as u64;
        let rcfg = netrpc::rpc::Config { call_timeout: ns, nonblocking_timeout: Some(ns) };
        let port = RpcPort::new(at, service, rcfg)?;
        Ok(Station { port, nic, link_fd, medium })
    }

    /// The NIC's DMA byte counters so far.
    pub fn nic_bytes(&self) -> NicBytes {
        let s = &self.nic.shared().stats;
        NicBytes {
            host_ram: s.host_dma_bytes.load(std::sync::atomic::Ordering::Relaxed),
            nic_local: s.nic_local_dma_bytes.load(std::sync::atomic::Ordering::Relaxed),
        }
    }

    /// Sleep until the link is readable or `timeout` passed — unless a packet already
    /// waits in the NIC's link (then return at once: poll).
    pub fn wait_link(&mut self, timeout: Duration) {
        self.wait_link_or(timeout, None);
    }

    /// [`Self::wait_link`], waking also when `also` becomes readable (the server's
    /// disk-read completions: [`crate::uring::Reads::ready_fd`]).
    pub fn wait_link_or(&mut self, timeout: Duration, also: Option<std::os::fd::BorrowedFd<'_>>) {
        use rustix::event::{poll, PollFd, PollFlags, Timespec};
        if !self.port.prepare_wait() {
            return;
        }
        let ts = Timespec { tv_sec: timeout.as_secs() as i64, tv_nsec: timeout.subsec_nanos() as i64 };
        let link = PollFd::new(&self.link_fd, PollFlags::IN);
        let _ = match also {
            Some(fd) => poll(&mut [link, PollFd::from_borrowed_fd(fd, PollFlags::IN)], Some(&ts)),
            None => poll(&mut [link], Some(&ts)),
        };
        self.port.end_wait();
    }
}
