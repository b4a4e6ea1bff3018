// SPDX-License-Identifier: GPL-2.0-only
//! NBD byte ranges on a gmblock volume: any offset and length a client sends, done as
//! gmblock's aligned block requests (4 KiB multiples, at most 1 MiB each).
//!
//! A range is cut into a head, a middle and a tail. The middle — whole blocks — goes
//! straight between the caller's buffer and the server in requests of up to 1 MiB. A head
//! or tail that covers part of a block goes through a one-block bounce buffer: a read
//! copies the part out; a write reads the block, patches the part and writes the block
//! back (read-modify-write). The caller serialises requests, so no other write lands
//! between the read and the write of a patched block. A trim covers only the whole
//! blocks inside its range (NBD's trim is advisory: the partial edges keep their bytes).

use gmblock::proto::{BLOCK_BYTES, MAX_REQUEST_BYTES};

const BLOCK: u64 = BLOCK_BYTES as u64;
const MAX: u64 = MAX_REQUEST_BYTES as u64;

/// What a range needs of a volume: aligned block requests of at most 1 MiB.
pub trait Blocks {
    fn size(&self) -> u64;
    fn read_blocks(&mut self, offset: u64, buf: &mut [u8]) -> anyhow::Result<()>;
    fn write_blocks(&mut self, offset: u64, data: &[u8]) -> anyhow::Result<()>;
    fn trim_blocks(&mut self, offset: u64, len: u32) -> anyhow::Result<()>;
}

impl Blocks for gmblock::client::Client {
    fn size(&self) -> u64 {
        self.info.size
    }
    fn read_blocks(&mut self, offset: u64, buf: &mut [u8]) -> anyhow::Result<()> {
        self.read(offset, buf)
    }
    fn write_blocks(&mut self, offset: u64, data: &[u8]) -> anyhow::Result<()> {
        self.write(offset, data)
    }
    fn trim_blocks(&mut self, offset: u64, len: u32) -> anyhow::Result<()> {
        self.trim(offset, len)
    }
}

/// Why a range was refused before any I/O.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Refused {
    /// It ends past the end of the volume (or the end overflows).
    PastEnd { end: Option<u64>, size: u64 },
}

impl std::fmt::Display for Refused {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Refused::PastEnd { end: Some(e), size } => {
                write!(f, "the range ends at {e}, past the volume's {size} bytes")
            }
            Refused::PastEnd { end: None, size } => write!(f, "the range's end overflows (volume of {size} bytes)"),
        }
    }
}

impl std::error::Error for Refused {}

/// The end of `len` bytes at `offset`, if the volume holds them.
fn end_of(size: u64, offset: u64, len: usize) -> Result<u64, Refused> {
    match offset.checked_add(len as u64) {
        Some(end) if end <= size => Ok(end),
        end => Err(Refused::PastEnd { end, size }),
    }
}

/// One step over a range: whole blocks, or part of one block.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Piece {
    /// Whole blocks from volume offset `pos` (at most 1 MiB of them).
    Whole { pos: u64 },
    /// Part of the block at volume offset `block`, from its byte `start`.
    Part { block: u64, start: usize },
}

/// The pieces of `[offset, end)`: each as (where it starts in the caller's buffer, its
/// length, the piece).
fn pieces(offset: u64, end: u64) -> impl Iterator<Item = (usize, usize, Piece)> {
    let mut pos = offset;
    std::iter::from_fn(move || {
        if pos >= end {
            return None;
        }
        let at = (pos - offset) as usize;
        let block = pos / BLOCK * BLOCK;
        let (n, piece) = if pos == block && end - pos >= BLOCK {
            (((end - pos) / BLOCK * BLOCK).min(MAX), Piece::Whole { pos })
        } else {
            (end.min(block + BLOCK) - pos, Piece::Part { block, start: (pos - block) as usize })
        };
        pos += n;
        Some((at, n as usize, piece))
    })
}

/// Read `out.len()` bytes at `offset`.
pub fn read_at<B: Blocks>(b: &mut B, offset: u64, out: &mut [u8]) -> anyhow::Result<()> {
    let end = end_of(b.size(), offset, out.len())?;
    let mut bounce = [0u8; BLOCK_BYTES as usize];
    for (at, n, piece) in pieces(offset, end) {
        match piece {
            Piece::Whole { pos } => b.read_blocks(pos, &mut out[at..at + n])?,
            Piece::Part { block, start } => {
                b.read_blocks(block, &mut bounce)?;
                out[at..at + n].copy_from_slice(&bounce[start..start + n]);
            }
        }
    }
    Ok(())
}

/// Write `data` at `offset`; partial blocks are read, patched and written whole.
pub fn write_at<B: Blocks>(b: &mut B, offset: u64, data: &[u8]) -> anyhow::Result<()> {
    let end = end_of(b.size(), offset, data.len())?;
    let mut bounce = [0u8; BLOCK_BYTES as usize];
    for (at, n, piece) in pieces(offset, end) {
        match piece {
            Piece::Whole { pos } => b.write_blocks(pos, &data[at..at + n])?,
            Piece::Part { block, start } => {
                b.read_blocks(block, &mut bounce)?;
                bounce[start..start + n].copy_from_slice(&data[at..at + n]);
                b.write_blocks(block, &bounce)?;
            }
        }
    }
    Ok(())
}

