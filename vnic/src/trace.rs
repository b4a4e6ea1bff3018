// SPDX-License-Identifier: GPL-2.0-only
//! The NIC's event trace: a timestamped record of what its engines did — each packet sent
//! and received on the link, each host interrupt raised, each park and wakeup of the
//! processor — written to a file (`trapeze-nic --trace FILE`), and the report that lines
//! up the traces of several NICs to show where a request/reply round trip spends its time
//! (`trapeze-nic trace-report FILE...`).
//!
//! Packets are matched across NICs by (sender, receiver, the header's per-sender sequence),
//! and the timestamps are the host's monotonic clock in ns, so the NICs of one machine line
//! up.
//! A **request** is a packet without payload; its **reply** is the next packet the server
//! sends back carrying a solicited payload (one tagged with a payload token), when the
//! server received nothing in between — one request outstanding, as a synchronous reader
//! makes them. The report gives, in µs:
//! - *hop*: a request's send on the requester's NIC to its arrival on the server's, by the
//!   state the server's processor was in: parked (woken by the packet), idle (polling, no
//!   event since the send) or busy;
//! - *server*: the server's interrupt for the request to the reply leaving its NIC — the
//!   interrupt's delivery and the host's work;
//! - *round trip*: the request's send to its reply's arrival, on the requester's NIC;
//! - *requester*: a reply's arrival to the requester's next request (its host's completion
//!   path and whatever it did before asking again);
//! - *ping*: a link-level echo request's send to its reply's arrival, on the pinging NIC
//!   (`trapeze-nic ping`, [`crate::echo`]: no host involved), and, with the peer's trace,
//!   the request's send to the peer NIC answering it.
//!
//! With nothing to break down (no request/reply pair and no ping), the report says so
//! rather than print a table of zeros.
//!
//! A park is recorded only when something woke it (not its 100 ms timeout): an idle NIC's
//! trace stays as it is.
//!
//! Each record is 24 bytes, little-endian: time ns `u64`, kind `u8`, flags `u8` (bit 0: a
//! solicited payload), peer `u16` (the other node; the NIC's own id in the header record),
//! sequence `u32`, payload bytes `u32`, reserved `u32`. The file is written through a
//! buffer flushed whenever the processor parks and when the NIC stops, so a NIC killed
//! outright loses at most its last busy stretch.

use std::collections::HashMap;
use std::fs::File;
use std::io::{BufWriter, Read, Write};
use std::path::Path;
use trapeze_firmware::iface::wire::{FLAG_TOKEN, HEADER_BYTES};

/// Bytes per record.
pub const RECORD_BYTES: usize = 24;
/// The header record's sequence field: this format.
const FORMAT: u32 = 1;

/// What a record says happened.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[repr(u8)]
pub enum Kind {
    /// The first record: `peer` is the NIC's node id.
    Header = 0,
    /// A packet left on the link.
    Tx = 1,
    /// A packet arrived from the link.
    Rx = 2,
    /// A host interrupt was raised.
    Irq = 3,
    /// The processor parked (nothing to do).
    Park = 4,
    /// The processor woke from a park.
    Unpark = 5,
    /// A link-level echo request left (`peer`: the node pinged, `seq`: the probe).
    PingTx = 6,
    /// The reply to one of this NIC's echo requests arrived.
    PingRx = 7,
    /// An echo request from `peer` arrived and was answered.
    EchoRx = 8,
}

/// One event.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Record {
    pub t_ns: u64,
    pub kind: Kind,
    /// The packet carried a solicited payload (a reply).
    pub solicited: bool,
    pub peer: u16,
    pub seq: u32,
    pub payload: u32,
}

impl Record {
    pub fn to_bytes(&self) -> [u8; RECORD_BYTES] {
        let mut b = [0u8; RECORD_BYTES];
        b[..8].copy_from_slice(&self.t_ns.to_le_bytes());
        b[8] = self.kind as u8;
        b[9] = u8::from(self.solicited);
        b[10..12].copy_from_slice(&self.peer.to_le_bytes());
        b[12..16].copy_from_slice(&self.seq.to_le_bytes());
        b[16..20].copy_from_slice(&self.payload.to_le_bytes());
        b
    }

