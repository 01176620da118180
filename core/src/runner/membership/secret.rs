//! The cluster's secret, and the proofs of it that every connection between its processes
//! starts with.
//!
//! A process proves it holds the secret by an HMAC-SHA256, keyed with the secret, over a
//! label naming the step, nonces from both ends and what the step claims (a process index,
//! a generation); the other end checks it in constant time. The nonces make a proof good
//! for one connection only: one seen on the network cannot be replayed. A wrong proof is
//! never told why.
//!
//! A cluster whose hosts are all loopback may run without a secret ([`Secret::none`]): the
//! proofs are then keyed with nothing, which anyone on the machine can compute, and the
//! risk is stated when the run starts. A cluster with any other host needs one.

use std::fmt;
use std::net::IpAddr;

use hmac::{Hmac, Mac};
use sha2::Sha256;

/// Where a cluster's secret comes from when `--cluster-token` is not given.
pub const TOKEN_ENV: &str = "MEGAFLUX_CLUSTER_TOKEN";

/// The fewest bytes a given secret may have: shorter ones are guessed.
pub const MIN_TOKEN_BYTES: usize = 16;

/// Bytes of a nonce.
pub const NONCE_BYTES: usize = 16;

/// Bytes of a proof (an HMAC-SHA256).
pub const PROOF_BYTES: usize = 32;

/// A nonce: fresh random bytes, one per connection and end.
pub type Nonce = [u8; NONCE_BYTES];

/// A proof of the secret.
pub type Proof = [u8; PROOF_BYTES];

/// The secret every process of one cluster holds.
#[derive(Clone)]
pub struct Secret {
    key: Vec<u8>,
}

/// Why a secret cannot be used.
#[derive(Debug, thiserror::Error)]
pub enum SecretError {
    /// Too short to resist guessing.
    #[error(
        "the cluster token has {0} bytes: give one of at least {MIN_TOKEN_BYTES} (for example `head -c 24 /dev/urandom | base64`)"
    )]
    Short(usize),
    /// The system's random source failed.
    #[error("the system's random source failed: {0}")]
    Random(String),
    /// A host other than loopback, and no secret.
    #[error(
        "the cluster has a host that is not loopback ({0}), so its processes must prove a shared secret: give every process the same --cluster-token, --cluster-token-file or ${TOKEN_ENV}"
    )]
    Needed(String),
}

impl Secret {
    /// The secret `token` (trailing line ends dropped, as a token file has them).
    pub fn new(token: &str) -> Result<Self, SecretError> {
        let token = token.trim_end_matches(['\r', '\n']);
        if token.len() < MIN_TOKEN_BYTES {
            return Err(SecretError::Short(token.len()));
        }
        Ok(Secret {
            key: token.as_bytes().to_vec(),
        })
    }

    /// No secret: proofs anyone can compute (a loopback cluster on a machine of its own).
    pub fn none() -> Self {
        Secret { key: Vec::new() }
    }

    /// Whether a secret was given.
    pub fn is_given(&self) -> bool {
        !self.key.is_empty()
    }

    /// The proof, for the step `label`, of what `parts` say.
    pub fn prove(&self, label: &str, parts: &[&[u8]]) -> Proof {
        self.mac(label, parts).finalize().into_bytes().into()
    }

    /// Whether `proof` is the proof of `parts` for `label`, compared in constant time.
    pub fn verify(&self, label: &str, parts: &[&[u8]], proof: &[u8]) -> bool {
        same(&self.prove(label, parts), proof)
    }

    fn mac(&self, label: &str, parts: &[&[u8]]) -> Hmac<Sha256> {
        // HMAC takes keys of any length (a long one is hashed first): this never fails.
        let mut mac = <Hmac<Sha256> as hmac::digest::KeyInit>::new_from_slice(&self.key)
            .unwrap_or_else(|_| unreachable!("HMAC takes keys of any length"));
        // Each part is length-prefixed, so that no two lists of parts prove the same.
        for part in std::iter::once(label.as_bytes()).chain(parts.iter().copied()) {
            mac.update(&(part.len() as u64).to_le_bytes());
            mac.update(part);
        }
        mac
    }

