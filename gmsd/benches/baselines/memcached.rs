// SPDX-License-Identifier: GPL-2.0-only
//! A memcached client of the text protocol's `set` and `get`, one `write` per request and
//! buffered reads, as a tuned client (libmemcached) talks to it. The `memcache` crate
//! (0.21) was measured first and not kept: it sends a GET as 19 separate TCP segments
//! (`strace -c`: 19,040 `sendto` for 1,000 GETs), which wakes the server per segment —
//! 226 µs p50 and 206 µs of client CPU per 8 KiB GET in the run that measured this
//! client at a fraction of that. A baseline is only fair with its best client.

use anyhow::{bail, Context};
use std::io::{BufRead, BufReader, Read, Write};
use std::net::TcpStream;

pub struct Memcached {
    out: TcpStream,
    inp: BufReader<TcpStream>,
    line: String,
    req: Vec<u8>,
}

impl Memcached {
    pub fn connect(port: u16) -> anyhow::Result<Memcached> {
        let s = TcpStream::connect(("127.0.0.1", port)).context("connecting to memcached")?;
        s.set_nodelay(true)?;
        let inp = BufReader::with_capacity(64 << 10, s.try_clone()?);
        Ok(Memcached { out: s, inp, line: String::new(), req: Vec::with_capacity(16 << 10) })
    }

    /// `set KEY 0 0 LEN` with `value`: stored, or an error naming the server's answer.
    pub fn set(&mut self, key: &str, value: &[u8]) -> anyhow::Result<()> {
        self.req.clear();
        write!(self.req, "set {key} 0 0 {}\r\n", value.len())?;
        self.req.extend_from_slice(value);
        self.req.extend_from_slice(b"\r\n");
        self.out.write_all(&self.req)?;
        match self.read_line()? {
            "STORED" => Ok(()),
            other => bail!("memcached set {key}: {other}"),
        }
    }

    /// `get KEY` into `value`: false if the server holds no such key.
    pub fn get(&mut self, key: &str, value: &mut Vec<u8>) -> anyhow::Result<bool> {
        self.req.clear();
        write!(self.req, "get {key}\r\n")?;
        self.out.write_all(&self.req)?;
        let head = self.read_line()?;
        if head == "END" {
            return Ok(false);
        }
        // VALUE <key> <flags> <bytes>
        let len: usize = match head.split(' ').collect::<Vec<_>>()[..] {
            ["VALUE", k, _, n] if k == key => n.parse().with_context(|| format!("memcached: {head}"))?,
            _ => bail!("memcached get {key}: {head}"),
        };
        value.resize(len, 0);
        self.inp.read_exact(value)?;
        let mut tail = [0u8; 7];
        self.inp.read_exact(&mut tail)?;
        if &tail != b"\r\nEND\r\n" {
            bail!("memcached get {key}: the value did not end with END");
        }
        Ok(true)
    }

    /// The next line the server sends, without its CRLF.
    fn read_line(&mut self) -> anyhow::Result<&str> {
        self.line.clear();
        if self.inp.read_line(&mut self.line)? == 0 {
            bail!("memcached closed the connection");
        }
        Ok(self.line.trim_end_matches("\r\n"))
    }
}
