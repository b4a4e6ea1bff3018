// SPDX-License-Identifier: GPL-2.0-only
//! The block protocol on NetRPC: operations, their bodies, the error replies, and the
//! rule by which a request of 4 KiB–1 MiB is cut into NetRPC calls (one link message each).
//!
//! A *request* (what a client asks: read 1 MiB at 0) becomes *chunks*, each one call:
//! - a read chunk is at most [`READ_CHUNK_BYTES`] (64 KiB): the reply's payload, gathered
//!   on the server from up to eight frames and landing, solicited, in as many of the
//!   client's frames. A chunk that is a multiple of 8 KiB uses whole 8 KiB frames; any
//!   other (4 KiB-multiple) chunk uses 4 KiB of each frame, so it is at most 32 KiB.
//!   [`read_chunk`] gives the client's split;
//! - a write chunk is at most [`WRITE_CHUNK_BYTES`] (8 KiB): the request's payload,
//!   which lands unsolicited in one receive frame of the server;
//! - trim is one call of up to [`MAX_REQUEST_BYTES`]; flush and info carry no range.
//!
//! Every offset and length is a multiple of [`BLOCK_BYTES`] (4 KiB): the server does
//! `O_DIRECT` I/O, which needs aligned offsets and lengths. A client keeps many chunks in
//! flight; the server answers each on its own, in any order.

use netrpc::prelude::*;
use netrpc::wire::CodecError;

/// The block size: every offset and length is a multiple of it.
pub const BLOCK_BYTES: u32 = 4096;
/// The largest request a client accepts (it is cut into chunks).
pub const MAX_REQUEST_BYTES: u32 = 1 << 20;
/// The largest read chunk (one reply payload: 8 frames of 8 KiB).
pub const READ_CHUNK_BYTES: u32 = 64 * 1024;
/// The largest write chunk (one request payload: one receive frame).
pub const WRITE_CHUNK_BYTES: u32 = 8192;
/// The frame size of both ends (the runtime's).
pub const FRAME_BYTES: u32 = trapeze_node::rpc::FRAME_BYTES;
/// The link MTU both ends configure: a whole read chunk.
pub const MTU_BYTES: u32 = READ_CHUNK_BYTES;

/// A range of the volume: `len` bytes at byte `offset`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Range {
    pub offset: u64,
    pub len: u32,
}

impl Message for Range {
    fn encode(&self, out: &mut [u8]) -> Result<usize, CodecError> {
        let out = out.get_mut(..12).ok_or(CodecError)?;
        out[..8].copy_from_slice(&self.offset.to_le_bytes());
        out[8..].copy_from_slice(&self.len.to_le_bytes());
        Ok(12)
    }
    fn decode(b: &[u8]) -> Result<Self, CodecError> {
        if b.len() != 12 {
            return Err(CodecError);
        }
        let offset = u64::from_le_bytes(b[..8].try_into().map_err(|_| CodecError)?);
        let len = u32::from_le_bytes(b[8..].try_into().map_err(|_| CodecError)?);
        Ok(Range { offset, len })
    }
}

/// Which data path a server runs (`--path`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum, serde::Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum DataPath {
    /// Blocks move between the disk and NIC-local memory; the NIC sends from there.
    Direct,
    /// Blocks move between the disk and a host-RAM buffer the NIC DMAs from/to.
    ViaRam,
}

/// What `INFO` answers.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Info {
    pub size: u64,
    pub path: DataPath,
    pub read_only: bool,
}

impl Message for Info {
    fn encode(&self, out: &mut [u8]) -> Result<usize, CodecError> {
        let out = out.get_mut(..10).ok_or(CodecError)?;
        out[..8].copy_from_slice(&self.size.to_le_bytes());
        out[8] = match self.path {
            DataPath::Direct => 1,
            DataPath::ViaRam => 2,
        };
        out[9] = u8::from(self.read_only);
        Ok(10)
    }
    fn decode(b: &[u8]) -> Result<Self, CodecError> {
        if b.len() != 10 || b[9] > 1 {
            return Err(CodecError);
        }
        let size = u64::from_le_bytes(b[..8].try_into().map_err(|_| CodecError)?);
        let path = match b[8] {
            1 => DataPath::Direct,
            2 => DataPath::ViaRam,
            _ => return Err(CodecError),
        };
        Ok(Info { size, path, read_only: b[9] == 1 })
    }
}

