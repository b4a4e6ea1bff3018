// SPDX-License-Identifier: GPL-2.0-only
//! One-sided reads through the virtual NIC, in both processor modes: an answer never
//! leaves with bytes other than those its entry's sequence check vouched for, even when its
//! host retracts the entry and reuses the frame while the answer is leaving (issue 34,
//! torn reads). The flashed image's reads copied the bytes before the check: the answer
//! carries them. The native engines read them from the host's frame after the check,
//! check the entry again, and send the answer aborted: the requester receives nothing.
//!
//! The race is made deterministic by the serving NIC's link backend: link out asks it for
//! the route of a packet after the firmware's last check and before it reads the packet's
//! payload, and at that moment the backend plays the host's part (retract, rewrite).

mod common;

use common::*;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;
use trapeze_firmware::iface::answer::{self, Descriptor, Export};
use trapeze_firmware::iface::entry::rx_flags;
use trapeze_firmware::iface::layout::Policy;
use trapeze_host::endpoint::EndpointConfig;
use trapeze_node::host::{random_seed, HostPort, DEFAULT_REGION_BASE};
use trapeze_vnic::engines::new_eventfd;
use trapeze_vnic::link::backend::{InProcPort, InProcSwitch};
use trapeze_vnic::link::testing::{Hooks, Wrap};
use trapeze_vnic::link::{FaultConfig, Link, LinkBackend};
use trapeze_vnic::nic::Nic;
use trapeze_vnic::shm::Mapping;

const T: Duration = Duration::from_secs(10);
const PAGE: usize = 4096;
const ENTRY: u32 = 3;
const KEY: u64 = 0x5eed_0034_feed_0001;
const REPLY: &[u8] = b"page 34, version 1\0\0";
const EXPORTED: u8 = 0xAA;
const REUSED: u8 = 0x55;

/// What the host does at the racing moment; run once.
type Move = Box<dyn FnOnce() + Send>;

/// Hooks that run the host's [`Move`] when link out asks for the route of the next
/// packet, then leave the wrapped switch port as it is.
struct Racer {
    armed: Arc<Mutex<Option<Move>>>,
    /// Packets the move ran before.
    raced: Arc<AtomicU64>,
}

impl Hooks<InProcPort> for Racer {
    fn routes_to(&self, port: &InProcPort, dst: u16) -> bool {
        let mv = self.armed.lock().unwrap_or_else(|e| e.into_inner()).take();
        if let Some(mv) = mv {
            mv();
            self.raced.fetch_add(1, Ordering::SeqCst);
        }
        port.routes_to(dst)
    }
    fn describe(&self, port: &InProcPort) -> String {
        format!("racer over {}", port.describe())
    }
}

/// A NIC with node id `node` on `backend`, started in `mode`, and its host.
fn node(mode: Mode, node: u16, backend: Box<dyn LinkBackend>) -> Node {
    let nic = Arc::new(Nic::new(&format!("ans{node}"), Link::new(node, backend, FaultConfig::NONE), SPIN).unwrap());
    let image = (mode == Mode::Flashed).then(image_bytes);
    start(&nic, mode, image.as_deref()).unwrap();
    let region = Arc::new(Mapping::create_memfd("answer-frames", REGION_BYTES).unwrap());
    nic.shared().dma.register("host", DEFAULT_REGION_BASE, region.clone(), 0, REGION_BYTES as u64).unwrap();
    let (db, irq) = (Arc::new(new_eventfd().unwrap()), Arc::new(new_eventfd().unwrap()));
    nic.shared().wakers.add_doorbell(db.clone());
    nic.shared().notifier.add(irq.clone());
    let cfg = EndpointConfig { node_id: node, policy: Policy::Eager, ..EndpointConfig::default() };
    let host = HostPort::new(nic.mem(), region.clone(), DEFAULT_REGION_BASE, db, irq, cfg, random_seed()).unwrap();
    Node { nic, host, region }
}

