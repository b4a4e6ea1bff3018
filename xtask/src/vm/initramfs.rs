// SPDX-License-Identifier: GPL-2.0-only
//! The guests' initramfs: a newc cpio of /init, busybox, the modules, the scripts' shared
//! functions (`/etc/trapeze/lib.sh`) and the script; the
//! static guest tools (`guest-tools/`) some tests add to it, and the host programs they add
//! with the shared libraries `ldd` names; base64 for `vm run --cmd`.

use anyhow::{bail, ensure, Context};
use std::fs;
use std::path::{Path, PathBuf};
use std::process::Command;

/// The guest's `/init`, relative to the workspace root.
const INIT: &str = "kernel-crate/guest/init";
/// What the guest scripts share (they source `/etc/trapeze/lib.sh`), relative to the root.
const LIB: &str = "kernel-crate/guest/lib.sh";

/// Build `initramfs.cpio.gz` in `dir`: /init, busybox, the modules, lib.sh, the optional script.
pub(super) fn build_initramfs(dir: &Path, modules: &[PathBuf], script: Option<&[u8]>) -> anyhow::Result<PathBuf> {
    let root = crate::workspace_root();
    let init = fs::read(root.join(INIT)).with_context(|| format!("reading {INIT}"))?;
    let lib = fs::read(root.join(LIB)).with_context(|| format!("reading {LIB}"))?;
    let busybox = fs::read("/bin/busybox").context("reading /bin/busybox (apt-get install busybox-static)")?;
    let mut c = Cpio::default();
    for d in [
        "bin",
        "sbin",
        "usr",
        "usr/bin",
        "usr/sbin",
        "dev",
        "proc",
        "sys",
        "tmp",
        "run",
        "root",
        "etc",
        "etc/trapeze",
        "lib",
        "lib/modules",
    ] {
        c.dir(d);
    }
    c.char_dev("dev/console", 0o600, 5, 1);
    c.char_dev("dev/null", 0o666, 1, 3);
    c.file("bin/busybox", 0o755, &busybox);
    c.symlink("bin/sh", "busybox");
    c.file("init", 0o755, &init);
    c.file("etc/trapeze/lib.sh", 0o644, &lib);
    let mut names = Vec::new();
    for m in modules {
        let name = m.file_name().context("module path")?.to_string_lossy().into_owned();
        c.file(&format!("lib/modules/{name}"), 0o644, &fs::read(m)?);
        names.push(name);
    }
    if let Some(s) = script {
        c.file("etc/trapeze/run.sh", 0o755, s);
    }
    let cpio = dir.join("initramfs.cpio");
    fs::write(&cpio, c.finish())?;
    let st = Command::new("gzip").args(["-9", "-n", "-f"]).arg(&cpio).status().context("running gzip")?;
    ensure!(st.success(), "gzip {} failed ({st})", cpio.display());
    let gz = dir.join("initramfs.cpio.gz");
    let size = fs::metadata(&gz)?.len();
    eprintln!(
        "  {} ({} KiB): /init from {INIT}, busybox, modules: {}{}",
        gz.display(),
        size / 1024,
        if names.is_empty() { "none".to_string() } else { names.join(" ") },
        if script.is_some() { ", /etc/trapeze/run.sh" } else { "" }
    );
    Ok(gz)
}

/// True when the ELF file has no program interpreter (a static executable).
fn is_static_elf(b: &[u8]) -> bool {
    const PT_INTERP: u32 = 3;
    if b.len() < 64 || &b[..4] != b"\x7fELF" || b[4] != 2 {
        return false;
    }
    let u16_at = |o: usize| u16::from_le_bytes([b[o], b[o + 1]]) as usize;
    let phoff = u64::from_le_bytes(b[0x20..0x28].try_into().expect("8 bytes")) as usize;
    let (size, n) = (u16_at(0x36), u16_at(0x38));
    (0..n).all(|i| {
        let o = phoff + i * size;
        b.get(o..o + 4).is_some_and(|t| u32::from_le_bytes(t.try_into().expect("4 bytes")) != PT_INTERP)
    })
}

