// SPDX-License-Identifier: GPL-2.0-only
//! The shared volume of `cargo xtask vm nbd-test`: several guests on one NBD export at once
//! (issue 35: one writer and its readers see its flushed data; every guest reads one
//! common region at the same time). The layout the guests use (`kernel-crate/guest/nbd.sh`
//! reads it from `/etc/trapeze/nbd.env`), and the host's checks: every guest's sums
//! against the writer's, and nbdkit's request log (its `log` filter) for the writer's
//! FLUSH before its header and every guest's reads of the common region in flight during
//! one span.

use super::report::printable;
use std::collections::{BTreeMap, BTreeSet};
use std::path::Path;
use std::process::Command;

/// Guests on the export: guest 0 writes, the others read.
pub(super) const GUESTS: u16 = 3;
/// The volume's first MiB hold guest 0's ext4 file system; the shared area follows.
const FS_MIB: u64 = 48;
/// The shared area: its first 4 KiB block is the writer's header, block 1 + k guest k's
/// ready mark, block 1 + GUESTS + k its mark that it has read C once.
const AREA_MIB: u64 = 48;
/// Region A (MiB offset, MiB): written and flushed by the writer, then read by each reader.
const A: (u64, u64) = (49, 2);
/// Region C (MiB offset, MiB): the common region every guest reads at once.
const C: (u64, u64) = (52, 8);
/// How many times each guest reads C at least (it reads on until every guest has read C
/// once, and then once more).
const PASSES: u32 = 3;
/// The guests' waits end this many seconds before the host's power-off timeout, so that a
/// guest left waiting says so and powers off.
const WAIT_MARGIN: u64 = 60;

/// The shared area's lines of `/etc/trapeze/nbd.env` for a run with `nonce`, whose host
/// waits `timeout` s for the power-off.
pub(super) fn env(nonce: &str, timeout: u64) -> String {
    format!(
        "guests={GUESTS}\nnonce={nonce}\nfs_mib={FS_MIB}\narea_mib={AREA_MIB}\na_mib={}\na_len={}\nc_mib={}\nc_len={}\n\
         c_passes={PASSES}\ndeadline={}\n",
        A.0,
        A.1,
        C.0,
        C.1,
        timeout.saturating_sub(WAIT_MARGIN).max(WAIT_MARGIN)
    )
}

/// A run's nonce: the header and ready marks of another run never match it.
pub(super) fn nonce() -> String {
    let nanos = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map_or(0, |d| d.as_nanos());
    format!("{:x}-{:x}", std::process::id(), nanos)
}

/// The host's checks of the shared area: `consoles` (guest k's at index k, the script's
/// lines starting with `prefix`), nbdkit's request log and the volume reassembled from
/// the servers' files. What was found, and what failed.
pub(super) fn checks(consoles: &[String], prefix: &str, log: &str, image: &Path) -> (Vec<String>, Vec<String>) {
    let (mut found, mut failed) = (Vec::new(), Vec::new());
    let said_by = |k: usize, what: &str| consoles.get(k).map_or_else(Vec::new, |c| said(c, prefix, what));
    let Some(wrote) = said_by(0, "shared wrote").into_iter().next().filter(|w| w.len() == 2) else {
        failed.push("guest 0 printed no \"shared wrote MD5A MD5C\"".into());
        return (found, failed);
    };
    let (ma, mc) = (&wrote[0], &wrote[1]);
    let mut ok = |good: bool, what: String| if good { found.push(what) } else { failed.push(what) };
    for k in 0..usize::from(GUESTS) {
        if k > 0 {
            let read: Vec<String> = said_by(k, "shared read").into_iter().filter_map(|w| w.first().cloned()).collect();
            ok(
                read.len() == 1 && read[0] == *ma,
                format!("guest {k} read region A as md5 {}, the writer's {ma}", read.join(" ")),
            );
        }
        let passes: Vec<String> = said_by(k, "common read").into_iter().filter_map(|w| w.get(1).cloned()).collect();
        ok(
            passes.len() >= PASSES as usize && passes.iter().all(|s| s == mc),
            format!(
                "guest {k} read region C {} times (at least {PASSES}), {} of them as the writer's md5 {mc}",
                passes.len(),
                passes.iter().filter(|s| *s == mc).count()
            ),
        );
    }
    for (name, (mib, len), sum) in [("A", A, ma), ("C", C, mc)] {
        let got = image_md5(image, mib, len);
        let what =
            format!("the servers' files hold region {name}: md5 {}, the writer's {sum}", got.as_deref().unwrap_or("?"));
        ok(got.as_deref() == Some(sum.as_str()), what);
    }
    let (f, e) = log_checks(&Requests::parse(log));
    found.extend(f);
    failed.extend(e);
    (found, failed)
}

