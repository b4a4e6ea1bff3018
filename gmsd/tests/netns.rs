// SPDX-License-Identifier: GPL-2.0-only
//! Four `gmsd` as four machines in all but hardware: each daemon in a network namespace of
//! its own, on raw Ethernet (`--link ether:IFNAME`, peers by MAC) over a veth pair to a
//! bridge in a fifth namespace, `--replicas 2`. Clients write 128 MiB of pages (each
//! carrying its page number and generation) through daemons 0, 1 and 2 and read each batch
//! back as they go; node 3 is `kill -9`ed mid-run. Nothing acknowledged is lost: once the
//! survivors have declared it failed and made its copies again (`re_replicated`), every
//! page reads back with every byte. Then node 3 is started again in its namespace: it
//! rejoins (members, alive, `rejoins`), takes new puts, and a new generation of pages
//! reads back.
//!
//! It needs root and iproute2 (`needs: root, ip`: `cargo xtask test` runs it where they
//! are; plain `cargo test` lists it as ignored). The namespaces are always removed, by a
//! Drop guard, whatever happens. `GMSD_NETNS_MIB` sets the data written: the default 128
//! takes about 32 s in a debug build on a 2-core machine, 256 (the issue's figure) 78–95 s.

#[path = "support/daemons.rs"]
mod daemons;

use daemons::{held, stat, wait_for, Daemons};
use gms::prelude::{PageId, Version};
use gmsd::client::Client;
use gmsd::proto::{GetOutcome, PutOutcome, Stat, PAGE_BYTES};
use std::path::PathBuf;
use std::process::Command;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};
use trapeze_node::gms::page_pattern;

const VOL: u64 = 12;
const NODES: u16 = 4;
/// The daemon killed mid-run (no client writes through it).
const VICTIM: u16 = 3;
/// The daemons clients write and read through.
const WRITERS: u16 = 3;
const MTU: &str = "9000";
const BATCH: usize = 256;

/// Page `i` of the test: in volume `VOL + i % 3`, which the daemon clients write it
/// through (`i % 3`) writes (a volume has one writer).
fn pid(i: u64) -> PageId {
    PageId::new(VOL + i % WRITERS as u64, i)
}

/// Meta pages (label and floor map) of each volume, at the daemons' default size.
const META: u64 = gms::store::volume::meta_pages(gmsd::volumes::VOLUME_PAGES, PAGE_BYTES as u32);

/// Page `page` at generation `gen`: its number and generation, then a pattern of both.
fn content(page: u64, gen: u64) -> Vec<u8> {
    let mut d = page_pattern(PageId::new(VOL, page), Version(gen));
    d[..8].copy_from_slice(&page.to_le_bytes());
    d[8..16].copy_from_slice(&gen.to_le_bytes());
    d
}

/// Run `ip ARGS`, with its stderr in the error.
fn ip(args: &[&str]) -> Result<(), String> {
    let out = Command::new("ip").args(args).output().map_err(|e| format!("ip: {e}"))?;
    if out.status.success() {
        Ok(())
    } else {
        Err(format!("ip {}: {}", args.join(" "), String::from_utf8_lossy(&out.stderr).trim()))
    }
}

/// Network namespaces to delete on drop (deleting one deletes its veth ends too).
#[derive(Default)]
struct Namespaces(Vec<String>);

impl Namespaces {
    fn add(&mut self, name: &str) -> Result<(), String> {
        ip(&["netns", "add", name])?;
        self.0.push(name.to_string());
        Ok(())
    }
}

impl Drop for Namespaces {
    fn drop(&mut self) {
        for ns in &self.0 {
            if let Err(e) = ip(&["netns", "del", ns]) {
                eprintln!("cleanup: {e}");
            }
        }
    }
}

/// The daemons, each in its namespace: killed (their logs printed on failure) when
/// dropped, before the namespaces go (fields drop in order).
struct Cluster {
    daemons: Daemons,
    _namespaces: Namespaces,
}

fn mac(n: u16) -> String {
    format!("02:54:5a:00:00:{:02x}", n + 1)
}

