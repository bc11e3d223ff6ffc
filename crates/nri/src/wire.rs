//! The framings on an NRI socket.
//!
//! The multiplexer: frames of `conn id (u32 BE) | length (u32 BE) | payload`, the payload a
//! piece of connection `conn id`'s byte stream. ttrpc on each stream: messages of
//! `length (u32 BE) | stream id (u32 BE) | type (u8) | flags (u8) | payload (protobuf)`; a
//! request and its response share the stream id, which the caller picks (odd, increasing).

use std::io::{self, Read};

/// The plugin's service: the runtime calls Configure, Synchronize, StateChange... here.
pub const PLUGIN_CONN: u32 = 1;
/// The runtime's service: the plugin calls RegisterPlugin here.
pub const RUNTIME_CONN: u32 = 2;

const MUX_HEADER: usize = 8;
const TTRPC_HEADER: usize = 10;
/// ttrpc's largest message payload.
pub const TTRPC_MAX: usize = 4 << 20;
/// The multiplexer's largest frame payload (a whole ttrpc message).
const MUX_MAX: usize = TTRPC_HEADER + TTRPC_MAX;

pub const TYPE_REQUEST: u8 = 1;
pub const TYPE_RESPONSE: u8 = 2;

/// What a peer sent that the protocol does not allow.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum WireError {
    #[error("a ttrpc message of {0} bytes, over ttrpc's limit of {TTRPC_MAX}")]
    TooLong(usize),
    #[error("a multiplexer frame of {0} bytes, over its limit of {MUX_MAX}")]
    FrameTooLong(usize),
}

/// One multiplexer frame: `payload` on connection `conn`, split into several frames where it
/// is longer than a frame may be.
pub fn mux_frames(conn: u32, payload: &[u8]) -> Vec<u8> {
    let mut out = Vec::with_capacity(payload.len() + MUX_HEADER);
    for chunk in payload.chunks(MUX_MAX) {
        out.extend_from_slice(&conn.to_be_bytes());
        out.extend_from_slice(&(chunk.len() as u32).to_be_bytes());
        out.extend_from_slice(chunk);
    }
    out
}

/// Reads one multiplexer frame; None at the end of the stream before a frame began.
pub fn read_frame(r: &mut impl Read) -> io::Result<Option<(u32, Vec<u8>)>> {
    let mut h = [0u8; MUX_HEADER];
    let mut got = 0;
    while got < MUX_HEADER {
        match r.read(&mut h[got..]) {
            Ok(0) if got == 0 => return Ok(None),
            Ok(0) => return Err(io::ErrorKind::UnexpectedEof.into()),
            Ok(n) => got += n,
            Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
            Err(e) => return Err(e),
        }
    }
    let conn = u32::from_be_bytes([h[0], h[1], h[2], h[3]]);
    let len = u32::from_be_bytes([h[4], h[5], h[6], h[7]]) as usize;
    if len > MUX_MAX {
        return Err(io::Error::new(io::ErrorKind::InvalidData, WireError::FrameTooLong(len)));
    }
    let mut payload = vec![0u8; len];
    r.read_exact(&mut payload)?;
    Ok(Some((conn, payload)))
}

/// One ttrpc message, header and payload.
pub fn ttrpc_message(stream: u32, kind: u8, payload: &[u8]) -> Result<Vec<u8>, WireError> {
    if payload.len() > TTRPC_MAX {
        return Err(WireError::TooLong(payload.len()));
    }
    let mut out = Vec::with_capacity(TTRPC_HEADER + payload.len());
    out.extend_from_slice(&(payload.len() as u32).to_be_bytes());
    out.extend_from_slice(&stream.to_be_bytes());
    out.push(kind);
    out.push(0);
    out.extend_from_slice(payload);
    Ok(out)
}

/// A ttrpc message as received.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Message {
    pub stream: u32,
    pub kind: u8,
    pub flags: u8,
    pub payload: Vec<u8>,
}