/// `INFO`: the volume's size and the server's data path.
pub struct InfoOp;
impl Operation for InfoOp {
    const OP: u16 = 0x0B01;
    type Request = ();
    type Reply = Info;
}

/// `READ`: a read chunk; the reply's payload is the data (solicited).
pub struct ReadOp;
impl Operation for ReadOp {
    const OP: u16 = 0x0B02;
    type Request = Range;
    type Reply = ();
}

/// `WRITE`: a write chunk, its data the request's payload. Acknowledged once written to
/// the file with `O_DIRECT` (in the device, possibly in its volatile cache); durable
/// after a later `FLUSH` is acknowledged.
pub struct WriteOp;
impl Operation for WriteOp {
    const OP: u16 = 0x0B03;
    type Request = Range;
    type Reply = ();
}

/// `FLUSH`: `fdatasync` of the export; every write acknowledged before it was sent is
/// durable when it is acknowledged.
pub struct FlushOp;
impl Operation for FlushOp {
    const OP: u16 = 0x0B04;
    type Request = ();
    type Reply = ();
}

/// `TRIM`: the range reads back as zeros (the file's blocks are deallocated).
pub struct TrimOp;
impl Operation for TrimOp {
    const OP: u16 = 0x0B05;
    type Request = Range;
    type Reply = ();
}

/// A block server's error replies (NetRPC remote codes from 64).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum BlockError {
    /// The range ends past the end of the volume.
    PastEnd = 64,
    /// Longer than the operation's chunk limit, or empty.
    TooLarge = 65,
    /// Offset or length not a multiple of [`BLOCK_BYTES`].
    Misaligned = 66,
    /// The disk returned an I/O error (or a short transfer).
    Io = 67,
    /// The exported file was removed (unlinked) while served.
    Removed = 68,
    /// A write carried no payload, or one of another length than its range.
    BadPayload = 69,
    /// The server is out of frames for now: retry.
    Busy = 70,
    /// The export does not support the operation (trim on a device without discard).
    Unsupported = 71,
    /// A write or trim to a read-only export.
    ReadOnly = 72,
}

impl BlockError {
    const ALL: [BlockError; 9] = [
        BlockError::PastEnd,
        BlockError::TooLarge,
        BlockError::Misaligned,
        BlockError::Io,
        BlockError::Removed,
        BlockError::BadPayload,
        BlockError::Busy,
        BlockError::Unsupported,
        BlockError::ReadOnly,
    ];

    /// The error a NetRPC remote code names, if it is one of these.
    pub fn from_code(code: u16) -> Option<BlockError> {
        Self::ALL.into_iter().find(|e| *e as u16 == code)
    }

    /// As a NetRPC error reply.
    pub fn rpc(self) -> RpcError {
        RpcError::Remote(self as u16)
    }

    pub fn describe(self) -> &'static str {
        match self {
            BlockError::PastEnd => "the range ends past the end of the volume",
            BlockError::TooLarge => "the range is empty or longer than the operation allows",
            BlockError::Misaligned => "offset or length is not a multiple of 4096",
            BlockError::Io => "the server's disk returned an I/O error",
            BlockError::Removed => "the server's exported file was removed",
            BlockError::BadPayload => "the write's payload is missing or not its range's length",
            BlockError::Busy => "the server is out of buffers for now",
            BlockError::Unsupported => "the export does not support this operation",
            BlockError::ReadOnly => "the export is read-only",
        }
    }
}

impl std::fmt::Display for BlockError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.describe())
    }
}

