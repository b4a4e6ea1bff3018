// SPDX-License-Identifier: GPL-2.0-only
//! Tidy's import-cycle check: no circle of `crate::`/`super::` references among the
//! modules of any crate, at any level of its module tree.
//!
//! Each crate's module tree is read the way rustc reads it: from the crate root
//! (`src/lib.rs`, `src/main.rs`, `src/bin/*.rs`, `kernel-crate/src/trapeze.rs`) through
//! its `mod x;` declarations, `#[path]` attributes included, so a file reached through
//! `#[path]` belongs to the module that includes it, wherever it lies. Every path that
//! starts with `crate::`, `$crate::`, `super::` or `self::` (in code, comments and
//! string literals blanked out) and every `use` item is resolved to the module it names
//! from the module it is written in (inline `mod x { … }` blocks counted), going through
//! `use`/`pub use` renames of module-level names (`pub use netrpc as net`). A reference
//! from module `a::b::…` to `a::c::…` is an edge `b → c` among the children of `a`, when
//! both are modules of their own file; the crate root's children are the top level.
//! Every strongly connected component of more than one module at any level is a cycle,
//! reported with the file and line of each reference that makes one of its edges.

use super::code_only;
use std::collections::{BTreeMap, BTreeSet};
use std::path::{Component, Path, PathBuf};

/// The crate roots outside the workspace members' `src/`.
const EXTRA_ROOTS: &[&str] = &["kernel-crate/src/trapeze.rs"];

/// A path written in a file: its segments (the first one `crate`, `super`, `self`, or in
/// a `use` item a name), the inline modules it sits in, and its line.
#[derive(Debug)]
struct Ref {
    inline: Vec<String>,
    segs: Vec<String>,
    line: usize,
    in_use: bool,
    /// The name a `use` item binds (`None` for a glob or outside `use`).
    binding: Option<String>,
}

/// A `mod name;` declaration.
struct Decl {
    inline: Vec<String>,
    name: String,
    path_attr: Option<String>,
}

#[derive(Default)]
struct Parsed {
    decls: Vec<Decl>,
    inline_mods: Vec<Vec<String>>,
    refs: Vec<Ref>,
}

#[derive(Debug, PartialEq)]
enum Tok {
    Ident(String),
    Colons,
    Punct(char),
    Str(String),
}

/// The tokens of a file's code (comments and literals' contents already blanked), each
/// with its line; string literals carry their text from the original.
fn tokens(text: &str, code: &str) -> Vec<(Tok, usize)> {
    let b = code.as_bytes();
    let (mut out, mut i, mut line) = (Vec::new(), 0, 1);
    let ident = |c: u8| c.is_ascii_alphanumeric() || c == b'_' || c >= 0x80;
    while i < b.len() {
        let c = b[i];
        if c == b'\n' {
            line += 1;
            i += 1;
        } else if c.is_ascii_whitespace() {
            i += 1;
        } else if ident(c) || c == b'$' && b.get(i + 1).is_some_and(|&d| ident(d)) {
            let start = i;
            i += 1;
            while i < b.len() && ident(b[i]) {
                i += 1;
            }
            out.push((Tok::Ident(code[start..i].to_string()), line));
        } else if c == b':' && b.get(i + 1) == Some(&b':') {
            out.push((Tok::Colons, line));
            i += 2;
        } else if c == b'"' {
            let end = b[i + 1..].iter().position(|&d| d == b'"').map_or(b.len(), |n| i + 1 + n);
            out.push((Tok::Str(text.get(i + 1..end).unwrap_or("").to_string()), line));
            line += b[i..end].iter().filter(|&&d| d == b'\n').count();
            i = end + 1;
        } else {
            out.push((Tok::Punct(c as char), line));
            i += 1;
        }
    }
    out
}

struct Parser<'a> {
    toks: &'a [(Tok, usize)],
    i: usize,
    out: Parsed,
    inline: Vec<(String, usize)>,
}

