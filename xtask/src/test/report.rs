// SPDX-License-Identifier: GPL-2.0-only
//! The test report: what `cargo test`'s output and xtask's own stages passed, failed and
//! skipped, and why each skip happened.
//!
//! libtest's text output is read line by line: cargo's `Running … (target/…/deps/NAME-HASH)`
//! and `Doc-tests CRATE` lines name the binary, `test NAME ... ignored, REASON` gives each
//! skip its reason, and each binary's `test result:` line gives its counts (authoritative:
//! a test's child process can print into the middle of a `test NAME ...` line). A binary
//! that started but printed no result line crashed, and counts as one failure.

use std::collections::BTreeMap;

/// One test that did not run, and why.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Skip {
    /// The test binary's name (`flashed-1a2b…`, `doc:trapeze_netrpc`) or `stage`.
    pub binary: String,
    pub name: String,
    pub reason: String,
}

/// A prerequisite named by an ignored test's reason: `#[ignore = "needs: root, ip"]`.
/// Anything else ignored (`#[ignore = "long run: …"]`) is run on demand only.
pub fn needs(reason: &str) -> Option<Vec<String>> {
    let list = reason.strip_prefix("needs:")?;
    let list = list.split(" — ").next().unwrap_or(list);
    Some(list.split(',').map(|s| s.trim().to_string()).filter(|s| !s.is_empty()).collect())
}

/// A test binary's target name: `flashed` of `flashed-1a2b3c4d5e6f7a8b` (cargo's hash
/// suffix dropped); any other name as it is.
fn target_name(binary: &str) -> &str {
    match binary.rsplit_once('-') {
        Some((name, hash)) if hash.len() == 16 && hash.bytes().all(|b| b.is_ascii_hexdigit()) => name,
        _ => binary,
    }
}

#[derive(Default, Debug)]
pub struct Report {
    pub passed: usize,
    /// What failed, one line each.
    pub failed: Vec<String>,
    pub skipped: Vec<Skip>,
}

impl Report {
    pub fn stage_passed(&mut self) {
        self.passed += 1;
    }

    pub fn stage_failed(&mut self, what: &str, why: &str) {
        self.failed.push(format!("stage `{what}`: {why}"));
    }

    pub fn stage_skipped(&mut self, what: &str, reason: &str) {
        self.skipped.push(Skip { binary: "stage".into(), name: what.into(), reason: reason.into() });
    }

    /// Fold a `cargo test` run's tally in. `rerun` marks a run of tests that an earlier
    /// run skipped: whatever of them ran is no longer a skip.
    /// A rerun's binary is matched by its target name, not its hash: the rerun selects
    /// fewer targets, so cargo may unify other features and build the same test target
    /// under another hash (it did on 2026-11-28: 20 gated tests passed and still counted
    /// as skipped).
    pub fn add(&mut self, t: Tally, rerun: bool) {
        if rerun {
            self.skipped
                .retain(|s| !t.ran.iter().any(|(b, n)| target_name(b) == target_name(&s.binary) && *n == s.name));
        }
        self.passed += t.passed;
        self.failed.extend(t.failed);
        self.skipped.extend(t.skipped);
    }

    /// The closing line: `summary: N passed, M failed, K skipped`.
    pub fn summary(&self) -> String {
        format!("summary: {} passed, {} failed, {} skipped", self.passed, self.failed.len(), self.skipped.len())
    }
}

/// What one `cargo test` run printed, tallied.
#[derive(Default, Debug)]
pub struct Tally {
    pub passed: usize,
    pub failed: Vec<String>,
    pub skipped: Vec<Skip>,
    /// (binary, test) of every test that ran, passed or failed.
    pub ran: Vec<(String, String)>,
}

/// Reads libtest output a line at a time.
#[derive(Default)]
pub struct Parser {
    tally: Tally,
    /// The binary whose tests are being printed, and whether its result line was seen.
    current: Option<(String, bool)>,
    /// Per-line results of the current binary: name → (status, reason).
    lines: BTreeMap<String, (String, String)>,
}

