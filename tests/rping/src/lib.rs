//! rping's conventions, for playing either side of `rping -V` against a
//! Linux peer (issue #34): the host-side live test (`tests/peer_live.rs`)
//! and the unikernel's `peer_rping_*` scenarios use the same helpers.
//!
//! `no_std`, no allocator, no dependencies, no panics: every buffer is the
//! caller's. Facts from rdma-core `librdmacm/examples/rping.c` (functions
//! named at each item); nothing is copied from it.
//!
//! One ping (`rping.c`: `rping_test_client`, `rping_test_server`):
//! 1. the client fills its start buffer with [`fill_ping`] and SENDs an
//!    [`Advert`] of it;
//! 2. the server RDMA READs that many bytes into its own buffer, SENDs a
//!    go-ahead (any 16 bytes);
//! 3. the client SENDs an [`Advert`] of its sink buffer;
//! 4. the server RDMA WRITEs [`text_len`] bytes of what it read into the
//!    sink, SENDs a go-ahead;
//! 5. with `-V` the client compares the sink with the start buffer
//!    ([`check_ping`]).
#![no_std]
#![deny(missing_docs)]

/// rping's default port (`rping.c`: `main`, `DEFAULT_PORT`-like 7174), in
/// the RDMA-CM TCP port space.
pub const PORT: u16 = 7174;

/// Size of [`Advert`] on the wire: rping's `struct rping_rdma_info`.
pub const ADVERT_LEN: usize = 16;

/// Smallest ping size rping accepts (`rping.c`: `main`, `RPING_MIN_BUFSIZE`
/// is the length of the text "rdma-ping-%d: " with a 10-digit number).
pub const MIN_SIZE: usize = 16;

/// A buffer advertisement (`rping.c`: `rping_format_send`): address, rkey
/// and size, each big-endian.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Advert {
    /// Virtual address of the buffer (the MR's iova space).
    pub addr: u64,
    /// Its rkey.
    pub rkey: u32,
    /// Its size in bytes.
    pub len: u32,
}

impl Advert {
    /// The 16 bytes rping sends.
    pub fn encode(&self) -> [u8; ADVERT_LEN] {
        let mut b = [0u8; ADVERT_LEN];
        b[..8].copy_from_slice(&self.addr.to_be_bytes());
        b[8..12].copy_from_slice(&self.rkey.to_be_bytes());
        b[12..].copy_from_slice(&self.len.to_be_bytes());
        b
    }

    /// Decodes a received advertisement (`rping.c`: `server_recv`,
    /// `client_recv`: it must be exactly 16 bytes).
    pub fn decode(b: &[u8]) -> Option<Advert> {
        let b: &[u8; ADVERT_LEN] = b.try_into().ok()?;
        let mut a = [0u8; 8];
        a.copy_from_slice(&b[..8]);
        let mut k = [0u8; 4];
        k.copy_from_slice(&b[8..12]);
        let mut l = [0u8; 4];
        l.copy_from_slice(&b[12..]);
        Some(Advert {
            addr: u64::from_be_bytes(a),
            rkey: u32::from_be_bytes(k),
            len: u32::from_be_bytes(l),
        })
    }
}

/// Byte `i` of ping `ping`'s text in a buffer of `size` bytes
/// (`rping.c`: `rping_test_client`): "rdma-ping-N: ", then letters from
/// 'A' + ping mod 58 counting up through 'z' and wrapping to 'A', the
/// last byte NUL. `None` past the end.
pub fn ping_byte(ping: usize, size: usize, i: usize) -> Option<u8> {
    if i >= size {
        return None;
    }
    if i + 1 == size {
        return Some(0);
    }
    // "rdma-ping-" + decimal digits of `ping` + ": "
    const HEAD: &[u8] = b"rdma-ping-";
    let mut digits = [0u8; 20];
    let mut n = 0;
    let mut v = ping;
    loop {
        digits[n] = b'0' + (v % 10) as u8;
        n += 1;
        v /= 10;
        if v == 0 {
            break;
        }
    }
    let text_len = HEAD.len() + n + 2;
    if i < HEAD.len() {
        return Some(HEAD[i]);
    }
    if i < HEAD.len() + n {
        return Some(digits[n - 1 - (i - HEAD.len())]);
    }
    if i < text_len {
        return Some(if i == text_len - 2 { b':' } else { b' ' });
    }
    let start = (ping % 58) as u8;
    Some(65 + (start + ((i - text_len) % 58) as u8) % 58)
}

