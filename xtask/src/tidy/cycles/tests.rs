// SPDX-License-Identifier: GPL-2.0-only
//! Tests of the import-cycle check on small crate trees written to a temporary directory.

use super::find;
use std::path::PathBuf;

/// A workspace written under the temporary directory, removed when dropped.
struct Tree(PathBuf);

impl Tree {
    /// `members` as the workspace's members and `files` (path, text) beneath it.
    fn new(name: &str, members: &[&str], files: &[(&str, &str)]) -> Tree {
        let dir = std::env::temp_dir().join(format!("xtask-tidy-cycles-{}-{name}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        let quoted: Vec<String> = members.iter().map(|m| format!("\"{m}\"")).collect();
        let manifest = format!("[workspace]\nmembers = [{}]\n", quoted.join(", "));
        for (path, text) in std::iter::once(&("Cargo.toml", manifest.as_str())).chain(files) {
            let p = dir.join(path);
            std::fs::create_dir_all(p.parent().unwrap()).unwrap();
            std::fs::write(p, text).unwrap();
        }
        Tree(dir)
    }

    fn cycles(&self) -> Vec<String> {
        let found = find(&self.0).unwrap();
        assert_eq!(found.unreached, Vec::<String>::new());
        found.cycles
    }
}

impl Drop for Tree {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

#[test]
fn a_cycle_is_found_and_named_with_its_lines() {
    let t = Tree::new(
        "found",
        &["a"],
        &[
            ("a/src/lib.rs", "mod x;\nmod y;\nmod z;\n"),
            ("a/src/x.rs", "//! x\nuse crate::{\n    y::Y,\n    z,\n};\n"),
            ("a/src/y.rs", "//! y\npub struct Y;\nfn f() {\n    super::x::g();\n}\n"),
            ("a/src/z.rs", "//! z: used by x, uses nothing\n"),
        ],
    );
    assert_eq!(
        t.cycles(),
        vec!["a (lib): import cycle among top-level modules: x, y\n    x -> y: a/src/x.rs:3\n    y -> x: a/src/y.rs:4"]
    );
}

#[test]
fn a_dag_passes_and_comments_and_strings_are_ignored() {
    let y = "//! y, which says `crate::x` only in comments and strings\n\
             // use crate::x;\n/* super::x::g(); /* nested */ crate::x */\n\
             fn f<'a>(s: &'a str) -> bool { s == \"crate::x::g\" || s == r#\"super::x\"# || '\"' == 'c' }\n\
             /// [`crate::x`]\npub struct Y;\n";
    let t = Tree::new(
        "dag",
        &["a", "b"],
        &[
            ("a/src/lib.rs", "mod x;\nmod y;\nmod z;\npub use y::Y;\n"),
            ("a/src/x.rs", "use crate::y::Y;\nuse super::Y as Again;\n"),
            ("a/src/y.rs", y),
            ("a/src/z.rs", "use crate::x;\nfn f() { crate::y::Y; }\n"),
            ("b/src/main.rs", "mod p;\nmod q;\nfn main() { p::f() }\n"),
            ("b/src/p.rs", "pub fn f() { crate::q::g() }\n"),
            ("b/src/q.rs", "pub fn g() {}\n#[cfg(test)]\nmod tests {\n    use super::*;\n}\n"),
        ],
    );
    assert_eq!(t.cycles(), Vec::<String>::new());
}

#[test]
fn a_directory_modules_children_are_checked_among_themselves() {
    let t = Tree::new(
        "children",
        &["a"],
        &[
            ("a/src/lib.rs", "mod d;\nmod e;\n"),
            ("a/src/d.rs", "mod p;\nmod q;\n"),
            ("a/src/d/p.rs", "use super::q::Q;\npub struct P;\n"),
            ("a/src/d/q.rs", "pub struct Q;\nfn f() { let _ = crate::d::p::P; }\n"),
            ("a/src/e/mod.rs", "mod r;\nmod s;\n"),
            ("a/src/e/r.rs", "use super::s;\n"),
            ("a/src/e/s.rs", "mod inner {\n    fn f() { super::super::r::g() }\n}\n"),
        ],
    );
    assert_eq!(
        t.cycles(),
        vec![
            "a (lib): import cycle among modules in `d`: p, q\n    p -> q: a/src/d/p.rs:1\n    q -> p: a/src/d/q.rs:2",
            "a (lib): import cycle among modules in `e`: r, s\n    r -> s: a/src/e/r.rs:1\n    s -> r: a/src/e/s.rs:2",
        ]
    );
}

#[test]
fn path_included_files_belong_to_the_including_module() {
    // `k` includes `lib`'s files the way kernel-crate/src/tpz.rs does: inside `tpz` their
    // `super::` paths name each other, and their `crate::` names `k`'s root.
    let t = Tree::new(
        "path",
        &["lib"],
        &[
            ("lib/src/lib.rs", "mod m1;\nmod m2;\npub use m2 as net;\n"),
            ("lib/src/m1.rs", "use super::net::X;\n"),
            ("lib/src/m2.rs", "pub struct X;\n"),
            ("kernel-crate/src/trapeze.rs", "mod other;\nmod tpz;\n"),
            ("kernel-crate/src/tpz.rs", "#[path = \"../../lib/src/lib.rs\"]\nmod lib;\n"),
            ("kernel-crate/src/other.rs", "use crate::tpz::lib::m1;\n"),
        ],
    );
    assert_eq!(t.cycles(), Vec::<String>::new());
    // In `lib` itself `crate::other` names nothing of its own; in `k` it is `tpz → other`.
    std::fs::write(t.0.join("lib/src/m2.rs"), "pub struct X;\nfn f() { crate::other::g() }\n").unwrap();
    assert_eq!(
        t.cycles(),
        vec![
            "kernel-crate: import cycle among top-level modules: other, tpz\n    other -> tpz: \
             kernel-crate/src/other.rs:1\n    tpz -> other: lib/src/m2.rs:2"
        ]
    );
}