/// The words after "PREFIX WHAT " on each of a console's lines that have them.
fn said(console: &str, prefix: &str, what: &str) -> Vec<Vec<String>> {
    console
        .lines()
        .map(printable)
        .filter_map(|l| {
            let rest = l.strip_prefix(prefix)?.strip_prefix(what)?.strip_prefix(' ')?;
            Some(rest.split_whitespace().map(str::to_string).collect())
        })
        .collect()
}

/// The md5sum of `len` MiB of `image` at `mib` MiB.
fn image_md5(image: &Path, mib: u64, len: u64) -> Option<String> {
    let script = format!("dd if='{}' bs=1M skip={mib} count={len} status=none | md5sum", image.display());
    let out = Command::new("sh").args(["-c", &script]).output().ok()?;
    String::from_utf8_lossy(&out.stdout).split_whitespace().next().map(str::to_string)
}

/// A moment in nbdkit's log: the line's number and its time, in seconds of the day.
type At = (usize, f64);

/// One request in nbdkit's log: its connection, action, range, and when it entered and
/// returned.
#[derive(Debug, Clone)]
struct Request {
    conn: u32,
    act: String,
    offset: u64,
    count: u64,
    enter: At,
    leave: Option<At>,
}

impl Request {
    fn within(&self, (mib, len): (u64, u64)) -> bool {
        let (lo, hi) = (mib << 20, (mib + len) << 20);
        self.offset < hi && self.offset + self.count > lo
    }
}

/// nbdkit's `log` filter's lines, as requests in the order they entered.
#[derive(Debug, Default)]
struct Requests(Vec<Request>);

impl Requests {
    /// Lines such as `2026-11-30 04:59:20.698739 connection=1 Write id=1 offset=0x2000
    /// count=0x1000 fua=1 ...` and `... connection=1 ...Write id=1 return=0`; other lines
    /// (and lines that do not parse) are left out.
    fn parse(log: &str) -> Requests {
        let mut reqs: Vec<Request> = Vec::new();
        let mut open: BTreeMap<(u32, u64), usize> = BTreeMap::new();
        for (n, line) in log.lines().enumerate() {
            let w: Vec<&str> = line.split_whitespace().collect();
            let (Some(time), Some(conn), Some(act), Some(id)) = (
                w.get(1).and_then(|t| seconds_of_day(t)),
                w.get(2).and_then(|c| c.strip_prefix("connection=")?.parse::<u32>().ok()),
                w.get(3),
                w.get(4).and_then(|i| i.strip_prefix("id=")?.parse::<u64>().ok()),
            ) else {
                continue;
            };
            if act.starts_with("...") {
                if let Some(i) = open.remove(&(conn, id)) {
                    reqs[i].leave = Some((n, time));
                }
                continue;
            }
            let field = |key: &str| {
                w.iter().find_map(|f| u64::from_str_radix(f.strip_prefix(key)?.strip_prefix("0x")?, 16).ok())
            };
            open.insert((conn, id), reqs.len());
            reqs.push(Request {
                conn,
                act: act.to_string(),
                offset: field("offset=").unwrap_or(0),
                count: field("count=").unwrap_or(0),
                enter: (n, time),
                leave: None,
            });
        }
        Requests(reqs)
    }
}

/// "HH:MM:SS.ffffff" as seconds.
fn seconds_of_day(t: &str) -> Option<f64> {
    let mut p = t.split(':');
    let (h, m, s) = (p.next()?.parse::<f64>().ok()?, p.next()?.parse::<f64>().ok()?, p.next()?.parse::<f64>().ok()?);
    Some(h * 3600.0 + m * 60.0 + s)
}

/// Seconds from `a` to `b`, across a midnight.
fn span(a: f64, b: f64) -> f64 {
    if b >= a {
        b - a
    } else {
        b + 86_400.0 - a
    }
}

