// SPDX-License-Identifier: GPL-2.0-only
//! The tidy check, a stage of `cargo xtask test`: what rustfmt and clippy do not see.
//!
//! Over every file git tracks that is source (Rust, C, linker scripts, shell scripts,
//! Kbuild/Makefiles, the CI script):
//! * it opens with its SPDX line (after a `#!` line, if any), and a one-line description
//!   follows at once (for Rust, a `//!` line before any code: inner attributes may sit
//!   between);
//! * every `unsafe` block and `unsafe impl` in Rust has a `SAFETY:` comment right above it
//!   (comment and attribute lines in between are fine) or on its line;
//! * no source file is over 800 lines, except under `tests/`, `benches/` and `examples/`.
//!
//! And over every crate (each workspace member's `src/`, and `kernel-crate/src/`): no
//! import cycle among its modules at any level of its module tree ([`cycles`]).

mod cycles;

use anyhow::{bail, Context};
use std::path::Path;

/// `cargo xtask tidy`.
pub fn run() -> anyhow::Result<()> {
    check(&crate::workspace_root())
}

const SPDX: &str = "SPDX-License-Identifier: GPL-2.0-only";
const MAX_LINES: usize = 800;

/// Is this tracked path a source file tidy reads?
fn is_source(path: &str) -> bool {
    let name = path.rsplit('/').next().unwrap_or(path);
    [".rs", ".c", ".h", ".x", ".sh"].iter().any(|e| name.ends_with(e))
        || ["Kbuild", "Makefile", "init", "run"].contains(&name) && !path.ends_with(".md")
}

fn exempt_from_size(path: &str) -> bool {
    path.split('/').any(|c| ["tests", "benches", "examples"].contains(&c))
}

/// The problems of one file, each a line `path:line: what`.
pub fn check_file(path: &str, text: &str) -> Vec<String> {
    let mut bad = Vec::new();
    let lines: Vec<&str> = text.lines().collect();
    let mut i = usize::from(lines.first().is_some_and(|l| l.starts_with("#!")));
    if !lines.get(i).is_some_and(|l| l.contains(SPDX)) {
        bad.push(format!("{path}:{}: does not open with `{SPDX}`", i + 1));
    } else {
        i += 1;
        if path.ends_with(".rs") {
            while lines.get(i).is_some_and(|l| l.starts_with("#![") || l.trim().is_empty()) {
                i += 1;
            }
            if !lines.get(i).is_some_and(|l| l.starts_with("//!") && l.len() > 4) {
                bad.push(format!("{path}:{}: no `//!` line saying what the file owns after the SPDX line", i + 1));
            }
        } else {
            if lines.get(i).is_some_and(|l| l.trim() == "/*") {
                i += 1; // a block comment whose text starts on its second line
            }
            let described = lines.get(i).is_some_and(|l| {
                let t = l.trim_start_matches(['/', '*', '#', ' ']);
                (l.starts_with('#') || l.starts_with("/*") || l.starts_with("//") || l.starts_with(" *")) && t.len() > 3
            });
            if !described {
                bad.push(format!("{path}:{}: no description comment after the SPDX line", i + 1));
            }
        }
    }
    if path.ends_with(".rs") {
        for (n, code) in code_only(text).lines().enumerate() {
            if (code.contains("unsafe {") || code.contains("unsafe impl")) && !has_safety_comment(&lines, n) {
                bad.push(format!("{path}:{}: `unsafe` without a `// SAFETY:` comment above it", n + 1));
            }
        }
    }
    if lines.len() > MAX_LINES && !exempt_from_size(path) {
        bad.push(format!("{path}: {} lines, over {MAX_LINES}: split it by concern", lines.len()));
    }
    bad
}

