//! Skewed keys for the counting workloads: `--skew zipf:S` draws each record's key with
//! Zipf's law (rank `r` of `n` has weight `1 / r^S`), and `--skew-shift SECS` makes another
//! set of keys hot from then on, so that skew, and a change of it, can be shown and balanced.
//!
//! A record's draw is a function of its global index and the seed alone (rejection-inversion
//! sampling, Hörmann and Derflinger 1996, fed by a counter-based hash): any number of workers
//! and processes makes the same records.

use std::fmt;
use std::str::FromStr;

use crate::bins::mix64;
use crate::error::ConfigError;

/// The largest Zipf exponent taken: beyond it one key is all the load anyway.
pub const MAX_EXPONENT: f64 = 10.0;

/// How a counting workload's keys are drawn.
#[derive(Clone, Copy, Debug, PartialEq, Default)]
pub enum Skew {
    /// Every key alike.
    #[default]
    Uniform,
    /// Zipf's law with this exponent (> 0).
    Zipf(f64),
}

impl fmt::Display for Skew {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Skew::Uniform => write!(f, "uniform"),
            Skew::Zipf(s) => write!(f, "zipf:{s}"),
        }
    }
}

/// As `--skew` takes it: `uniform` or `zipf:S`.
impl FromStr for Skew {
    type Err = ConfigError;

    fn from_str(s: &str) -> Result<Self, ConfigError> {
        let bad = |why: &str| ConfigError::Invalid(format!("--skew {s}: {why}"));
        match s.split_once(':') {
            None if s == "uniform" => Ok(Skew::Uniform),
            Some(("zipf", e)) => match e.parse::<f64>() {
                Ok(e) if e > 0.0 && e <= MAX_EXPONENT => Ok(Skew::Zipf(e)),
                Ok(_) => Err(bad(&format!(
                    "the exponent must be above 0 and at most {MAX_EXPONENT}"
                ))),
                Err(_) => Err(bad(&format!("`{e}` is not a number"))),
            },
            _ => Err(bad("expected uniform or zipf:S (S an exponent such as 1.5)")),
        }
    }
}

/// Draws ranks `0..n` with Zipf's law, by rejection-inversion: O(1) per draw, no table.
#[derive(Clone, Copy, Debug)]
pub struct Zipf {
    n: f64,
    exponent: f64,
    h_x1: f64,
    h_n: f64,
    s: f64,
}

impl Zipf {
    /// Ranks `0..n` (`n` ≥ 1) with exponent `exponent` (> 0).
    pub fn new(n: u64, exponent: f64) -> Self {
        let mut z = Zipf {
            n: n.max(1) as f64,
            exponent,
            h_x1: 0.0,
            h_n: 0.0,
            s: 0.0,
        };
        z.h_x1 = z.h_integral(1.5) - 1.0;
        z.h_n = z.h_integral(z.n + 0.5);
        z.s = 2.0 - z.h_integral_inverse(z.h_integral(2.5) - z.h(2.0));
        z
    }

    /// The rank (0 the most frequent) of draw `index` of the stream `seed`.
    pub fn rank(&self, index: u64, seed: u64) -> u64 {
        let stream = mix64(seed ^ 0x5a17_u64.rotate_left(40));
        for attempt in 0u64.. {
            let bits = mix64(index ^ mix64(stream.wrapping_add(attempt)));
            let u = (bits >> 11) as f64 * (1.0 / (1u64 << 53) as f64);
            let v = self.h_n + u * (self.h_x1 - self.h_n);
            let x = self.h_integral_inverse(v);
            let k = (x + 0.5).floor().clamp(1.0, self.n);
            if k - x <= self.s || v >= self.h_integral(k + 0.5) - self.h(k) {
                return k as u64 - 1;
            }
        }
        unreachable!("0u64.. does not end")
    }

    fn h(&self, x: f64) -> f64 {
        (-self.exponent * x.ln()).exp()
    }

    fn h_integral(&self, x: f64) -> f64 {
        let log_x = x.ln();
        helper2((1.0 - self.exponent) * log_x) * log_x
    }