/// In the request log: the writer's header write came after a FLUSH that returned after
/// its writes of A and C; each reader's first read of A entered after the header write
/// returned; every guest's connection read C, and all of them were reading C during one
/// span.
fn log_checks(r: &Requests) -> (Vec<String>, Vec<String>) {
    let (mut found, mut failed) = (Vec::new(), Vec::new());
    let header = (AREA_MIB, 0);
    let Some(head) = r.0.iter().find(|q| q.act == "Write" && q.offset == header.0 << 20) else {
        failed.push("nbdkit's log shows no write of the shared area's header block".into());
        return (found, failed);
    };
    let writer = head.conn;
    let data_done = r.0.iter().filter(|q| q.conn == writer && q.act == "Write" && (q.within(A) || q.within(C)));
    let data_done = data_done.filter_map(|q| q.leave.map(|l| l.0)).max();
    let flushed = r.0.iter().any(|q| {
        q.conn == writer
            && q.act == "Flush"
            && data_done.is_some_and(|d| q.enter.0 > d)
            && q.leave.is_some_and(|l| l.0 < head.enter.0)
    });
    let what = format!("nbdkit log: the writer (connection {writer}) flushed after writing A and C, before its header");
    if flushed {
        found.push(what);
    } else {
        failed.push(format!("{what}: no such FLUSH"));
    }
    let head_done = head.leave.map_or(usize::MAX, |l| l.0);
    let readers: BTreeSet<u32> = r.0.iter().filter(|q| q.act == "Read" && q.within(A)).map(|q| q.conn).collect();
    if readers.len() + 1 != usize::from(GUESTS) {
        failed.push(format!("nbdkit log: {} connections read A, not the {} readers", readers.len(), GUESTS - 1));
    }
    for c in &readers {
        let first = r.0.iter().find(|q| q.conn == *c && q.act == "Read" && q.within(A)).map(|q| q.enter.0);
        let what = format!("nbdkit log: connection {c} read A only after the header was written");
        if first.is_some_and(|f| f > head_done) {
            found.push(what);
        } else {
            failed.push(format!("{what}: it read A before"));
        }
    }
    match common_span(r) {
        Ok(s) => found.push(s),
        Err(e) => failed.push(e),
    }
    (found, failed)
}

