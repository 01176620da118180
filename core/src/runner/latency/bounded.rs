//! Reading a histogram from untrusted text (a trace's `latency` line) without letting it
//! choose how much memory the reading takes.
//!
//! HdrHistogram's deserializer allocates what the serialized header claims before it reads
//! the bytes behind it (a payload of 4 GiB, or counts for three significant digits... or
//! five, over the whole `u64` range). So the header is read here first: the V2 cookie
//! (`0x1c849313`) or V2+DEFLATE cookie (`0x1c849314`), then, big-endian, the payload length
//! (u32), the normalizing offset (u32), the significant digits (u32), the lowest and the
//! highest trackable values (u64 each) and the integer-to-double ratio (f64): 40 bytes, and
//! the payload after them. A compressed histogram is the cookie, the compressed length
//! (u32) and a zlib stream of a plain one, which is inflated here with a limit. Only a
//! histogram whose claims fit what is present and the bounds below goes on to the
//! deserializer.

use std::io::Read;

use base64::Engine;
use base64::engine::general_purpose::STANDARD as BASE64;
use hdrhistogram::Histogram;

/// The largest serialized histogram read (plain V2, header included, after inflating a
/// compressed one): 4 MiB, over ten times what three significant digits over the whole
/// `u64` range take at the worst (nine bytes a count).
pub const MAX_HISTOGRAM_BYTES: usize = 4 << 20;

/// The most memory the counts of a histogram read may take: 1 MiB, four times what
/// megaflux's own histograms (three significant digits up to a minute) take, and enough for
/// three digits over the whole `u64` range.
pub const MAX_COUNTS_BYTES: u64 = 1 << 20;

/// HdrHistogram's V2 cookie.
const V2_COOKIE: u32 = 0x1c84_9313;
/// HdrHistogram's V2 cookie of a DEFLATE-compressed histogram.
const V2_DEFLATE_COOKIE: u32 = 0x1c84_9314;
/// The header of a plain V2 histogram: cookie, payload length, normalizing offset,
/// significant digits, lowest and highest trackable values, integer-to-double ratio.
const V2_HEADER_BYTES: usize = 40;
/// The header of a compressed one: cookie and compressed length.
const DEFLATE_HEADER_BYTES: usize = 8;
/// The most significant digits HdrHistogram takes.
const MAX_DIGITS: u32 = 5;
/// Bytes of one count of a `Histogram<u64>`.
const COUNT_BYTES: u64 = 8;

