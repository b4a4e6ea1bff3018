// SPDX-License-Identifier: GPL-2.0-only
//! A user-space host on a virtual NIC: the host API ([`trapeze_host::endpoint`]) over the
//! mapped NIC memory, plus a shared frame region registered for DMA, a doorbell to wake
//! the NIC and an interrupt eventfd to sleep on.
//!
//! This is the binding tests and tools use; payloads are copied into and out of frames
//! of the region (the zero-copy paths belong to the services built on the host API).

use anyhow::{bail, Context};
use rustix::event::{poll, PollFd, PollFlags};
use std::os::fd::{AsFd, OwnedFd};
use std::path::Path;
use std::sync::Arc;
use std::time::{Duration, Instant};
use trapeze_firmware::iface::entry::{Segment, TxStatus};
use trapeze_firmware::iface::ipt::{CancelState, PayloadToken};
use trapeze_firmware::iface::layout::{notify, Counter, NIC_MEM_BYTES, RECV_RING_ENTRIES};
use trapeze_host::endpoint::{Endpoint, EndpointConfig, SendMsg};
use trapeze_vnic::control::{ControlClient, Request};
use trapeze_vnic::nic::NicMem;
use trapeze_vnic::shm::Mapping;

/// DMA address where a host's frame region starts by default.
pub const DEFAULT_REGION_BASE: u64 = 0x1_0000_0000;

/// A message received by [`HostPort::recv`], payload copied out.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Received {
    pub src: u16,
    pub ctrl: Vec<u8>,
    pub payload: Vec<u8>,
    pub flags: u32,
    pub token: PayloadToken,
}

/// First-fit allocator of frame ranges in the region (offsets).
struct Frames {
    free: Vec<(u64, u64)>,
}

impl Frames {
    fn alloc(&mut self, len: u64) -> Option<u64> {
        let len = len.max(1).next_multiple_of(64);
        let i = self.free.iter().position(|&(_, l)| l >= len)?;
        let (off, l) = self.free[i];
        if l == len {
            self.free.remove(i);
        } else {
            self.free[i] = (off + len, l - len);
        }
        Some(off)
    }
    fn free(&mut self, off: u64, len: u64) {
        let len = len.max(1).next_multiple_of(64);
        let i = self.free.partition_point(|&(o, _)| o < off);
        self.free.insert(i, (off, len));
        // Merge with neighbours.
        if i + 1 < self.free.len() && self.free[i].0 + self.free[i].1 == self.free[i + 1].0 {
            self.free[i].1 += self.free[i + 1].1;
            self.free.remove(i + 1);
        }
        if i > 0 && self.free[i - 1].0 + self.free[i - 1].1 == self.free[i].0 {
            self.free[i - 1].1 += self.free[i].1;
            self.free.remove(i);
        }
    }
}

/// Frames of one send, freed when the NIC reports it done.
type SendCookie = u32;

/// A user-space host attached to one NIC.
pub struct HostPort {
    ep: Endpoint<NicMem, SendCookie>,
    region: Arc<Mapping>,
    base: u64,
    frames: Frames,
    /// Frames (offset, len) of each in-flight send, by cookie.
    send_frames: Vec<Option<Vec<(u64, u64)>>>,
    send_status: Vec<TxStatus>,
    recv_frames: Vec<u64>,
    armed: Vec<(PayloadToken, u64, u64)>,
    doorbell: Arc<OwnedFd>,
    irq: Arc<OwnedFd>,
    mtu: u32,
    /// How long [`Self::recv`] polls the ring before sleeping on the interrupt.
    spin: Duration,
    /// The control connection that holds this host's attachment (remote hosts only):
    /// closing it detaches the host and unregisters its region.
    _control: Option<ControlClient>,
}

