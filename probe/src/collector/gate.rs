//! Who may connect, and who may command: the token and the address decide.
//!
//! On a loopback address anyone on the machine may watch, and the token (if there is one)
//! guards exporters and commands. On any other address the token is required, and every
//! client of every role must present it. Tokens are compared in constant time.

use std::net::SocketAddr;

use subtle::ConstantTimeEq;

use crate::error::ProbeError;
use crate::wire::{Role, TOKEN_ENV};

/// The collector's admission rule.
#[derive(Clone, Debug)]
pub struct Gate {
    token: Option<Vec<u8>>,
    public: bool,
}

impl Gate {
    /// The rule for serving on `serve` with `token`. A public address without a token, and
    /// an empty token anywhere, are refused.
    pub fn new(serve: Option<SocketAddr>, token: Option<&str>) -> Result<Gate, ProbeError> {
        if token.is_some_and(str::is_empty) {
            return Err(ProbeError::Config(format!(
                "the token is empty (--token or {TOKEN_ENV}): an empty token protects nothing"
            )));
        }
        let public = serve.is_some_and(|a| !a.ip().is_loopback());
        if let Some(addr) = serve
            && public
            && token.is_none()
        {
            return Err(ProbeError::Config(format!(
                "serving on {addr}, which is not a loopback address, needs a token (--token or {TOKEN_ENV})"
            )));
        }
        Ok(Gate {
            token: token.map(|t| t.as_bytes().to_vec()),
            public,
        })
    }

    /// Whether `presented` is the token (any client holds it when there is none). The time
    /// it takes depends on the presented token's length only, not on the token's: both are
    /// compared byte by byte over the presented length, the token repeated.
    pub fn holds(&self, presented: Option<&str>) -> bool {
        match (&self.token, presented) {
            (None, _) => true,
            (Some(token), Some(p)) => {
                let p = p.as_bytes();
                let same_length = (token.len() as u64).ct_eq(&(p.len() as u64));
                let cycled: Vec<u8> = token.iter().copied().cycle().take(p.len()).collect();
                bool::from(same_length & cycled.as_slice().ct_eq(p))
            }
            (Some(_), None) => false,
        }
    }

    /// Whether a client of `role` that does (`holds`) or does not hold the token may
    /// connect: `Err` says why not.
    pub fn admit(&self, role: &Role, holds: bool) -> Result<(), String> {
        match role {
            _ if holds => Ok(()),
            Role::Exporter { .. } => Err("exporters need the collector's token".into()),
            Role::Subscriber if self.public => {
                Err("this collector serves a public address: subscribers need its token".into())
            }
            Role::Subscriber => Ok(()),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn addr(s: &str) -> Option<SocketAddr> {
        Some(s.parse().unwrap())
    }

    #[test]
    fn empty_and_missing_tokens_are_refused_where_they_protect_nothing() {
        assert!(Gate::new(addr("127.0.0.1:0"), Some("")).is_err());
        assert!(Gate::new(None, Some("")).is_err());
        assert!(Gate::new(addr("0.0.0.0:0"), None).is_err());
        assert!(Gate::new(addr("127.0.0.1:0"), None).is_ok());
    }

    #[test]
    fn public_addresses_need_the_token_for_every_role() {
        let gate = Gate::new(addr("0.0.0.0:0"), Some("s3cret")).unwrap();
        assert!(gate.holds(Some("s3cret")));
        assert!(!gate.holds(Some("s3cre")));
        assert!(!gate.holds(Some("s3cret ")));
        assert!(!gate.holds(Some("s3crets3cret")), "the token twice");
        assert!(!gate.holds(Some("")));
        assert!(!gate.holds(None));
        assert!(gate.admit(&Role::Subscriber, false).is_err());
        assert!(gate.admit(&Role::Exporter { process: 1 }, false).is_err());
        assert!(gate.admit(&Role::Subscriber, true).is_ok());

        let local = Gate::new(addr("127.0.0.1:0"), Some("s3cret")).unwrap();
        assert!(local.admit(&Role::Subscriber, false).is_ok());
        assert!(local.admit(&Role::Exporter { process: 1 }, false).is_err());
        let open = Gate::new(addr("127.0.0.1:0"), None).unwrap();
        assert!(open.holds(None));
    }
}
