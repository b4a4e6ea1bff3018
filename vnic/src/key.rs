// SPDX-License-Identifier: GPL-2.0-only
//! The cluster key: 32 secret bytes in a file only its owner can read, shared by every
//! NIC of a cluster, from which the link derives its MAC key (`link::mac`).
//!
//! A key file is exactly [`KEY_BYTES`] raw bytes, a regular file owned by the user who
//! loads it, with no permission bits for group or others (mode 0600 or 0400).
//! [`ClusterKey::load`] refuses anything else with an error naming the file, what is
//! wrong and what to do. [`ClusterKey::generate`] makes one from the OS random source
//! (`getrandom(2)`), mode 0600, and never overwrites an existing file.

use anyhow::{bail, Context};
use std::fmt;
use std::fs::{File, OpenOptions};
use std::io::{Read, Write};
use std::os::unix::fs::{MetadataExt, OpenOptionsExt};
use std::path::Path;

/// Bytes of a cluster key.
pub const KEY_BYTES: usize = 32;

/// A cluster key. Its `Debug` shows no key bytes.
#[derive(Clone, PartialEq, Eq)]
pub struct ClusterKey([u8; KEY_BYTES]);

impl fmt::Debug for ClusterKey {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("ClusterKey(..)")
    }
}

impl ClusterKey {
    /// A key from its bytes (tests and in-process testbeds; a deployment loads a file).
    pub fn from_bytes(bytes: [u8; KEY_BYTES]) -> ClusterKey {
        ClusterKey(bytes)
    }

    /// A fresh key from the OS random source, not stored anywhere.
    pub fn random() -> anyhow::Result<ClusterKey> {
        let mut k = [0u8; KEY_BYTES];
        fill_random(&mut k)?;
        Ok(ClusterKey(k))
    }

    pub fn bytes(&self) -> &[u8; KEY_BYTES] {
        &self.0
    }

    /// Load a key file, refusing one that is not a regular file of exactly
    /// [`KEY_BYTES`] bytes, owned by this process's effective user, with no group or
    /// other permission bits.
    pub fn load(path: &Path) -> anyhow::Result<ClusterKey> {
        let shown = path.display();
        // O_NOFOLLOW: the checks below are of the file opened, not of where a link points.
        let mut f = OpenOptions::new()
            .read(true)
            .custom_flags(rustix::fs::OFlags::NOFOLLOW.bits() as i32)
            .open(path)
            .with_context(|| format!("opening cluster key file {shown}"))?;
        let md = f.metadata().with_context(|| format!("reading the status of cluster key file {shown}"))?;
        if !md.file_type().is_file() {
            bail!("cluster key file {shown} is not a regular file");
        }
        let me = rustix::process::geteuid().as_raw();
        if md.uid() != me {
            bail!(
                "cluster key file {shown} is owned by uid {}, not by this user (uid {me}): \
                 a key must belong to the user that runs the NIC (make one with `trapeze-nic keygen PATH`)",
                md.uid()
            );
        }
        let mode = md.mode() & 0o7777;
        if mode & 0o077 != 0 {
            bail!(
                "cluster key file {shown} has mode {mode:04o}: {}; a key must be readable by its owner only \
                 (`chmod 600 {shown}`, and make a new key if anyone else may have read it)",
                who_else_may(mode)
            );
        }
        if md.len() != KEY_BYTES as u64 {
            bail!(
                "cluster key file {shown} holds {} bytes, not {KEY_BYTES}: make one with `trapeze-nic keygen PATH`",
                md.len()
            );
        }
        let mut k = [0u8; KEY_BYTES];
        f.read_exact(&mut k).with_context(|| format!("reading cluster key file {shown}"))?;
        let mut rest = [0u8; 1];
        if f.read(&mut rest).with_context(|| format!("reading cluster key file {shown}"))? != 0 {
            bail!("cluster key file {shown} grew while it was read: not {KEY_BYTES} bytes");
        }
        Ok(ClusterKey(k))
    }

    /// Make a new key file at `path` (mode 0600, from the OS random source) and return
    /// the key. Refuses to replace an existing file (or a symbolic link) at `path`.
    pub fn generate(path: &Path) -> anyhow::Result<ClusterKey> {
        let shown = path.display();
        let key = ClusterKey::random()?;
        let mut f: File =
            OpenOptions::new().write(true).create_new(true).mode(0o600).open(path).map_err(|e| match e.kind() {
                std::io::ErrorKind::AlreadyExists => {
                    anyhow::anyhow!("{shown} already exists: not overwriting a key file (remove it first)")
                }
                _ => anyhow::Error::new(e).context(format!("creating cluster key file {shown}")),
            })?;
        // The umask can only have taken bits away; make the mode exact anyway.
        rustix::fs::fchmod(&f, rustix::fs::Mode::from_raw_mode(0o600))
            .with_context(|| format!("setting mode 0600 on {shown}"))?;
        let written = f.write_all(&key.0).and_then(|()| f.sync_all());
        if let Err(e) = written {
            let _ = std::fs::remove_file(path);
            return Err(anyhow::Error::new(e).context(format!("writing cluster key file {shown}")));
        }
        Ok(key)
    }
}

/// What the group and other bits of `mode` allow, in words: `its group may read it`,
/// `other users may read and change it`, both joined by `; ` when both have bits.
fn who_else_may(mode: u32) -> String {
    let class = |who: &str, bits: u32| -> Option<String> {
        let verbs: Vec<&str> = [(0o4, "read"), (0o2, "change"), (0o1, "execute")]
            .into_iter()
            .filter(|(b, _)| bits & b != 0)
            .map(|(_, v)| v)
            .collect();
        (!verbs.is_empty()).then(|| format!("{who} may {} it", verbs.join(" and ")))
    };
    [class("its group", (mode >> 3) & 0o7), class("other users", mode & 0o7)]
        .into_iter()
        .flatten()
        .collect::<Vec<_>>()
        .join("; ")
}

/// Fill `buf` from the OS random source (`getrandom(2)`, blocking until it is seeded).
fn fill_random(buf: &mut [u8]) -> anyhow::Result<()> {
    let mut done = 0;
    while done < buf.len() {
        match rustix::rand::getrandom(&mut buf[done..], rustix::rand::GetRandomFlags::empty()) {
            Ok(n) => done += n,
            Err(rustix::io::Errno::INTR) => {}
            Err(e) => return Err(anyhow::Error::new(std::io::Error::from(e)).context("reading the OS random source")),
        }
    }
    Ok(())
}
