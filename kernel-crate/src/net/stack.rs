// SPDX-License-Identifier: GPL-2.0-only
//! NetRPC, the GMS node and the global LRU of a bound NIC ([`Core`]): their kernel
//! configuration, made on the heap, the LRU's steps, and sending. A [`Client`] of the
//! runtime (the disk) keeps its state in the core, under the same lock, and is handed the
//! completions of its operations after each batch ([`Core::settle`]).

use super::{KHost, KStorage, NetRpc, Node};
use crate::stats::STATS;
use crate::sys;
use crate::tpz::endpoint::SendMsg;
use crate::tpz::gms::epochs::{Lru, LruConfig};
use crate::tpz::gms::prelude::{slots_for, GmsConfig, GmsNode, Storage};
use crate::tpz::iface::entry::Segment;
use crate::tpz::iface::ipt::PayloadToken;
use crate::tpz::netrpc::rpc::{Config as RpcConfig, Rpc};
use kernel::prelude::*;

/// NetRPC's timeouts in the kernel (ns): a blocking call 1 s, a nonblocking one 2 s.
const RPC_CONFIG: RpcConfig = RpcConfig { call_timeout: 1_000_000_000, nonblocking_timeout: Some(2_000_000_000) };
/// GMS's timeouts in the kernel (ns; TCG guests answer in ~0.1–1 ms, p99 up to ~10 ms).
const GMS_CONFIG: GmsConfig = GmsConfig {
    op_timeout: 500_000_000,
    task_timeout: 200_000_000,
    retry_delay: 50_000_000,
    max_attempts: 0,
    tombstone_ttl: 10_000_000_000,
    budget: 0,
    scrub_interval: 1_000_000_000,
    rebuild_window: 2_000_000_000,
};
/// The global LRU in the kernel (ns): epochs of 500 ms (TCG guests answer in ~0.1–10 ms),
/// summaries awaited 200 ms, ages in 10 ms ticks. No headroom: the kernel discards no
/// held page to make room (`/dev/gms0`'s pages are data, not a cache).
const LRU_CONFIG: LruConfig = LruConfig {
    epoch_ns: 500_000_000,
    min_epoch_ns: 20_000_000,
    deadline_ns: 200_000_000,
    oldest_pages: 256,
    tick_ns: 10_000_000,
    headroom: 0,
};
/// Ready-made values in the module image, copied to the heap at probe ([`sys::boxed`]).
static RPC_TEMPLATE: sys::boxed::Template<NetRpc> = sys::boxed::Template::new(Rpc::new(0, RPC_CONFIG));
static LRU_TEMPLATE: sys::boxed::Template<Lru> = sys::boxed::Template::new(Lru::new(0, LRU_CONFIG));
/// The node's template has empty tables (an empty `KVVec` owns no memory); probe gives it
/// tables sized from the parameters ([`GmsNode::set_tables`]).
static NODE_TEMPLATE: sys::boxed::Template<Node> =
    sys::boxed::Template::new(GmsNode::new(0, GMS_CONFIG, KHost::empty(), KVVec::new(), KVVec::new()));

/// What a bound NIC's receive path touches, under the driver's core spinlock: NetRPC and
/// the GMS node, whose host owns the endpoint and every frame, the global LRU, and the
/// state of the runtime's client `C`.
pub(crate) struct Core<C> {
    pub(crate) rpc: KBox<NetRpc>,
    /// The node (its tables are allocations of their own).
    pub(crate) node: KVBox<Node>,
    /// This node's part in the global LRU, which places `/dev/gms0`'s puts.
    pub(crate) lru: KBox<Lru>,
    /// The client's state (the disk's, once it exists).
    pub(crate) client: C,
}

/// A user of the runtime whose nonblocking GMS operations complete on the receive path:
/// their completions wait in the host ([`KHost::take_done`]) until [`Client::settle`]
/// takes them, after each batch, still under the lock.
pub(crate) trait Client: Sized {
    /// Take the completions of this client's operations and act on them.
    fn settle(core: &mut Core<Self>);
}

/// No client.
impl Client for () {
    fn settle(_: &mut Core<()>) {}
}