impl Parser {
    pub fn line(&mut self, line: &str) {
        let t = line.trim();
        if let Some(rest) = t.strip_prefix("Running ") {
            // `Running tests/x.rs (target/debug/deps/x-HASH)` or `Running unittests src/lib.rs (…)`
            if let Some(path) = rest.rsplit_once('(').and_then(|(_, p)| p.strip_suffix(')')) {
                let name = path.rsplit('/').next().unwrap_or(path).to_string();
                self.start(name);
            }
        } else if let Some(krate) = t.strip_prefix("Doc-tests ") {
            self.start(format!("doc:{krate}"));
        } else if let Some(rest) = t.strip_prefix("test result: ") {
            self.result(rest);
        } else if let Some(rest) = t.strip_prefix("test ") {
            if let Some((name, status)) = rest.rsplit_once(" ... ") {
                let (status, reason) = status.split_once(", ").unwrap_or((status, ""));
                self.lines.insert(name.to_string(), (status.trim().to_string(), reason.trim().to_string()));
            }
        }
    }

    fn start(&mut self, binary: String) {
        self.close();
        self.current = Some((binary, false));
    }

    /// `ok. 3 passed; 1 failed; 2 ignored; 0 measured; 0 filtered out; finished in …`
    fn result(&mut self, rest: &str) {
        let Some((binary, seen)) = self.current.as_mut() else { return };
        *seen = true;
        let binary = binary.clone();
        let count = |what: &str| -> usize {
            rest.split(';')
                .filter_map(|part| {
                    part.trim().trim_start_matches("ok.").trim_start_matches("FAILED.").trim().split_once(' ')
                })
                .find(|(_, w)| *w == what)
                .and_then(|(n, _)| n.parse().ok())
                .unwrap_or(0)
        };
        let (passed, failed, ignored) = (count("passed"), count("failed"), count("ignored"));
        self.tally.passed += passed;
        let lines = std::mem::take(&mut self.lines);
        let mut failed_names = Vec::new();
        let mut ignored_seen = 0;
        for (name, (status, reason)) in lines {
            match status.as_str() {
                "ok" => self.tally.ran.push((binary.clone(), name)),
                "FAILED" => {
                    failed_names.push(format!("{binary}: {name}"));
                    self.tally.ran.push((binary.clone(), name));
                }
                "ignored" => {
                    ignored_seen += 1;
                    let reason = if reason.is_empty() { "ignored without a reason".to_string() } else { reason };
                    self.tally.skipped.push(Skip { binary: binary.clone(), name, reason });
                }
                _ => {}
            }
        }
        // Names a child process garbled still count, by the result line.
        failed_names.truncate(failed);
        while failed_names.len() < failed {
            failed_names.push(format!("{binary}: a test whose name could not be read from the output"));
        }
        self.tally.failed.extend(failed_names);
        for _ in ignored_seen..ignored {
            self.tally.skipped.push(Skip {
                binary: binary.clone(),
                name: "(unreadable name)".into(),
                reason: "ignored; its line was garbled by other output".into(),
            });
        }
    }

    /// A binary that printed no result line died (a crash, an abort, a timeout kill).
    fn close(&mut self) {
        if let Some((binary, false)) = self.current.take() {
            self.tally.failed.push(format!("{binary}: the test binary ended without a result (crashed?)"));
            self.lines.clear();
        }
    }

