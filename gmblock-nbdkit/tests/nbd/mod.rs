// SPDX-License-Identifier: GPL-2.0-only
//! A bare NBD client for the tests: the fixed newstyle handshake, simple replies, and
//! requests sent as given — so a test can send what no well-behaved client would.

use std::io::{ErrorKind, Read, Write};
use std::net::TcpStream;
use std::time::Duration;

const IHAVEOPT: u64 = 0x4948_4156_454F_5054;
pub const REQUEST_MAGIC: u32 = 0x2560_9513;
const REPLY_MAGIC: u32 = 0x6744_6698;
pub const READ: u16 = 0;
pub const WRITE: u16 = 1;
pub const FLUSH: u16 = 3;

pub struct Nbd {
    pub s: TcpStream,
    pub size: u64,
    next: u64,
}

impl Nbd {
    /// Connect and pick the default export (`NBD_OPT_EXPORT_NAME ""`).
    pub fn connect(port: u16) -> std::io::Result<Nbd> {
        let mut s = TcpStream::connect(("127.0.0.1", port))?;
        s.set_read_timeout(Some(Duration::from_secs(30)))?;
        let mut hello = [0u8; 18];
        s.read_exact(&mut hello)?;
        assert_eq!(&hello[..8], b"NBDMAGIC");
        assert_eq!(u64::from_be_bytes(hello[8..16].try_into().unwrap()), IHAVEOPT, "not a newstyle server");
        s.write_all(&3u32.to_be_bytes())?; // FIXED_NEWSTYLE | NO_ZEROES
        let mut opt = IHAVEOPT.to_be_bytes().to_vec();
        opt.extend(1u32.to_be_bytes()); // NBD_OPT_EXPORT_NAME
        opt.extend(0u32.to_be_bytes());
        s.write_all(&opt)?;
        let mut info = [0u8; 10];
        s.read_exact(&mut info)?;
        Ok(Nbd { s, size: u64::from_be_bytes(info[..8].try_into().unwrap()), next: 1 })
    }

    /// Send a request header with `magic` (and `payload` after it, which may be shorter
    /// than `len`); its handle.
    pub fn send_magic(&mut self, magic: u32, kind: u16, offset: u64, len: u32, payload: &[u8]) -> std::io::Result<u64> {
        let handle = self.next;
        self.next += 1;
        let mut h = magic.to_be_bytes().to_vec();
        h.extend(0u16.to_be_bytes());
        h.extend(kind.to_be_bytes());
        h.extend(handle.to_be_bytes());
        h.extend(offset.to_be_bytes());
        h.extend(len.to_be_bytes());
        h.extend(payload);
        self.s.write_all(&h)?;
        Ok(handle)
    }

    pub fn send(&mut self, kind: u16, offset: u64, len: u32, payload: &[u8]) -> std::io::Result<u64> {
        self.send_magic(REQUEST_MAGIC, kind, offset, len, payload)
    }

    /// The next simple reply: its error (0: none); a read's data into `data`.
    pub fn reply(&mut self, handle: u64, data: &mut [u8]) -> std::io::Result<u32> {
        let mut r = [0u8; 16];
        self.s.read_exact(&mut r)?;
        assert_eq!(u32::from_be_bytes(r[..4].try_into().unwrap()), REPLY_MAGIC);
        assert_eq!(u64::from_be_bytes(r[8..].try_into().unwrap()), handle);
        let err = u32::from_be_bytes(r[4..8].try_into().unwrap());
        if err == 0 {
            self.s.read_exact(data)?;
        }
        Ok(err)
    }

    /// A read: its data, or the error the server replied with.
    pub fn read(&mut self, offset: u64, len: usize) -> std::io::Result<Result<Vec<u8>, u32>> {
        let h = self.send(READ, offset, len as u32, &[])?;
        let mut buf = vec![0u8; len];
        Ok(match self.reply(h, &mut buf)? {
            0 => Ok(buf),
            e => Err(e),
        })
    }

    pub fn write(&mut self, offset: u64, data: &[u8]) -> std::io::Result<u32> {
        let h = self.send(WRITE, offset, data.len() as u32, data)?;
        self.reply(h, &mut [])
    }

    pub fn flush(&mut self) -> std::io::Result<u32> {
        let h = self.send(FLUSH, 0, 0, &[])?;
        self.reply(h, &mut [])
    }

    /// Whether the server closed the connection within `wait` (end of stream or reset),
    /// with nothing more to read.
    pub fn closed(&mut self, wait: Duration) -> bool {
        self.s.set_read_timeout(Some(wait)).unwrap();
        let mut b = [0u8; 1];
        match self.s.read(&mut b) {
            Ok(0) => true,
            Ok(_) => false,
            Err(e) => !matches!(e.kind(), ErrorKind::WouldBlock | ErrorKind::TimedOut),
        }
    }
}
