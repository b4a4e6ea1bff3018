// SPDX-License-Identifier: GPL-2.0-only
//! POLYVAL, the universal hash of RFC 8452 over GF(2^128), for the link MAC: a
//! VPCLMULQDQ kernel that folds 64 blocks into each reduction with three carry-less
//! multiplies a block (Karatsuba), on 512-bit vectors where the CPU has AVX-512 and on
//! 256-bit ones where it has AVX2, else RustCrypto's `polyval`; all give the same value
//! (tested).
//!
//! The only `unsafe` here is the kernel's: running code compiled for those CPU features
//! (allowed only through an `x86::Simd` token, made after the CPU was asked) and its masked
//! vector loads. Everything it computes is checked against the crate in the tests.
//!
//! Why a kernel of our own: a link MAC hashes each 8 KiB payload twice per call (sender
//! and receiver), so its speed is the MAC's cost. Per 8 KiB on the project's machine
//! (AMD EPYC with AVX-512, best of 7 × 20,000, 2026-11-25): `polyval` 0.7.3 (four blocks
//! per reduction, 128-bit carry-less multiplies) 1.39 µs; this kernel 0.39 µs (16
//! blocks: 0.61 µs, 32: 0.43 µs, 128: 0.37 µs); BLAKE3 `keyed_hash` 1.61 µs. On a
//! machine of this project's with VPCLMULQDQ and AVX2 but no AVX-512 (2026-11-29, other
//! builds running, best of 7 × 20,000, three runs): the 256-bit kernel 0.79 µs, the crate
//! 1.61 µs — that machine ran the crate until this kernel came. Karatsuba's three
//! multiplies instead of four (2026-11-29, AVX-512 machine, pinned, load average 7–10,
//! the fastest of 8 alternating runs of best of 7 × 20,000): 512-bit 0.288 → 0.259 µs,
//! 256-bit 0.614 → 0.473 µs (medians 0.482 → 0.456, 1.201 → 0.877; the crate, unchanged,
//! 1.360 → 1.326).

/// Bytes per POLYVAL block.
pub const BLOCK: usize = 16;

/// Blocks folded into one reduction by the SIMD kernel.
const GROUP_BLOCKS: usize = 64;

/// Bytes of a whole SIMD group.
const GROUP_BYTES: usize = GROUP_BLOCKS * BLOCK;

/// A POLYVAL key `H`, with what the SIMD kernel needs if the CPU has it.
#[derive(Clone)]
pub struct Key {
    h: [u8; BLOCK],
    #[cfg(target_arch = "x86_64")]
    simd: Option<(x86::Simd, Box<x86::Powers>)>,
}

impl Key {
    /// The key `h`, hashed by the SIMD kernel where the CPU has the features it needs.
    pub fn new(h: [u8; BLOCK]) -> Key {
        #[cfg(target_arch = "x86_64")]
        let simd = x86::Simd::detect().map(|s| (s, Box::new(x86::Powers::new(s, &h))));
        Key {
            h,
            #[cfg(target_arch = "x86_64")]
            simd,
        }
    }

    /// The key `h`, always hashed by the `polyval` crate.
    pub fn portable(h: [u8; BLOCK]) -> Key {
        Key {
            h,
            #[cfg(target_arch = "x86_64")]
            simd: None,
        }
    }

    /// Whether this key is hashed by the SIMD kernel.
    pub fn is_simd(&self) -> bool {
        #[cfg(target_arch = "x86_64")]
        return self.simd.is_some();
        #[cfg(not(target_arch = "x86_64"))]
        false
    }

    /// A hash of bytes given in pieces, under this key.
    pub fn hasher(&self) -> Hasher<'_> {
        let state = match self.simd_parts() {
            Some(_) => State::Simd([0; BLOCK]),
            None => State::Portable(Box::new(polyval::Polyval::new(&self.h.into()))),
        };
        Hasher { key: self, state, partial: [0; BLOCK], buffered: 0 }
    }

    #[cfg(target_arch = "x86_64")]
    fn simd_parts(&self) -> Option<(x86::Simd, &x86::Powers)> {
        self.simd.as_ref().map(|(s, p)| (*s, &**p))
    }

    #[cfg(not(target_arch = "x86_64"))]
    fn simd_parts(&self) -> Option<((), &())> {
        None
    }
}