/// A binary of `guest-tools/` (e.g. `trapeze-memhog`), built statically linked and
/// stripped in release mode (glibc's libc.a, `+crt-static`): the guests have no libc.
pub(crate) fn guest_tool(bin: &str) -> anyhow::Result<Vec<u8>> {
    eprintln!("==> {bin}: static release build (glibc libc.a, +crt-static)");
    crate::cargo(&[
        "rustc",
        "--locked",
        "--release",
        "-p",
        "trapeze-guest-tools",
        "--bin",
        bin,
        "--",
        "-C",
        "target-feature=+crt-static",
        "-C",
        "strip=symbols",
    ])?;
    let path = super::runtime::target_dir()?.join("release").join(bin);
    let bytes = fs::read(&path).with_context(|| format!("reading {}", path.display()))?;
    ensure!(
        is_static_elf(&bytes),
        "{} is dynamically linked (it has a program interpreter): the guests have no libc; is libc6-dev's libc.a installed?",
        path.display()
    );
    eprintln!("  {} ({} KiB, static)", path.display(), bytes.len() / 1024);
    Ok(bytes)
}

/// A newc ("070701") cpio archive, as the kernel unpacks an initramfs.
#[derive(Default)]
pub(super) struct Cpio {
    buf: Vec<u8>,
    ino: u32,
}

impl Cpio {
    fn entry(&mut self, name: &str, mode: u32, nlink: u32, rdev: (u32, u32), data: &[u8]) {
        self.ino += 1;
        let fields = [
            self.ino,
            mode,
            0, // uid
            0, // gid
            nlink,
            0, // mtime
            data.len() as u32,
            0, // devmajor
            0, // devminor
            rdev.0,
            rdev.1,
            name.len() as u32 + 1,
            0, // check
        ];
        self.buf.extend_from_slice(b"070701");
        for f in fields {
            self.buf.extend_from_slice(format!("{f:08x}").as_bytes());
        }
        self.buf.extend_from_slice(name.as_bytes());
        self.buf.push(0);
        self.pad();
        self.buf.extend_from_slice(data);
        self.pad();
    }
    fn pad(&mut self) {
        while !self.buf.len().is_multiple_of(4) {
            self.buf.push(0);
        }
    }
    pub(super) fn dir(&mut self, name: &str) {
        self.entry(name, 0o040_755, 2, (0, 0), &[]);
    }
    pub(super) fn file(&mut self, name: &str, perm: u32, data: &[u8]) {
        self.entry(name, 0o100_000 | perm, 1, (0, 0), data);
    }
    fn symlink(&mut self, name: &str, target: &str) {
        self.entry(name, 0o120_777, 1, (0, 0), target.as_bytes());
    }
    fn char_dev(&mut self, name: &str, perm: u32, major: u32, minor: u32) {
        self.entry(name, 0o020_000 | perm, 1, (major, minor), &[]);
    }
    pub(super) fn finish(mut self) -> Vec<u8> {
        self.entry("TRAILER!!!", 0, 1, (0, 0), &[]);
        while !self.buf.len().is_multiple_of(512) {
            self.buf.push(0);
        }
        self.buf
    }
}

/// Standard base64 with padding (the guest decodes it with busybox `base64 -d`).
pub(super) fn base64(data: &[u8]) -> String {
    const A: &[u8; 64] = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
    let mut out = String::with_capacity(data.len().div_ceil(3) * 4);
    for chunk in data.chunks(3) {
        let b = [chunk[0], *chunk.get(1).unwrap_or(&0), *chunk.get(2).unwrap_or(&0)];
        let n = (u32::from(b[0]) << 16) | (u32::from(b[1]) << 8) | u32::from(b[2]);
        for i in 0..4 {
            if i <= chunk.len() {
                out.push(A[(n >> (18 - 6 * i) & 63) as usize] as char);
            } else {
                out.push('=');
            }
        }
    }
    out
}

/// A program and the shared libraries `ldd` lists for it, at the same paths in the guest.
fn with_libraries(program: &str) -> anyhow::Result<Vec<(String, PathBuf)>> {
    let out = Command::new("ldd").arg(program).output().with_context(|| format!("running ldd {program}"))?;
    ensure!(out.status.success(), "ldd {program} failed: {}", String::from_utf8_lossy(&out.stderr));
    let text = String::from_utf8_lossy(&out.stdout);
    if let Some(l) = text.lines().find(|l| l.contains("not found")) {
        bail!("{program} needs a library that is not installed: {}", l.trim());
    }
    let mut files = vec![(program.to_string(), PathBuf::from(program))];
    files.extend(ldd_paths(&text).into_iter().map(|p| (p.clone(), PathBuf::from(p))));
    Ok(files)
}

