// SPDX-License-Identifier: GPL-2.0-only
//! How much kernel stack the module's own code can take, read from its machine code
//! (`objdump -d -r` of `trapeze.ko`).
//!
//! Each function's frame is its return address, the registers its prologue pushes and its
//! largest `sub $N,%rsp`. Its calls are the `call`s and tail `jmp`s whose target is a
//! symbol: the relocation on the instruction (a call to another section or module) or the
//! symbol in the instruction (a call resolved inside one section). A chain's depth is the
//! sum of the frames along it; the deepest chain from any function is what the module
//! adds to whatever kernel frames lie below its entry point (insmod and the PCI core under
//! probe, blk-mq under a request) and above its calls into the kernel (printk, the
//! allocator, `add_disk`, which scans partitions and so re-enters blk-mq and the module).
//! Calls through function pointers are not followed, and a recursive call is cut (the
//! module has none by design); so the figure is a lower bound of the true worst case,
//! which is why its limit leaves most of the stack to the kernel.

use std::collections::HashMap;

/// A function's frame (bytes) and the symbols it calls.
#[derive(Debug, Default, PartialEq)]
pub struct Func {
    pub frame: u64,
    pub calls: Vec<String>,
}

/// Functions by symbol (mangled, as `objdump` prints them without `-C`).
pub type Funcs = HashMap<String, Func>;

/// Parse `objdump -d -r --no-show-raw-insn` output.
pub fn parse(text: &str) -> Funcs {
    let mut funcs = Funcs::new();
    let mut cur: Option<(String, Reading)> = None;
    for l in text.lines() {
        if let Some(name) = l.strip_suffix(">:").and_then(|h| h.split_once(" <")).map(|(_, s)| s) {
            if let Some((n, r)) = cur.replace((name.to_string(), Reading::default())) {
                funcs.insert(n, r.done());
            }
        } else if let Some((_, r)) = cur.as_mut() {
            r.line(l);
        }
    }
    if let Some((n, r)) = cur {
        funcs.insert(n, r.done());
    }
    funcs
}

/// One function's lines so far.
#[derive(Default)]
struct Reading {
    func: Func,
    insns: u32,
    pushes: u64,
    sub: u64,
    /// A call or jump just read, whose target a relocation line may name ("": none yet).
    pending: Option<String>,
}

impl Reading {
    fn line(&mut self, l: &str) {
        // `\t\t\tb4: R_X86_64_PLT32\tsymbol-0x4`
        if let Some((_, rel)) = l.trim_start().split_once(": R_X86_64_") {
            if let (Some(_), Some((kind, sym))) = (&self.pending, rel.split_once(char::is_whitespace)) {
                if kind == "PLT32" || kind == "PC32" {
                    self.pending = Some(symbol_of(sym.trim()).to_string());
                }
            }
            self.take_call();
            return;
        }
        // `   b3:\tcall   b8 <f+0xb8>`
        let Some((_, insn)) = l.split_once(":\t") else { return };
        self.take_call();
        let insn = insn.trim();
        self.insns += 1;
        let (op, args) = insn.split_once(char::is_whitespace).map_or((insn, ""), |(o, a)| (o, a.trim()));
        if self.insns <= 8 && op == "push" {
            self.pushes += 1;
        }
        if let Some(v) = args.strip_suffix(",%rsp").and_then(|i| i.strip_prefix("$0x")).filter(|_| op == "sub") {
            self.sub = self.sub.max(u64::from_str_radix(v, 16).unwrap_or(0));
        }
        if op == "call" || op == "jmp" {
            // The symbol in `<sym>`; `<f+0x..>` is a jump inside a function or a
            // placeholder a relocation fills.
            let direct = args.split_once('<').and_then(|(_, s)| s.strip_suffix('>')).filter(|s| !s.contains("+0x"));
            self.pending = Some(direct.unwrap_or("").to_string());
        }
    }

    fn take_call(&mut self) {
        if let Some(t) = self.pending.take().filter(|t| !t.is_empty()) {
            self.func.calls.push(t);
        }
    }

    fn done(mut self) -> Func {
        self.take_call();
        self.func.frame = 8 + 8 * self.pushes + self.sub;
        self.func
    }
}