/// Why an encoded histogram was not read.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum HistogramError {
    /// The text is longer than any histogram read may be.
    #[error("{chars} characters of base64, more than a histogram of at most {max} bytes takes")]
    TooLong {
        /// The text's length.
        chars: usize,
        /// [`MAX_HISTOGRAM_BYTES`].
        max: usize,
    },
    /// The text is not base64.
    #[error("not base64: {0}")]
    Base64(String),
    /// Fewer bytes than the header being read needs.
    #[error("{got} bytes, too few for a histogram header of {need}")]
    Short {
        /// Bytes present.
        got: usize,
        /// Bytes the header needs.
        need: usize,
    },
    /// The cookie is neither HdrHistogram's V2 nor its V2+DEFLATE one.
    #[error("cookie {0:#010x} is not HdrHistogram's V2 (0x1c849313) or V2+DEFLATE (0x1c849314)")]
    Cookie(u32),
    /// The header claims a payload larger than any histogram read may have.
    #[error("the header claims a payload of {claimed} bytes, more than the {max} a histogram may have")]
    PayloadTooLarge {
        /// The payload length the header states.
        claimed: u64,
        /// The most it may state.
        max: u64,
    },
    /// The header claims a payload longer than the bytes behind it.
    #[error("the header claims a payload of {claimed} bytes, but only {present} follow it")]
    PayloadMissing {
        /// The payload length the header states.
        claimed: u64,
        /// The bytes after the header.
        present: u64,
    },
    /// The compressed payload inflates past [`MAX_HISTOGRAM_BYTES`].
    #[error("the compressed payload inflates to more than {max} bytes")]
    Inflated {
        /// [`MAX_HISTOGRAM_BYTES`].
        max: usize,
    },
    /// The compressed payload is not a zlib stream.
    #[error("the compressed payload does not inflate: {0}")]
    Inflate(String),
    /// More significant digits than HdrHistogram takes.
    #[error("{digits} significant digits (HdrHistogram takes 0 to 5)")]
    Digits {
        /// The significant digits the header states.
        digits: u32,
    },
    /// A lowest and highest trackable value HdrHistogram refuses.
    #[error("no histogram tracks {low} to {high} at {digits} significant digits")]
    Range {
        /// The lowest discernible value the header states.
        low: u64,
        /// The highest trackable value it states.
        high: u64,
        /// Its significant digits.
        digits: u32,
    },
    /// A range and precision whose counts would take more than [`MAX_COUNTS_BYTES`].
    #[error(
        "tracking {low} to {high} at {digits} significant digits takes {bytes} bytes of counts, more than {max}"
    )]
    CountsTooLarge {
        /// The lowest discernible value the header states.
        low: u64,
        /// The highest trackable value it states.
        high: u64,
        /// Its significant digits.
        digits: u32,
        /// The bytes its counts would take.
        bytes: u64,
        /// [`MAX_COUNTS_BYTES`].
        max: u64,
    },
    /// The header is within bounds but HdrHistogram's deserializer refused the histogram.
    #[error("not an HdrHistogram: {0}")]
    Decode(String),
}

/// A histogram as [`super::encode`] writes it (or compressed), read only when its header's
/// claims fit the bytes present, [`MAX_HISTOGRAM_BYTES`] and [`MAX_COUNTS_BYTES`].
pub(super) fn decode(encoded: &str) -> Result<Histogram<u64>, HistogramError> {
    let bytes = from_base64(encoded)?;
    let plain = match be_u32(&bytes, 0) {
        Some(V2_COOKIE) => bytes,
        Some(V2_DEFLATE_COOKIE) => inflate(&bytes)?,
        Some(cookie) => return Err(HistogramError::Cookie(cookie)),
        None => {
            return Err(HistogramError::Short {
                got: bytes.len(),
                need: V2_HEADER_BYTES,
            });
        }
    };
    check_v2(&plain)?;
    hdrhistogram::serialization::Deserializer::new()
        .deserialize(&mut plain.as_slice())
        .map_err(|e| HistogramError::Decode(e.to_string()))
}

/// The bytes of the base64 text, refused before decoding when they could not be a
/// histogram of at most [`MAX_HISTOGRAM_BYTES`].
fn from_base64(encoded: &str) -> Result<Vec<u8>, HistogramError> {
    // Four characters for every three bytes, and padding.
    let max_chars = MAX_HISTOGRAM_BYTES.div_ceil(3) * 4;
    if encoded.len() > max_chars {
        return Err(HistogramError::TooLong {
            chars: encoded.len(),
            max: MAX_HISTOGRAM_BYTES,
        });
    }
    BASE64
        .decode(encoded)
        .map_err(|e| HistogramError::Base64(e.to_string()))
}

/// The plain V2 histogram a compressed one holds, inflated no further than
/// [`MAX_HISTOGRAM_BYTES`].
fn inflate(bytes: &[u8]) -> Result<Vec<u8>, HistogramError> {
    let claimed = be_u32(bytes, 4).ok_or(HistogramError::Short {
        got: bytes.len(),
        need: DEFLATE_HEADER_BYTES,
    })?;
    let compressed = payload(bytes, DEFLATE_HEADER_BYTES, claimed)?;
    let mut plain = Vec::new();
    flate2::read::ZlibDecoder::new(compressed)
        .take(MAX_HISTOGRAM_BYTES as u64 + 1)
        .read_to_end(&mut plain)
        .map_err(|e| HistogramError::Inflate(e.to_string()))?;
    if plain.len() > MAX_HISTOGRAM_BYTES {
        return Err(HistogramError::Inflated {
            max: MAX_HISTOGRAM_BYTES,
        });
    }
    Ok(plain)
}