/// One connection's byte stream, cut into ttrpc messages whatever the frames' boundaries.
#[derive(Default)]
pub struct Stream {
    buf: Vec<u8>,
}

impl Stream {
    pub fn push(&mut self, bytes: &[u8]) {
        self.buf.extend_from_slice(bytes);
    }

    /// The next whole message, if the bytes so far hold one.
    pub fn next_message(&mut self) -> Result<Option<Message>, WireError> {
        if self.buf.len() < TTRPC_HEADER {
            return Ok(None);
        }
        let b = &self.buf;
        let len = u32::from_be_bytes([b[0], b[1], b[2], b[3]]) as usize;
        if len > TTRPC_MAX {
            return Err(WireError::TooLong(len));
        }
        if b.len() < TTRPC_HEADER + len {
            return Ok(None);
        }
        let m = Message {
            stream: u32::from_be_bytes([b[4], b[5], b[6], b[7]]),
            kind: b[8],
            flags: b[9],
            payload: b[TTRPC_HEADER..TTRPC_HEADER + len].to_vec(),
        };
        self.buf.drain(..TTRPC_HEADER + len);
        Ok(Some(m))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn messages_come_out_whole_however_the_frames_cut_the_stream() {
        let a = ttrpc_message(1, TYPE_REQUEST, b"hello").unwrap();
        let b = ttrpc_message(3, TYPE_RESPONSE, &[7u8; 300]).unwrap();
        let bytes: Vec<u8> = a.iter().chain(&b).copied().collect();
        for cut in 1..bytes.len() {
            let mut s = Stream::default();
            let mut got = Vec::new();
            for piece in bytes.chunks(cut) {
                s.push(piece);
                while let Some(m) = s.next_message().unwrap() {
                    got.push(m);
                }
            }
            assert_eq!(got.len(), 2, "pieces of {cut}");
            assert_eq!((got[0].stream, got[0].kind, got[0].payload.as_slice()), (1, TYPE_REQUEST, &b"hello"[..]));
            assert_eq!((got[1].stream, got[1].kind, got[1].payload.len()), (3, TYPE_RESPONSE, 300));
        }
    }

    #[test]
    fn frames_round_trip_and_a_short_or_huge_one_is_an_error() {
        let mut bytes = mux_frames(PLUGIN_CONN, b"abc");
        bytes.extend(mux_frames(RUNTIME_CONN, b"de"));
        assert!(mux_frames(RUNTIME_CONN, b"").is_empty(), "nothing to send, no frame");
        let mut r = &bytes[..];
        assert_eq!(read_frame(&mut r).unwrap(), Some((PLUGIN_CONN, b"abc".to_vec())));
        assert_eq!(read_frame(&mut r).unwrap(), Some((RUNTIME_CONN, b"de".to_vec())));
        assert_eq!(read_frame(&mut r).unwrap(), None, "the end, between frames");
        let cut = &bytes[..5];
        assert_eq!(read_frame(&mut &cut[..]).unwrap_err().kind(), io::ErrorKind::UnexpectedEof);
        let mut huge = 1u32.to_be_bytes().to_vec();
        huge.extend_from_slice(&u32::MAX.to_be_bytes());
        assert_eq!(read_frame(&mut &huge[..]).unwrap_err().kind(), io::ErrorKind::InvalidData);
        let mut s = Stream::default();
        s.push(&u32::MAX.to_be_bytes());
        s.push(&[0; 6]);
        assert_eq!(s.next_message(), Err(WireError::TooLong(u32::MAX as usize)));
    }

    #[test]
    fn a_payload_longer_than_a_frame_goes_in_several() {
        let big = vec![1u8; MUX_MAX + 5];
        let bytes = mux_frames(RUNTIME_CONN, &big);
        let mut r = &bytes[..];
        let (c1, p1) = read_frame(&mut r).unwrap().unwrap();
        let (c2, p2) = read_frame(&mut r).unwrap().unwrap();
        assert_eq!((c1, p1.len(), c2, p2.len()), (RUNTIME_CONN, MUX_MAX, RUNTIME_CONN, 5));
    }
}