/// `sym-0x4` or `sym+0x10` → `sym`.
fn symbol_of(s: &str) -> &str {
    s.rfind(['-', '+']).filter(|&i| s[i + 1..].starts_with("0x")).map_or(s, |i| &s[..i])
}

/// The deepest chain of the module's own frames, from the function that starts it: total
/// bytes and (symbol, frame) along it.
pub fn deepest(funcs: &Funcs) -> (u64, Vec<(String, u64)>) {
    let mut memo = HashMap::new();
    let mut names: Vec<&str> = funcs.keys().map(String::as_str).collect();
    names.sort_unstable();
    let mut best: Option<(u64, &str)> = None;
    for name in names {
        let ((d, _), _) = depth(funcs, name, &mut memo, &mut Vec::new());
        if best.is_none_or(|(b, _)| d > b) {
            best = Some((d, name));
        }
    }
    let Some((total, root)) = best else { return (0, Vec::new()) };
    // Walk the chain again from its root, with the same cuts as when it was measured.
    let mut chain = Vec::new();
    let mut path = Vec::new();
    let mut at = Some(root);
    while let Some(f) = at {
        chain.push((f.to_string(), funcs[f].frame));
        at = depth(funcs, f, &mut HashMap::new(), &mut path.clone()).0 .1;
        path.push(f);
    }
    (total, chain)
}

/// Depth of the deepest chain from `f` and its next step; a call back into `path`
/// (recursion) is cut, and a result that depends on a cut is not memoised (from another
/// root the cut falls elsewhere). Whether a cut was made.
fn depth<'a>(
    funcs: &'a Funcs,
    f: &'a str,
    memo: &mut HashMap<&'a str, (u64, Option<&'a str>)>,
    path: &mut Vec<&'a str>,
) -> ((u64, Option<&'a str>), bool) {
    if let Some(&d) = memo.get(f) {
        return (d, false);
    }
    path.push(f);
    let (mut next, mut cut): ((u64, Option<&str>), bool) = ((0, None), false);
    for c in &funcs[f].calls {
        let Some((c, _)) = funcs.get_key_value(c.as_str()) else { continue };
        if path.contains(&c.as_str()) {
            cut = true;
            continue;
        }
        let ((d, _), c_cut) = depth(funcs, c, memo, path);
        cut |= c_cut;
        if d > next.0 {
            next = (d, Some(c));
        }
    }
    path.pop();
    let d = (funcs[f].frame + next.0, next.1);
    if !cut {
        memo.insert(f, d);
    }
    (d, cut)
}

#[cfg(test)]
mod tests {
    use super::*;

    const TEXT: &str = "\
0000000000000000 <probe>:
   0:\tpush   %rbp
   1:\tpush   %rbx
   2:\tsub    $0x1000,%rsp
   9:\tcall   e <probe+0xe>
\t\t\ta: R_X86_64_PLT32\tpci_enable_device-0x4
   e:\tcall   20 <disk>
  13:\tjmp    9 <probe+0x9>
  15:\tsub    $0x10,%rax
0000000000000020 <disk>:
  20:\tsub    $0x800,%rsp
  27:\tcall   2c <disk+0xc>
\t\t\t28: R_X86_64_PLT32\tleaf-0x4
  2c:\tjmp    31 <disk+0x11>
\t\t\t2d: R_X86_64_PLT32\tprobe-0x4
0000000000000040 <leaf>:
  40:\tpush   %rax
  41:\tret
";

    #[test]
    fn frames_and_calls_are_read_from_objdump_output() {
        let f = parse(TEXT);
        assert_eq!(f["probe"], Func { frame: 8 + 16 + 0x1000, calls: vec!["pci_enable_device".into(), "disk".into()] });
        assert_eq!(f["disk"], Func { frame: 8 + 0x800, calls: vec!["leaf".into(), "probe".into()] });
        assert_eq!(f["leaf"].frame, 16);
    }

    #[test]
    fn the_deepest_chain_sums_frames_and_cuts_recursion() {
        let (total, chain) = deepest(&parse(TEXT));
        assert_eq!(total, (8 + 16 + 0x1000) + (8 + 0x800) + 16);
        let names: Vec<&str> = chain.iter().map(|c| c.0.as_str()).collect();
        assert_eq!(names, ["probe", "disk", "leaf"]);
    }
}