#[derive(Clone)]
enum State {
    /// The running sum of the SIMD kernel.
    Simd([u8; BLOCK]),
    /// The crate's hasher (boxed, so that a hasher moves as a few words; only CPUs
    /// without the kernel allocate it).
    Portable(Box<polyval::Polyval>),
}

/// POLYVAL over bytes given in pieces: where the pieces split does not matter (whole
/// blocks are hashed as they come, up to 64 per reduction; only a block's start waits).
#[derive(Clone)]
pub struct Hasher<'k> {
    key: &'k Key,
    state: State,
    /// The start of a block not yet whole (`buffered` bytes).
    partial: [u8; BLOCK],
    buffered: usize,
}

impl Hasher<'_> {
    pub fn update(&mut self, mut bytes: &[u8]) {
        if self.buffered > 0 {
            let n = bytes.len().min(BLOCK - self.buffered);
            self.partial[self.buffered..self.buffered + n].copy_from_slice(&bytes[..n]);
            self.buffered += n;
            bytes = &bytes[n..];
            if self.buffered < BLOCK {
                return;
            }
            absorb(self.key, &mut self.state, &self.partial);
            self.buffered = 0;
        }
        let whole = bytes.len() - bytes.len() % BLOCK;
        absorb(self.key, &mut self.state, &bytes[..whole]);
        let rest = &bytes[whole..];
        self.partial[..rest.len()].copy_from_slice(rest);
        self.buffered = rest.len();
    }

    /// POLYVAL of everything given, zero-padded to a whole block, followed by `last`.
    pub fn finish(self, last: [u8; BLOCK]) -> [u8; BLOCK] {
        let partial = &self.partial[..self.buffered];
        match self.state {
            #[cfg(target_arch = "x86_64")]
            State::Simd(sum) => {
                let (simd, powers) = self.key.simd_parts().expect("a SIMD state has a SIMD key");
                x86::finish(simd, powers, sum, partial, last)
            }
            #[cfg(not(target_arch = "x86_64"))]
            State::Simd(_) => unreachable!("no SIMD state without the kernel"),
            State::Portable(mut p) => {
                use polyval::universal_hash::UniversalHash;
                p.update_padded(partial);
                p.update_padded(&last);
                p.finalize().into()
            }
        }
    }
}

/// Hash `bytes`, whole blocks, into `state`.
fn absorb(key: &Key, state: &mut State, bytes: &[u8]) {
    if bytes.is_empty() {
        return;
    }
    match state {
        #[cfg(target_arch = "x86_64")]
        State::Simd(sum) => {
            let (simd, powers) = key.simd_parts().expect("a SIMD state has a SIMD key");
            *sum = x86::absorb(simd, powers, *sum, bytes);
        }
        #[cfg(not(target_arch = "x86_64"))]
        State::Simd(_) => unreachable!("no SIMD state without the kernel"),
        State::Portable(p) => {
            use polyval::universal_hash::UniversalHash;
            p.update_padded(bytes);
        }
    }
}

#[cfg(target_arch = "x86_64")]
#[allow(unsafe_code)] // CPU-feature code and masked loads: this module's documented unsafe
mod x86 {
    use super::{BLOCK, GROUP_BLOCKS, GROUP_BYTES};
    use core::arch::x86_64::*;

    /// Proof that the CPU has VPCLMULQDQ and PCLMULQDQ, and AVX-512 (F, BW) or AVX2: only
    /// [`Simd::detect`] makes one.
    #[derive(Clone, Copy, Debug, PartialEq, Eq)]
    pub enum Simd {
        Avx512,
        Avx2,
    }

    impl Simd {
        /// The widest kernel this CPU runs.
        pub fn detect() -> Option<Simd> {
            let clmul =
                std::arch::is_x86_feature_detected!("vpclmulqdq") && std::arch::is_x86_feature_detected!("pclmulqdq");
            let avx512 =
                std::arch::is_x86_feature_detected!("avx512f") && std::arch::is_x86_feature_detected!("avx512bw");
            match (clmul, avx512, std::arch::is_x86_feature_detected!("avx2")) {
                (true, true, _) => Some(Simd::Avx512),
                (true, false, true) => Some(Simd::Avx2),
                _ => None,
            }
        }

