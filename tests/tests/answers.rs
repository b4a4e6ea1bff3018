// SPDX-License-Identifier: GPL-2.0-only
//! The answer table through the timing model (`trapeze_firmware::sim`): a NIC answers an
//! answerable request from host memory its host exported, without its host; whatever it
//! cannot answer reaches the host unchanged; an answer whose entry changed while its
//! payload was read never arrives.

use trapeze_firmware::iface::answer::{self, Descriptor, Export};
use trapeze_firmware::iface::entry::rx_flags;
use trapeze_firmware::iface::ipt::{IptEntry, PayloadToken};
use trapeze_firmware::iface::layout::{notify, Counter, ANSWER_ENTRIES};
use trapeze_firmware::sim::{Cluster, Faults, NodeConfig, OutMsg, Params, Rng, TransferKind, US};

const LIMIT_PS: u64 = 100_000 * US;
const PAGE: usize = 4096;
const ENTRY: u32 = 5;
const KEY: u64 = 0x5eed_0000_feed_0001;
const REPLY: &[u8] = b"page 17, version 3";

fn cluster() -> Cluster {
    let cfg = NodeConfig { notify: notify::IRQ_ON_RECV, ..NodeConfig::default() };
    Cluster::new(Params::alpha500(), 2, cfg, Faults::default())
}

fn data(seed: u64, len: usize) -> Vec<u8> {
    let mut r = Rng::new(seed);
    (0..len.div_ceil(8)).flat_map(|_| r.next_u64().to_le_bytes()).take(len).collect()
}

fn settle(c: &mut Cluster) {
    assert!(c.run_until(LIMIT_PS, |c| c.is_quiet()), "cluster did not go quiet in 100 ms");
    let t = c.now_ps();
    c.run_until(200 * US, |c| c.now_ps() > t + 100 * US);
}

fn counter(c: &Cluster, node: usize, k: Counter) -> u64 {
    c.firmware(node).counter(k)
}

/// Node 1 exports a page in entry [`ENTRY`]: the page's bytes.
fn export_page(c: &mut Cluster) -> Vec<u8> {
    let page = data(0xA11, PAGE);
    let addr = c.host_mut(1).store(&page).expect("host memory");
    let e = Export { key: KEY, addr, len: PAGE as u32, reply: REPLY };
    answer::publish(c.nic_mem(1), ENTRY, &e).unwrap();
    page
}

/// Node 0 asks node 1 for `d` (its token armed by the caller), `body` (padded to whole
/// words) before the descriptor.
fn ask(c: &mut Cluster, d: Descriptor, body: &[u8]) -> Vec<u8> {
    let mut ctrl = body.to_vec();
    ctrl.resize(body.len().next_multiple_of(4), 0);
    ctrl.extend_from_slice(&d.to_bytes());
    let now = c.now_ps();
    let msg = OutMsg { peer: 1, ctrl: ctrl.clone(), token: PayloadToken::NONE, answerable: true, ..Default::default() };
    c.host_mut(0).post(now, msg);
    ctrl
}

#[test]
fn a_nic_answers_an_exported_page_without_its_host() {
    let mut c = cluster();
    let page = export_page(&mut c);
    for round in 0..3u32 {
        let (tok, frame) = c.host_mut(0).arm(PAGE as u32, 1).expect("arm");
        ask(&mut c, Descriptor { index: ENTRY, key: KEY, token: tok.0 }, b"getpage 17");
        settle(&mut c);
        let d = c.host(0).delivered.last().expect("an answer").clone();
        assert_eq!(c.host(0).delivered.len(), round as usize + 1);
        assert_eq!((d.src, d.token, d.ctrl.as_slice()), (1, tok, REPLY));
        assert_eq!(d.flags, rx_flags::IPT | rx_flags::ANSWER);
        assert_eq!(c.host(0).read(frame, PAGE).unwrap(), &page[..], "round {round}: the page in the frame");
        assert!(!IptEntry::new(c.nic_mem(0), tok.index()).unwrap().is_armed(), "the IPT entry consumed");
    }
    assert!(c.host(1).delivered.is_empty(), "node 1's host saw a request");
    assert_eq!(counter(&c, 1, Counter::TxAnswers), 3);
    assert_eq!(counter(&c, 1, Counter::Interrupts), 0, "node 1's host was never interrupted");
    assert_eq!(counter(&c, 1, Counter::RxAnswerToHost), 0);
    assert_eq!(counter(&c, 0, Counter::RxIptDelivered), 3);
}