    pub fn finish(mut self) -> Tally {
        self.close();
        self.tally
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A gated test that ran in a rerun under another build hash is no longer a skip;
    /// one that did not run, or a same-named test of another target, still is.
    #[test]
    fn a_rerun_under_another_hash_clears_the_skip() {
        let skip = |b: &str, n: &str| Skip { binary: b.into(), name: n.into(), reason: "needs: root".into() };
        let mut r = Report {
            skipped: vec![skip("flashed-a5b576a96fecee47", "boots"), skip("pair-efbe81f6bdba497b", "boots")],
            ..Report::default()
        };
        let ran = vec![("flashed-0123456789abcdef".to_string(), "boots".to_string())];
        r.add(Tally { passed: 1, ran, ..Tally::default() }, true);
        assert_eq!(r.skipped, vec![skip("pair-efbe81f6bdba497b", "boots")]);
        assert_eq!(target_name("doc:trapeze_netrpc"), "doc:trapeze_netrpc");
        assert_eq!(target_name("gms-demo-12"), "gms-demo-12");
    }

    const OUTPUT: &str = "\
     Running unittests src/lib.rs (target/debug/deps/trapeze_gms-0123)

running 2 tests
test lru::tests::plan ... ok
test model::long ... ignored, long run: 10,000 scenarios
test result: ok. 1 passed; 0 failed; 1 ignored; 0 measured; 0 filtered out; finished in 0.01s

     Running tests/flashed.rs (target/debug/deps/flashed-4567)

running 3 tests
test boots ... ignored, needs: riscv32 target
test loads ... FAILED
test halts ... child says hi
ok
test result: FAILED. 1 passed; 1 failed; 1 ignored; 0 measured; 0 filtered out; finished in 1.2s

     Running tests/crash.rs (target/debug/deps/crash-89ab)

running 1 test
   Doc-tests trapeze_netrpc

running 1 test
test netrpc/src/lib.rs - (line 20) ... ok
test result: ok. 1 passed; 0 failed; 0 ignored; 0 measured; 0 filtered out; finished in 0.5s
";

    fn parse(text: &str) -> Tally {
        let mut p = Parser::default();
        text.lines().for_each(|l| p.line(l));
        p.finish()
    }

    #[test]
    fn counts_come_from_result_lines_and_reasons_from_test_lines() {
        let t = parse(OUTPUT);
        assert_eq!(t.passed, 3, "1 + 1 (its line garbled by a child's output) + 1 doc test");
        assert_eq!(
            t.failed,
            vec![
                "flashed-4567: loads".to_string(),
                "crash-89ab: the test binary ended without a result (crashed?)".into()
            ]
        );
        assert_eq!(t.skipped.len(), 2);
        assert_eq!(t.skipped[0].reason, "long run: 10,000 scenarios");
        assert_eq!(
            t.skipped[1],
            Skip { binary: "flashed-4567".into(), name: "boots".into(), reason: "needs: riscv32 target".into() }
        );
        assert!(t.ran.contains(&("doc:trapeze_netrpc".into(), "netrpc/src/lib.rs - (line 20)".into())));
    }

    #[test]
    fn a_rerun_turns_skips_into_results() {
        let mut r = Report::default();
        r.add(parse(OUTPUT), false);
        let rerun = "     Running tests/flashed.rs (/abs/target/debug/deps/flashed-4567)\n\
                     test boots ... ok\n\
                     test result: ok. 1 passed; 0 failed; 0 ignored; 0 measured; 2 filtered out; finished in 1s\n";
        r.add(parse(rerun), true);
        assert_eq!(r.passed, 4);
        assert_eq!(r.skipped.len(), 1, "only the long run is still skipped: {:?}", r.skipped);
        r.stage_passed();
        r.stage_skipped("guests", "--no-vm");
        assert_eq!(r.summary(), "summary: 5 passed, 2 failed, 2 skipped");
    }

    #[test]
    fn needs_lists_prerequisites() {
        assert_eq!(needs("needs: root, ip — netns and veth"), Some(vec!["root".to_string(), "ip".into()]));
        assert_eq!(needs("needs: qemu"), Some(vec!["qemu".to_string()]));
        assert_eq!(needs("long run: 10k scenarios"), None);
    }
}
