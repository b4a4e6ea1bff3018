// SPDX-License-Identifier: GPL-2.0-only
//! A restarted daemon rejoins: three `gmsd` over UDP on 127.0.0.1 with `--replicas 2`;
//! node 2 is `kill -9`ed and started again (same id and address, a new incarnation),
//! once after the survivors declared it failed and once at once, before they could. Each
//! time the survivors admit it again (`rejoins`, members), the copies it lost are made
//! again on it, new puts land on it, and every page reads back with its bytes.

#[path = "support/daemons.rs"]
mod daemons;

use daemons::{held, over_udp, stat, udp_ports, wait_for, Daemons};
use gms::prelude::{PageId, Version};
use gmsd::client::Client;
use gmsd::proto::{GetOutcome, PutOutcome};
use std::time::{Duration, Instant};
use trapeze_node::gms::page_pattern;

const VOL: u64 = 11;
const PAGES: u64 = 256;
const NODES: u16 = 3;
const RESTARTED: u16 = 2;
/// Copies of the volume's meta pages (`gms::store::volume`: its label and its floor map,
/// four pages at `--volume-pages 4096`, stored beside its pages, two copies each, so one
/// of each at most on node 2) a node holds at most, an older copy of one rewritten
/// included until its directory drops it.
const META: u64 = 6;

fn content(page: u64) -> Vec<u8> {
    page_pattern(PageId::new(VOL, page), Version(0))
}

/// Put `pages` through `c`: each must be stored on nodes 1 and 2 (the two other than 0).
fn put_all(c: &mut Client, pages: std::ops::Range<u64>) {
    let data: Vec<Vec<u8>> = pages.clone().map(content).collect();
    let items: Vec<(PageId, &[u8])> = pages.clone().zip(&data).map(|(i, d)| (PageId::new(VOL, i), &d[..])).collect();
    for (i, r) in pages.zip(c.put_many(&items).expect("put_many")) {
        match r {
            PutOutcome::Stored { targets, .. } => {
                let mut t = targets.as_slice().to_vec();
                t.sort_unstable();
                assert_eq!(t, vec![1, 2], "page {i}: copies on both nodes other than the writer");
            }
            other => panic!("page {i}: put ended {other:?}"),
        }
    }
}

/// Pages `0..n` read back right through `c` (the writer's daemon reads through its
/// store, any other as a reader, through the directory).
fn read_all(c: &mut Client, n: u64) {
    let ids: Vec<PageId> = (0..n).map(|i| PageId::new(VOL, i)).collect();
    for (i, g) in (0..n).zip(c.get_many(&ids, true).expect("get_many")) {
        match g {
            GetOutcome::Hit { data, .. } => assert!(data == content(i), "page {i}: wrong bytes"),
            GetOutcome::Miss(why) => panic!("page {i} missed: {why}"),
        }
    }
}

/// Both survivors admit node 2 again (`rejoins` reaches `n`, all three are members, it is
/// alive) and node 0 has made every copy it lost again: `remade` of the pages' in all, and
/// a few more, the volume's meta pages' ([`META`] each time).
fn rejoined(cl: &Daemons, n: u64, remade: u64) -> Duration {
    let t0 = Instant::now();
    for s in [0, 1] {
        wait_for(Duration::from_secs(10), &format!("gmsd {s} to admit node {RESTARTED} again (rejoin {n})"), || {
            stat(&cl.sock(s)).filter(|s| {
                s.rejoins == n && s.members == [0, 1, 2] && s.nodes.iter().all(|m| m.alive && m.last_heard_ms < 1000)
            })
        });
    }
    wait_for(Duration::from_secs(5), &format!("gmsd {RESTARTED} to see all three members"), || {
        stat(&cl.sock(RESTARTED)).filter(|s| s.members == [0, 1, 2])
    });
    wait_for(Duration::from_secs(20), &format!("gmsd 0 to make {remade} lost copies again"), || {
        stat(&cl.sock(0))
            .filter(|s| (remade..=remade + 2 * META).contains(&s.re_replicated) && s.re_replicate_pending == 0)
    });
    t0.elapsed()
}