#[test]
fn what_the_table_cannot_answer_reaches_the_host_unchanged() {
    let mut c = cluster();
    export_page(&mut c);
    let (tok, _) = c.host_mut(0).arm(PAGE as u32, 1).expect("arm");
    let good = Descriptor { index: ENTRY, key: KEY, token: tok.0 };
    let asks = [
        Descriptor { key: KEY ^ 1, ..good },
        Descriptor { index: ENTRY + 1, ..good },
        Descriptor { index: ANSWER_ENTRIES, ..good },
        Descriptor { token: 0, ..good },
    ];
    let mut sent = Vec::new();
    for (i, d) in asks.iter().enumerate() {
        sent.push(ask(&mut c, *d, format!("ask {i}").as_bytes()));
        settle(&mut c);
    }
    // A retracted entry, and a control message too short to hold a descriptor (and not
    // of whole words).
    answer::retract(c.nic_mem(1), ENTRY).unwrap();
    sent.push(ask(&mut c, good, b"retracted"));
    settle(&mut c);
    let now = c.now_ps();
    let short = OutMsg { peer: 1, ctrl: b"short".to_vec(), answerable: true, ..Default::default() };
    c.host_mut(0).post(now, short.clone());
    sent.push(short.ctrl);
    settle(&mut c);

    let got: Vec<_> = c.host(1).delivered.iter().map(|d| (d.src, d.ctrl.clone(), d.flags)).collect();
    let want: Vec<_> = sent.into_iter().map(|ctrl| (0, ctrl, 0)).collect();
    assert_eq!(got, want, "every request reached node 1's host as sent, in order");
    assert!(c.host(0).delivered.is_empty(), "no answer");
    assert_eq!(counter(&c, 1, Counter::RxAnswerToHost), 6);
    assert_eq!(counter(&c, 1, Counter::TxAnswers), 0);
    assert_eq!(counter(&c, 1, Counter::Interrupts), 6);
}

#[test]
fn an_answer_whose_entry_changes_while_it_is_read_never_arrives() {
    let mut c = cluster();
    let page = export_page(&mut c);
    let (tok, frame) = c.host_mut(0).arm(PAGE as u32, 1).expect("arm");
    ask(&mut c, Descriptor { index: ENTRY, key: KEY, token: tok.0 }, b"getpage 17");
    // The host begins to change the page once its NIC has started reading it.
    let reading = |c: &Cluster| c.transfer_log(1).iter().any(|t| t.kind == TransferKind::HostRead);
    assert!(c.run_until(LIMIT_PS, reading), "node 1's NIC never read the page");
    answer::begin(c.nic_mem(1), ENTRY).unwrap();
    settle(&mut c);
    assert!(c.host(0).delivered.is_empty(), "a torn answer arrived");
    assert_eq!(counter(&c, 1, Counter::TxAnswersAborted), 1);
    assert_eq!(counter(&c, 0, Counter::RxIptDelivered), 0);
    // Cut through: its first bytes were on the link already, so the receiver dropped it.
    assert_eq!(counter(&c, 0, Counter::RxDropCrc), 1);
    assert!(IptEntry::new(c.nic_mem(0), tok.index()).unwrap().is_armed(), "the token still armed");

    // Published again, the same token (never consumed) gets the page.
    let e = Export { key: KEY, addr: c.host_mut(1).store(&page).unwrap(), len: PAGE as u32, reply: REPLY };
    answer::publish(c.nic_mem(1), ENTRY, &e).unwrap();
    ask(&mut c, Descriptor { index: ENTRY, key: KEY, token: tok.0 }, b"getpage 17 again");
    settle(&mut c);
    let d = c.host(0).delivered.last().expect("the answer").clone();
    assert_eq!((d.ctrl.as_slice(), d.flags), (REPLY, rx_flags::IPT | rx_flags::ANSWER));
    assert_eq!(c.host(0).read(frame, PAGE).unwrap(), &page[..]);
    assert!(c.host(1).delivered.is_empty());
}
