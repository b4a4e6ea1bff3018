// SPDX-License-Identifier: GPL-2.0-only
//! Corpus replay: every file of `corpus/NAME/` through its fuzz target, on the stable
//! toolchain — the seeds and every crasher the fuzzers found stay regression tests.

use std::path::Path;
use trapeze_fuzz::TARGETS;

#[test]
fn every_target_has_a_corpus_and_every_file_passes() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("corpus");
    let mut total = 0;
    for (name, run) in TARGETS {
        let dir = root.join(name);
        let mut files: Vec<_> = std::fs::read_dir(&dir)
            .unwrap_or_else(|e| panic!("corpus of target {name}: {}: {e}", dir.display()))
            .map(|e| e.expect("corpus entry").path())
            .collect();
        files.sort();
        assert!(!files.is_empty(), "target {name} has an empty corpus ({})", dir.display());
        for f in &files {
            let data = std::fs::read(f).unwrap_or_else(|e| panic!("{}: {e}", f.display()));
            let outcome = std::panic::catch_unwind(|| run(&data));
            assert!(outcome.is_ok(), "target {name}: {} fails", f.display());
        }
        total += files.len();
        println!("{name}: {} inputs", files.len());
    }
    println!("{total} corpus inputs replayed");
}

#[test]
fn every_libfuzzer_entry_point_is_a_listed_target() {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("fuzz_targets");
    let mut stems: Vec<String> = std::fs::read_dir(&dir)
        .unwrap_or_else(|e| panic!("{}: {e}", dir.display()))
        .filter_map(|e| e.expect("entry").file_name().to_str()?.strip_suffix(".rs").map(str::to_string))
        .collect();
    stems.sort();
    let mut listed: Vec<String> = TARGETS.iter().map(|(n, _)| n.to_string()).collect();
    listed.sort();
    assert_eq!(stems, listed, "fuzz_targets/*.rs and trapeze_fuzz::TARGETS differ: the replay would miss a corpus");
}