/// Fills `out` (the ping size) with ping `ping`'s text ([`ping_byte`]).
pub fn fill_ping(ping: usize, out: &mut [u8]) {
    let size = out.len();
    for (i, b) in out.iter_mut().enumerate() {
        *b = ping_byte(ping, size, i).unwrap_or(0);
    }
}

/// How many bytes rping's server WRITEs back of what it read
/// (`rping.c`: `rping_test_server`: `strlen + 1`), at most `data.len()`.
pub fn text_len(data: &[u8]) -> usize {
    data.iter().position(|&b| b == 0).map_or(data.len(), |p| p + 1)
}

/// Where a ping's data first differs from the text it should hold.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Mismatch {
    /// Byte offset.
    pub at: usize,
    /// The byte found.
    pub got: u8,
    /// The byte expected.
    pub want: u8,
}

/// Whether `data` (the ping size) holds ping `ping`'s text, as rping's
/// `-V` check of the sink (`rping.c`: `rping_test_client`, `memcmp` of the
/// whole buffer).
pub fn check_ping(ping: usize, data: &[u8]) -> Result<(), Mismatch> {
    let size = data.len();
    for (i, &got) in data.iter().enumerate() {
        let want = ping_byte(ping, size, i).unwrap_or(0);
        if got != want {
            return Err(Mismatch { at: i, got, want });
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    extern crate std;
    use super::*;
    use std::vec::Vec;

    /// The text as rping.c builds it, written plainly (with an allocator).
    fn reference(ping: usize, size: usize) -> Vec<u8> {
        let mut v = std::format!("rdma-ping-{ping}: ").into_bytes();
        let mut c = 65 + (ping % 58) as u8;
        while v.len() < size {
            v.push(c);
            c = if c >= 122 { 65 } else { c + 1 };
        }
        v.truncate(size);
        v[size - 1] = 0;
        v
    }

    #[test]
    fn ping_text_matches_rpings_format() {
        for ping in [0, 1, 9, 10, 57, 58, 123, 99999] {
            for size in [MIN_SIZE, 17, 64, 200, 5000] {
                let mut b = std::vec![0xAA; size];
                fill_ping(ping, &mut b);
                assert_eq!(b, reference(ping, size), "ping {ping} size {size}");
                assert_eq!(check_ping(ping, &b), Ok(()));
            }
        }
        let mut b = [0u8; 64];
        fill_ping(3, &mut b);
        assert_eq!(&b[..16], b"rdma-ping-3: DEF");
        assert_eq!(text_len(&b), 64);
        b[20] = b'?';
        assert_eq!(check_ping(3, &b), Err(Mismatch { at: 20, got: b'?', want: b'K' }));
        assert!(check_ping(4, &reference(3, 64)).is_err());
    }

    #[test]
    fn advert_round_trips_big_endian() {
        let a = Advert { addr: 0x0102_0304_0506_0708, rkey: 0x0a0b_0c0d, len: 64 };
        let b = a.encode();
        assert_eq!(b[0], 1);
        assert_eq!(b[8], 0x0a);
        assert_eq!(b[15], 64);
        assert_eq!(Advert::decode(&b), Some(a));
        assert_eq!(Advert::decode(&b[..15]), None);
    }

    #[test]
    fn text_len_is_strlen_plus_one() {
        assert_eq!(text_len(b"ab\0cd"), 3);
        assert_eq!(text_len(b"abc"), 3);
        assert_eq!(text_len(b""), 0);
    }
}