impl Cluster {
    /// A bridge namespace and one namespace per node, each with a veth pair to the bridge;
    /// daemon `n` runs in namespace `n` with a budget of `budget_mb`.
    fn new(tag: &str, budget_mb: u64) -> Cluster {
        let pid = std::process::id();
        let mut namespaces = Namespaces::default();
        let br = format!("tzg-{pid}-br");
        namespaces.add(&br).unwrap_or_else(|e| panic!("making a network namespace (root and iproute2 needed): {e}"));
        ip(&["-n", &br, "link", "add", "br0", "type", "bridge"]).unwrap();
        let (mut ns, mut ifname) = (Vec::new(), Vec::new());
        for n in 0..NODES {
            let (node_ns, node_if, br_if) =
                (format!("tzg-{pid}-n{n}"), format!("tzg{pid}n{n}"), format!("tzg{pid}b{n}"));
            namespaces.add(&node_ns).unwrap();
            let pair =
                format!("link add {node_if} netns {node_ns} address {} type veth peer name {br_if} netns {br}", mac(n));
            ip(&pair.split(' ').collect::<Vec<_>>()).unwrap();
            ip(&["-n", &node_ns, "link", "set", &node_if, "mtu", MTU, "up"]).unwrap();
            ip(&["-n", &br, "link", "set", &br_if, "mtu", MTU, "master", "br0", "up"]).unwrap();
            ns.push(node_ns);
            ifname.push(node_if);
        }
        ip(&["-n", &br, "link", "set", "br0", "mtu", MTU, "up"]).unwrap();
        // `ip netns exec` execs gmsd: the child is the daemon.
        let daemons = Daemons::new(tag, NODES, move |n| {
            let mut cmd = Command::new("ip");
            cmd.args(["netns", "exec", &ns[n as usize], env!("CARGO_BIN_EXE_gmsd")])
                .args(["--node", &n.to_string(), "--link", &format!("ether:{}", ifname[n as usize])])
                .args(["--budget-mb", &budget_mb.to_string(), "--replicas", "2", "--dead-after-ms", "2000"]);
            for m in (0..NODES).filter(|&m| m != n) {
                cmd.args(["--peer", &format!("{m}={}", mac(m))]);
            }
            cmd
        })
        .expect("a directory for the daemons");
        Cluster { daemons, _namespaces: namespaces }
    }

    fn sock(&self, n: u16) -> PathBuf {
        self.daemons.sock(n)
    }

    fn spawn(&mut self, n: u16) {
        self.daemons.spawn(n).expect("spawn ip netns exec gmsd");
    }

    fn kill(&mut self, n: u16) {
        self.daemons.kill(n).expect("kill -9 gmsd");
    }
}

/// What one writer saw.
#[derive(Default)]
struct Run {
    /// Pages acknowledged stored (page, generation, copies' holders).
    acked: Vec<(u64, u64, Vec<u16>)>,
    /// Puts answered refused, failed or too few targets, then put again.
    again: u64,
    /// Pages that missed when read back during the run (checked again at the end).
    missed: Vec<u64>,
    read: u64,
}

/// Write `pages` at generation `gen` through `c` in batches, reading each batch back after
/// the next one is written; `acked` counts acknowledged pages for the killer. A put not
/// stored goes again (a failure mid-run leaves some so); a hit with wrong bytes fails the
/// test at once.
fn write_and_read(c: &mut Client, pages: &[u64], gen: u64, acked: &AtomicU64) -> Run {
    let mut run = Run::default();
    let mut prev: Vec<u64> = Vec::new();
    for batch in pages.chunks(BATCH) {
        let mut todo: Vec<u64> = batch.to_vec();
        for attempt in 0.. {
            if todo.is_empty() {
                break;
            }
            assert!(attempt < 20, "pages {:?}… still not stored after 20 tries", &todo[..todo.len().min(4)]);
            let data: Vec<Vec<u8>> = todo.iter().map(|&i| content(i, gen)).collect();
            let items: Vec<(PageId, &[u8])> = todo.iter().zip(&data).map(|(&i, d)| (pid(i), &d[..])).collect();
            let mut left = Vec::new();
            for (&i, r) in todo.iter().zip(c.put_many(&items).expect("put_many")) {
                match r {
                    PutOutcome::Stored { targets, .. } => {
                        run.acked.push((i, gen, targets.as_slice().to_vec()));
                        acked.fetch_add(1, Ordering::Relaxed);
                    }
                    PutOutcome::Refused | PutOutcome::Failed { .. } | PutOutcome::TooFewTargets { .. } => {
                        run.again += 1;
                        left.push(i);
                    }
                    other => panic!("page {i}: put ended {other:?}"),
                }
            }
            if !left.is_empty() {
                std::thread::sleep(Duration::from_millis(100));
            }
            todo = left;
        }
        run.read += prev.len() as u64;
        run.missed.extend(read_back(c, &prev, gen));
        prev = batch.to_vec();
    }
    run.read += prev.len() as u64;
    run.missed.extend(read_back(c, &prev, gen));
    run
}