    /// `None` for an unknown kind.
    pub fn from_bytes(b: &[u8; RECORD_BYTES]) -> Option<Record> {
        let kind = match b[8] {
            0 => Kind::Header,
            1 => Kind::Tx,
            2 => Kind::Rx,
            3 => Kind::Irq,
            4 => Kind::Park,
            5 => Kind::Unpark,
            6 => Kind::PingTx,
            7 => Kind::PingRx,
            8 => Kind::EchoRx,
            _ => return None,
        };
        let word = |i: usize| u32::from_le_bytes([b[i], b[i + 1], b[i + 2], b[i + 3]]);
        Some(Record {
            t_ns: u64::from_le_bytes([b[0], b[1], b[2], b[3], b[4], b[5], b[6], b[7]]),
            kind,
            solicited: b[9] & 1 != 0,
            peer: u16::from_le_bytes([b[10], b[11]]),
            seq: word(12),
            payload: word(16),
        })
    }

    /// A packet's record from its Trapeze header (the first [`HEADER_BYTES`] of it);
    /// `peer` is the other end. `None`: too short to have a header.
    pub fn packet(kind: Kind, t_ns: u64, peer: u16, header: &[u8]) -> Option<Record> {
        if header.len() < HEADER_BYTES as usize {
            return None;
        }
        let word = |i: usize| u32::from_le_bytes([header[i], header[i + 1], header[i + 2], header[i + 3]]);
        Some(Record { t_ns, kind, solicited: header[3] & FLAG_TOKEN != 0, peer, seq: word(24), payload: word(12) })
    }
}

/// A NIC's trace file, being written.
pub struct EventLog {
    out: BufWriter<File>,
}

impl EventLog {
    /// Start a trace of node `node` in a new file at `path`.
    pub fn create(path: &Path, node: u16) -> std::io::Result<EventLog> {
        let mut log = EventLog { out: BufWriter::with_capacity(1 << 20, File::create(path)?) };
        log.record(Kind::Header, node, FORMAT, 0, false);
        Ok(log)
    }

    /// `CLOCK_MONOTONIC`: one clock for every process of the machine.
    pub fn now_ns(&self) -> u64 {
        let t = rustix::time::clock_gettime(rustix::time::ClockId::Monotonic);
        t.tv_sec as u64 * 1_000_000_000 + t.tv_nsec as u64
    }

    pub fn record(&mut self, kind: Kind, peer: u16, seq: u32, payload: u32, solicited: bool) {
        let r = Record { t_ns: self.now_ns(), kind, solicited, peer, seq, payload };
        self.push(&r);
    }

    pub fn push(&mut self, r: &Record) {
        // A trace that cannot be written is lost, not the NIC's work.
        let _ = self.out.write_all(&r.to_bytes());
    }

    pub fn flush(&mut self) {
        let _ = self.out.flush();
    }
}

impl Drop for EventLog {
    fn drop(&mut self) {
        self.flush();
    }
}

/// A trace file read back: its node and its records in order.
pub fn read(path: &Path) -> anyhow::Result<(u16, Vec<Record>)> {
    let mut bytes = Vec::new();
    File::open(path)?.read_to_end(&mut bytes)?;
    parse(&bytes, &path.display().to_string())
}

/// The bytes of a trace file (`name` for the errors): its node and its records in order.
/// Bytes after the last whole record (a write cut short) are left out.
pub fn parse(bytes: &[u8], name: &str) -> anyhow::Result<(u16, Vec<Record>)> {
    let mut recs = bytes.chunks_exact(RECORD_BYTES).map(|c| Record::from_bytes(c.try_into().expect("exact chunk")));
    let node = match recs.next().flatten() {
        Some(Record { kind: Kind::Header, seq: FORMAT, peer, .. }) => peer,
        _ => anyhow::bail!("{name} is not a NIC trace (format {FORMAT})"),
    };
    let recs: Option<Vec<Record>> = recs.collect();
    Ok((node, recs.ok_or_else(|| anyhow::anyhow!("{name}: a record of unknown kind"))?))
}