/// NetRPC and the GMS node on the heap, never on the 16 KiB kernel stack: the node stores
/// at most `budget` pages for others and directs at most `dir_pages` pages.
#[inline(never)]
pub(crate) fn new_core<C>(node: u16, budget: usize, dir_pages: usize, host: KHost, client: C) -> Result<Core<C>> {
    let mut rpc = RPC_TEMPLATE.copy()?;
    rpc.set_node(node, RPC_CONFIG);
    // Call generations a node on the link cannot guess (netrpc's reply tokens).
    rpc.set_secret([sys::random_u64(), sys::random_u64()]);
    let mut gms = NODE_TEMPLATE.copy_kv()?;
    gms.set_identity(node, GmsConfig { budget, ..GMS_CONFIG });
    let held = KStorage::buf(slots_for(budget), None).ok_or(ENOMEM)?;
    let dir = KStorage::buf(slots_for(dir_pages), None).ok_or(ENOMEM)?;
    gms.set_tables(held, dir);
    gms.host = host;
    let mut lru = LRU_TEMPLATE.copy()?;
    lru.set_node(node);
    Ok(Core { rpc, node: gms, lru, client })
}

impl<C: Client> Core<C> {
    /// Hand the client the completions of its operations (after a batch of input).
    pub(crate) fn settle(&mut self) {
        C::settle(self);
    }
}

impl<C> Core<C> {
    /// Global-LRU work: the messages received since the last step, the coordinator's
    /// duties, the putpages stored here counted against the plan, and the sends.
    pub(crate) fn lru_step(&mut self, now: u64) {
        let Core { rpc, node, lru, .. } = self;
        let tick = lru.tick(now);
        let plans = lru.stats.plans;
        for i in 0..node.host.lru_queued.min(node.host.lru_inbox.len()) {
            let m = node.host.lru_inbox[i];
            lru.handle(now, &m, |e| node.lru_summary(tick, e));
        }
        node.host.lru_queued = 0;
        lru.poll(now, node.members().ids(), |e| node.lru_summary(tick, e));
        lru.note_stored(node.stats().pages_stored, node.lru_coordinator());
        while let Some(m) = lru.take_send() {
            // A full transmit queue loses the message: the epoch's deadline covers it.
            let _ = rpc.send_oneway(m.dst, m.op, &m.body[..m.len], None);
        }
        STATS.lru_plans.add(lru.stats.plans - plans);
    }

    /// Hand NetRPC's queued transmits to the NIC; whether any was posted. Frames dropped
    /// before this wait for these sends.
    pub(crate) fn flush(&mut self) -> bool {
        let mut sent = false;
        while let Some(t) = self.rpc.poll_transmit() {
            sent |= self.node.host.post(&t);
        }
        self.node.host.tag_limbo();
        self.node.host.reap();
        // Blocking calls are polled with `take_outcome`: the events only say which.
        while self.rpc.poll_event().is_some() {}
        sent
    }

    pub(crate) fn take_tx_frame(&mut self) -> Option<usize> {
        let h = &mut self.node.host;
        let t = (0..h.tx.len().min(32)).find(|&t| h.tx_busy & (1 << t) == 0)?;
        h.tx_busy |= 1 << t;
        Some(t)
    }

    /// Post `ctrl` + `len` bytes of `tx[t]` to `peer`; on failure `tx[t]` is free again.
    pub(crate) fn send(&mut self, peer: u16, ctrl: &[u8], len: usize, t: usize) -> Result {
        let h = &mut self.node.host;
        let seg = [Segment { addr: h.tx[t].dma_addr(), len: len as u32 }];
        let msg = SendMsg {
            peer,
            ctrl,
            payload_len: len as u32,
            segments: if len > 0 { &seg } else { &[] },
            token: PayloadToken::NONE,
        };
        match h.ep.post_send(&msg, t) {
            Ok(()) => {
                STATS.tx_msgs.inc();
                Ok(())
            }
            Err(e) => {
                h.tx_busy &= !(1 << t);
                STATS.tx_ring_full.inc();
                pr_warn!("send to node {} not posted: {:?}\n", peer, e);
                Err(EBUSY)
            }
        }
    }
}