/// Check a range against the volume's size, alignment and a chunk limit.
pub fn check_range(r: Range, size: u64, max: u32) -> Result<(), BlockError> {
    if r.len == 0 || r.len > max {
        return Err(BlockError::TooLarge);
    }
    if !r.offset.is_multiple_of(u64::from(BLOCK_BYTES)) || !r.len.is_multiple_of(BLOCK_BYTES) {
        return Err(BlockError::Misaligned);
    }
    match r.offset.checked_add(u64::from(r.len)) {
        Some(end) if end <= size => Ok(()),
        _ => Err(BlockError::PastEnd),
    }
}

/// How a read chunk of `len` bytes sits in frames: (bytes used of each frame, frames).
/// `None`: not a valid read chunk.
pub fn read_layout(len: u32) -> Option<(u32, u32)> {
    let piece = if len.is_multiple_of(FRAME_BYTES) { FRAME_BYTES } else { BLOCK_BYTES };
    let n = len / piece;
    (len > 0 && len.is_multiple_of(BLOCK_BYTES) && n <= trapeze_iface::layout::MAX_SEGMENTS).then_some((piece, n))
}

/// The next read chunk of a request with `left` bytes to go: the largest whole-frame
/// chunk up to [`READ_CHUNK_BYTES`], or a lone 4 KiB block at the tail.
pub fn read_chunk(left: u32) -> u32 {
    let whole = left.min(READ_CHUNK_BYTES) / FRAME_BYTES * FRAME_BYTES;
    if whole > 0 {
        whole
    } else {
        left.min(BLOCK_BYTES)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn bodies_round_trip_and_bad_ones_are_refused() {
        let r = Range { offset: 1 << 40, len: 65536 };
        let b = Body::encode(&r).unwrap();
        assert_eq!(Range::decode(b.as_slice()), Ok(r));
        assert_eq!(Range::decode(&b.as_slice()[..11]), Err(CodecError));
        let i = Info { size: 123 << 12, path: DataPath::Direct, read_only: true };
        let b = Body::encode(&i).unwrap();
        assert_eq!(Info::decode(b.as_slice()), Ok(i));
        let mut bad = [0u8; 10];
        bad[8] = 3;
        assert_eq!(Info::decode(&bad), Err(CodecError));
    }

    #[test]
    fn ranges_are_checked() {
        let size = 1 << 20;
        assert_eq!(check_range(Range { offset: 0, len: 4096 }, size, 8192), Ok(()));
        assert_eq!(check_range(Range { offset: size - 4096, len: 8192 }, size, 8192), Err(BlockError::PastEnd));
        assert_eq!(check_range(Range { offset: u64::MAX - 4095, len: 4096 }, size, 8192), Err(BlockError::PastEnd));
        assert_eq!(check_range(Range { offset: 512, len: 4096 }, size, 8192), Err(BlockError::Misaligned));
        assert_eq!(check_range(Range { offset: 0, len: 100 }, size, 8192), Err(BlockError::Misaligned));
        assert_eq!(check_range(Range { offset: 0, len: 0 }, size, 8192), Err(BlockError::TooLarge));
        assert_eq!(check_range(Range { offset: 0, len: 16384 }, size, 8192), Err(BlockError::TooLarge));
        for e in BlockError::ALL {
            assert_eq!(BlockError::from_code(e.rpc().code()), Some(e));
        }
    }

    #[test]
    fn reads_are_cut_into_chunks_that_fit_frames() {
        assert_eq!(read_layout(65536), Some((8192, 8)));
        assert_eq!(read_layout(32768), Some((8192, 4)));
        assert_eq!(read_layout(12288), Some((4096, 3)));
        assert_eq!(read_layout(36864), None, "nine 4 KiB pieces");
        assert_eq!(read_layout(0), None);
        let mut left = MAX_REQUEST_BYTES - 4096;
        let mut chunks = 0;
        while left > 0 {
            let c = read_chunk(left);
            assert!(read_layout(c).is_some(), "{c}");
            left -= c;
            chunks += 1;
        }
        assert_eq!(chunks, 17, "15 of 64 KiB, then 56 KiB and 4 KiB");
    }
}