/// Read `pages` through `c`: a hit must carry generation `gen`'s bytes; the misses are returned.
fn read_back(c: &mut Client, pages: &[u64], gen: u64) -> Vec<u64> {
    let ids: Vec<PageId> = pages.iter().map(|&i| pid(i)).collect();
    let mut missed = Vec::new();
    for (&i, g) in pages.iter().zip(c.get_many(&ids, true).expect("get_many")) {
        match g {
            GetOutcome::Hit { data, .. } => {
                assert_eq!(data.len(), PAGE_BYTES, "page {i}: length");
                if data != content(i, gen) {
                    let head = |d: &[u8]| {
                        (
                            u64::from_le_bytes(d[..8].try_into().unwrap()),
                            u64::from_le_bytes(d[8..16].try_into().unwrap()),
                        )
                    };
                    panic!("page {i}: wrong bytes (page, generation) {:?}, expected ({i}, {gen})", head(&data));
                }
            }
            GetOutcome::Miss(_) => missed.push(i),
        }
    }
    missed
}

/// Run `job` through each writer daemon at once, writer `k` with pages `i % WRITERS == k`.
fn on_writers<T: Send>(clients: &mut [Client], pages: &[u64], job: impl Fn(&mut Client, &[u64]) -> T + Sync) -> Vec<T> {
    std::thread::scope(|s| {
        let job = &job;
        let hs: Vec<_> = clients
            .iter_mut()
            .enumerate()
            .map(|(k, c)| {
                let mine: Vec<u64> = pages.iter().copied().filter(|i| i % WRITERS as u64 == k as u64).collect();
                s.spawn(move || job(c, &mine))
            })
            .collect();
        hs.into_iter().map(|h| h.join().expect("client thread")).collect()
    })
}