impl Parser<'_> {
    fn peek(&self, k: usize) -> Option<&Tok> {
        self.toks.get(self.i + k).map(|t| &t.0)
    }
    fn ident(&self, k: usize) -> Option<&str> {
        match self.peek(k) {
            Some(Tok::Ident(s)) => Some(s),
            _ => None,
        }
    }
    fn line(&self) -> usize {
        self.toks.get(self.i).or(self.toks.last()).map_or(0, |t| t.1)
    }
    fn inline_names(&self) -> Vec<String> {
        self.inline.iter().map(|m| m.0.clone()).collect()
    }

    fn run(mut self) -> Parsed {
        let (mut depth, mut path_attr) = (0, None);
        while self.i < self.toks.len() {
            let prev = self.i.checked_sub(1).map(|p| &self.toks[p].0);
            match &self.toks[self.i].0 {
                Tok::Punct('#') if self.ident(2) == Some("path") && self.peek(3) == Some(&Tok::Punct('=')) => {
                    if let Some(Tok::Str(s)) = self.peek(4) {
                        path_attr = Some(s.clone());
                    }
                    self.i += 5;
                }
                Tok::Ident(k) if k == "mod" && self.ident(1).is_some() => {
                    let name = self.ident(1).unwrap_or_default().to_string();
                    if self.peek(2) == Some(&Tok::Punct('{')) {
                        self.inline.push((name, depth));
                        depth += 1;
                        self.out.inline_mods.push(self.inline_names());
                    } else {
                        let (inline, path_attr) = (self.inline_names(), path_attr.take());
                        self.out.decls.push(Decl { inline, name, path_attr });
                    }
                    path_attr = None;
                    self.i += 3;
                }
                Tok::Ident(k) if k == "use" => {
                    self.i += 1;
                    self.use_tree(Vec::new());
                }
                Tok::Ident(k)
                    if matches!(k.as_str(), "crate" | "$crate" | "super" | "self")
                        && self.peek(1) == Some(&Tok::Colons)
                        && prev != Some(&Tok::Colons)
                        && prev != Some(&Tok::Ident("in".into())) =>
                {
                    let mut segs = vec![k.clone()];
                    let mut line = self.line();
                    self.i += 1;
                    while self.peek(0) == Some(&Tok::Colons) {
                        let Some(s) = self.ident(1) else { break };
                        segs.push(s.to_string());
                        line = self.toks[self.i + 1].1;
                        self.i += 2;
                    }
                    let inline = self.inline_names();
                    self.out.refs.push(Ref { inline, segs, line, in_use: false, binding: None });
                }
                t => {
                    match t {
                        Tok::Punct('{') => depth += 1,
                        Tok::Punct('}') => {
                            depth = depth.saturating_sub(1);
                            if self.inline.last().is_some_and(|m| m.1 == depth) {
                                self.inline.pop();
                            }
                        }
                        _ => {}
                    }
                    if matches!(t, Tok::Punct('{' | '}' | ';')) {
                        path_attr = None;
                    }
                    self.i += 1;
                }
            }
        }
        self.out
    }

    /// One use tree after `prefix`: records a reference per leaf (with the name it binds).
    fn use_tree(&mut self, prefix: Vec<String>) {
        let mut segs = prefix;
        let mut line = self.line();
        if self.peek(0) == Some(&Tok::Colons) {
            self.i += 1;
        }
        loop {
            match self.peek(0) {
                Some(Tok::Ident(s)) if s != "as" => {
                    segs.push(s.clone());
                    line = self.line();
                    self.i += 1;
                    if self.peek(0) != Some(&Tok::Colons) {
                        break;
                    }
                    self.i += 1;
                }
                Some(Tok::Punct('*')) => {
                    self.i += 1;
                    let inline = self.inline_names();
                    self.out.refs.push(Ref { inline, segs, line, in_use: true, binding: None });
                    return;
                }
                Some(Tok::Punct('{')) => {
                    self.i += 1;
                    while self.i < self.toks.len() {
                        if self.peek(0) == Some(&Tok::Punct('}')) {
                            self.i += 1;
                            return;
                        }
                        let before = self.i;
                        self.use_tree(segs.clone());
                        if self.peek(0) == Some(&Tok::Punct(',')) {
                            self.i += 1;
                        } else if self.i == before || self.peek(0) == Some(&Tok::Punct(';')) {
                            return; // not a use tree: leave the rest to the main scan
                        }
                    }
                    return;
                }
                _ => break,
            }
        }
        if segs.last().is_some_and(|s| s == "self") {
            segs.pop();
        }
        let mut binding = segs.last().cloned();
        if self.ident(0) == Some("as") {
            binding = self.ident(1).map(str::to_string);
            self.i += 2;
        }
        if !segs.is_empty() {
            let inline = self.inline_names();
            self.out.refs.push(Ref { inline, segs, line, in_use: true, binding });
        }
    }
}