        /// The 256-bit kernel, where the CPU runs it (a test's: it also runs where the
        /// 512-bit one does).
        #[cfg(test)]
        pub fn avx2() -> Option<Simd> {
            Simd::detect().map(|_| Simd::Avx2).filter(|_| std::arch::is_x86_feature_detected!("avx2"))
        }
    }

    /// `H^64, H^63, …, H^1` (POLYVAL's products), then 64 zero blocks so that 1 KiB read
    /// from any block offset up to 64 stays in the table; and beside each, the XOR of its
    /// two 64-bit halves in both halves (Karatsuba's middle factor: three carry-less
    /// multiplies a block instead of four).
    #[derive(Clone)]
    pub struct Powers {
        h: [[u8; BLOCK]; 2 * GROUP_BLOCKS],
        folded: [[u8; BLOCK]; 2 * GROUP_BLOCKS],
    }

    impl Powers {
        pub fn new(_: Simd, h: &[u8; BLOCK]) -> Powers {
            // SAFETY: a `Simd` exists only where the CPU has the features `powers` uses.
            unsafe { powers(h) }
        }
    }

    /// The sum after hashing `bytes` (whole blocks) from the sum `acc`.
    pub fn absorb(simd: Simd, powers: &Powers, acc: [u8; BLOCK], bytes: &[u8]) -> [u8; BLOCK] {
        groups(simd, powers, acc, bytes, None)
    }

    /// The sum after hashing `bytes` (zero-padded to a whole block) and then `last`.
    pub fn finish(simd: Simd, powers: &Powers, acc: [u8; BLOCK], bytes: &[u8], last: [u8; BLOCK]) -> [u8; BLOCK] {
        groups(simd, powers, acc, bytes, Some(last))
    }

    #[target_feature(enable = "pclmulqdq")]
    unsafe fn powers(h: &[u8; BLOCK]) -> Powers {
        let mut p = Powers { h: [[0u8; BLOCK]; 2 * GROUP_BLOCKS], folded: [[0u8; BLOCK]; 2 * GROUP_BLOCKS] };
        let h = load(h);
        let mut x = h;
        for k in 1..=GROUP_BLOCKS {
            p.h[GROUP_BLOCKS - k] = store(x);
            p.folded[GROUP_BLOCKS - k] = store(_mm_xor_si128(x, _mm_shuffle_epi32(x, 0x4E)));
            x = mul(x, h);
        }
        p
    }

    /// Hash `bytes` then `last` (if any) from `acc`, in groups of up to 64 blocks with
    /// `last` in the final one, by `simd`'s kernel.
    fn groups(
        simd: Simd,
        powers: &Powers,
        acc: [u8; BLOCK],
        mut bytes: &[u8],
        last: Option<[u8; BLOCK]>,
    ) -> [u8; BLOCK] {
        let sum = |acc, group: &[u8], last| match simd {
            // SAFETY: a `Simd` exists only where the CPU has the features its kernel uses.
            Simd::Avx512 => unsafe { group_sum(powers, acc, group, last) },
            // SAFETY: as above.
            Simd::Avx2 => unsafe { group_sum_256(powers, acc, group, last) },
        };
        let mut acc = load(&acc);
        // Room for `last` in the final group.
        let room = if last.is_some() { GROUP_BYTES - BLOCK } else { 0 };
        while bytes.len() > room {
            let (group, rest) = bytes.split_at(bytes.len().min(GROUP_BYTES));
            acc = sum(acc, group, None);
            bytes = rest;
        }
        if let Some(last) = last {
            acc = sum(acc, bytes, Some(load(&last)));
        }
        store(acc)
    }

