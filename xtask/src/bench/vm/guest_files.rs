// SPDX-License-Identifier: GPL-2.0-only
//! What `cargo xtask bench vm` copies into the guests besides the kernel and module: the
//! static guest tools (`trapeze-blkbench`, `trapeze-filebench`, `trapeze-memhog`) and the
//! NBD programs with the shared libraries they need.

use anyhow::{bail, ensure, Context};
use std::path::PathBuf;
use std::process::Command;

/// The guest tools the bench runs: raw device, files, swap workload.
pub(super) const TOOLS: [&str; 3] = ["trapeze-blkbench", "trapeze-filebench", "trapeze-memhog"];

/// A guest tool, statically linked, release.
pub(super) fn build_tool(name: &str) -> anyhow::Result<Vec<u8>> {
    crate::vm::guest_tool(name)
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
                let data = std::fs::read(&host_path).with_context(|| format!("reading {}", host_path.display()))?;
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