fn parse(text: &str) -> Parsed {
    let toks = tokens(text, &code_only(text));
    Parser { toks: &toks, i: 0, out: Parsed::default(), inline: Vec::new() }.run()
}

/// A module of a crate: whether it has a file of its own (not an inline block), and the
/// names its `use` items bind, each to a path as written there.
#[derive(Default)]
struct Module {
    own_file: bool,
    bindings: Vec<(String, Vec<String>)>,
}

/// The edges among one module's children: (from, to) → the (file, line) of each reference.
type Edges = BTreeMap<(String, String), BTreeSet<(String, usize)>>;

/// One crate's module tree and the references its files make.
struct Crate {
    name: String,
    modules: BTreeMap<Vec<String>, Module>,
    /// (module the reference is written in, the reference, its file shown from the root).
    refs: Vec<(Vec<String>, Ref, String)>,
    /// The files read (normalized paths).
    files: BTreeSet<PathBuf>,
}

/// `a/b/../c` → `a/c`, without asking the file system.
fn normalize(p: &Path) -> PathBuf {
    let mut out = PathBuf::new();
    for c in p.components() {
        match c {
            Component::ParentDir if out.file_name().is_some() => {
                out.pop();
            }
            Component::CurDir => {}
            c => out.push(c),
        }
    }
    out
}

impl Crate {
    fn read(root_dir: &Path, name: String, root_file: &Path) -> Crate {
        let mut krate = Crate { name, modules: BTreeMap::new(), refs: Vec::new(), files: BTreeSet::new() };
        krate.modules.insert(Vec::new(), Module { own_file: true, bindings: Vec::new() });
        krate.load(root_dir, root_file, Vec::new(), true);
        krate
    }

    /// Read `file` as module `path` and, through its declarations, its descendants.
    /// `mod_rs`: its children live in its own directory (crate roots, `mod.rs` files and
    /// files reached through `#[path]`) rather than in a directory named after it.
    fn load(&mut self, root_dir: &Path, file: &Path, path: Vec<String>, mod_rs: bool) {
        let file = normalize(file);
        let Ok(text) = std::fs::read_to_string(&file) else { return }; // cfg'd out or absent
        if !self.files.insert(file.clone()) {
            return;
        }
        let shown = file.strip_prefix(root_dir).unwrap_or(&file).display().to_string();
        let parsed = parse(&text);
        for m in &parsed.inline_mods {
            self.modules.entry([path.clone(), m.clone()].concat()).or_default();
        }
        let dir = file.parent().unwrap_or(Path::new("")).to_path_buf();
        let own_dir = if mod_rs { dir.clone() } else { dir.join(file.file_stem().unwrap_or_default()) };
        for d in parsed.decls {
            let child = [path.clone(), d.inline.clone(), vec![d.name.clone()]].concat();
            let base = d.inline.iter().fold(own_dir.clone(), |p, m| p.join(m));
            let (child_file, child_mod_rs) = match &d.path_attr {
                Some(p) if d.inline.is_empty() => (dir.join(p), true),
                Some(p) => (base.join(p), true),
                None if base.join(format!("{}.rs", d.name)).exists() => (base.join(format!("{}.rs", d.name)), false),
                None => (base.join(&d.name).join("mod.rs"), true),
            };
            if child_file.exists() {
                self.modules.insert(child.clone(), Module { own_file: true, bindings: Vec::new() });
                self.load(root_dir, &child_file, child, child_mod_rs);
            }
        }
        for r in parsed.refs {
            let at = [path.clone(), r.inline.clone()].concat();
            if let Some(name) = &r.binding {
                self.modules.entry(at.clone()).or_default().bindings.push((name.clone(), r.segs.clone()));
            }
            self.refs.push((at, r, shown.clone()));
        }
    }

    /// The absolute path (from the crate root) of `segs` written in module `at`, if it
    /// stays inside the crate.
    fn absolute(&self, at: &[String], segs: &[String], in_use: bool) -> Option<Vec<String>> {
        let first = segs.first()?;
        match first.as_str() {
            "crate" | "$crate" => Some(segs[1..].to_vec()),
            "self" => Some([at, &segs[1..]].concat()),
            "super" => {
                let ups = segs.iter().take_while(|s| *s == "super").count();
                let base = at.get(..at.len().checked_sub(ups)?)?;
                Some([base, &segs[ups..]].concat())
            }
            // In a `use` item a plain first name is a child module here (or another crate).
            _ if in_use && self.modules.contains_key(&[at, &segs[..1]].concat()) => Some([at, segs].concat()),
            _ => None,
        }
    }