/// The `claimed` bytes after a header of `header` bytes, if they are all there and within
/// [`MAX_HISTOGRAM_BYTES`].
fn payload(bytes: &[u8], header: usize, claimed: u32) -> Result<&[u8], HistogramError> {
    let max = MAX_HISTOGRAM_BYTES - header;
    if claimed as u64 > max as u64 {
        return Err(HistogramError::PayloadTooLarge {
            claimed: claimed.into(),
            max: max as u64,
        });
    }
    let missing = HistogramError::PayloadMissing {
        claimed: claimed.into(),
        present: bytes.len().saturating_sub(header) as u64,
    };
    bytes.get(header..header + claimed as usize).ok_or(missing)
}

/// Checks a plain V2 histogram's header: its cookie, that its counts' payload is there,
/// and that its range and precision make counts of at most [`MAX_COUNTS_BYTES`].
fn check_v2(bytes: &[u8]) -> Result<(), HistogramError> {
    let short = HistogramError::Short {
        got: bytes.len(),
        need: V2_HEADER_BYTES,
    };
    if bytes.len() < V2_HEADER_BYTES {
        return Err(short);
    }
    let field32 = |at| be_u32(bytes, at).ok_or(short.clone());
    let field64 = |at| be_u64(bytes, at).ok_or(short.clone());
    match field32(0)? {
        V2_COOKIE => {}
        cookie => return Err(HistogramError::Cookie(cookie)),
    }
    let counts = payload(bytes, V2_HEADER_BYTES, field32(4)?)?;
    let digits = field32(12)?;
    let (low, high) = (field64(16)?, field64(24)?);
    check_counts(low, high, digits)?;
    check_zero_runs(counts)
}

/// Refuses a counts payload holding the one number HdrHistogram's decoder cannot take: the
/// varint `u64::MAX`, a run of 2^63 zeros, whose negation overflows (a panic where overflow
/// is checked, as in debug builds).
fn check_zero_runs(counts: &[u8]) -> Result<(), HistogramError> {
    let mut at = 0;
    while at < counts.len() {
        let (value, read) = varint(&counts[at..]);
        if value == u64::MAX {
            return Err(HistogramError::Decode(format!(
                "a run of 2^63 zeros at byte {at} of the counts"
            )));
        }
        at += read;
    }
    Ok(())
}

/// The LEB128-64b9B varint `bytes` start with (HdrHistogram's: seven bits a byte while the
/// high bit is set, the ninth byte whole), and the bytes it takes; one cut short is read as
/// far as it goes (the deserializer refuses it).
fn varint(bytes: &[u8]) -> (u64, usize) {
    let mut value = 0u64;
    for (i, &b) in bytes.iter().take(9).enumerate() {
        if i == 8 {
            return (value | (u64::from(b) << 56), 9);
        }
        value |= u64::from(b & 0x7f) << (7 * i);
        if b & 0x80 == 0 {
            return (value, i + 1);
        }
    }
    (value, bytes.len().clamp(1, 9))
}

/// Refuses a range and precision HdrHistogram refuses, or whose counts would take more than
/// [`MAX_COUNTS_BYTES`].
fn check_counts(low: u64, high: u64, digits: u32) -> Result<(), HistogramError> {
    if digits > MAX_DIGITS {
        return Err(HistogramError::Digits { digits });
    }
    let Some(counts) = counts_len(low, high, digits) else {
        return Err(HistogramError::Range { low, high, digits });
    };
    let bytes = counts.saturating_mul(COUNT_BYTES);
    if bytes > MAX_COUNTS_BYTES {
        return Err(HistogramError::CountsTooLarge {
            low,
            high,
            digits,
            bytes,
            max: MAX_COUNTS_BYTES,
        });
    }
    Ok(())
}

