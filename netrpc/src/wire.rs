// SPDX-License-Identifier: GPL-2.0-only
//! NetRPC messages on the wire: a 24-byte header at the start of the Trapeze control
//! message, then the body (≤ [`MAX_BODY`] bytes).
//!
//! ```text
//! +0  version u8 | kind u8 (request / reply / error / one-way)
//! +2  op u16
//! +4  reply token: origin node u16 | call record u16 | generation u32
//! +12 payload kind u8 | hops u8 (delegations so far) | body length u16
//! +16 payload token u64 (the requester's IPT token, for solicited replies)
//! +24 body
//! ```
//! Little-endian. Parsing never panics and checks every length against the buffer.

/// Bytes of a Trapeze control message.
pub const CTRL_BYTES: usize = 128;
pub const HEADER_BYTES: usize = 24;
/// Largest request or reply body.
pub const MAX_BODY: usize = CTRL_BYTES - HEADER_BYTES;
pub const VERSION: u8 = 1;

/// What a message is.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Kind {
    Request = 1,
    Reply = 2,
    /// A reply carrying an error code (the body's first two bytes) instead of a result.
    ErrorReply = 3,
    /// A request that expects no reply.
    OneWay = 4,
}

impl Kind {
    #[inline]
    pub fn from_u8(v: u8) -> Option<Kind> {
        match v {
            1 => Some(Kind::Request),
            2 => Some(Kind::Reply),
            3 => Some(Kind::ErrorReply),
            4 => Some(Kind::OneWay),
            _ => None,
        }
    }
}

/// How the requester wants a reply payload delivered.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum PayloadKind {
    /// No payload expected.
    None = 0,
    /// Into the requester's frame through its IPT token (zero-copy).
    Solicited = 1,
    /// Into whatever receive buffer the requester's NIC has (the reply owns it).
    Unsolicited = 2,
    /// Into a receive buffer, then copied into the requester's frame.
    UnsolicitedCopy = 3,
}

impl PayloadKind {
    #[inline]
    pub fn from_u8(v: u8) -> Option<PayloadKind> {
        match v {
            0 => Some(PayloadKind::None),
            1 => Some(PayloadKind::Solicited),
            2 => Some(PayloadKind::Unsolicited),
            3 => Some(PayloadKind::UnsolicitedCopy),
            _ => None,
        }
    }
}

/// Names the call a reply completes; carried by requests (also when delegated) and
/// copied into the reply. `payload_token` is the requester's IPT token when the reply
/// payload is solicited, so whichever node replies can tag the payload with it.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Default, Hash)]
pub struct ReplyToken {
    pub origin: u16,
    pub record: u16,
    pub generation: u32,
    pub payload_kind: u8,
    pub payload_token: u64,
}

/// A parsed message header.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Header {
    pub kind: Kind,
    pub op: u16,
    pub token: ReplyToken,
    pub hops: u8,
    pub body_len: u16,
}

/// Why bytes are not a NetRPC message.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum WireError {
    Truncated,
    BadVersion,
    BadKind,
    BadPayloadKind,
    BodyTooLong,
}

#[inline]
fn u16_at(b: &[u8], i: usize) -> u16 {
    u16::from_le_bytes([b[i], b[i + 1]])
}
#[inline]
fn u32_at(b: &[u8], i: usize) -> u32 {
    u32::from_le_bytes([b[i], b[i + 1], b[i + 2], b[i + 3]])
}
#[inline]
fn u64_at(b: &[u8], i: usize) -> u64 {
    let mut w = [0u8; 8];
    w.copy_from_slice(&b[i..i + 8]);
    u64::from_le_bytes(w)
}

/// The kind of a message from its control bytes, without validating the rest (a cheap
/// look, e.g. to skip reading a clock for replies, whose handling never uses it).
#[inline]
pub fn message_kind(ctrl: &[u8]) -> Option<Kind> {
    ctrl.get(1).and_then(|&k| Kind::from_u8(k))
}

