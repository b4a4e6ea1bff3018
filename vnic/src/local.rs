// SPDX-License-Identifier: GPL-2.0-only
//! Protection from other local users: private runtime directories, socket modes and the
//! peer-credential check every control and ivshmem socket makes.
//!
//! Whoever can connect to a NIC's control or ivshmem socket can attach to its endpoint
//! and make it DMA into a host's (or a guest's) memory, so only the user the NIC runs as
//! and root may. Three layers:
//! * **Directory.** The default socket directory, `$XDG_RUNTIME_DIR/trapeze` or (without
//!   a runtime directory) `/tmp/trapeze-UID`, is created mode 0700; one that exists must
//!   be a real directory (not a symlink), owned by this user, and writable by nobody else
//!   ([`ensure_private_dir`]). Another user who made `/tmp/trapeze-UID` first (to squat
//!   it or read what is put there) is refused with an error naming the path and owner.
//! * **Explicit socket directories.** A socket path given on the command line must be in
//!   a directory that exists (nothing is created for it) and that not every user can
//!   write to without the sticky bit ([`check_socket_dir`]): there anyone could remove
//!   the socket and put their own in its place.
//! * **Socket file.** Every listening socket is made mode 0600 after `bind`
//!   ([`restrict_socket`]), so `connect(2)` by another user fails with `EACCES`.
//! * **Peer credentials.** Every accepted connection's `SO_PEERCRED` is checked
//!   ([`check_peer`]): a peer of another uid (root excepted) is closed before it is
//!   served, whatever the socket file's mode or directory.

use anyhow::{bail, Context};
use rustix::fs::Mode;
use std::os::fd::AsFd;
use std::os::unix::fs::{MetadataExt, PermissionsExt};
use std::path::{Path, PathBuf};

/// The mode of a runtime directory.
pub const DIR_MODE: u32 = 0o700;
/// The mode of a listening socket.
pub const SOCKET_MODE: u32 = 0o600;

/// This process's effective uid (what owns the files it creates).
pub fn euid() -> u32 {
    rustix::process::geteuid().as_raw()
}

/// The default runtime directory of trapeze programs: `$XDG_RUNTIME_DIR/trapeze`, or
/// `/tmp/trapeze-UID` without a runtime directory. Make it with [`ensure_private_dir`].
pub fn runtime_dir() -> PathBuf {
    match std::env::var_os("XDG_RUNTIME_DIR") {
        Some(d) if !d.is_empty() => PathBuf::from(d).join("trapeze"),
        _ => PathBuf::from(format!("/tmp/trapeze-{}", euid())),
    }
}

/// Create `dir` mode 0700 if it is missing (with any missing parent), or check the one that
/// is there: a directory, not a symlink, owned by this user, not writable by group or
/// others. Read or search bits for others on a directory of ours are removed (with a
/// log line); anything else is refused with an error that names the path, its owner and
/// mode, and what to do.
pub fn ensure_private_dir(dir: &Path) -> anyhow::Result<()> {
    use std::os::unix::fs::DirBuilderExt;
    // Missing parents are made mode 0700 too; an existing `dir` is left as it is and
    // checked below (also if it is a symlink to a directory).
    std::fs::DirBuilder::new()
        .recursive(true)
        .mode(DIR_MODE)
        .create(dir)
        .with_context(|| format!("creating the runtime directory {} (mode 0700)", dir.display()))?;
    let m = std::fs::symlink_metadata(dir)
        .with_context(|| format!("looking at the runtime directory {}", dir.display()))?;
    let me = euid();
    let mode = m.mode() & 0o7777;
    let redo = "remove it (or have its owner remove it), then start again: it will be made afresh, mode 0700";
    if m.file_type().is_symlink() {
        bail!(
            "the runtime directory {} is a symbolic link, not a directory: refusing to use it ({redo})",
            dir.display()
        );
    }
    if !m.is_dir() {
        bail!("the runtime directory {} is not a directory: refusing to use it ({redo})", dir.display());
    }
    if m.uid() != me {
        bail!(
            "the runtime directory {} belongs to uid {}, not to this user (uid {me}): refusing to put sockets \
             where another user controls them ({redo}, or set XDG_RUNTIME_DIR to a directory of your own)",
            dir.display(),
            m.uid()
        );
    }
    if mode & 0o022 != 0 {
        bail!(
            "the runtime directory {} has mode {mode:04o}: group or other users can write in it, so anything in it \
             may have been put there by someone else; refusing to use it ({redo})",
            dir.display()
        );
    }
    if mode & 0o077 != 0 {
        std::fs::set_permissions(dir, std::fs::Permissions::from_mode(DIR_MODE))
            .with_context(|| format!("making the runtime directory {} private (chmod 0700)", dir.display()))?;
        tracing::info!("made the runtime directory {} private (mode {mode:04o} → 0700)", dir.display());
    }
    Ok(())
}

/// [`runtime_dir`], created or checked by [`ensure_private_dir`].
pub fn private_runtime_dir() -> anyhow::Result<PathBuf> {
    let dir = runtime_dir();
    ensure_private_dir(&dir)?;
    Ok(dir)
}