    /// POLYVAL's Horner step over the `k` blocks of `group` (the last possibly partial and
    /// zero-padded), then `last`, at once: with `Y_1..Y_k` those blocks, the first XORed
    /// with `acc`, the sum `Σ Y_i · H^(k+1-i)`, unreduced, then reduced once. At most 64
    /// blocks in all.
    #[inline]
    #[target_feature(enable = "avx512f,avx512bw,vpclmulqdq,pclmulqdq")]
    fn group_sum(powers: &Powers, mut acc: __m128i, group: &[u8], last: Option<__m128i>) -> __m128i {
        let len = group.len();
        let k = len.div_ceil(BLOCK) + usize::from(last.is_some());
        debug_assert!(k > 0 && k <= GROUP_BLOCKS);
        // Block i of the group is multiplied by H^(k+1-i): the table's last k powers.
        let (h_at, f_at) = (&powers.h[GROUP_BLOCKS - k..], &powers.folded[GROUP_BLOCKS - k..]);
        let (mut lo, mut hi, mut mid) = (_mm512_setzero_si512(), _mm512_setzero_si512(), _mm512_setzero_si512());
        for at in (0..len).step_by(64) {
            let n = len - at;
            let x = if n >= 64 {
                // SAFETY: bytes at..at+64 of `group`, all inside it (unaligned load).
                unsafe { _mm512_loadu_si512(group.as_ptr().add(at).cast()) }
            } else {
                // SAFETY: the mask selects bytes at..at+n of `group`, all inside it;
                // masked-off bytes are not read (and cannot fault).
                unsafe { _mm512_maskz_loadu_epi8((1u64 << n) - 1, group.as_ptr().add(at).cast()) }
            };
            let x = if at == 0 { _mm512_xor_si512(x, _mm512_zextsi128_si512(acc)) } else { x };
            // Blocks at/16.. of `h_at`, which has k + 64 of them (at < len ≤ 16 k).
            let h4: &[[u8; BLOCK]; 4] = h_at[at / BLOCK..at / BLOCK + 4].try_into().expect("four blocks");
            let f4: &[[u8; BLOCK]; 4] = f_at[at / BLOCK..at / BLOCK + 4].try_into().expect("four blocks");
            // SAFETY: 64 bytes read from each of two 64-byte arrays (unaligned loads).
            let (h, f) = unsafe { (_mm512_loadu_si512(h4.as_ptr().cast()), _mm512_loadu_si512(f4.as_ptr().cast())) };
            lo = _mm512_xor_si512(lo, _mm512_clmulepi64_epi128(x, h, 0x00));
            hi = _mm512_xor_si512(hi, _mm512_clmulepi64_epi128(x, h, 0x11));
            // (x0 ^ x1)(h0 ^ h1) = lo ^ hi ^ (the middle term), summed over the group.
            let t = _mm512_xor_si512(x, _mm512_shuffle_epi32(x, _MM_PERM_BADC));
            mid = _mm512_xor_si512(mid, _mm512_clmulepi64_epi128(t, f, 0x00));
            acc = _mm_setzero_si128();
        }
        let mid = _mm512_xor_si512(mid, _mm512_xor_si512(lo, hi));
        let lo = _mm512_xor_si512(lo, _mm512_bslli_epi128(mid, 8));
        let hi = _mm512_xor_si512(hi, _mm512_bsrli_epi128(mid, 8));
        let (mut lo, mut hi) = (fold(lo), fold(hi));
        if let Some(last) = last {
            // `last` is block k, times H^1 (with `acc` if it is also the first block).
            let (l, h) = product(_mm_xor_si128(last, acc), load(&h_at[k - 1]));
            lo = _mm_xor_si128(lo, l);
            hi = _mm_xor_si128(hi, h);
        }
        reduce(lo, hi)
    }