/// Samples of one quantity, µs.
#[derive(Default, Debug)]
pub struct Samples(Vec<f64>);

impl Samples {
    fn push(&mut self, ns: u64) {
        self.0.push(ns as f64 / 1000.0);
    }
    pub fn len(&self) -> usize {
        self.0.len()
    }
    pub fn is_empty(&self) -> bool {
        self.0.is_empty()
    }
    /// The `q` quantile (0..=1), if any sample.
    pub fn quantile(&mut self, q: f64) -> Option<f64> {
        self.0.sort_by(f64::total_cmp);
        let i = ((self.0.len() as f64 - 1.0) * q).round() as usize;
        self.0.get(i).copied()
    }
    fn line(&mut self, what: &str) -> String {
        match (self.quantile(0.1), self.quantile(0.5), self.quantile(0.9)) {
            (Some(a), Some(b), Some(c)) => format!("{what:<44} {:>7}  {a:>8.1} {b:>8.1} {c:>8.1}", self.len()),
            _ => format!("{what:<44} {:>7}", 0),
        }
    }
}

/// The breakdown of request/reply round trips over a set of traces (see the module doc).
#[derive(Default, Debug)]
pub struct Report {
    pub hop_parked: Samples,
    pub hop_idle: Samples,
    pub hop_busy: Samples,
    pub server_rx_to_irq: Samples,
    pub server_irq_to_reply: Samples,
    pub round_trip: Samples,
    pub requester: Samples,
    /// Echo request out to its reply in, on the pinging NIC.
    pub ping_round_trip: Samples,
    /// Echo request out to the peer NIC answering it (both traces needed).
    pub ping_hop: Samples,
    /// Traces and records read, for the report's first line.
    traces: usize,
    records: usize,
}

impl Report {
    pub fn new(traces: &[(u16, Vec<Record>)]) -> Report {
        let mut sent: HashMap<(u16, u16, u32), u64> = HashMap::new();
        for (me, recs) in traces {
            for r in recs.iter().filter(|r| r.kind == Kind::Tx) {
                sent.insert((*me, r.peer, r.seq), r.t_ns);
            }
        }
        let mut pings: HashMap<(u16, u16, u32), u64> = HashMap::new();
        for (me, recs) in traces {
            for r in recs.iter().filter(|r| r.kind == Kind::PingTx) {
                pings.insert((*me, r.peer, r.seq), r.t_ns);
            }
        }
        let mut rep =
            Report { traces: traces.len(), records: traces.iter().map(|t| t.1.len()).sum(), ..Report::default() };
        for (me, recs) in traces {
            for (i, r) in recs.iter().enumerate() {
                match r.kind {
                    Kind::Rx if r.payload == 0 => rep.request_in(&sent, *me, recs, i),
                    Kind::Tx if r.payload == 0 => rep.request_out(recs, i),
                    Kind::PingRx => {
                        if let Some(&t0) = pings.get(&(*me, r.peer, r.seq)) {
                            rep.ping_round_trip.push(r.t_ns.saturating_sub(t0));
                        }
                    }
                    Kind::EchoRx => {
                        if let Some(&t0) = pings.get(&(r.peer, *me, r.seq)) {
                            rep.ping_hop.push(r.t_ns.saturating_sub(t0));
                        }
                    }
                    _ => {}
                }
            }
        }
        rep
    }