#[test]
#[ignore = "needs: root, ip — network namespaces, veth pairs, a bridge and raw sockets"]
fn four_daemons_in_namespaces_lose_nothing_to_a_kill_and_the_killed_one_rejoins() {
    let mib: u64 = std::env::var("GMSD_NETNS_MIB").ok().and_then(|v| v.parse().ok()).unwrap_or(128);
    let pages = (mib << 20) / PAGE_BYTES as u64;
    // Two copies of everything on the three survivors, with a quarter to spare.
    let budget_mb = (2 * mib / 3 + 1) * 5 / 4 + 4;
    let t_all = Instant::now();
    let mut cl = Cluster::new("netns-test", budget_mb);
    for n in 0..NODES {
        cl.spawn(n);
    }
    for n in 0..NODES {
        let s = wait_for(Duration::from_secs(20), &format!("gmsd {n} to hear its peers over the bridge"), || {
            stat(&cl.sock(n)).filter(|s| {
                s.nodes.len() == NODES as usize && s.nodes.iter().all(|m| m.alive && m.last_heard_ms < 1000)
            })
        });
        assert_eq!(s.members, [0, 1, 2, 3]);
    }
    let setup = t_all.elapsed();
    let mut clients: Vec<Client> = (0..WRITERS).map(|n| Client::connect(&cl.sock(n)).expect("connect")).collect();

    // ---- write and read back the data set; kill -9 node 3 once 40 % is acknowledged ----
    let all: Vec<u64> = (0..pages).collect();
    let acked = AtomicU64::new(0);
    let t_run = Instant::now();
    let mut victim_held = 0;
    let mut t_kill = None;
    let runs = std::thread::scope(|s| {
        let (clients, all, acked) = (&mut clients, &all, &acked);
        let h = s.spawn(move || on_writers(clients, all, |c, mine| write_and_read(c, mine, 1, acked)));
        while !h.is_finished() {
            if t_kill.is_none() && acked.load(Ordering::Relaxed) >= pages * 2 / 5 {
                victim_held = stat(&cl.sock(VICTIM)).map_or(0, |s| held(&s));
                cl.kill(VICTIM);
                t_kill = Some(Instant::now());
            }
            std::thread::sleep(Duration::from_millis(5));
        }
        h.join().expect("writers")
    });
    let run_secs = t_run.elapsed().as_secs_f64();
    let t_kill = t_kill.expect("node 3 was killed mid-run");
    let acked_pages: Vec<u64> = runs.iter().flat_map(|r| r.acked.iter().map(|a| a.0)).collect();
    assert_eq!(acked_pages.len() as u64, pages, "every page acknowledged once");
    let acked_on_victim: Vec<u64> =
        runs.iter().flat_map(|r| &r.acked).filter(|a| a.2.contains(&VICTIM)).map(|a| a.0).collect();

    // ---- the survivors declare it failed and make its copies again ----
    for n in 0..WRITERS {
        wait_for(Duration::from_secs(10), &format!("gmsd {n} to declare node {VICTIM} failed"), || {
            stat(&cl.sock(n)).filter(|s| s.members == [0, 1, 2] && s.failures_detected == 1)
        });
    }
    let survivors: Vec<Stat> = (0..WRITERS)
        .map(|n| {
            wait_for(Duration::from_secs(60), &format!("gmsd {n} to make its lost copies again"), || {
                stat(&cl.sock(n)).filter(|s| s.re_replicate_pending == 0)
            })
        })
        .collect();
    let repaired_secs = t_kill.elapsed().as_secs_f64();
    let re_replicated: u64 = survivors.iter().map(|s| s.re_replicated).sum();
    assert!(re_replicated > 0, "no survivor made a copy again, yet node {VICTIM} held {victim_held} pages");
    // Each acknowledged page's copy made again once, and the copies of the volumes' meta
    // pages (labels and floor maps) node 3 held.
    let on_victim = acked_on_victim.len() as u64;
    assert!(
        (on_victim..=on_victim + WRITERS as u64 * META).contains(&re_replicated),
        "{re_replicated} copies made again, against {on_victim} acknowledged pages with a copy on node {VICTIM}"
    );
    // Two live copies of every page on the three survivors (the last repairs may still be
    // on the wire).
    let t_held = Instant::now();
    let mut on_survivors = 0;
    while t_held.elapsed() < Duration::from_secs(10) {
        on_survivors = (0..WRITERS).filter_map(|n| stat(&cl.sock(n))).map(|s| held(&s)).sum::<u64>();
        if on_survivors >= 2 * pages {
            break;
        }
        std::thread::sleep(Duration::from_millis(100));
    }
    if on_survivors < 2 * pages {
        // Which pages lack a copy, and what the survivors say.
        let holders: std::collections::HashMap<u64, Vec<u16>> =
            runs.iter().flat_map(|r| &r.acked).map(|a| (a.0, a.2.clone())).collect();
        let short: Vec<(u64, u8, Vec<u16>)> = on_writers(&mut clients, &all, |c, mine| {
            let mut out = Vec::new();
            let ids: Vec<PageId> = mine.iter().map(|&i| pid(i)).collect();
            for (&i, g) in mine.iter().zip(c.get_many(&ids, true).expect("get_many")) {
                if matches!(g, GetOutcome::Miss(_)) {
                    out.push((i, 0u8));
                }
            }
            out
        })
        .into_iter()
        .flatten()
        .map(|(i, k)| (i, k, holders[&i].clone()))
        .collect();
        for n in 0..WRITERS {
            let s = stat(&cl.sock(n)).expect("stat");
            eprintln!(
                "gmsd {n}: held {}, dropped {}, discarded {}, re-registered {}, re-replicated {}, refused here {}, \
                 retries {}, nic {:?}",
                held(&s),
                s.pages_dropped,
                s.pages_discarded,
                s.reregistered,
                s.re_replicated,
                s.refused_here,
                s.retries,
                s.nic
            );
        }
        panic!(
            "the survivors hold {on_survivors} copies of {pages} pages; {} copies miss (page, replica, holders when \
             acknowledged): {:?}",
            short.len(),
            &short[..short.len().min(20)]
        );
    }

    // ---- zero lost: every page reads back, every byte (through its writer) ----
    let t_read = Instant::now();
    let missed_during: u64 = runs.iter().map(|r| r.missed.len() as u64).sum();
    let lost: Vec<u64> =
        on_writers(&mut clients, &all, |c, mine| read_back(c, mine, 1)).into_iter().flatten().collect();
    let read_secs = t_read.elapsed().as_secs_f64();
    assert!(lost.is_empty(), "{} acknowledged pages lost: {:?}", lost.len(), &lost[..lost.len().min(10)]);
    let again: u64 = runs.iter().map(|r| r.again).sum();
    let read_during: u64 = runs.iter().map(|r| r.read).sum();
    eprintln!(
        "netns: {NODES} daemons up over raw Ethernet in {:.1} s; wrote {mib} MiB ({pages} pages, 2 copies) and read \
         {read_during} pages back as it went in {run_secs:.1} s ({:.1} MB/s written); kill -9 of node {VICTIM} \
         (holding {victim_held} copies) at {:.1} s; {again} puts went again; {missed_during} reads missed during the \
         run; survivors made {re_replicated} copies again ({} acknowledged pages had one there), done {repaired_secs:.1} \
         s after the kill; all {pages} pages read back, every byte, in {read_secs:.1} s",
        setup.as_secs_f64(),
        pages as f64 * PAGE_BYTES as f64 / run_secs / 1e6,
        (t_kill - t_run).as_secs_f64(),
        acked_on_victim.len(),
    );

    // ---- node 3 starts again in its namespace: it rejoins and takes new puts ----
    let t_restart = Instant::now();
    cl.spawn(VICTIM);
    for n in 0..WRITERS {
        wait_for(Duration::from_secs(10), &format!("gmsd {n} to admit node {VICTIM} again"), || {
            stat(&cl.sock(n)).filter(|s| {
                s.members == [0, 1, 2, 3] && s.rejoins == 1 && s.nodes.iter().all(|m| m.alive && m.last_heard_ms < 1000)
            })
        });
    }
    wait_for(Duration::from_secs(5), &format!("gmsd {VICTIM} to see all four members"), || {
        stat(&cl.sock(VICTIM)).filter(|s| s.members == [0, 1, 2, 3] && s.nodes.iter().all(|m| m.alive))
    });
    let rejoin_secs = t_restart.elapsed().as_secs_f64();
    // A new generation of the first eighth of the pages.
    let second: Vec<u64> = (0..pages / 8).collect();
    let runs2 = on_writers(&mut clients, &second, |c, mine| write_and_read(c, mine, 2, &acked));
    let on_victim = runs2.iter().flat_map(|r| &r.acked).filter(|a| a.2.contains(&VICTIM)).count() as u64;
    assert!(on_victim > 0, "no new put landed on the restarted node {VICTIM}");
    let s3 =
        wait_for(Duration::from_secs(5), &format!("gmsd {VICTIM} to hold the {on_victim} copies put there"), || {
            stat(&cl.sock(VICTIM)).filter(|s| held(s) >= on_victim)
        });
    let lost2: Vec<u64> =
        on_writers(&mut clients, &second, |c, mine| read_back(c, mine, 2)).into_iter().flatten().collect();
    assert!(lost2.is_empty(), "{} pages of generation 2 lost: {:?}", lost2.len(), &lost2[..lost2.len().min(10)]);
    eprintln!(
        "netns: node {VICTIM} restarted and admitted by all three in {rejoin_secs:.1} s; {} pages of generation 2 \
         written, {on_victim} with a copy on it (it holds {} of its {} pages), all read back; total {:.1} s",
        second.len(),
        held(&s3),
        budget_mb * 1024 / 8,
        t_all.elapsed().as_secs_f64()
    );
}
