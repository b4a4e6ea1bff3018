// SPDX-License-Identifier: GPL-2.0-only
//! What `cargo xtask bench vm` copies into the guests besides the kernel and module: the
//! static guest tools (`trapeze-blkbench`, `trapeze-filebench`, `trapeze-memhog`); the
//! NBD programs go with their libraries (`crate::vm::programs_with_libraries`).

/// The guest tools the bench runs: raw device, files, swap workload.
pub(super) const TOOLS: [&str; 3] = ["trapeze-blkbench", "trapeze-filebench", "trapeze-memhog"];

/// A guest tool, statically linked, release.
pub(super) fn build_tool(name: &str) -> anyhow::Result<Vec<u8>> {
    crate::vm::guest_tool(name)
}