    /// Request `recs[i]` arrived at server `me`.
    fn request_in(&mut self, sent: &HashMap<(u16, u16, u32), u64>, me: u16, recs: &[Record], i: usize) {
        let r = recs[i];
        let reply = reply_after(recs, i, r.peer, Kind::Tx);
        if let Some(&t0) = sent.get(&(r.peer, me, r.seq)) {
            let hop = r.t_ns.saturating_sub(t0);
            match i.checked_sub(1).map(|p| recs[p]) {
                Some(p) if p.kind == Kind::Unpark => self.hop_parked.push(hop),
                Some(p) if p.t_ns < t0 => self.hop_idle.push(hop),
                _ => self.hop_busy.push(hop),
            }
        }
        let Some(j) = reply else { return };
        if let Some(irq) = recs[i + 1..j].iter().find(|x| x.kind == Kind::Irq) {
            self.server_rx_to_irq.push(irq.t_ns.saturating_sub(r.t_ns));
            self.server_irq_to_reply.push(recs[j].t_ns.saturating_sub(irq.t_ns));
        }
    }

    /// Request `recs[i]` left this requester: its round trip, and from its reply to the
    /// requester's next request.
    fn request_out(&mut self, recs: &[Record], i: usize) {
        let r = recs[i];
        let Some(j) = reply_after(recs, i, r.peer, Kind::Rx) else { return };
        self.round_trip.push(recs[j].t_ns.saturating_sub(r.t_ns));
        let next = recs[j + 1..].iter().find(|x| matches!(x.kind, Kind::Tx | Kind::Rx));
        if let Some(n) = next.filter(|n| n.kind == Kind::Tx && n.payload == 0) {
            self.requester.push(n.t_ns.saturating_sub(recs[j].t_ns));
        }
    }

    /// The report as text: one line per quantity measured (those with no sample left
    /// out), or a sentence saying no round trip was recorded.
    pub fn text(&mut self) -> String {
        let (traces, records) = (self.traces, self.records);
        let mut s = format!("{:<44} {:>7}  {:>8} {:>8} {:>8}\n", "µs", "n", "p10", "p50", "p90");
        let mut any = false;
        for (what, x) in [
            ("request hop, server NIC parked", &mut self.hop_parked),
            ("request hop, server NIC idle (polling)", &mut self.hop_idle),
            ("request hop, server NIC busy", &mut self.hop_busy),
            ("server: request in to interrupt", &mut self.server_rx_to_irq),
            ("server: interrupt to reply out", &mut self.server_irq_to_reply),
            ("requester NIC: request out to reply in", &mut self.round_trip),
            ("requester: reply in to next request out", &mut self.requester),
            ("ping: echo request out to reply in", &mut self.ping_round_trip),
            ("ping: echo request out to the peer's echo", &mut self.ping_hop),
        ] {
            if !x.is_empty() {
                any = true;
                s.push_str(&x.line(what));
                s.push('\n');
            }
        }
        if !any {
            return format!(
                "no round trips recorded ({traces} trace{}, {records} record{}): the NICs exchanged no request \
                 with its reply and no ping; `trapeze-nic ping` sends some\n",
                if traces == 1 { "" } else { "s" },
                if records == 1 { "" } else { "s" }
            );
        }
        s
    }
}