impl Header {
    /// Parse the header and return it with the body.
    #[inline]
    pub fn parse(b: &[u8]) -> Result<(Header, &[u8]), WireError> {
        // A fixed-size view: the field reads below need no bounds checks.
        let Some(h) = b.first_chunk::<HEADER_BYTES>() else {
            return Err(WireError::Truncated);
        };
        let (b, whole) = (h, b);
        if b[0] != VERSION {
            return Err(WireError::BadVersion);
        }
        let kind = Kind::from_u8(b[1]).ok_or(WireError::BadKind)?;
        if PayloadKind::from_u8(b[12]).is_none() {
            return Err(WireError::BadPayloadKind);
        }
        let body_len = u16_at(b, 14);
        if body_len as usize > MAX_BODY {
            return Err(WireError::BodyTooLong);
        }
        if whole.len() < HEADER_BYTES + body_len as usize {
            return Err(WireError::Truncated);
        }
        let h = Header {
            kind,
            op: u16_at(b, 2),
            token: ReplyToken {
                origin: u16_at(b, 4),
                record: u16_at(b, 6),
                generation: u32_at(b, 8),
                payload_kind: b[12],
                payload_token: u64_at(b, 16),
            },
            hops: b[13],
            body_len,
        };
        Ok((h, &whole[HEADER_BYTES..HEADER_BYTES + body_len as usize]))
    }

    /// Write the header into `out[..HEADER_BYTES]` (`out` must be at least that long).
    #[inline]
    pub fn emit(&self, out: &mut [u8]) {
        // One length check, then fixed offsets.
        let out: &mut [u8; HEADER_BYTES] = out.first_chunk_mut().expect("a header needs HEADER_BYTES bytes");
        out[0] = VERSION;
        out[1] = self.kind as u8;
        out[2..4].copy_from_slice(&self.op.to_le_bytes());
        out[4..6].copy_from_slice(&self.token.origin.to_le_bytes());
        out[6..8].copy_from_slice(&self.token.record.to_le_bytes());
        out[8..12].copy_from_slice(&self.token.generation.to_le_bytes());
        out[12] = self.token.payload_kind;
        out[13] = self.hops;
        out[14..16].copy_from_slice(&self.body_len.to_le_bytes());
        out[16..24].copy_from_slice(&self.token.payload_token.to_le_bytes());
    }
}

/// Encoding of typed request and reply bodies. Implementations must reject (not panic
/// on) bodies of the wrong length.
pub trait Message: Sized {
    /// Write the body into `out` (at most [`MAX_BODY`] bytes); return its length.
    fn encode(&self, out: &mut [u8]) -> Result<usize, CodecError>;
    fn decode(body: &[u8]) -> Result<Self, CodecError>;
}

/// A body of the wrong size or content.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct CodecError;

impl Message for () {
    fn encode(&self, _out: &mut [u8]) -> Result<usize, CodecError> {
        Ok(0)
    }
    fn decode(body: &[u8]) -> Result<Self, CodecError> {
        if body.is_empty() {
            Ok(())
        } else {
            Err(CodecError)
        }
    }
}

/// A fixed-size body of `N` raw bytes (e.g. a page id).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Bytes<const N: usize>(pub [u8; N]);

impl<const N: usize> Message for Bytes<N> {
    fn encode(&self, out: &mut [u8]) -> Result<usize, CodecError> {
        if N > MAX_BODY || out.len() < N {
            return Err(CodecError);
        }
        out[..N].copy_from_slice(&self.0);
        Ok(N)
    }
    fn decode(body: &[u8]) -> Result<Self, CodecError> {
        let mut a = [0u8; N];
        if body.len() != N {
            return Err(CodecError);
        }
        a.copy_from_slice(body);
        Ok(Bytes(a))
    }
}

/// A typed operation: an op code tying a request type to a reply type.
pub trait Operation {
    const OP: u16;
    type Request: Message;
    type Reply: Message;
}