    /// [`group_sum`] on 256-bit vectors (two blocks a step), for CPUs without AVX-512.
    #[inline]
    #[target_feature(enable = "avx2,vpclmulqdq,pclmulqdq")]
    fn group_sum_256(powers: &Powers, mut acc: __m128i, group: &[u8], last: Option<__m128i>) -> __m128i {
        let len = group.len();
        let k = len.div_ceil(BLOCK) + usize::from(last.is_some());
        debug_assert!(k > 0 && k <= GROUP_BLOCKS);
        let (h_at, f_at) = (&powers.h[GROUP_BLOCKS - k..], &powers.folded[GROUP_BLOCKS - k..]);
        let (mut lo, mut hi, mut mid) = (_mm256_setzero_si256(), _mm256_setzero_si256(), _mm256_setzero_si256());
        for at in (0..len).step_by(32) {
            let n = len - at;
            let x = if n >= 32 {
                // SAFETY: bytes at..at+32 of `group`, all inside it (unaligned load).
                unsafe { _mm256_loadu_si256(group.as_ptr().add(at).cast()) }
            } else {
                // No masked byte loads without AVX-512: the tail, zero-padded, from a copy.
                let mut tail = [0u8; 32];
                tail[..n].copy_from_slice(&group[at..]);
                // SAFETY: 32 bytes read from a 32-byte array (unaligned load).
                unsafe { _mm256_loadu_si256(tail.as_ptr().cast()) }
            };
            let x = if at == 0 { _mm256_xor_si256(x, _mm256_zextsi128_si256(acc)) } else { x };
            // Blocks at/16.. of `h_at`, which has k + 64 of them (at < len ≤ 16 k).
            let h2: &[[u8; BLOCK]; 2] = h_at[at / BLOCK..at / BLOCK + 2].try_into().expect("two blocks");
            let f2: &[[u8; BLOCK]; 2] = f_at[at / BLOCK..at / BLOCK + 2].try_into().expect("two blocks");
            // SAFETY: 32 bytes read from each of two 32-byte arrays (unaligned loads).
            let (h, f) = unsafe { (_mm256_loadu_si256(h2.as_ptr().cast()), _mm256_loadu_si256(f2.as_ptr().cast())) };
            lo = _mm256_xor_si256(lo, _mm256_clmulepi64_epi128(x, h, 0x00));
            hi = _mm256_xor_si256(hi, _mm256_clmulepi64_epi128(x, h, 0x11));
            // Karatsuba's middle factor, as in `group_sum`.
            let t = _mm256_xor_si256(x, _mm256_shuffle_epi32(x, 0x4E));
            mid = _mm256_xor_si256(mid, _mm256_clmulepi64_epi128(t, f, 0x00));
            acc = _mm_setzero_si128();
        }
        let mid = _mm256_xor_si256(mid, _mm256_xor_si256(lo, hi));
        let lo = _mm256_xor_si256(lo, _mm256_bslli_epi128(mid, 8));
        let hi = _mm256_xor_si256(hi, _mm256_bsrli_epi128(mid, 8));
        let fold = |x: __m256i| _mm_xor_si128(_mm256_castsi256_si128(x), _mm256_extracti128_si256(x, 1));
        let (mut lo, mut hi) = (fold(lo), fold(hi));
        if let Some(last) = last {
            let (l, h) = product(_mm_xor_si128(last, acc), load(&h_at[k - 1]));
            lo = _mm_xor_si128(lo, l);
            hi = _mm_xor_si128(hi, h);
        }
        reduce(lo, hi)
    }

    /// The XOR of a 512-bit value's four 128-bit lanes.
    #[inline]
    #[target_feature(enable = "avx512f")]
    fn fold(x: __m512i) -> __m128i {
        let y = _mm256_xor_si256(_mm512_castsi512_si256(x), _mm512_extracti64x4_epi64(x, 1));
        _mm_xor_si128(_mm256_castsi256_si128(y), _mm256_extracti128_si256(y, 1))
    }

    /// `(hi·x^128 + lo) · x^-128 mod P`, P = x^128 + x^127 + x^126 + x^121 + 1, by two
    /// Montgomery steps of 64 bits: adding `q·P` for the low 64 bits `q` clears them
    /// (P ≡ 1 mod x^64), and `q·(x^127 + x^126 + x^121)` is `q · 0xC2 << 56` one word up.
    #[inline]
    #[target_feature(enable = "pclmulqdq")]
    fn reduce(lo: __m128i, hi: __m128i) -> __m128i {
        let c = _mm_set_epi64x(0xC200_0000_0000_0000u64 as i64, 1);
        let t = _mm_clmulepi64_si128(lo, c, 0x10);
        let lo = _mm_xor_si128(_mm_shuffle_epi32(lo, 0x4E), t);
        let t = _mm_clmulepi64_si128(lo, c, 0x10);
        let lo = _mm_xor_si128(_mm_shuffle_epi32(lo, 0x4E), t);
        _mm_xor_si128(lo, hi)
    }

    /// The carry-less product `a · b` as its low and high 128 bits.
    #[inline]
    #[target_feature(enable = "pclmulqdq")]
    fn product(a: __m128i, b: __m128i) -> (__m128i, __m128i) {
        let lo = _mm_clmulepi64_si128(a, b, 0x00);
        let hi = _mm_clmulepi64_si128(a, b, 0x11);
        let mid = _mm_xor_si128(_mm_clmulepi64_si128(a, b, 0x10), _mm_clmulepi64_si128(a, b, 0x01));
        (_mm_xor_si128(lo, _mm_slli_si128(mid, 8)), _mm_xor_si128(hi, _mm_srli_si128(mid, 8)))
    }

