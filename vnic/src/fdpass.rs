// SPDX-License-Identifier: GPL-2.0-only
//! Unix-socket helpers: messages with file descriptors attached (SCM_RIGHTS), and
//! SOCK_SEQPACKET listeners/connections (one message per packet, boundaries kept).

use rustix::net::{
    AddressFamily, RecvAncillaryBuffer, RecvAncillaryMessage, RecvFlags, SendAncillaryBuffer, SendAncillaryMessage,
    SendFlags, SocketAddrUnix, SocketType,
};
use std::io::{self, IoSlice, IoSliceMut};
use std::mem::MaybeUninit;
use std::os::fd::{BorrowedFd, OwnedFd};
use std::path::Path;

/// Most descriptors one message carries.
pub const MAX_FDS: usize = 4;

/// Send `data` with `fds` attached (at most [`MAX_FDS`]).
pub fn send_with_fds(sock: BorrowedFd<'_>, data: &[u8], fds: &[BorrowedFd<'_>]) -> io::Result<usize> {
    if fds.len() > MAX_FDS {
        return Err(io::Error::new(io::ErrorKind::InvalidInput, "too many descriptors for one message"));
    }
    let mut space = [MaybeUninit::<u8>::uninit(); rustix::cmsg_space!(ScmRights(MAX_FDS))];
    let mut cmsg = SendAncillaryBuffer::new(&mut space);
    if !fds.is_empty() && !cmsg.push(SendAncillaryMessage::ScmRights(fds)) {
        return Err(io::Error::other("control-message buffer too small"));
    }
    Ok(rustix::net::sendmsg(sock, &[IoSlice::new(data)], &mut cmsg, SendFlags::NOSIGNAL)?)
}

/// Receive one message into `buf`, with any descriptors attached to it. A return of
/// `(0, [])` on a stream or seqpacket socket means the peer closed.
pub fn recv_with_fds(sock: BorrowedFd<'_>, buf: &mut [u8]) -> io::Result<(usize, Vec<OwnedFd>)> {
    let mut space = [MaybeUninit::<u8>::uninit(); rustix::cmsg_space!(ScmRights(MAX_FDS))];
    let mut cmsg = RecvAncillaryBuffer::new(&mut space);
    let r = rustix::net::recvmsg(sock, &mut [IoSliceMut::new(buf)], &mut cmsg, RecvFlags::CMSG_CLOEXEC)?;
    let mut fds = Vec::new();
    for m in cmsg.drain() {
        if let RecvAncillaryMessage::ScmRights(it) = m {
            fds.extend(it);
        }
    }
    Ok((r.bytes, fds))
}

/// A listening Unix socket of `kind` at `path` (a stale socket file is replaced), mode
/// 0600 ([`crate::local::restrict_socket`]); its directory must exist. Check each
/// accepted connection with [`crate::local::check_peer`].
pub fn listen(path: &Path, kind: SocketType) -> io::Result<OwnedFd> {
    match std::fs::remove_file(path) {
        Ok(()) => {}
        Err(e) if e.kind() == io::ErrorKind::NotFound => {}
        Err(e) => return Err(e),
    }
    let sock = rustix::net::socket_with(AddressFamily::UNIX, kind, rustix::net::SocketFlags::CLOEXEC, None)?;
    rustix::net::bind(&sock, &SocketAddrUnix::new(path)?)?;
    // Before `listen`, so no connection is queued while the file still has the umask's mode.
    crate::local::restrict_socket(path).map_err(io::Error::other)?;
    rustix::net::listen(&sock, 16)?;
    Ok(sock)
}

/// Connect to the Unix socket at `path`.
pub fn connect(path: &Path, kind: SocketType) -> io::Result<OwnedFd> {
    let sock = rustix::net::socket_with(AddressFamily::UNIX, kind, rustix::net::SocketFlags::CLOEXEC, None)?;
    rustix::net::connect(&sock, &SocketAddrUnix::new(path)?)?;
    Ok(sock)
}