/// The text with comments and the contents of string and char literals blanked out:
/// every such byte but a newline becomes a space, so byte offsets and line numbers stay
/// those of the original (a lexical scan: `//` and nested `/* */` comments, `"…"` with
/// escapes, raw strings `r#"…"#` and `b`/`c` prefixes, char literals told from lifetimes).
pub(crate) fn code_only(text: &str) -> String {
    let b = text.as_bytes();
    let mut out = b.to_vec();
    let blank = |out: &mut Vec<u8>, from: usize, to: usize| {
        for c in &mut out[from..to.min(b.len())] {
            if *c != b'\n' {
                *c = b' ';
            }
        }
    };
    let ident = |c: u8| c.is_ascii_alphanumeric() || c == b'_' || c >= 0x80;
    let mut i = 0;
    while i < b.len() {
        match b[i] {
            b'/' if b.get(i + 1) == Some(&b'/') => {
                let end = b[i..].iter().position(|&c| c == b'\n').map_or(b.len(), |n| i + n);
                blank(&mut out, i, end);
                i = end;
            }
            b'/' if b.get(i + 1) == Some(&b'*') => {
                let (mut j, mut depth) = (i + 2, 1);
                while j < b.len() && depth > 0 {
                    if b[j..].starts_with(b"/*") {
                        depth += 1;
                        j += 2;
                    } else if b[j..].starts_with(b"*/") {
                        depth -= 1;
                        j += 2;
                    } else {
                        j += 1;
                    }
                }
                blank(&mut out, i, j);
                i = j;
            }
            b'"' => {
                let mut j = i + 1;
                while j < b.len() && b[j] != b'"' {
                    j += if b[j] == b'\\' { 2 } else { 1 };
                }
                blank(&mut out, i + 1, j);
                i = j + 1;
            }
            b'\'' => {
                // A char literal ('x', '\n', '\u{..}', a multi-byte char) or a lifetime/label.
                let rest = &text[i + 1..];
                let mut chars = rest.chars();
                let end = match (chars.next(), chars.next()) {
                    (Some('\\'), _) => {
                        rest.find('\'').filter(|&n| n > 1).or_else(|| rest.get(2..)?.find('\'').map(|n| n + 2))
                    }
                    (Some(c), Some('\'')) => Some(c.len_utf8()),
                    _ => None,
                };
                match end {
                    Some(n) => {
                        blank(&mut out, i + 1, i + 1 + n);
                        i += n + 2;
                    }
                    None => i += 1,
                }
            }
            c if ident(c) => {
                let start = i;
                while i < b.len() && ident(b[i]) {
                    i += 1;
                }
                if matches!(&text[start..i], "r" | "br" | "cr") {
                    let hashes = b[i..].iter().take_while(|&&c| c == b'#').count();
                    if b.get(i + hashes) == Some(&b'"') {
                        let open = i + hashes + 1;
                        let close: Vec<u8> = std::iter::once(b'"').chain(std::iter::repeat_n(b'#', hashes)).collect();
                        let end = b[open..].windows(close.len()).position(|w| w == close).map_or(b.len(), |n| open + n);
                        blank(&mut out, open, end);
                        i = end + close.len();
                    }
                }
            }
            _ => i += 1,
        }
    }
    // Only whole characters were blanked, so this is the text's own UTF-8.
    String::from_utf8_lossy(&out).into_owned()
}

/// A `SAFETY:` comment on line `n`, or in the run of comment/attribute lines right above.
fn has_safety_comment(lines: &[&str], n: usize) -> bool {
    if lines[n].contains("SAFETY:") {
        return true;
    }
    for l in lines[..n].iter().rev() {
        let t = l.trim();
        if t.contains("SAFETY:") {
            return true;
        }
        if !(t.starts_with("//") || t.starts_with("#[") || t.starts_with("/*") || t.starts_with('*')) {
            return false;
        }
    }
    false
}