/// Every guest's connection read C, and their reads of C overlapped: a span in which each
/// connection had entered its first read of C and none had returned its last.
fn common_span(r: &Requests) -> Result<String, String> {
    let mut per: BTreeMap<u32, (At, At)> = BTreeMap::new();
    for q in r.0.iter().filter(|q| q.act == "Read" && q.within(C)) {
        let leave = q.leave.ok_or_else(|| format!("nbdkit log: connection {}'s read of C never returned", q.conn))?;
        let e = per.entry(q.conn).or_insert((q.enter, leave));
        e.1 = if leave.0 > e.1 .0 { leave } else { e.1 };
    }
    if per.len() < usize::from(GUESTS) {
        return Err(format!("nbdkit log: {} connections read C, not {GUESTS}", per.len()));
    }
    let start = per.values().map(|s| s.0).max_by_key(|x| x.0).expect("not empty");
    let end = per.values().map(|s| s.1).min_by_key(|x| x.0).expect("not empty");
    if start.0 >= end.0 {
        return Err(format!("nbdkit log: the {} connections' reads of C did not overlap", per.len()));
    }
    // The most connections with a read of C in flight at one moment.
    let mut events: Vec<(usize, u32, i32)> = Vec::new();
    for q in r.0.iter().filter(|q| q.act == "Read" && q.within(C)) {
        events.push((q.enter.0, q.conn, 1));
        events.extend(q.leave.map(|l| (l.0, q.conn, -1)));
    }
    events.sort_unstable();
    let mut in_flight: BTreeMap<u32, i32> = BTreeMap::new();
    let mut most = 0;
    for (_, c, d) in events {
        *in_flight.entry(c).or_default() += d;
        most = most.max(in_flight.values().filter(|&&n| n > 0).count());
    }
    Ok(format!(
        "nbdkit log: {} connections read C at once for {:.0} ms (all in their reads of C), at most {most} with a read of C in flight at one moment",
        per.len(),
        span(start.1, end.1) * 1000.0
    ))
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A log line: `conn`'s request `id` entering (`act`, offset and count in bytes) or
    /// returning (`act` starting with "...").
    fn line(sec: f64, conn: u32, act: &str, id: u64, range: Option<(u64, u64)>) -> String {
        let range = range.map_or(String::new(), |(o, c)| format!(" offset={o:#x} count={c:#x}"));
        let tail = if act.starts_with("...") { " return=0" } else { " ..." };
        format!("2026-11-30 05:00:{sec:09.6} connection={conn} {act} id={id}{range}{tail}")
    }

    /// The writer on connection 1, the readers on 2, 3, …: A and C written, flushed, the
    /// header, each reader's A, then reads of C in `c_reads` order (connection, entering?).
    fn log(flush_before_header: bool, c_reads: &[(u32, bool)]) -> String {
        let mib = |m: u64| m << 20;
        let mut l = vec![
            "2026-11-30 05:00:00.000000 Ready thread_model=3".to_string(),
            line(1.0, 1, "Write", 1, Some((mib(A.0), mib(A.1)))),
            line(1.1, 1, "...Write", 1, None),
            line(1.2, 1, "Write", 2, Some((mib(C.0), mib(C.1)))),
            line(1.3, 1, "...Write", 2, None),
        ];
        let flush = [line(1.4, 1, "Flush", 3, None), line(1.5, 1, "...Flush", 3, None)];
        let head = [line(1.6, 1, "Write", 4, Some((mib(AREA_MIB), 4096))), line(1.7, 1, "...Write", 4, None)];
        if flush_before_header {
            l.extend(flush.into_iter().chain(head));
        } else {
            l.extend(head.into_iter().chain(flush));
        }
        for conn in 2..=u32::from(GUESTS) {
            l.push(line(2.0, conn, "Read", 1, Some((mib(A.0), mib(1)))));
            l.push(line(2.1, conn, "...Read", 1, None));
        }
        for (n, &(conn, enter)) in c_reads.iter().enumerate() {
            let act = if enter { "Read" } else { "...Read" };
            l.push(line(3.0 + n as f64 * 0.1, conn, act, 10, Some((mib(C.0), mib(1)))));
        }
        l.join("\n")
    }

    /// Every guest's connection entering a read of C, then each returning (`together`), or
    /// each entering and returning before the next enters.
    fn c_reads(together: bool) -> Vec<(u32, bool)> {
        let conns = 1..=u32::from(GUESTS);
        if together {
            conns.clone().map(|c| (c, true)).chain(conns.map(|c| (c, false))).collect()
        } else {
            conns.flat_map(|c| [(c, true), (c, false)]).collect()
        }
    }

    #[test]
    fn overlapping_reads_of_c_after_a_flushed_header_pass() {
        let r = Requests::parse(&log(true, &c_reads(true)));
        let (found, failed) = log_checks(&r);
        assert!(failed.is_empty(), "{failed:?}");
        assert_eq!(found.len(), usize::from(GUESTS) + 1, "{found:?}");
        let last = found.last().unwrap();
        assert!(last.contains(&format!("{GUESTS} connections read C at once for 100 ms")), "{last}");
        assert!(last.contains(&format!("at most {GUESTS} with a read of C in flight")), "{last}");
    }

    #[test]
    fn reads_of_c_one_after_the_other_fail() {
        let r = Requests::parse(&log(true, &c_reads(false)));
        let (_, failed) = log_checks(&r);
        assert_eq!(failed.len(), 1, "{failed:?}");
        assert!(failed[0].contains("did not overlap"), "{}", failed[0]);
    }

    #[test]
    fn a_header_written_before_the_flush_fails() {
        let r = Requests::parse(&log(false, &c_reads(true)));
        let (_, failed) = log_checks(&r);
        assert_eq!(failed.len(), 1, "{failed:?}");
        assert!(failed[0].contains("no such FLUSH"), "{}", failed[0]);
    }

    #[test]
    fn one_connection_reading_c_is_not_a_shared_read() {
        let r = Requests::parse(&log(true, &[(1, true), (1, false)]));
        assert_eq!(common_span(&r), Err(format!("nbdkit log: 1 connections read C, not {GUESTS}")));
    }

    #[test]
    fn the_guests_sums_are_read_from_their_consoles() {
        let console =
            "x\ntrapeze-nbd: shared wrote aa cc\r\ntrapeze-nbd: common read 1 cc\ntrapeze-nbd: common read 2 cd\n";
        let prefix = "trapeze-nbd: ";
        assert_eq!(said(console, prefix, "shared wrote"), [vec!["aa".to_string(), "cc".to_string()]]);
        let passes: Vec<Vec<String>> = said(console, prefix, "common read");
        assert_eq!(passes.len(), 2);
        assert_eq!(passes[1], ["2", "cd"]);
    }

    #[test]
    fn the_guests_wait_less_than_the_host() {
        let e = env("n1", 600);
        assert!(e.contains("deadline=540\n"), "{e}");
        assert!(e.contains("guests=3\nnonce=n1\n"), "{e}");
        assert!(C.0 + C.1 <= 64 && A.0 + A.1 <= C.0 && FS_MIB <= AREA_MIB && AREA_MIB < A.0, "the layout fits 64 MiB");
        assert!(2 * u64::from(GUESTS) < 256, "the marks fit the area's first MiB, before A");
    }
}