    /// The modules an absolute path names: its longest prefix that is a module, following
    /// `use` renames on the way (several when a name has cfg'd alternatives).
    fn resolve(&self, abs: &[String], hops: usize) -> Vec<Vec<String>> {
        let mut cur: Vec<String> = Vec::new();
        for (i, seg) in abs.iter().enumerate() {
            let next = [cur.clone(), vec![seg.clone()]].concat();
            if self.modules.contains_key(&next) {
                cur = next;
                continue;
            }
            let mut out = Vec::new();
            if hops < 8 {
                let bound = self.modules.get(&cur).into_iter().flat_map(|m| &m.bindings).filter(|b| &b.0 == seg);
                for (_, target) in bound {
                    if let Some(t) = self.absolute(&cur, target, true) {
                        out.extend(self.resolve(&[t, abs[i + 1..].to_vec()].concat(), hops + 1));
                    }
                }
            }
            if out.is_empty() {
                out.push(cur);
            }
            return out;
        }
        vec![cur]
    }

    /// Edges among the children of each module: level → (from, to) → where.
    fn edges(&self) -> BTreeMap<Vec<String>, Edges> {
        let mut edges: BTreeMap<_, BTreeMap<_, BTreeSet<_>>> = BTreeMap::new();
        for (at, r, file) in &self.refs {
            let Some(abs) = self.absolute(at, &r.segs, r.in_use) else { continue };
            for to in self.resolve(&abs, 0) {
                let common = at.iter().zip(&to).take_while(|(a, b)| a == b).count();
                if common >= at.len() || common >= to.len() {
                    continue; // a reference to its own module, an ancestor or a descendant
                }
                let own = |p: &[String]| self.modules.get(&p[..=common]).is_some_and(|m| m.own_file);
                if own(at) && own(&to) {
                    let key = (at[common].clone(), to[common].clone());
                    edges
                        .entry(at[..common].to_vec())
                        .or_default()
                        .entry(key)
                        .or_default()
                        .insert((file.clone(), r.line));
                }
            }
        }
        edges
    }

    /// Every cycle, as the lines of its report.
    fn cycles(&self) -> Vec<String> {
        let mut out = Vec::new();
        for (level, edges) in self.edges() {
            let graph: BTreeMap<&str, Vec<&str>> = edges.keys().fold(BTreeMap::new(), |mut g, (a, b)| {
                g.entry(a.as_str()).or_insert_with(Vec::new).push(b.as_str());
                g.entry(b.as_str()).or_default();
                g
            });
            for scc in sccs(&graph).into_iter().filter(|c| c.len() > 1) {
                let at = if level.is_empty() {
                    "top-level modules".into()
                } else {
                    format!("modules in `{}`", level.join("::"))
                };
                let mut lines = vec![format!("{}: import cycle among {at}: {}", self.name, scc.join(", "))];
                for ((a, b), wheres) in
                    edges.iter().filter(|((a, b), _)| scc.contains(&a.as_str()) && scc.contains(&b.as_str()))
                {
                    let wheres: Vec<String> = wheres.iter().map(|(f, l)| format!("{f}:{l}")).collect();
                    lines.push(format!("    {a} -> {b}: {}", wheres.join(", ")));
                }
                out.push(lines.join("\n"));
            }
        }
        out
    }
}