#[test]
fn a_restarted_daemon_rejoins_and_takes_puts() {
    let ports = udp_ports(NODES).expect("free UDP ports");
    let mut cl = Daemons::new("rejoin-test", NODES, move |n| {
        let mut c = over_udp(&ports, n, &["--budget-mb", "16", "--dead-after-ms", "2000", "--replicas", "2"]);
        c.args(["--volume-pages", "4096"]);
        c
    })
    .expect("a directory for the daemons");
    for n in 0..NODES {
        cl.spawn(n).expect("spawn gmsd");
    }
    for n in 0..NODES {
        wait_for(Duration::from_secs(20), &format!("gmsd {n} to hear its peers"), || {
            stat(&cl.sock(n)).filter(|s| s.nodes.iter().all(|m| m.alive && m.last_heard_ms < 1000))
        });
    }
    let mut c = Client::connect(&cl.sock(0)).expect("connect");
    put_all(&mut c, 0..PAGES);

    // ---- kill -9, declared failed, then started again: a rejoin ----
    cl.kill(RESTARTED).expect("kill -9 gmsd");
    let t_kill = Instant::now();
    for s in [0, 1] {
        wait_for(Duration::from_secs(5), &format!("gmsd {s} to declare node {RESTARTED} failed"), || {
            stat(&cl.sock(s)).filter(|s| s.members == [0, 1] && s.failures_detected == 1)
        });
    }
    // Every page lost its copy on node 2; with one other node left, none can be made again
    // (nor can a new page be put twice).
    let s0 = wait_for(Duration::from_secs(5), "gmsd 0 to count the lost copies", || {
        stat(&cl.sock(0)).filter(|s| (PAGES..=PAGES + META).contains(&s.re_replicate_pending))
    });
    assert_eq!(s0.re_replicated, 0);
    let r = c.put(PageId::new(VOL, 10 * PAGES), &content(10 * PAGES)).expect("put");
    assert!(matches!(r, PutOutcome::TooFewTargets { replicas: 2, .. }), "with node {RESTARTED} down: {r:?}");
    let down = t_kill.elapsed();
    cl.spawn(RESTARTED).expect("spawn gmsd");
    let back = rejoined(&cl, 1, PAGES);
    // Its copies came back by re-replication; new puts land on it too.
    put_all(&mut c, PAGES..2 * PAGES);
    let s2 = wait_for(Duration::from_secs(5), &format!("gmsd {RESTARTED} to hold {} copies", 2 * PAGES), || {
        stat(&cl.sock(RESTARTED)).filter(|s| (2 * PAGES..=2 * PAGES + META).contains(&held(s)))
    });
    assert!(s2.nodes.iter().all(|m| m.alive), "{:?}", s2.nodes);
    let mut c1 = Client::connect(&cl.sock(1)).expect("connect");
    read_all(&mut c1, 2 * PAGES);
    read_all(&mut c, 2 * PAGES);
    eprintln!(
        "kill -9 of node {RESTARTED}: declared failed and {PAGES} copies waiting after {:.2} s; restarted, admitted \
         again and all {PAGES} copies made again on it {:.2} s later; then {PAGES} new puts stored on it",
        down.as_secs_f64(),
        back.as_secs_f64()
    );

    // ---- kill -9 and started again at once: a new incarnation, before any timeout ----
    cl.kill(RESTARTED).expect("kill -9 gmsd");
    cl.spawn(RESTARTED).expect("spawn gmsd");
    let back = rejoined(&cl, 2, 3 * PAGES);
    for s in [0, 1] {
        let st = stat(&cl.sock(s)).expect("stat");
        assert_eq!(st.failures_detected, 1, "gmsd {s}: the quick restart is a rejoin by incarnation, not a timeout");
    }
    wait_for(Duration::from_secs(5), &format!("gmsd {RESTARTED} to hold {} copies again", 2 * PAGES), || {
        stat(&cl.sock(RESTARTED)).filter(|s| (2 * PAGES..=2 * PAGES + META).contains(&held(s)))
    });
    put_all(&mut c, 2 * PAGES..3 * PAGES);
    read_all(&mut c1, 3 * PAGES);
    read_all(&mut c, 3 * PAGES);
    let s2 = stat(&cl.sock(RESTARTED)).expect("stat");
    let h = held(&s2);
    assert!((3 * PAGES..=3 * PAGES + META).contains(&h), "the restarted node holds {h} copies, not one of every page");
    eprintln!(
        "kill -9 and an immediate restart: admitted again by its new incarnation and {} copies made again on it in \
         {:.2} s; {PAGES} more puts stored on it",
        2 * PAGES,
        back.as_secs_f64()
    );
}