/// A secret seed for IPT keys, from the OS.
pub fn random_seed() -> [u64; 2] {
    let mut b = [0u8; 16];
    let mut got = 0;
    while got < b.len() {
        match rustix::rand::getrandom(&mut b[got..], rustix::rand::GetRandomFlags::empty()) {
            Ok(n) => got += n,
            Err(rustix::io::Errno::INTR) => {}
            // getrandom(2) exists on every supported kernel; a failure here is fatal for
            // key secrecy, so fall back to the clock only with the pid mixed in.
            Err(_) => {
                let t = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).unwrap_or_default();
                return [t.as_nanos() as u64, std::process::id() as u64 ^ 0x5851_F42D_4C95_7F2D];
            }
        }
    }
    [
        u64::from_le_bytes(b[..8].try_into().unwrap_or_default()),
        u64::from_le_bytes(b[8..].try_into().unwrap_or_default()),
    ]
}

impl HostPort {
    /// Attach to NIC memory `mem`, with `region` registered at DMA address `base`, a
    /// doorbell eventfd the NIC watches and an interrupt eventfd it signals. Initialises
    /// the endpoint with `cfg` (receive frames of `cfg.mtu` bytes; interrupts on receive).
    pub fn new(
        mem: NicMem,
        region: Arc<Mapping>,
        base: u64,
        doorbell: Arc<OwnedFd>,
        irq: Arc<OwnedFd>,
        cfg: EndpointConfig,
        key_seed: [u64; 2],
    ) -> anyhow::Result<HostPort> {
        let mut frames = Frames { free: vec![(0, region.len() as u64)] };
        let mut recv_frames = Vec::new();
        for _ in 0..RECV_RING_ENTRIES {
            recv_frames.push(frames.alloc(cfg.mtu as u64).context("frame region too small for the receive frames")?);
        }
        let cfg = EndpointConfig { notify: cfg.notify | notify::IRQ_ON_RECV, ..cfg };
        let ep = Endpoint::init(mem, &cfg, key_seed, |i| {
            Some(Segment { addr: base + recv_frames[i as usize], len: cfg.mtu })
        });
        let port = HostPort {
            ep,
            region,
            base,
            frames,
            send_frames: Vec::new(),
            send_status: Vec::new(),
            recv_frames,
            armed: Vec::new(),
            doorbell,
            irq,
            mtu: cfg.mtu,
            spin: Duration::from_micros(50),
            _control: None,
        };
        port.ring();
        let t0 = Instant::now();
        while !port.ep.config_applied() {
            if t0.elapsed() > Duration::from_secs(5) {
                bail!("the NIC firmware did not apply the configuration (is it running?)");
            }
            port.ring();
            std::thread::sleep(Duration::from_micros(200));
        }
        Ok(port)
    }

    /// Attach to the NIC serving `control` (another process): map its NIC memory, create
    /// a frame region of `region_bytes` and register it for DMA at
    /// [`DEFAULT_REGION_BASE`], and initialise the endpoint with `cfg` (its node id is
    /// taken from the NIC: it is the NIC's address on the link).
    pub fn attach(control: &Path, region_bytes: usize, cfg: EndpointConfig) -> anyhow::Result<HostPort> {
        let client = ControlClient::connect(control)?;
        let (v, fds) = client.request_with_fds(&Request::Attach, &[], Duration::from_secs(10))?;
        let [mem, db, irq]: [OwnedFd; 3] = fds
            .try_into()
            .map_err(|f: Vec<OwnedFd>| anyhow::anyhow!("attach answered with {} descriptors, expected 3", f.len()))?;
        let mem_bytes = v["nic_mem_bytes"].as_u64().context("attach answer lacks nic_mem_bytes")? as usize;
        if mem_bytes != NIC_MEM_BYTES as usize {
            bail!("NIC memory is {mem_bytes} bytes, this host expects {NIC_MEM_BYTES}");
        }
        let node = v["node"].as_u64().context("attach answer lacks node")? as u16;
        let cfg = EndpointConfig { node_id: node, ..cfg };
        let mem = NicMem::new(Arc::new(Mapping::from_fd(mem, mem_bytes)?));
        let region = Arc::new(Mapping::create_memfd("trapeze-host-frames", region_bytes)?);
        let name = format!("host-{}", std::process::id());
        client.request_with_fds(
            &Request::RegisterRegion { name, dma_base: DEFAULT_REGION_BASE, len: region_bytes as u64 },
            &[region.fd()],
            Duration::from_secs(10),
        )?;
        let mut port =
            HostPort::new(mem, region, DEFAULT_REGION_BASE, Arc::new(db), Arc::new(irq), cfg, random_seed())?;
        port._control = Some(client);
        Ok(port)
    }