/// Trim the whole blocks inside `[offset, offset + len)`.
pub fn trim_at<B: Blocks>(b: &mut B, offset: u64, len: u32) -> anyhow::Result<()> {
    let end = end_of(b.size(), offset, len as usize)?;
    let mut pos = offset.div_ceil(BLOCK) * BLOCK;
    let last = end / BLOCK * BLOCK;
    while pos < last {
        let n = (last - pos).min(MAX);
        b.trim_blocks(pos, n as u32)?;
        pos += n;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A volume in memory that refuses what a gmblock server refuses.
    struct Mem {
        bytes: Vec<u8>,
        calls: usize,
    }

    fn check(m: &Mem, offset: u64, len: usize) -> anyhow::Result<()> {
        let r = gmblock::proto::Range { offset, len: len as u32 };
        gmblock::proto::check_range(r, m.bytes.len() as u64, MAX_REQUEST_BYTES).map_err(|e| anyhow::anyhow!("{e}"))
    }

    impl Blocks for Mem {
        fn size(&self) -> u64 {
            self.bytes.len() as u64
        }
        fn read_blocks(&mut self, offset: u64, buf: &mut [u8]) -> anyhow::Result<()> {
            check(self, offset, buf.len())?;
            self.calls += 1;
            buf.copy_from_slice(&self.bytes[offset as usize..offset as usize + buf.len()]);
            Ok(())
        }
        fn write_blocks(&mut self, offset: u64, data: &[u8]) -> anyhow::Result<()> {
            check(self, offset, data.len())?;
            self.calls += 1;
            self.bytes[offset as usize..offset as usize + data.len()].copy_from_slice(data);
            Ok(())
        }
        fn trim_blocks(&mut self, offset: u64, len: u32) -> anyhow::Result<()> {
            check(self, offset, len as usize)?;
            self.bytes[offset as usize..offset as usize + len as usize].fill(0);
            Ok(())
        }
    }

    fn mem(size: usize) -> Mem {
        Mem { bytes: (0..size).map(|i| (i * 7 + i / 4096) as u8).collect(), calls: 0 }
    }

    #[test]
    fn any_range_reads_and_writes_like_a_byte_array() {
        let size = 3 << 20;
        let mut m = mem(size);
        let mut model = m.bytes.clone();
        let cases: [(u64, usize); 9] = [
            (0, 1),
            (1, 4095),
            (4095, 2),
            (4096, 4096),
            (1000, 5000),
            (8191, 1 << 20),
            (12288, (2 << 20) + 4096),
            (size as u64 - 3, 3),
            (17, (3 << 20) - 17),
        ];
        for (k, &(offset, len)) in cases.iter().enumerate() {
            let data: Vec<u8> = (0..len).map(|i| (i as u8) ^ (k as u8 * 31 + 1)).collect();
            write_at(&mut m, offset, &data).unwrap();
            model[offset as usize..offset as usize + len].copy_from_slice(&data);
            assert_eq!(m.bytes, model, "write {len} at {offset}");
            let mut back = vec![0u8; len];
            read_at(&mut m, offset, &mut back).unwrap();
            assert_eq!(back, data, "read {len} at {offset}");
        }
    }

    #[test]
    fn aligned_ranges_take_no_bounce_and_large_ones_are_cut_at_1_mib() {
        let mut m = mem(4 << 20);
        let mut buf = vec![0u8; 3 << 20];
        read_at(&mut m, 4096, &mut buf).unwrap();
        assert_eq!(m.calls, 3);
        m.calls = 0;
        write_at(&mut m, 1 << 20, &buf[..8192]).unwrap();
        assert_eq!(m.calls, 1);
        m.calls = 0;
        write_at(&mut m, 100, &buf[..10]).unwrap();
        assert_eq!(m.calls, 2, "one read and one write of the patched block");
    }

    #[test]
    fn past_the_end_is_refused_before_any_io() {
        let mut m = mem(1 << 20);
        let mut buf = [0u8; 10];
        let e = read_at(&mut m, (1 << 20) - 5, &mut buf).unwrap_err();
        assert_eq!(e.downcast_ref::<Refused>(), Some(&Refused::PastEnd { end: Some((1 << 20) + 5), size: 1 << 20 }));
        assert!(write_at(&mut m, u64::MAX - 2, &buf).unwrap_err().downcast_ref::<Refused>().is_some());
        assert!(trim_at(&mut m, 1 << 20, 1).is_err());
        assert_eq!(m.calls, 0);
    }

    #[test]
    fn trim_covers_only_whole_blocks() {
        let mut m = mem(1 << 20);
        let before = m.bytes.clone();
        trim_at(&mut m, 100, 3 * 4096).unwrap();
        assert_eq!(&m.bytes[..4096], &before[..4096], "the partial head is kept");
        assert!(m.bytes[4096..3 * 4096].iter().all(|&b| b == 0));
        assert_eq!(&m.bytes[3 * 4096..], &before[3 * 4096..], "the partial tail is kept");
        trim_at(&mut m, 0, 100).unwrap();
        assert_eq!(&m.bytes[..4096], &before[..4096], "no whole block: nothing trimmed");
    }
}
