// SPDX-License-Identifier: GPL-2.0-only
//! GMS: the Global Memory Service — a cluster-wide page cache — as a sans-IO protocol
//! core over NetRPC, after the GMS/Trapeze papers.
//!
//! Every node holds some pages in frames (its **page-frame directory**, bounded by a
//! memory budget) and is the **directory node** for the pages that rendezvous hashing of
//! (page id, node) gives it among the live members (a globally replicated function: when
//! a node dies only its pages' directory entries move). A directory entry names the one
//! caching site of a page and its version.
//!
//! - **getpage**: requester → directory node; the directory node answers with the page
//!   (2-way) or **delegates** the request, with the requester's reply token, to the
//!   caching site, which replies straight to the requester with the page tagged by the
//!   requester's IPT token (3-way, zero-copy); or "miss". Moving reads (per space: a
//!   holder hands a copy over only in a space whose policy moves) hand the copy to the
//!   requester. A requester that knows where it put a page (a block
//!   device) may ask that member straight (`getpage_hinted`, 2-way); a miss there sends
//!   it to the directory. Several such pages may go as one **getpages** ([`getpages`]):
//!   one request, and one reply whose payload the holder gathers from its frames and the
//!   NIC scatters into the requester's.
//! - **topversion**: the newest version a member knows of a volume's pages ([`top`]), which
//!   a writer's load asks every member before it claims an epoch ([`store::claim`]).
//! - **One-sided reads**: a holder exports each copy its directory names in its NIC's
//!   answer table ([`node::Host::export`], with the reply a hit of it is) and retracts the
//!   export before it lets the frame go; its `PUTDONE` tells the putter the entry and key.
//!   A hinted getpage naming them (`getpage_hinted`) is answered by that NIC without
//!   the holder's host; what the NIC cannot answer reaches the host as before. Such reads
//!   do not refresh the copy's age in the holder's LRU.
//! - **putpage / movepage**: the page goes one-way to a target (chosen by the global
//!   LRU), which stores it or refuses (budget), has the directory name it, and only then
//!   answers (`PUTDONE`). A movepage's sender drops its copy: one copy per page.
//! - **Identity**: a copy changes hands at the same version (movepage, moving read), so the
//!   directory gives every copy it names an identity too (a per-page sequence it assigns
//!   on accepting a registration and returns in the answer). A hand-over passes the
//!   giver's identity to the taker, whose registration claims it; a registration whose
//!   claim is older than the named copy's — the previous holder's scrub re-registration
//!   still in flight, a duplicated `DIRUPDATE` — is refused instead of displacing the
//!   new holder. Removals and drops name the identity they mean ([`directory`]). A new
//!   directory node gives a re-registered copy a new identity; until its holder learns
//!   it, a moving read does not hand the copy over, a movepage claiming the old one is
//!   refused (`Superseded`: the mover keeps its copy), and a drop of the old one (from a
//!   directory that died) does not cover it.
//! - **discardpage**: the directory forgets the page; its holder drops it.
//! - **Replicas** ([`replica`]): a writer that wants `r` copies puts `r` GMS pages (replica
//!   `k` in a derived space) to `r` distinct targets and reads the next when one misses;
//!   the core itself keeps one copy per GMS page. A reader of a volume it does not write
//!   ([`reader`]) asks the replicas in turn with the store's retry numbers.
//! - **The store** ([`store`]): the writer's side — a volume of pages kept as `r` replicas,
//!   with its records, versions per disk identity, placement with site avoidance, write
//!   and read retries, re-replication, liveness and the volume's label and floor map in
//!   the cluster — as one sans-IO core with `poll_issue`/`handle_*`/`poll_done`, so that
//!   every runtime and the checker drive the same policy.
//! - **Striping** ([`stripe`]): the client-side policy of a volume striped over block
//!   servers (Slice's round-robin at a grain): per-server chunks in flight at once,
//!   sequential read-ahead, bounded retries — for any runtime that moves the bytes.
//! - **GMS over disk** ([`cached`]): the client-side policy of a volume on a block server
//!   cached in network memory — getpage first, the block server on a miss; write-through,
//!   or write-back where a write is acknowledged once its dirty copies are on two distinct
//!   lenders ([`replica`] pages, placed apart as the store's replicas: one lender may die
//!   before the page is cleaned), the writer cleans every dirty page (block write, then a
//!   clean put, the other copies discarded) before a flush completes, and a holder never
//!   lets a dirty page go for room ([`node::GmsNode::age_out`]).
//! - **Failures**: calls time out into clean misses; a failed node's entries are removed;
//!   on every membership change, survivors mark the copies whose directory node moved
//!   and a sweep registers them with the new one as the task table frees up (repair,
//!   counted in [`types::GmsStats::reregistered`]; the new directory keeps the newest
//!   version it is told of). Until those registrations are in, a directory that names no
//!   copy of a page it took over answers the getpage [`types::MissReason::Rebuilding`]
//!   ("ask again"), not "nobody has it", for [`types::GmsConfig::rebuild_window`]; a
//!   reader counts that as no answer. Background updates are retried until
//!   answered and a slow scrub re-checks entries and copies, so the directory converges.
//!   Versions (and tombstones that keep a version floor after an entry is removed) make
//!   sure a getpage never returns a version older than the newest completed putpage while
//!   the page's directory node stays, and never another page's data; the old directory's
//!   floors die with it, so after a move a reader that knows the version it wrote asks
//!   for it ([`node::GmsNode::getpage_at_least`]) and never gets an older one.
//! - **Entitlement**: a message is acted on only when its sender (the id its NIC stamped)
//!   may send it: members of the view put, get and update the directory, naming only
//!   themselves; only a page's directory node has a copy dropped, verified or served as
//!   the caching site; a `PUTDONE` answers only a put in flight to its sender; a heartbeat
//!   speaks only for its sender. Versions are bounded so that no single message blocks a
//!   page for good or has a holder give up its copy ([`directory`]): a discard of
//!   `u64::MAX` and a registration of it or beyond the directory's version lead are
//!   refused, and so is either one that *leaps* (beyond a step above the page's known
//!   versions) over a firm copy;
//!   a leap over none is provisional and lapses after the tombstone ttl, as does a
//!   discard floor beyond every firm version; a target refuses a put far beyond the copy
//!   it holds, and hands a copy over on a moving read only in a space whose reads move.
//!   The refusals are counted ([`types::GmsStats::unentitled`]). Among members, the
//!   directory trusts a node's claim to hold the page it registers (it keeps no record
//!   of puts; any member may write any page).
//!
//! The runtime owns the NIC, the frames and the clock: it implements [`node::Host`],
//! keeps a `netrpc::rpc::Rpc<GmsNode<..>, F>` next to the [`node::GmsNode`] (which is the
//! `Rpc`'s [`net::types::Runtime`]), feeds messages to the `Rpc`, calls
//! [`node::GmsNode::drive`] after every input, and sends what the `Rpc` transmits.
//! Putpage targets come from the epoch-based global LRU: [`lru`] is its arithmetic (age
//! summaries, the coordinator, epoch plans) and [`epochs`] a node's part in it (the epoch
//! messages, drawing targets by the plan's weights), which the runtime drives beside the
//! node. `#![no_std]`, no heap, no `unsafe`: the two tables that grow with the memory a
//! node offers (pages held, directory entries) live in the runtime's
//! [`net::storage::Storage`], sized when the node is made; the rest are const-generic arrays.
//!
//! ```
//! use gms::prelude::*;
//! use netrpc::prelude::*;
//! use netrpc::storage::Heap;
//!
//! /// Frames are plain numbers here; the "page contents" live in a table next to them.
//! #[derive(Default)]
//! struct Frames { data: std::collections::HashMap<u32, u64>, next: u32, done: Vec<Completion<u32>> }
//! impl Host<u32> for Frames {
//!     fn copy_payload(&mut self, from: &u32, to: &u32, _: u32) -> bool {
//!         let d = self.data[from];
//!         self.data.insert(*to, d);
//!         true
//!     }
//!     fn release(&mut self, f: u32) { self.data.remove(&f); }
//!     fn dropped(&mut self, _: PageId, f: u32, _: bool) { self.data.remove(&f); }
//!     fn completed(&mut self, done: Completion<u32>) { self.done.push(done); }
//! }
//! type Node = GmsNode<u32, Frames, Heap, 4, 4, 4, 4>;
//!
//! // Room for 16 held pages and 16 directory entries each, from the global allocator.
//! let mut nodes: Vec<Node> =
//!     (0..3).map(|i| GmsNode::with_capacity(i, GmsConfig::default(), Frames::default(), 16, 16).unwrap()).collect();
//! let mut rpcs: Vec<Rpc<Node, u32>> = (0..3).map(|i| Rpc::new(i, netrpc::rpc::Config::default())).collect();
//! for i in 0..3 {
//!     nodes[i].set_members(0, &mut rpcs[i], 1, &[0, 1, 2]).unwrap();
//! }
//! // A perfect network: deliver until quiet. Payloads carry the frame's contents;
//! // a tagged payload lands in the frame the IPT token names (token = frame here).
//! let run = |nodes: &mut Vec<Node>, rpcs: &mut Vec<Rpc<Node, u32>>| loop {
//!     let mut moved = false;
//!     for src in 0..3 {
//!         nodes[src].drive(0, &mut rpcs[src]);
//!         while let Some(t) = rpcs[src].poll_transmit() {
//!             let dst = t.dst as usize;
//!             let payload = match t.payload {
//!                 None => InPayload::None,
//!                 Some((f, len)) => {
//!                     let data = nodes[src].host.data[&f];
//!                     let to = if t.tag != 0 { t.tag as u32 } else {
//!                         nodes[dst].host.next += 1;
//!                         1000 * (dst as u32 + 1) + nodes[dst].host.next
//!                     };
//!                     nodes[dst].host.data.insert(to, data);
//!                     if t.tag != 0 { InPayload::Ipt { token: t.tag, len } } else { InPayload::Buffer { frame: to, len } }
//!                 }
//!             };
//!             rpcs[dst].handle_message(0, &mut nodes[dst], src as u16, t.ctrl(), payload);
//!             moved = true;
//!         }
//!     }
//!     if !moved { break; }
//! };
//!
//! // Node 0 evicts page (1, 7), version 3, into node 1's memory.
//! let page = PageId::new(1, 7);
//! nodes[0].host.data.insert(1, 0xAB);
//! nodes[0].putpage(0, &mut rpcs[0], page, Version(3), 1, 8192, 1, false, Mode::NonBlocking).unwrap();
//! run(&mut nodes, &mut rpcs);
//! assert!(matches!(nodes[0].host.done[0].result, OpResult::Put(PutResult::Stored { target: 1 })));
//!
//! // Node 2 faults on it: the page comes from node 1's memory straight into frame 9.
//! let reply_to = ReplyTo::Solicited { token: 9, frame: 9 };
//! nodes[2].getpage(0, &mut rpcs[2], page, reply_to, Mode::NonBlocking).unwrap();
//! run(&mut nodes, &mut rpcs);
//! let OpResult::Get(GetResult::Hit { version, frame, .. }) = nodes[2].host.done[0].result else { panic!() };
//! assert_eq!((version, nodes[2].host.data[&frame]), (Version(3), 0xAB));
//! ```