/// Tarjan's strongly connected components, each sorted by name.
fn sccs<'a>(graph: &BTreeMap<&'a str, Vec<&'a str>>) -> Vec<Vec<&'a str>> {
    struct State<'a> {
        index: BTreeMap<&'a str, usize>,
        low: BTreeMap<&'a str, usize>,
        stack: Vec<&'a str>,
        on_stack: BTreeSet<&'a str>,
        out: Vec<Vec<&'a str>>,
    }
    fn visit<'a>(v: &'a str, g: &BTreeMap<&'a str, Vec<&'a str>>, s: &mut State<'a>) {
        let n = s.index.len();
        s.index.insert(v, n);
        s.low.insert(v, n);
        s.stack.push(v);
        s.on_stack.insert(v);
        for &w in g.get(v).into_iter().flatten() {
            if !s.index.contains_key(w) {
                visit(w, g, s);
                let lw = s.low[w];
                s.low.entry(v).and_modify(|l| *l = (*l).min(lw));
            } else if s.on_stack.contains(w) {
                let iw = s.index[w];
                s.low.entry(v).and_modify(|l| *l = (*l).min(iw));
            }
        }
        if s.low[v] == s.index[v] {
            let mut comp = Vec::new();
            while let Some(w) = s.stack.pop() {
                s.on_stack.remove(w);
                comp.push(w);
                if w == v {
                    break;
                }
            }
            comp.sort();
            s.out.push(comp);
        }
    }
    let mut s = State {
        index: BTreeMap::new(),
        low: BTreeMap::new(),
        stack: Vec::new(),
        on_stack: BTreeSet::new(),
        out: Vec::new(),
    };
    for &v in graph.keys() {
        if !s.index.contains_key(v) {
            visit(v, graph, &mut s);
        }
    }
    s.out
}

/// The crate roots: every workspace member's `src/lib.rs`, `src/main.rs`, `src/bin/*.rs`
/// and `src/bin/*/main.rs`, and [`EXTRA_ROOTS`]; each with the name it is reported by.
fn roots(root: &Path) -> anyhow::Result<Vec<(String, PathBuf)>> {
    #[derive(serde::Deserialize)]
    struct Manifest {
        workspace: Workspace,
    }
    #[derive(serde::Deserialize)]
    struct Workspace {
        members: Vec<String>,
    }
    let text = std::fs::read_to_string(root.join("Cargo.toml"))?;
    let manifest: Manifest = toml::from_str(&text).map_err(|e| anyhow::anyhow!("Cargo.toml: {e}"))?;
    let mut out = Vec::new();
    for m in manifest.workspace.members {
        let src = root.join(&m).join("src");
        for (file, kind) in [("lib.rs", "lib"), ("main.rs", "bin")] {
            if src.join(file).exists() {
                out.push((format!("{m} ({kind})"), src.join(file)));
            }
        }
        let mut bins: Vec<_> =
            std::fs::read_dir(src.join("bin")).into_iter().flatten().flatten().map(|e| e.path()).collect();
        bins.sort();
        for b in bins {
            let stem = b.file_stem().unwrap_or_default().to_string_lossy().to_string();
            if b.extension().is_some_and(|e| e == "rs") {
                out.push((format!("{m} (bin {stem})"), b));
            } else if b.join("main.rs").exists() {
                out.push((format!("{m} (bin {stem})"), b.join("main.rs")));
            }
        }
    }
    for r in EXTRA_ROOTS {
        if root.join(r).exists() {
            out.push((r.split('/').next().unwrap_or(r).to_string(), root.join(r)));
        }
    }
    Ok(out)
}

/// What [`find`] found.
pub struct Found {
    /// One report per cycle.
    pub cycles: Vec<String>,
    /// How many crates were read.
    pub crates: usize,
    /// The `.rs` files under the crates' `src/` that no crate's module tree reaches (so
    /// unchecked), shown from the root.
    pub unreached: Vec<String>,
}

/// Every import cycle in the repository's crates.
pub fn find(root: &Path) -> anyhow::Result<Found> {
    let roots = roots(root)?;
    let (mut cycles, mut read) = (Vec::new(), BTreeSet::new());
    for (name, file) in &roots {
        let krate = Crate::read(root, name.clone(), file);
        cycles.extend(krate.cycles());
        read.extend(krate.files);
    }
    let mut unreached = BTreeSet::new();
    let mut dirs: Vec<PathBuf> = roots.iter().filter_map(|(_, f)| Some(crate_src(f)?.to_path_buf())).collect();
    while let Some(dir) = dirs.pop() {
        for entry in std::fs::read_dir(&dir).into_iter().flatten().flatten() {
            let p = normalize(&entry.path());
            if p.is_dir() {
                dirs.push(p);
            } else if p.extension().is_some_and(|e| e == "rs") && !read.contains(&p) {
                unreached.insert(p.strip_prefix(root).unwrap_or(&p).display().to_string());
            }
        }
    }
    Ok(Found { cycles, crates: roots.len(), unreached: unreached.into_iter().collect() })
}

/// The `src/` directory a crate root lies in.
fn crate_src(root_file: &Path) -> Option<&Path> {
    root_file.ancestors().find(|a| a.file_name().is_some_and(|n| n == "src"))
}

#[cfg(test)]
mod tests;