/// Check every tracked source file and every crate's imports under `root`.
pub fn check(root: &Path) -> anyhow::Result<()> {
    let out = std::process::Command::new("git")
        .args(["ls-files", "-z"])
        .current_dir(root)
        .output()
        .context("running git ls-files")?;
    anyhow::ensure!(out.status.success(), "git ls-files failed: {}", String::from_utf8_lossy(&out.stderr));
    let mut bad = Vec::new();
    let mut files = 0;
    for path in String::from_utf8_lossy(&out.stdout).split('\0').filter(|p| is_source(p)) {
        let Ok(text) = std::fs::read_to_string(root.join(path)) else { continue }; // deleted in the work tree
        files += 1;
        bad.extend(check_file(path, &text));
    }
    let cycles::Found { cycles, crates, unreached } = cycles::find(root)?;
    for f in &unreached {
        eprintln!("tidy: note: {f}: in no crate's module tree, so not checked for import cycles");
    }
    bad.extend(cycles.iter().cloned());
    if !bad.is_empty() {
        bail!("{} problems in {files} files and {crates} crates:\n{}", bad.len(), bad.join("\n"));
    }
    eprintln!("tidy: {files} source files: headers, SAFETY comments and sizes in order");
    eprintln!("tidy: {crates} crates: no import cycle among their modules");
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::{check_file, code_only};

    #[test]
    fn code_only_blanks_comments_and_literals_in_place() {
        let text =
            "let a = \"x // y\"; // z\n/* a /* b */ c */ f('\"', '\\'', r#\"q\"#, b'é');\nfn g<'a>(s: &'a str) {}\n";
        let code = code_only(text);
        assert_eq!(code.len(), text.len());
        assert_eq!(
            code.lines().collect::<Vec<_>>(),
            ["let a = \"      \";     ", "                  f(' ', '  ', r#\" \"#, b'  ');", "fn g<'a>(s: &'a str) {}"]
        );
    }

    #[test]
    fn headers_are_required() {
        assert!(check_file("a.rs", "// SPDX-License-Identifier: GPL-2.0-only\n//! Owns a.\nfn f() {}\n").is_empty());
        assert!(check_file("a.rs", "// SPDX-License-Identifier: GPL-2.0-only\n#![no_std]\n\n//! Owns a.\n").is_empty());
        assert_eq!(check_file("a.rs", "//! Owns a.\n").len(), 1);
        assert_eq!(check_file("a.rs", "// SPDX-License-Identifier: GPL-2.0-only\nfn f() {}\n").len(), 1);
        assert!(check_file("x.sh", "#!/bin/sh\n# SPDX-License-Identifier: GPL-2.0-only\n# x.sh — does x\n").is_empty());
        assert_eq!(check_file("x.sh", "#!/bin/sh\n# SPDX-License-Identifier: GPL-2.0-only\nset -e\n").len(), 1);
    }

    #[test]
    fn unsafe_needs_a_safety_comment() {
        let head = "// SPDX-License-Identifier: GPL-2.0-only\n//! Owns a.\n";
        let ok = format!("{head}// SAFETY: the pointer is valid.\n#[allow(unused)]\nlet x = unsafe {{ *p }};\n");
        assert!(check_file("a.rs", &ok).is_empty());
        let bad = format!("{head}let y = 1;\nlet x = unsafe {{ *p }};\n");
        assert_eq!(check_file("a.rs", &bad), vec!["a.rs:4: `unsafe` without a `// SAFETY:` comment above it"]);
        let commented = format!("{head}// an unsafe {{ block }} in a comment\n");
        assert!(check_file("a.rs", &commented).is_empty());
        let quoted = format!("{head}let s = \"an \\\"unsafe {{\";\n");
        assert!(check_file("a.rs", &quoted).is_empty(), "{quoted}");
    }

    #[test]
    fn long_files_outside_tests_are_refused() {
        let body = format!("// SPDX-License-Identifier: GPL-2.0-only\n//! Owns a.\n{}", "x();\n".repeat(900));
        assert_eq!(check_file("src/a.rs", &body).len(), 1);
        assert!(check_file("vnic/tests/a.rs", &body).is_empty());
        assert!(check_file("vnic/examples/a.rs", &body).is_empty());
    }
}
