// SPDX-License-Identifier: GPL-2.0-only
//! Target `gmsd_proto`: gmsd's control protocol (`gmsd::proto`): the frame
//! length prefix, requests and both replies.
//!
//! The first byte picks the decoder. Oracles: decoding never panics (nor allocates
//! past libFuzzer's malloc limit); an accepted request re-encodes to the input but for
//! unknown GET flag bits, which the decoder ignores; accepted replies re-encode to bytes
//! that decode to the same outcomes; a framed message reads back whole.

use gmsd::proto::{
    decode_get_reply, decode_put_reply, encode_get_reply, encode_put_reply, read_frame, read_len, write_frame, Request,
    OP_GET,
};

pub fn fuzz(data: &[u8]) {
    let Some((&which, body)) = data.split_first() else { return };
    match which % 4 {
        0 => {
            if let Ok(req) = Request::decode(body) {
                let enc = req.encode();
                assert_eq!(Request::decode(&enc).expect("a re-encoded request decodes"), req);
                // One encoding but for unknown GET flag bits, which are ignored.
                assert_eq!(enc.len(), body.len());
                for (i, (a, b)) in enc.iter().zip(body).enumerate() {
                    assert!(a == b || (i == 1 && body[0] == OP_GET), "request byte {i} changed in the round trip");
                }
            }
        }
        1 => {
            if let Ok(res) = decode_put_reply(body) {
                assert_eq!(decode_put_reply(&encode_put_reply(&res)).expect("re-encoded reply decodes"), res);
            }
        }
        2 => {
            if let Ok(res) = decode_get_reply(body) {
                assert_eq!(decode_get_reply(&encode_get_reply(&res)).expect("re-encoded reply decodes"), res);
            }
        }
        _ => {
            if let Some(Ok(len)) = read_len(body) {
                let mut r = body;
                match read_frame(&mut r) {
                    Ok(f) => {
                        assert_eq!(f.len(), len);
                        assert_eq!(f, body[4..4 + len]);
                        let mut w = Vec::new();
                        write_frame(&mut w, &f).expect("writing to a Vec");
                        assert_eq!(w, body[..4 + len]);
                    }
                    Err(_) => assert!(body.len() < 4 + len, "a whole frame failed to read"),
                }
            }
        }
    }
}