/// The reply to the request at `recs[i]`: the next packet this NIC saw, if it is of kind
/// `reply`, exchanged with `peer` and carries a solicited payload (nothing else sent or
/// received in between: one request outstanding).
fn reply_after(recs: &[Record], i: usize, peer: u16, reply: Kind) -> Option<usize> {
    let (j, x) = recs.iter().enumerate().skip(i + 1).find(|(_, x)| matches!(x.kind, Kind::Tx | Kind::Rx))?;
    (x.kind == reply && x.peer == peer && x.solicited && x.payload > 0).then_some(j)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn rec(t_us: u64, kind: Kind, peer: u16, seq: u32, payload: u32) -> Record {
        Record { t_ns: t_us * 1000, kind, solicited: payload > 0, peer, seq, payload }
    }

    #[test]
    fn records_round_trip_through_bytes() {
        let r = Record { t_ns: 1 << 40, kind: Kind::Rx, solicited: true, peer: 7, seq: 99, payload: 4096 };
        assert_eq!(Record::from_bytes(&r.to_bytes()), Some(r));
        let mut b = r.to_bytes();
        b[8] = 9;
        assert_eq!(Record::from_bytes(&b), None);
    }

    #[test]
    fn a_round_trip_is_broken_down() {
        // Node 0 asks node 1 (parked) at 100 µs; node 1's interrupt at 112, its reply
        // leaves at 150 and lands at 160; node 0 asks again at 200 (node 1 idle then).
        let a = vec![rec(100, Kind::Tx, 1, 1, 0), rec(160, Kind::Rx, 1, 5, 4096), rec(200, Kind::Tx, 1, 2, 0)];
        let b = vec![
            rec(90, Kind::Park, 0, 0, 0),
            rec(109, Kind::Unpark, 0, 0, 0),
            rec(110, Kind::Rx, 0, 1, 0),
            rec(112, Kind::Irq, 0, 0, 0),
            rec(150, Kind::Tx, 0, 5, 4096),
            rec(205, Kind::Rx, 0, 2, 0),
        ];
        let mut rep = Report::new(&[(0, a), (1, b)]);
        assert_eq!(rep.hop_parked.quantile(0.5), Some(10.0));
        assert_eq!(rep.hop_idle.quantile(0.5), Some(5.0));
        assert!(rep.hop_busy.is_empty());
        assert_eq!(rep.server_rx_to_irq.quantile(0.5), Some(2.0));
        assert_eq!(rep.server_irq_to_reply.quantile(0.5), Some(38.0));
        assert_eq!(rep.round_trip.quantile(0.5), Some(60.0));
        assert_eq!(rep.requester.quantile(0.5), Some(40.0));
        let text = rep.text();
        assert!(text.contains("request hop, server NIC parked"), "{text}");
        assert!(!text.contains("ping"), "a row without samples is printed: {text}");
    }

    #[test]
    fn pings_are_reported_and_nothing_says_so() {
        // Node 0 pings node 1 at 10 µs, node 1 echoes at 14, the reply lands at 20.
        let a = vec![rec(10, Kind::PingTx, 1, 7, 0), rec(20, Kind::PingRx, 1, 7, 0)];
        let b = vec![rec(14, Kind::EchoRx, 0, 7, 0)];
        let mut rep = Report::new(&[(0, a), (1, b)]);
        assert_eq!(rep.ping_round_trip.quantile(0.5), Some(10.0));
        assert_eq!(rep.ping_hop.quantile(0.5), Some(4.0));
        assert!(rep.text().contains("ping: echo request out to reply in"));
        let idle = vec![rec(1, Kind::Park, 0, 0, 0), rec(2, Kind::Unpark, 0, 0, 0)];
        let text = Report::new(&[(0, idle), (1, vec![])]).text();
        assert!(text.starts_with("no round trips recorded (2 traces, 2 records)"), "{text}");
    }

    #[test]
    fn a_reply_after_other_traffic_is_not_matched() {
        // The server heard from someone else before answering: not a clean round trip.
        let b = vec![rec(10, Kind::Rx, 0, 1, 0), rec(12, Kind::Rx, 2, 1, 0), rec(20, Kind::Tx, 0, 3, 4096)];
        let rep = Report::new(&[(1, b)]);
        assert!(rep.server_irq_to_reply.is_empty());
    }

    #[test]
    fn a_file_is_written_and_read_back() {
        let path = std::env::temp_dir().join(format!("trapeze-trace-test-{}", std::process::id()));
        {
            let mut log = EventLog::create(&path, 3).unwrap();
            log.record(Kind::Irq, 0, 0, 0, false);
        }
        let (node, recs) = read(&path).unwrap();
        let _ = std::fs::remove_file(&path);
        assert_eq!(node, 3);
        assert_eq!(recs.len(), 1);
        assert_eq!(recs[0].kind, Kind::Irq);
        let junk = std::env::temp_dir().join(format!("trapeze-trace-junk-{}", std::process::id()));
        std::fs::write(&junk, [1u8; RECORD_BYTES]).unwrap();
        let e = read(&junk).unwrap_err().to_string();
        let _ = std::fs::remove_file(&junk);
        assert!(e.contains("is not a NIC trace"), "{e}");
    }
}
