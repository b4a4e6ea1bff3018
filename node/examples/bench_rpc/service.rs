// SPDX-License-Identifier: GPL-2.0-only
//! The benched service (get, 2-way and delegated 3-way) and the nodes that serve it, each a NIC driven inline.

use super::*;

/// get(len): reply with `len` bytes of the server's page (2-way), or delegated by the
/// directory (node 1) to the holder (node 2) in 3-way runs.
pub(crate) struct Get2;
impl Operation for Get2 {
    const OP: u16 = 0x10;
    type Request = Bytes<16>;
    type Reply = ();
}
pub(crate) struct Get3;
impl Operation for Get3 {
    const OP: u16 = 0x11;
    type Request = Bytes<16>;
    type Reply = ();
}

pub(crate) fn req(len: u32) -> Bytes<16> {
    let mut b = [0u8; 16];
    b[..4].copy_from_slice(&len.to_le_bytes());
    Bytes(b)
}

/// Server stubs: a page to send, and whether this node is a directory.
pub(crate) struct Server {
    pub(crate) page: Frame,
    pub(crate) directory: bool,
    /// Client side: nonblocking calls completed.
    pub(crate) done: u64,
    /// Deferred variant: the "lock" is busy once per call.
    pub(crate) busy_once: bool,
}

impl Service for Server {
    // The stubs never look at `inc.now`: no clock read per request.
    const READS_CLOCK: bool = false;

    fn serve(&mut self, inc: &Incoming<'_, Frame>, _frames: &mut Frames) -> Action<Frame> {
        let len = match inc.decode::<Get2>() {
            Ok(r) => u32::from_le_bytes(r.0[..4].try_into().unwrap_or_default()).min(FRAME_BYTES),
            Err(e) => return Action::Error(e),
        };
        match inc.op {
            Get3::OP if self.directory => Action::delegate(2, inc),
            Get2::OP | Get3::OP => Action::reply(&(), (len > 0).then_some((self.page, len))),
            _ => Action::Error(RpcError::UnknownOp),
        }
    }
}

pub(crate) type Port = RpcPort<Server>;

pub(crate) fn cont(ctx: &mut trapeze_node::rpc::Node<Server>, o: &Outcome<Frame>, _arg: u64) -> bool {
    if ctx.service.busy_once {
        // A "lock" held: refuse once without side effects; the retry runs deferred.
        ctx.service.busy_once = false;
        return false;
    }
    ctx.service.busy_once = ctx.service.directory; // re-armed per call by the client (see below)
    ctx.service.done += 1;
    if let Ok(r) = o {
        if let Payload::Frame { frame, .. } | Payload::Buffer { frame, .. } = r.payload {
            use netrpc::types::Runtime;
            ctx.release(frame);
        }
    }
    true
}

pub(crate) fn node(sw: &InProcSwitch, id: u16, directory: bool) -> anyhow::Result<Port> {
    node_on(Link::new(id, Box::new(sw.port(id)), FaultConfig::default()), id, directory)
}

/// [`node`] on a link of the caller's (another backend, a cluster key).
pub(crate) fn node_on(link: Link, id: u16, directory: bool) -> anyhow::Result<Port> {
    let nic = Arc::new(Nic::new(&format!("b{id}"), link, Duration::ZERO)?);
    let inline = nic.start_inline()?;
    let region = Arc::new(Mapping::create_memfd("bench-frames", 16 << 20)?);
    nic.shared()
        .dma
        .register("bench", DEFAULT_REGION_BASE, region.clone(), 0, 16 << 20)
        .map_err(|e| anyhow::anyhow!("{e}"))?;
    let cfg = EndpointConfig { node_id: id, mtu: FRAME_BYTES, ..EndpointConfig::default() };
    let service = Server { page: 0, directory, done: 0, busy_once: false };
    let rcfg = Config { call_timeout: 2_000_000_000, nonblocking_timeout: Some(2_000_000_000) };
    let mut p = RpcPort::new(
        trapeze_node::rpc::Attach::inline(nic.mem(), region, cfg, [id as u64 + 1, 99], inline),
        service,
        rcfg,
    )?;
    let page = p.node.frames.alloc().context("no frame for the page")?;
    p.node.frames.write(page, &vec![0x5Au8; FRAME_BYTES as usize]);
    p.node.service.page = page;
    Ok(p)
}