    pub fn endpoint(&self) -> &Endpoint<NicMem, SendCookie> {
        &self.ep
    }
    pub fn counter(&self, c: Counter) -> u64 {
        self.ep.counter(c)
    }
    pub fn mtu(&self) -> u32 {
        self.mtu
    }
    /// How long [`Self::recv`] polls before sleeping on the interrupt eventfd (waking a
    /// thread on another core costs tens of µs; polling costs a core).
    pub fn set_spin(&mut self, spin: Duration) {
        self.spin = spin;
    }

    fn ring(&self) {
        let _ = rustix::io::write(self.doorbell.as_fd(), &1u64.to_ne_bytes());
    }

    fn reap(&mut self) {
        let mut done = Vec::new();
        self.ep.reap_sends(|c, st| done.push((c, st)));
        for (c, st) in done {
            if let Some(fr) = self.send_frames.get_mut(c as usize).and_then(|f| f.take()) {
                for (off, len) in fr {
                    self.frames.free(off, len);
                }
            }
            self.send_status.push(st);
        }
    }

    /// Completed sends' statuses since the last call, oldest first.
    pub fn take_send_statuses(&mut self) -> Vec<TxStatus> {
        self.reap();
        std::mem::take(&mut self.send_status)
    }

    /// Copy `payload` into frames of `frame_bytes` (0 = one frame) and send it with `ctrl`
    /// to `peer`, tagged with `token` if given. Waits (bounded) for a free send slot.
    pub fn send(
        &mut self,
        peer: u16,
        ctrl: &[u8],
        payload: &[u8],
        token: PayloadToken,
        frame_bytes: u32,
    ) -> anyhow::Result<()> {
        let per = if frame_bytes == 0 { payload.len().max(1) } else { frame_bytes as usize };
        let mut segs = Vec::new();
        let mut fr = Vec::new();
        for chunk in payload.chunks(per) {
            let Some(off) = self.frames.alloc(chunk.len() as u64) else {
                for (o, l) in fr {
                    self.frames.free(o, l);
                }
                bail!("frame region exhausted");
            };
            self.region.write(off as usize, chunk);
            fr.push((off, chunk.len() as u64));
            segs.push(Segment { addr: self.base + off, len: chunk.len() as u32 });
        }
        let msg = SendMsg { peer, ctrl, payload_len: payload.len() as u32, segments: &segs, token };
        self.send_segments(&msg, false, fr)
    }

    /// Send with caller-given DMA segments (e.g. to test refusal of bad addresses).
    pub fn send_raw(&mut self, peer: u16, ctrl: &[u8], payload_len: u32, segs: &[Segment]) -> anyhow::Result<()> {
        let msg = SendMsg { peer, ctrl, payload_len, segments: segs, token: PayloadToken::NONE };
        self.send_segments(&msg, false, Vec::new())
    }

    /// Send `ctrl` alone as a request `peer`'s NIC may answer from its answer table
    /// ([`Endpoint::post_answerable`]: whole words ending with the descriptor).
    pub fn send_answerable(&mut self, peer: u16, ctrl: &[u8]) -> anyhow::Result<()> {
        let msg = SendMsg { peer, ctrl, payload_len: 0, segments: &[], token: PayloadToken::NONE };
        self.send_segments(&msg, true, Vec::new())
    }