    /// Checks that a cluster of `hosts` may run with this secret: with none, only if every
    /// host is loopback.
    pub fn check_hosts(&self, hosts: &[String]) -> Result<(), SecretError> {
        if self.is_given() {
            return Ok(());
        }
        match hosts.iter().find(|h| !is_loopback(h)) {
            Some(host) => Err(SecretError::Needed(host.clone())),
            None => Ok(()),
        }
    }
}

impl Default for Secret {
    fn default() -> Self {
        Secret::none()
    }
}

impl fmt::Debug for Secret {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        // Never the key: a Debug of a config goes to logs.
        f.write_str(if self.is_given() {
            "Secret(given)"
        } else {
            "Secret(none)"
        })
    }
}

impl PartialEq for Secret {
    fn eq(&self, other: &Self) -> bool {
        use subtle::ConstantTimeEq;
        bool::from(self.key.ct_eq(&other.key))
    }
}

/// Whether a proof given is the one expected, compared in constant time (the time depends
/// on the lengths only).
pub fn same(expected: &[u8], given: &[u8]) -> bool {
    use subtle::ConstantTimeEq;
    bool::from(expected.ct_eq(given))
}

/// A fresh nonce from the system's random source.
pub fn nonce() -> Result<Nonce, SecretError> {
    let mut n = [0u8; NONCE_BYTES];
    getrandom::getrandom(&mut n).map_err(|e| SecretError::Random(e.to_string()))?;
    Ok(n)
}

/// Whether a host list's entry (`host:port`, perhaps followed by more words) names a
/// loopback host: `localhost` or a loopback address; any other name may resolve anywhere.
pub fn is_loopback(entry: &str) -> bool {
    let address = entry.split_whitespace().next().unwrap_or_default();
    let host = address.rsplit_once(':').map_or(address, |(h, _)| h);
    let host = host.trim_start_matches('[').trim_end_matches(']');
    host.eq_ignore_ascii_case("localhost") || host.parse::<IpAddr>().is_ok_and(|ip| ip.is_loopback())
}

#[cfg(test)]
mod tests {
    use super::*;

    const TOKEN: &str = "0123456789abcdef-cluster";

    #[test]
    fn a_proof_holds_only_for_its_secret_label_and_parts() {
        let secret = Secret::new(TOKEN).unwrap();
        let proof = secret.prove("hello", &[b"ab", b"c"]);
        assert!(secret.verify("hello", &[b"ab", b"c"], &proof));
        assert!(!secret.verify("join", &[b"ab", b"c"], &proof));
        // The same bytes cut elsewhere are other parts.
        assert!(!secret.verify("hello", &[b"a", b"bc"], &proof));
        let other = Secret::new("0123456789abcdef-clustes").unwrap();
        assert!(!other.verify("hello", &[b"ab", b"c"], &proof));
        assert!(!Secret::none().verify("hello", &[b"ab", b"c"], &proof));
        assert!(!secret.verify("hello", &[b"ab", b"c"], &proof[..31]));
    }

    #[test]
    fn short_tokens_are_refused_and_file_line_ends_dropped() {
        assert!(matches!(Secret::new("short"), Err(SecretError::Short(5))));
        assert_eq!(
            Secret::new(&format!("{TOKEN}\n")).unwrap(),
            Secret::new(TOKEN).unwrap()
        );
        assert!(!format!("{:?}", Secret::new(TOKEN).unwrap()).contains(TOKEN));
    }

    #[test]
    fn only_an_all_loopback_cluster_runs_without_a_secret() {
        let local = [
            "127.0.0.1:2101".to_string(),
            "localhost:2102".into(),
            "[::1]:2103".into(),
        ];
        assert!(Secret::none().check_hosts(&local).is_ok());
        let mixed = ["127.0.0.1:2101".to_string(), "10.0.0.2:2101".into()];
        let err = Secret::none().check_hosts(&mixed).unwrap_err().to_string();
        assert!(
            err.contains("10.0.0.2:2101") && err.contains("--cluster-token"),
            "{err}"
        );
        assert!(Secret::new(TOKEN).unwrap().check_hosts(&mixed).is_ok());
        assert!(!is_loopback("db.example:2101"));
    }

    #[test]
    fn nonces_differ() {
        assert_ne!(nonce().unwrap(), nonce().unwrap());
    }
}
