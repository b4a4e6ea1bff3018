// SPDX-License-Identifier: GPL-2.0-only
//! One-sided reads on virtual NICs: a holder's NIC answers getpages of the pages it holds
//! from its answer table, without its host (3-node in-process cluster, one thread). The
//! putter learns each copy's entry from the holder's `PUTDONE`; a copy the holder lets go
//! is answered by its host again (a miss there: GMS finds the page's new place). Every
//! byte read back is checked.

use gms::prelude::*;
use trapeze_node::gms::{on_big_stack, page_pattern, Cluster, Got, Source};
use trapeze_runtime::iface::layout::Counter;

const SPACE: u64 = 5;
const PAGES: u64 = 40;

fn content(n: u64, v: u64) -> Vec<u8> {
    page_pattern(PageId::new(SPACE, n), Version(v))
}

fn put_all(c: &mut Cluster, v: u64, target: Option<u16>) {
    for n in 0..PAGES {
        while c.ports[0].in_flight() >= 16 {
            c.poll();
        }
        c.ports[0].put(PageId::new(SPACE, n), Version(v), &content(n, v), target).expect("put");
    }
    c.settle(0).expect("puts finish");
}

fn read_all(c: &mut Cluster, v: u64) {
    for n in 0..PAGES {
        match c.get_wait(0, PageId::new(SPACE, n)).expect("get") {
            Got::Hit { version, data, source } => {
                assert_eq!(version, Version(v), "page {n}");
                assert!(data == content(n, v), "page {n}: wrong bytes");
                assert_eq!(source, Source::TwoWay, "page {n}");
            }
            Got::Miss => panic!("page {n}: miss"),
        }
    }
}

/// Answers the NICs of nodes 1 and 2 sent, and getpages their hosts served.
fn served(c: &Cluster) -> (u64, u64) {
    let nic = |k: usize| c.ports[k].node.host.frames.ep.counter(Counter::TxAnswers);
    let host = |k: usize| c.ports[k].node.stats().gets_served;
    (nic(1) + nic(2), host(1) + host(2))
}

#[test]
fn holders_nics_answer_getpages_without_their_hosts() {
    on_big_stack(run).expect("test thread");
}

fn run() {
    let cfg = GmsConfig { op_timeout: 500_000_000, ..GmsConfig::default() };
    let mut c = Cluster::new(3, 100, cfg).expect("cluster");
    put_all(&mut c, 1, None);
    let exported: usize = (1..3).map(|k| c.ports[k].node.host.frames.exports()).sum();
    assert_eq!(exported, PAGES as usize, "every stored copy exported");

    let work = |c: &Cluster| c.ports[1].foreground_messages() + c.ports[2].foreground_messages();
    let before = work(&c);
    read_all(&mut c, 1);
    assert_eq!(served(&c), (PAGES, 0), "every getpage answered by a NIC, none by a host");
    // Their hosts received nothing, yet served every read: work that keeps a daemon
    // polling rather than asleep (gmsd's idle spin).
    assert!(work(&c) >= before + PAGES, "answers the NICs sent count as work: {} after {before}", work(&c));
    assert_eq!(c.ports[0].rpc.stats().answers, PAGES);

    // New versions, all on node 2: node 1's copies are dropped (their exports retracted),
    // node 2's replaced in place.
    put_all(&mut c, 2, Some(2));
    assert_eq!(c.ports[1].node.host.frames.exports(), 0, "node 1 holds nothing");
    assert_eq!(c.ports[2].node.host.frames.exports(), PAGES as usize);
    read_all(&mut c, 2);
    assert_eq!(served(&c), (2 * PAGES, 0));

    // Node 2 lets every copy go (as its LRU would): its NIC answers for none of them, its
    // host answers the getpages with misses, and node 0 asks the directory then.
    let now = c.ports[2].now();
    for n in 0..PAGES {
        let h = c.ports[2].node.drop_local(now, &PageId::new(SPACE, n)).expect("held");
        c.ports[2].node.host.release(h.frame);
    }
    assert_eq!(c.ports[2].node.host.frames.exports(), 0);
    for n in 0..PAGES {
        assert!(matches!(c.get_wait(0, PageId::new(SPACE, n)).expect("get"), Got::Miss), "page {n}");
    }
    assert_eq!(served(&c).0, 2 * PAGES, "no answer from a retracted entry");
    assert_eq!(c.ports[2].node.host.frames.ep.counter(Counter::RxAnswerToHost), PAGES);
}
