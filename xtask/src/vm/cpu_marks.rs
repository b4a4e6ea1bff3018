// SPDX-License-Identifier: GPL-2.0-only
//! Host CPU time of a bench's processes at the edges of guest 0's phases. Guest 0 prints
//! `trapeze-bench: cpu begin NAME ROUND` before a phase and `trapeze-bench: cpu end NAME
//! ROUND` after it; the host, which polls the console every few milliseconds while it
//! waits, reads `/proc/<pid>/stat` (utime + stime: every thread of the process) of every
//! process it knows — each guest's QEMU and NIC, and host servers such as `qemu-nbd` — the
//! moment it sees the line. The difference between a phase's two samples is what each
//! process spent during it (± one poll interval and one clock tick, 10 ms).

use std::fs;
use std::io::{Read, Seek, SeekFrom};
use std::path::{Path, PathBuf};
use std::time::Instant;

/// What a mark line carries after "trapeze-bench: ".
const MARK: &str = "trapeze-bench: cpu ";

/// Which edge of a phase a mark is.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Edge {
    Begin,
    End,
}

/// One sample: a phase's edge and every known process's CPU ticks (USER_HZ) then.
#[derive(Clone, Debug)]
pub struct CpuMark {
    pub edge: Edge,
    pub phase: String,
    pub round: u32,
    pub at: Instant,
    /// (label, ticks); a process that has exited (or never started) is left out.
    pub ticks: Vec<(String, u64)>,
}

/// Parse a mark line ("… trapeze-bench: cpu begin gms 3").
pub fn parse_mark(line: &str) -> Option<(Edge, String, u32)> {
    let rest = &line[line.find(MARK)? + MARK.len()..];
    let mut w = rest.split_whitespace();
    let edge = match w.next()? {
        "begin" => Edge::Begin,
        "end" => Edge::End,
        _ => return None,
    };
    let phase = w.next()?.to_string();
    let round = w.next()?.parse().ok()?;
    Some((edge, phase, round))
}

/// utime + stime of process `pid` in clock ticks (`/proc/<pid>/stat` fields 14 and 15),
/// `None` if it is gone or the file does not parse.
pub fn process_ticks(pid: u32) -> Option<u64> {
    let text = fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    stat_ticks(&text)
}

/// utime + stime from the text of a `/proc/<pid>/stat` file. The command name (field 2)
/// may hold spaces and parentheses: the fields are counted after its last ')'.
pub fn stat_ticks(text: &str) -> Option<u64> {
    let after = &text[text.rfind(')')? + 1..];
    let f: Vec<&str> = after.split_whitespace().collect();
    // after[0] is field 3 (state): utime is field 14, stime 15.
    let utime: u64 = f.get(11)?.parse().ok()?;
    let stime: u64 = f.get(12)?.parse().ok()?;
    Some(utime + stime)
}

/// Clock ticks per second of `/proc/<pid>/stat` (`getconf CLK_TCK`; Linux's USER_HZ).
pub fn ticks_per_second() -> anyhow::Result<u64> {
    let out = std::process::Command::new("getconf").arg("CLK_TCK").output()?;
    let text = String::from_utf8_lossy(&out.stdout);
    let hz: u64 = text.trim().parse().map_err(|e| anyhow::anyhow!("getconf CLK_TCK said {text:?}: {e}"))?;
    anyhow::ensure!(hz > 0, "getconf CLK_TCK said 0");
    Ok(hz)
}

/// Watches one console file for mark lines, reading only what is new.
pub struct MarkWatch {
    console: PathBuf,
    read: u64,
    partial: String,
    pub marks: Vec<CpuMark>,
}

impl MarkWatch {
    pub fn new(console: &Path) -> Self {
        MarkWatch { console: console.to_path_buf(), read: 0, partial: String::new(), marks: Vec::new() }
    }

    /// Read the console's new bytes; for each mark line, sample `procs` ((label, pid)).
    pub fn poll(&mut self, procs: &[(String, u32)]) {
        let Ok(mut f) = fs::File::open(&self.console) else { return };
        if f.seek(SeekFrom::Start(self.read)).is_err() {
            return;
        }
        let mut bytes = Vec::new();
        if f.read_to_end(&mut bytes).is_err() || bytes.is_empty() {
            return;
        }
        self.read += bytes.len() as u64;
        self.partial.push_str(&String::from_utf8_lossy(&bytes));
        let Some(end) = self.partial.rfind('\n') else { return };
        let whole: String = self.partial.drain(..=end).collect();
        for l in whole.lines() {
            if let Some((edge, phase, round)) = parse_mark(l) {
                let at = Instant::now();
                let ticks = procs.iter().filter_map(|(n, pid)| Some((n.clone(), process_ticks(*pid)?))).collect();
                self.marks.push(CpuMark { edge, phase, round, at, ticks });
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn marks_and_stat_lines_parse() {
        assert_eq!(parse_mark("x trapeze-bench: cpu begin gms 3"), Some((Edge::Begin, "gms".to_string(), 3)));
        assert_eq!(parse_mark("trapeze-bench: cpu end fair 12\r"), Some((Edge::End, "fair".to_string(), 12)));
        assert_eq!(parse_mark("trapeze-bench: cpu middle gms 3"), None);
        assert_eq!(parse_mark("trapeze-bench: cpu begin gms"), None);
        let stat = "42 (qemu (x) y) S 1 42 42 0 -1 4194560 100 0 0 0 250 75 0 0 20 0 5 0 100 0 0";
        assert_eq!(stat_ticks(stat), Some(325));
        assert_eq!(stat_ticks("42 (short) S 1"), None);
        // This process has a stat file and spends some CPU.
        assert!(process_ticks(std::process::id()).is_some());
    }

    #[test]
    fn a_watch_samples_at_each_mark_and_keeps_partial_lines() {
        let p = std::env::temp_dir().join(format!("cpu-marks-{}", std::process::id()));
        fs::write(&p, "boot\ntrapeze-bench: cpu begin gms 1\ntrapeze-bench: cpu en").unwrap();
        let me = vec![("me".to_string(), std::process::id()), ("gone".to_string(), u32::MAX)];
        let mut w = MarkWatch::new(&p);
        w.poll(&me);
        assert_eq!(w.marks.len(), 1);
        assert_eq!(w.marks[0].ticks.len(), 1, "a missing process is left out");
        let mut f = fs::OpenOptions::new().append(true).open(&p).unwrap();
        std::io::Write::write_all(&mut f, b"d gms 1\n").unwrap();
        w.poll(&me);
        assert_eq!(w.marks.len(), 2);
        assert_eq!((w.marks[1].edge, w.marks[1].round), (Edge::End, 1));
        fs::remove_file(&p).unwrap();
    }
}