    /// POLYVAL's product `a · b · x^-128 mod P`.
    #[inline]
    #[target_feature(enable = "pclmulqdq")]
    fn mul(a: __m128i, b: __m128i) -> __m128i {
        let (lo, hi) = product(a, b);
        reduce(lo, hi)
    }

    /// (SSE2 is in every x86-64: no feature to ask for.)
    #[inline]
    fn load(b: &[u8; BLOCK]) -> __m128i {
        // SAFETY: 16 bytes read from a 16-byte array (unaligned load).
        unsafe { _mm_loadu_si128(b.as_ptr().cast()) }
    }

    /// (SSE2 is in every x86-64: no feature to ask for.)
    #[inline]
    fn store(x: __m128i) -> [u8; BLOCK] {
        let mut b = [0u8; BLOCK];
        // SAFETY: 16 bytes written to a 16-byte array (unaligned store).
        unsafe { _mm_storeu_si128(b.as_mut_ptr().cast(), x) };
        b
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// RFC 8452 Appendix A: POLYVAL(H, X_1, X_2).
    const H: [u8; 16] = *b"\x25\x62\x93\x47\x58\x92\x42\x76\x1d\x31\xf8\x26\xba\x4b\x75\x7b";
    const X1: [u8; 16] = *b"\x4f\x4f\x95\x66\x8c\x83\xdf\xb6\x40\x17\x62\xbb\x2d\x01\xa2\x62";
    const X2: [u8; 16] = *b"\xd1\xa2\x4d\xdd\x27\x21\xd0\x06\xbb\xe4\x5f\x20\xd3\xc9\xf3\x62";
    const RESULT: [u8; 16] = *b"\xf7\xa3\xb4\x7b\x84\x61\x19\xfa\xe5\xb7\x86\x6c\xf5\xe5\xb7\x7e";

    fn rfc_vector(key: &Key) {
        let mut h = key.hasher();
        h.update(&X1);
        assert_eq!(h.finish(X2), RESULT);
    }

    #[test]
    fn portable_gives_rfc_8452s_value() {
        rfc_vector(&Key::portable(H));
    }

    /// Whatever this CPU runs gives the portable value for every length and every way
    /// of splitting the input (the SIMD kernel where the CPU has it: see the gated test).
    fn matches_portable(key: &Key, portable: &Key) {
        rfc_vector(key);
        let mut s = 0x9e37_79b9_7f4a_7c15u64;
        let mut rnd = move || {
            s ^= s << 13;
            s ^= s >> 7;
            s ^= s << 17;
            s
        };
        let data: Vec<u8> = (0..5000).map(|_| rnd() as u8).collect();
        for len in (0..2100).chain([4095, 4096, 4097, 5000]) {
            let d = &data[..len];
            let last = [len as u8; 16];
            let mut want = portable.hasher();
            want.update(d);
            let want = want.finish(last);
            let mut whole = key.hasher();
            whole.update(d);
            assert_eq!(whole.finish(last), want, "{len} bytes in one piece");
            let mut pieces = key.hasher();
            let mut at = 0;
            while at < len {
                let n = (rnd() as usize % 1500).min(len - at);
                pieces.update(&d[at..at + n]);
                at += n;
            }
            assert_eq!(pieces.finish(last), want, "{len} bytes in pieces");
        }
    }

    #[test]
    fn this_cpus_hash_matches_the_portable_one() {
        matches_portable(&Key::new(H), &Key::portable(H));
    }

    #[test]
    #[ignore = "needs: vpclmulqdq — the SIMD kernels run only on a CPU with VPCLMULQDQ and AVX2 or AVX-512"]
    fn simd_kernels_match_the_portable_one() {
        let key = Key::new(H);
        assert!(key.is_simd(), "this CPU lacks VPCLMULQDQ, or AVX2 and AVX-512");
        matches_portable(&key, &Key::portable(H));
        // The 256-bit kernel too, where the 512-bit one is the CPU's first choice.
        let simd = x86::Simd::avx2().expect("AVX2");
        let avx2 = Key { h: H, simd: Some((simd, Box::new(x86::Powers::new(simd, &H)))) };
        matches_portable(&avx2, &Key::portable(H));
    }
}