    fn h_integral_inverse(&self, x: f64) -> f64 {
        let t = (x * (1.0 - self.exponent)).max(-1.0);
        (helper1(t) * x).exp()
    }
}

/// `ln(1 + x) / x`, exact near 0.
fn helper1(x: f64) -> f64 {
    if x.abs() > 1e-8 {
        x.ln_1p() / x
    } else {
        1.0 - x * (0.5 - x * (1.0 / 3.0 - 0.25 * x))
    }
}

/// `(e^x - 1) / x`, exact near 0.
fn helper2(x: f64) -> f64 {
    if x.abs() > 1e-8 {
        x.exp_m1() / x
    } else {
        1.0 + x * 0.5 * (1.0 + x / 3.0 * (1.0 + 0.25 * x))
    }
}

/// Which distinct key (its index among `keys`) the rank `rank` is, in phase `phase` of the
/// run (0 before `--skew-shift`, 1 after): ranks are spread over the keys by a seeded
/// rotation, another one per phase, so that the hot keys of phase 1 are others than phase 0's.
pub fn key_index(rank: u64, keys: u64, seed: u64, phase: u64) -> u64 {
    let keys = keys.max(1);
    let offset = mix64(seed ^ mix64(phase.wrapping_add(0x0005_4b1f))) % keys;
    (rank % keys + offset) % keys
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn skews_parse_and_print_as_the_flag_takes_them() {
        assert_eq!("uniform".parse::<Skew>().unwrap(), Skew::Uniform);
        assert_eq!("zipf:1.5".parse::<Skew>().unwrap(), Skew::Zipf(1.5));
        assert_eq!(Skew::Zipf(1.5).to_string(), "zipf:1.5");
        for bad in [
            "zipf", "zipf:", "zipf:x", "zipf:0", "zipf:-1", "zipf:11", "pareto:1",
        ] {
            let e = bad.parse::<Skew>().unwrap_err().to_string();
            assert!(e.contains("--skew"), "{bad}: {e}");
        }
    }

    #[test]
    fn zipf_draws_follow_the_law() {
        // Exponent 1.5 over 1000 ranks: rank 1 has weight 1 / H(1000, 1.5) = 0.3856...
        let n = 1000u64;
        let z = Zipf::new(n, 1.5);
        let harmonic: f64 = (1..=n).map(|r| (r as f64).powf(-1.5)).sum();
        let draws = 200_000u64;
        let mut counts = vec![0u64; n as usize];
        for i in 0..draws {
            let r = z.rank(i, 7);
            assert!(r < n);
            counts[r as usize] += 1;
        }
        for rank in [0usize, 1, 9, 99] {
            let expected = ((rank + 1) as f64).powf(-1.5) / harmonic * draws as f64;
            let got = counts[rank] as f64;
            assert!(
                (got - expected).abs() < 5.0 * expected.sqrt() + 1.0,
                "rank {rank}: {got} draws, expected {expected:.0}"
            );
        }
    }

    #[test]
    fn draws_are_a_function_of_index_and_seed() {
        let z = Zipf::new(1 << 20, 1.2);
        let a: Vec<u64> = (0..100).map(|i| z.rank(i, 1)).collect();
        let b: Vec<u64> = (0..100).map(|i| z.rank(i, 1)).collect();
        let c: Vec<u64> = (0..100).map(|i| z.rank(i, 2)).collect();
        assert_eq!(a, b);
        assert_ne!(a, c);
    }

    #[test]
    fn a_shift_makes_other_keys_hot() {
        let keys = 1_000_000;
        let before: Vec<u64> = (0..10).map(|r| key_index(r, keys, 3, 0)).collect();
        let after: Vec<u64> = (0..10).map(|r| key_index(r, keys, 3, 1)).collect();
        assert!(before.iter().all(|k| !after.contains(k)), "{before:?} {after:?}");
        assert!(before.iter().chain(&after).all(|k| *k < keys));
    }
}