    /// Post `msg` (answerable or not), waiting (bounded) for a free send slot; `fr`: its
    /// frames, freed when the NIC reports it done.
    fn send_segments(&mut self, msg: &SendMsg<'_>, answerable: bool, fr: Vec<(u64, u64)>) -> anyhow::Result<()> {
        let cookie = match self.send_frames.iter().position(|f| f.is_none()) {
            Some(i) => i,
            None => {
                self.send_frames.push(None);
                self.send_frames.len() - 1
            }
        };
        let t0 = Instant::now();
        loop {
            self.reap();
            let posted = if answerable {
                self.ep.post_answerable(msg, cookie as u32)
            } else {
                self.ep.post_send(msg, cookie as u32)
            };
            match posted {
                Ok(()) => break,
                Err(trapeze_host::endpoint::SendError::RingFull) if t0.elapsed() < Duration::from_secs(5) => {
                    self.ring();
                    std::thread::yield_now();
                }
                Err(e) => {
                    for (o, l) in fr {
                        self.frames.free(o, l);
                    }
                    bail!("send refused: {e:?}");
                }
            }
        }
        self.send_frames[cookie] = Some(fr);
        self.ring();
        Ok(())
    }

    /// Arm an IPT frame of `len` bytes split into `frames` segments; returns the token.
    pub fn arm(&mut self, len: u32, frames: u32) -> anyhow::Result<PayloadToken> {
        let off = self.frames.alloc(len as u64).context("frame region exhausted")?;
        let n = frames.clamp(1, 8);
        let per = len.div_ceil(n).max(1);
        let mut segs = Vec::new();
        let mut at = 0;
        while at < len {
            let l = per.min(len - at);
            segs.push(Segment { addr: self.base + off + at as u64, len: l });
            at += l;
        }
        match self.ep.arm(&segs) {
            Ok(t) => {
                self.armed.push((t, off, len as u64));
                Ok(t)
            }
            Err(e) => {
                self.frames.free(off, len as u64);
                bail!("cannot arm an IPT entry: {e:?}")
            }
        }
    }

    /// Where `token`'s frame lies in the region, as (DMA address, length).
    pub fn armed_frame(&self, token: PayloadToken) -> Option<(u64, u64)> {
        self.armed.iter().find(|a| a.0 == token).map(|a| (self.base + a.1, a.2))
    }

    /// Bytes of the region at DMA address `addr`.
    pub fn read_region(&self, addr: u64, len: usize) -> Option<Vec<u8>> {
        let off = addr.checked_sub(self.base)? as usize;
        let mut v = vec![0; len];
        self.region.read(off, &mut v).then_some(v)
    }

    /// Disarm `token` and free its frame (unless the NIC is writing into it right now).
    pub fn disarm(&mut self, token: PayloadToken) -> CancelState {
        let st = self.ep.disarm(token);
        if st != CancelState::InFlight {
            if let Some(i) = self.armed.iter().position(|a| a.0 == token) {
                let (_, off, len) = self.armed.swap_remove(i);
                self.frames.free(off, len);
            }
        }
        st
    }

    /// Receive the next message, waiting up to `timeout` (spin briefly, then sleep on the
    /// interrupt eventfd). IPT payloads are copied from their frame, which is then freed.
    pub fn recv(&mut self, timeout: Duration) -> Option<Received> {
        let t0 = Instant::now();
        loop {
            if let Some(m) = self.ep.poll_recv() {
                let payload = if m.via_ipt() {
                    let data = self
                        .armed_frame(m.token)
                        .and_then(|(addr, _)| self.read_region(addr, m.payload_len as usize))
                        .unwrap_or_default();
                    self.disarm(m.token);
                    data
                } else {
                    let off = self.recv_frames[(m.slot % RECV_RING_ENTRIES) as usize];
                    let mut v = vec![0; m.payload_len as usize];
                    self.region.read(off as usize, &mut v);
                    v
                };
                self.ep.release_recv(None);
                return Some(Received { src: m.src, ctrl: m.ctrl().to_vec(), payload, flags: m.flags, token: m.token });
            }
            let waited = t0.elapsed();
            if waited >= timeout {
                return None;
            }
            if waited < self.spin {
                std::thread::yield_now();
                continue;
            }
            let left = (timeout - waited).min(Duration::from_millis(20));
            let ts = rustix::event::Timespec { tv_sec: 0, tv_nsec: left.as_nanos() as i64 };
            let mut fds = [PollFd::new(self.irq.as_ref(), PollFlags::IN)];
            let _ = poll(&mut fds, Some(&ts));
            let mut b = [0u8; 8];
            let _ = rustix::io::read(self.irq.as_fd(), &mut b);
        }
    }
}