/// The length of the counts array HdrHistogram allocates for `low..=high` at `digits`
/// significant digits (at most 5), as `Histogram::new_with_bounds` works it out (never
/// less: its floating-point logarithm can only make it smaller); `None` for a range it
/// refuses.
fn counts_len(low: u64, high: u64, digits: u32) -> Option<u64> {
    if low == 0 || low > u64::MAX / 2 || high < 2 * low {
        return None;
    }
    // Unit resolution up to 2 × 10^digits: sub-buckets of the next power of two.
    let largest = 2 * 10u64.pow(digits);
    let sub_bucket_magnitude = 64 - (largest - 1).leading_zeros();
    let unit_magnitude = 63 - low.leading_zeros();
    if unit_magnitude + sub_bucket_magnitude > 63 {
        return None;
    }
    // Buckets double their range until one covers `high`.
    let mut smallest_untrackable = 1u64 << (unit_magnitude + sub_bucket_magnitude);
    let mut buckets = 1u64;
    while smallest_untrackable <= high {
        if smallest_untrackable > u64::MAX / 2 {
            buckets += 1;
            break;
        }
        smallest_untrackable <<= 1;
        buckets += 1;
    }
    // Each bucket holds the upper half of its sub-buckets, plus the lower half of bucket 0.
    Some((buckets + 1) << (sub_bucket_magnitude - 1))
}

/// The big-endian u32 at `at`, if `bytes` reach that far.
fn be_u32(bytes: &[u8], at: usize) -> Option<u32> {
    let field: [u8; 4] = bytes.get(at..at.checked_add(4)?)?.try_into().ok()?;
    Some(u32::from_be_bytes(field))
}

/// The big-endian u64 at `at`, if `bytes` reach that far.
fn be_u64(bytes: &[u8], at: usize) -> Option<u64> {
    let field: [u8; 8] = bytes.get(at..at.checked_add(8)?)?.try_into().ok()?;
    Some(u64::from_be_bytes(field))
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The counts length worked out here is the one HdrHistogram allocates.
    #[test]
    fn counts_len_is_hdrhistograms() {
        let cases = [
            (1, 60_000_000_000, 3),
            (1, 2, 0),
            (1, u64::MAX, 3),
            (1, u64::MAX, 2),
            (1000, 3_600_000_000_000, 2),
            (1, 1u64 << 20, 5),
            (7, 1_000_000, 1),
            (1u64 << 40, 1u64 << 50, 3),
        ];
        for (low, high, digits) in cases {
            let h = Histogram::<u64>::new_with_bounds(low, high, digits as u8).expect("valid bounds");
            assert_eq!(
                counts_len(low, high, digits),
                Some(h.distinct_values() as u64),
                "{low}..={high} at {digits}"
            );
        }
        assert_eq!(counts_len(0, 10, 3), None);
        assert_eq!(counts_len(10, 19, 3), None);
    }

    /// Varints read as HdrHistogram writes them; the one its decoder would overflow on is
    /// refused.
    #[test]
    fn varints_and_the_zero_run_that_overflows() {
        assert_eq!(varint(&[0x05]), (5, 1));
        assert_eq!(varint(&[0x81, 0x01]), (129, 2));
        assert_eq!(varint(&[0xff; 9]), (u64::MAX, 9));
        assert_eq!(varint(&[0x80]), (0, 1));
        assert!(check_zero_runs(&[0x02, 0x03]).is_ok());
        let mut counts = vec![0x02];
        counts.extend([0xff; 9]);
        assert!(matches!(check_zero_runs(&counts), Err(HistogramError::Decode(_))));
    }
}