const SPIN: Duration = Duration::from_micros(50);

/// Node 1 exports a page of [`EXPORTED`] bytes; node 0 reads it one-sided. Node 1's host
/// retracts the entry and writes [`REUSED`] into the frame after its NIC checked the
/// entry for the answer's last pulse, before link out read the payload. The requester
/// must receive the exported bytes (what the check vouched for), never the new ones
/// under the old reply.
fn an_answer_carries_the_bytes_its_check_vouched_for(mode: Mode) {
    let switch = InProcSwitch::new();
    let armed = Arc::new(Mutex::new(None));
    let raced = Arc::new(AtomicU64::new(0));
    let racer = Wrap::new(switch.port(1), Racer { armed: armed.clone(), raced: raced.clone() });
    let mut a = node(mode, 0, Box::new(switch.port(0)));
    let mut b = node(mode, 1, Box::new(racer));

    let at = REGION_BYTES - PAGE;
    assert!(b.region.write(at, &[EXPORTED; PAGE]));
    let e = Export { key: KEY, addr: DEFAULT_REGION_BASE + at as u64, len: PAGE as u32, reply: REPLY };
    b.host.endpoint().export(ENTRY, &e).unwrap();
    let (mem, frame) = (b.nic.mem(), b.region.clone());
    *armed.lock().unwrap() = Some(Box::new(move || {
        answer::retract(&mem, ENTRY).unwrap();
        assert!(frame.write(at, &[REUSED; PAGE]));
    }) as Move);

    let tok = a.host.arm(PAGE as u32, 1).unwrap();
    let mut ctrl = b"getpage 34\0\0".to_vec();
    ctrl.extend_from_slice(&Descriptor { index: ENTRY, key: KEY, token: tok.0 }.to_bytes());
    a.host.send_answerable(1, &ctrl).unwrap();
    if mode == Mode::Native {
        // The native engines leave the payload in the host's frame until link out reads
        // it, then check the entry again: it changed, so the answer leaves aborted and
        // the requester's link drops it.
        eventually("node 1's link out tore the answer off", T, || b.nic.status().answers_torn == 1);
        let m = a.host.recv(Duration::from_millis(300));
        assert!(m.is_none(), "an aborted answer was delivered: {:?}", m.map(|m| m.flags));
    } else {
        // The flashed image's reads copy when they run: the answer carries what the check
        // vouched for.
        let m = a.host.recv(T).unwrap_or_else(|| panic!("{mode:?}: no answer (aborted: {})", aborted(&b)));
        assert_eq!((m.src, m.ctrl.as_slice(), m.flags), (1, REPLY, rx_flags::IPT | rx_flags::ANSWER));
        let reused = m.payload.iter().filter(|&&x| x == REUSED).count();
        assert_eq!(reused, 0, "{mode:?}: {reused} bytes written after the retract left under the old reply");
        assert!(m.payload == [EXPORTED; PAGE], "{mode:?}: the answer carries the exported page");
        assert_eq!(b.nic.status().answers_torn, 0);
    }
    assert_eq!(raced.load(Ordering::SeqCst), 1, "the host's move ran as the answer left");
    // The firmware counts an answer in the pass after link out sent it: the requester
    // may hold the answer first.
    eventually("node 1 counted the answer", T, || counter(&b, "tx_answers") == 1);
    assert!(b.host.recv(Duration::from_millis(50)).is_none(), "node 1's host saw the request");
}

fn aborted(n: &Node) -> u64 {
    counter(n, "tx_answers_aborted")
}

#[test]
fn an_answer_carries_the_bytes_its_check_vouched_for_native() {
    an_answer_carries_the_bytes_its_check_vouched_for(Mode::Native);
}

#[cfg(feature = "flashed")]
#[test]
#[ignore = "needs: riscv32 target"]
fn an_answer_carries_the_bytes_its_check_vouched_for_flashed() {
    an_answer_carries_the_bytes_its_check_vouched_for(Mode::Flashed);
}