#![no_std]
#![forbid(unsafe_code)]

#[cfg(MODULE)]
pub use super::netrpc as net;
/// NetRPC, the one dependency. The kernel module compiles these sources as a module
/// next to its own `netrpc` module (Kbuild passes `--cfg MODULE`), so there the name
/// resolves to that sibling instead of the crate.
#[cfg(not(MODULE))]
pub use netrpc as net;

pub mod cache;
pub mod cached;
pub mod client;
pub mod directory;
pub mod epochs;
pub mod getpages;
pub mod heartbeat;
pub mod lru;
pub mod members;
pub mod node;
pub mod ops;
pub mod page;
pub mod pending;
pub mod placement;
pub mod queue;
pub mod readahead;
pub mod reader;
pub mod registration;
pub mod replica;
pub mod serve;
pub mod slots;
pub mod store;
pub mod stripe;
pub mod table;
pub mod tasks;
pub mod top;
pub mod types;
pub mod view;

/// Everything a runtime needs.
pub mod prelude {
    pub use super::directory::{DirEntry, DirSlot, Directory};
    pub use super::members::Members;
    pub use super::net::storage::Storage;
    pub use super::node::{AgeOut, GmsNode, Held, HeldSlot, HeldState, Host};
    pub use super::ops::is_gms_op;
    pub use super::page::{PageId, Version};
    pub use super::table::slots_for;
    pub use super::types::{
        Answer, Completion, DiscardResult, GetResult, GmsConfig, GmsError, GmsStats, MissReason, OpId, OpResult,
        Policy, PutResult, ReadPolicy, TopResult, Via, WritePolicy,
    };
}
