// SPDX-License-Identifier: GPL-2.0-only
//! The control socket's clients as byte streams: accepting them (peer check, the
//! [`MAX_CLIENTS`] bound), reading what they send into one buffer made once, writing
//! their answers as their sockets take them, and when a client has a whole request
//! ready. What a request means is the rest of [`super`].

use super::{Control, MAX_CLIENTS, MAX_UNWRITTEN};
use crate::proto::{encode_error, read_len, MAX_FRAME_BYTES};
use std::io::{self, Read, Write};
use std::os::unix::net::UnixStream;

/// One client.
pub(super) struct Conn {
    pub(super) stream: UnixStream,
    pub(super) rbuf: Vec<u8>,
    pub(super) wbuf: Vec<u8>,
    pub(super) wpos: usize,
    /// The job being served (requests are answered in order, one at a time).
    pub(super) job: Option<u64>,
    /// Waiting for a stat answer.
    pub(super) stat: bool,
    pub(super) eof: bool,
}

impl Control {
    pub(super) fn accept(&mut self) -> bool {
        let mut any = false;
        loop {
            match self.listener.accept() {
                Ok((mut stream, _)) => {
                    if let Err(e) = trapeze_vnic::local::check_peer(&stream) {
                        tracing::warn!("gmsd control socket {}: {e:#}", self.path.display());
                        continue;
                    }
                    if self.conns.len() >= MAX_CLIENTS {
                        let why = format!("gmsd already serves {MAX_CLIENTS} clients: try again later");
                        tracing::warn!("gmsd control socket {}: refused a client: {why}", self.path.display());
                        let mut c = Vec::new();
                        let body = encode_error(&why);
                        c.extend_from_slice(&(body.len() as u32).to_le_bytes());
                        c.extend_from_slice(&body);
                        let _ = stream.set_nonblocking(true);
                        let _ = stream.write(&c);
                        continue;
                    }
                    if stream.set_nonblocking(true).is_err() {
                        continue;
                    }
                    self.next_conn += 1;
                    let c = Conn {
                        stream,
                        rbuf: Vec::new(),
                        wbuf: Vec::new(),
                        wpos: 0,
                        job: None,
                        stat: false,
                        eof: false,
                    };
                    self.conns.insert(self.next_conn, c);
                    any = true;
                }
                Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
                Err(_) => return any,
            }
        }
    }

    pub(super) fn read_all(&mut self) -> bool {
        let mut any = false;
        let mut ids = std::mem::take(&mut self.conn_ids);
        ids.clear();
        ids.extend(self.conns.keys().copied());
        for &id in &ids {
            let Some(c) = self.conns.get_mut(&id) else {
                continue;
            };
            let buf = &mut self.scratch;
            while !c.eof && c.rbuf.len() < MAX_FRAME_BYTES + 4 {
                match c.stream.read(buf) {
                    Ok(0) => c.eof = true,
                    Ok(n) => {
                        c.rbuf.extend_from_slice(&buf[..n]);
                        any = true;
                    }
                    Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
                    Err(e) if e.kind() == io::ErrorKind::WouldBlock => break,
                    Err(_) => c.eof = true,
                }
            }
            any |= self.start_request(id);
            let c = &self.conns[&id];
            if c.eof && c.job.is_none() && !c.stat && c.wpos >= c.wbuf.len() {
                self.conns.remove(&id);
            }
        }
        self.conn_ids = ids;
        any
    }

    pub(super) fn write_all(&mut self) -> bool {
        let mut any = false;
        self.conns.retain(|_, c| {
            while c.wpos < c.wbuf.len() {
                match c.stream.write(&c.wbuf[c.wpos..]) {
                    Ok(0) => return false,
                    Ok(n) => {
                        c.wpos += n;
                        any = true;
                    }
                    Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
                    Err(e) if e.kind() == io::ErrorKind::WouldBlock => break,
                    // The client went away: its jobs finish unanswered.
                    Err(_) => return false,
                }
            }
            if c.wpos >= c.wbuf.len() {
                c.wbuf.clear();
                c.wpos = 0;
            }
            !(c.eof && c.job.is_none() && !c.stat && c.wbuf.is_empty())
        });
        any
    }
}

/// Client `c` has a whole request buffered that nothing stops from starting (the daemon's
/// loop must not sleep on it: its socket will not become readable again for it).
pub(super) fn request_ready(c: &Conn) -> bool {
    c.job.is_none()
        && !c.stat
        && c.wbuf.len() - c.wpos < MAX_UNWRITTEN
        && matches!(read_len(&c.rbuf), Some(Ok(len)) if c.rbuf.len() >= 4 + len)
}

/// Queue `body` as one answer frame to client `c`.
pub(super) fn queue(c: &mut Conn, body: &[u8]) {
    c.wbuf.extend_from_slice(&(body.len() as u32).to_le_bytes());
    c.wbuf.extend_from_slice(body);
}