/// Initramfs entries (guest path, bytes, mode 0755) for `programs` and the shared libraries
/// they need, each file once.
pub(crate) fn programs_with_libraries(programs: &[&str]) -> anyhow::Result<Vec<(String, Vec<u8>, u32)>> {
    let mut files: Vec<(String, Vec<u8>, u32)> = Vec::new();
    for prog in programs {
        for (guest_path, host_path) in with_libraries(prog)? {
            if !files.iter().any(|f| f.0 == guest_path) {
                let data = fs::read(&host_path).with_context(|| format!("reading {}", host_path.display()))?;
                files.push((guest_path, data, 0o755));
            }
        }
    }
    Ok(files)
}

/// The library paths in `ldd` output: "libx.so.1 => /lib/…/libx.so.1 (0x…)" and
/// "/lib64/ld-linux-x86-64.so.2 (0x…)"; the vDSO has no file.
fn ldd_paths(text: &str) -> Vec<String> {
    text.lines()
        .filter_map(|l| match l.split_once("=>") {
            Some((_, r)) => r.split_whitespace().next(),
            None => l.split_whitespace().next(),
        })
        .filter(|p| p.starts_with('/'))
        .map(str::to_string)
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn static_executables_have_no_interpreter() {
        let me = fs::read(std::env::current_exe().unwrap()).unwrap();
        assert!(!is_static_elf(&me), "the test binary is dynamically linked");
        assert!(!is_static_elf(b"not an elf"));
        // A minimal ELF64 header with two program headers at 64, 56 bytes each.
        let elf = |types: [u32; 2]| {
            let mut b = vec![0u8; 64 + 2 * 56];
            b[..5].copy_from_slice(b"\x7fELF\x02");
            b[0x20] = 64;
            b[0x36] = 56;
            b[0x38] = 2;
            for (i, t) in types.iter().enumerate() {
                b[64 + i * 56..68 + i * 56].copy_from_slice(&t.to_le_bytes());
            }
            b
        };
        assert!(is_static_elf(&elf([1, 1])), "PT_LOAD only");
        assert!(!is_static_elf(&elf([6, 3])), "PT_PHDR + PT_INTERP");
    }

    #[test]
    fn base64_matches_the_standard() {
        assert_eq!(base64(b""), "");
        assert_eq!(base64(b"f"), "Zg==");
        assert_eq!(base64(b"fo"), "Zm8=");
        assert_eq!(base64(b"foo"), "Zm9v");
        assert_eq!(base64(b"insmod x && rmmod x"), "aW5zbW9kIHggJiYgcm1tb2QgeA==");
    }

    #[test]
    fn cpio_entries_are_aligned_and_terminated() {
        let mut c = Cpio::default();
        c.dir("bin");
        c.file("init", 0o755, b"#!/bin/sh\n");
        let a = c.finish();
        assert!(a.starts_with(b"070701"));
        assert_eq!(a.len() % 512, 0);
        let s = String::from_utf8_lossy(&a);
        assert!(s.contains("TRAILER!!!"));
        assert!(s.contains("init\0"));
    }

    #[test]
    fn ldd_output_gives_the_library_files() {
        let text =
            "\tlinux-vdso.so.1 (0x00007ffd)\n\tlibgnutls.so.30 => /lib/x86_64-linux-gnu/libgnutls.so.30 (0x7f9c)\n\
                    \tlibc.so.6 => /lib/x86_64-linux-gnu/libc.so.6 (0x7f9b)\n\t/lib64/ld-linux-x86-64.so.2 (0x7f9e)\n\
                    \tlibmissing.so.1 => not found\n";
        assert_eq!(
            ldd_paths(text),
            ["/lib/x86_64-linux-gnu/libgnutls.so.30", "/lib/x86_64-linux-gnu/libc.so.6", "/lib64/ld-linux-x86-64.so.2"]
        );
    }
}