/// Check the directory of `socket`, a socket path given explicitly (`what`, e.g.
/// "control socket", names it in errors): it must exist (nothing is created: a typo must
/// not leave directories behind, made as root perhaps), and if every user may write in
/// it, it must have the sticky bit (as `/tmp` has), or another user could unlink the
/// socket and bind their own in its place. Each error names the path and the fix.
pub fn check_socket_dir(socket: &Path, what: &str) -> anyhow::Result<()> {
    let dir = match socket.parent() {
        Some(d) if !d.as_os_str().is_empty() => d,
        _ => Path::new("."),
    };
    let (path, shown) = (socket.display(), dir.display());
    let m = match std::fs::metadata(dir) {
        Ok(m) => m,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => bail!(
            "the {what} {path} is in a directory that does not exist ({shown}): create it first \
             (mkdir -m 0700 {shown}) or choose a path in an existing directory; nothing is created for an \
             explicit path"
        ),
        Err(e) => return Err(e).with_context(|| format!("looking at {shown}, the directory of the {what} {path}")),
    };
    if !m.is_dir() {
        bail!("the {what} {path} is not in a directory: {shown} is not one; choose a path in a directory");
    }
    let mode = m.mode() & 0o7777;
    if mode & 0o002 != 0 && mode & 0o1000 == 0 {
        bail!(
            "the {what} {path} is in {shown}, mode {mode:04o}: every user can write in it and it has no sticky \
             bit, so another user could remove the socket and put their own in its place; use a directory of your \
             own (mkdir -m 0700 DIR) or make this one sticky (chmod +t {shown})"
        );
    }
    Ok(())
}

/// Make the socket file at `path` (just bound by this process) mode 0600.
pub fn restrict_socket(path: &Path) -> anyhow::Result<()> {
    rustix::fs::chmod(path, Mode::from_raw_mode(SOCKET_MODE))
        .map_err(std::io::Error::from)
        .with_context(|| format!("making the socket {} mode 0600", path.display()))
}

/// Whether the peer of the connected Unix socket `sock` may use it: its uid (as
/// `SO_PEERCRED` reports it) is this process's effective uid, or root. The error names
/// the peer's uid and pid.
pub fn check_peer(sock: impl AsFd) -> anyhow::Result<()> {
    let cred = rustix::net::sockopt::socket_peercred(sock)
        .map_err(std::io::Error::from)
        .context("reading the peer's credentials (SO_PEERCRED)")?;
    let uid = cred.uid.as_raw();
    if uid == euid() || cred.uid.is_root() {
        return Ok(());
    }
    bail!(
        "refused a connection from uid {uid} (pid {}): only uid {} (this process's user) and root may connect",
        cred.pid.as_raw_nonzero(),
        euid()
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    fn scratch(tag: &str) -> PathBuf {
        let d = std::env::temp_dir().join(format!("trapeze-local-{tag}-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&d);
        d
    }

    #[test]
    fn a_missing_directory_is_made_0700_and_a_loose_one_of_ours_is_tightened() {
        let d = scratch("mk");
        ensure_private_dir(&d).unwrap();
        assert_eq!(std::fs::metadata(&d).unwrap().mode() & 0o777, 0o700);
        std::fs::set_permissions(&d, std::fs::Permissions::from_mode(0o755)).unwrap();
        ensure_private_dir(&d).unwrap();
        assert_eq!(std::fs::metadata(&d).unwrap().mode() & 0o777, 0o700);
        std::fs::remove_dir(&d).unwrap();
    }

    #[test]
    fn a_directory_others_can_write_or_a_symlink_is_refused_naming_the_path() {
        let d = scratch("wr");
        std::fs::create_dir(&d).unwrap();
        std::fs::set_permissions(&d, std::fs::Permissions::from_mode(0o777)).unwrap();
        let e = format!("{:#}", ensure_private_dir(&d).unwrap_err());
        assert!(e.contains(&d.display().to_string()) && e.contains("0777"), "{e}");
        let l = scratch("ln");
        std::os::unix::fs::symlink(&d, &l).unwrap();
        let e = format!("{:#}", ensure_private_dir(&l).unwrap_err());
        assert!(e.contains(&l.display().to_string()) && e.contains("symbolic link"), "{e}");
        std::fs::remove_file(&l).unwrap();
        std::fs::remove_dir(&d).unwrap();
    }

    #[test]
    fn a_socket_directory_must_exist_and_be_sticky_if_anyone_can_write() {
        let d = scratch("sock");
        let sock = d.join("x.sock");
        let e = format!("{:#}", check_socket_dir(&sock, "control socket").unwrap_err());
        assert!(e.contains("does not exist") && e.contains("mkdir -m 0700") && e.contains("x.sock"), "{e}");
        assert!(!d.exists(), "nothing is created");
        std::fs::create_dir(&d).unwrap();
        std::fs::set_permissions(&d, std::fs::Permissions::from_mode(0o777)).unwrap();
        let e = format!("{:#}", check_socket_dir(&sock, "control socket").unwrap_err());
        assert!(e.contains("0777") && e.contains("chmod +t") && e.contains(&d.display().to_string()), "{e}");
        std::fs::set_permissions(&d, std::fs::Permissions::from_mode(0o1777)).unwrap();
        check_socket_dir(&sock, "control socket").unwrap();
        std::fs::set_permissions(&d, std::fs::Permissions::from_mode(0o755)).unwrap();
        check_socket_dir(&sock, "control socket").unwrap();
        let f = d.join("file");
        std::fs::write(&f, b"x").unwrap();
        let e = format!("{:#}", check_socket_dir(&f.join("x.sock"), "control socket").unwrap_err());
        assert!(e.contains("is not one"), "{e}");
        std::fs::remove_dir_all(&d).unwrap();
    }

    #[test]
    fn a_peer_of_the_same_user_passes_the_credential_check() {
        let (a, _b) = rustix::net::socketpair(
            rustix::net::AddressFamily::UNIX,
            rustix::net::SocketType::STREAM,
            rustix::net::SocketFlags::CLOEXEC,
            None,
        )
        .unwrap();
        check_peer(&a).unwrap();
    }
}
