//! What each client address may spend, kept across its connections: a client that
//! reconnects starts with the budget its last connection left, not a fresh one. An IPv6
//! client is its /64.
//!
//! An address has three buckets: commands that reach the job, refusals the collector
//! answers (commands without the token or over the rate), and failed tokens. Once its
//! refusals are spent, its connections are not read until they refill, so that parsing a
//! flood costs the collector no more than answering a trickle. At most [`ADDRESSES`] are
//! remembered; when full, those whose buckets are full again are forgotten first.

use std::net::IpAddr;
use std::sync::Mutex;
use std::time::Duration;

pub use megaflux::rate::ADDRESSES;
use megaflux::rate::PerAddress;

use super::limits::{Limits, Rate};

/// Refusals an address may be answered in a burst, and per second after it.
pub const REFUSALS_BURST: u32 = 256;
/// Refusals an address may be answered per second once its burst is spent.
pub const REFUSALS_PER_S: u32 = 64;
/// Failed tokens an address may present in a burst; then [`AUTH_PER_S`] a second.
pub const AUTH_BURST: u32 = 5;
/// Failed tokens an address may present once its burst is spent: one a second.
pub const AUTH_PER_S: u32 = 1;

struct Budget {
    commands: Rate,
    refusals: Rate,
    auth: Rate,
}

/// Every address's buckets.
pub struct Addresses {
    limits: Limits,
    budgets: Mutex<PerAddress<Budget>>,
}

/// What a command from an address may do.
#[derive(Debug, PartialEq, Eq)]
pub enum Spend {
    /// Pass it on.
    Command,
    /// Answer it with a refusal.
    Refuse,
    /// Answer nothing, and read nothing more from the connection for this long.
    Wait(Duration),
}

impl Addresses {
    /// Buckets for the rates in `limits`.
    pub fn new(limits: &Limits) -> Self {
        Addresses {
            limits: limits.clone(),
            budgets: Mutex::new(PerAddress::default()),
        }
    }

    fn with<T>(&self, addr: IpAddr, f: impl FnOnce(&mut Budget) -> T) -> T {
        let mut budgets = self
            .budgets
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner());
        let limits = &self.limits;
        let new = || Budget {
            commands: Rate::new(limits.commands_burst, limits.commands_per_s),
            refusals: Rate::new(REFUSALS_BURST, REFUSALS_PER_S),
            auth: Rate::new(AUTH_BURST, AUTH_PER_S),
        };
        let at_rest = |b: &mut Budget| b.commands.is_full() && b.refusals.is_full() && b.auth.is_full();
        f(budgets.get(addr, new, at_rest))
    }

    /// Spends for one command from `addr`, which holds the token or not.
    pub fn command(&self, addr: IpAddr, holds_token: bool) -> Spend {
        self.with(addr, |b| {
            if holds_token && b.commands.take() {
                Spend::Command
            } else if b.refusals.take() {
                Spend::Refuse
            } else {
                Spend::Wait(b.refusals.until_next())
            }
        })
    }

    /// Whether `addr` may present a token now: `Err` is how long until it may.
    pub fn may_try_token(&self, addr: IpAddr) -> Result<(), Duration> {
        self.with(addr, |b| {
            if b.auth.peek() {
                Ok(())
            } else {
                Err(b.auth.until_next())
            }
        })
    }

    /// Notes that `addr` presented a wrong token.
    pub fn failed_token(&self, addr: IpAddr) {
        self.with(addr, |b| {
            b.auth.take();
        });
    }

    /// Addresses remembered now.
    pub fn len(&self) -> usize {
        self.budgets.lock().map_or(0, |b| b.len())
    }

    /// Whether no address is remembered.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn limits() -> Limits {
        Limits {
            commands_burst: 3,
            commands_per_s: 0,
            ..Limits::default()
        }
    }

    #[test]
    fn an_address_keeps_its_budget_across_connections() {
        let addresses = Addresses::new(&limits());
        let a: IpAddr = [10, 0, 0, 1].into();
        let b: IpAddr = [10, 0, 0, 2].into();
        for _ in 0..3 {
            assert_eq!(addresses.command(a, true), Spend::Command);
        }
        // "Another connection" of the same address gets no fresh burst; another address does.
        assert_eq!(addresses.command(a, true), Spend::Refuse);
        assert_eq!(addresses.command(b, true), Spend::Command);
        // Refusals run out too: then the connection waits.
        let waits = (0..REFUSALS_BURST + 1)
            .filter(|_| matches!(addresses.command(a, false), Spend::Wait(_)))
            .count();
        assert_eq!(waits, 2);
    }

    #[test]
    fn an_ipv6_host_is_its_64() {
        let addresses = Addresses::new(&limits());
        let host = |last: u16| IpAddr::from([0x2001, 0xdb8, 0, 1, 0, 0, 0, last]);
        for last in 0..3 {
            assert_eq!(addresses.command(host(last), true), Spend::Command);
        }
        assert_eq!(addresses.command(host(9), true), Spend::Refuse);
        assert_eq!(
            addresses.command(IpAddr::from([0x2001, 0xdb8, 0, 2, 0, 0, 0, 1]), true),
            Spend::Command
        );
    }

    #[test]
    fn failed_tokens_are_throttled() {
        let addresses = Addresses::new(&limits());
        let a: IpAddr = [10, 0, 0, 1].into();
        for _ in 0..AUTH_BURST {
            assert!(addresses.may_try_token(a).is_ok());
            addresses.failed_token(a);
        }
        let wait = addresses.may_try_token(a).unwrap_err();
        assert!(wait <= Duration::from_secs(1), "{wait:?}");
    }

    #[test]
    fn the_remembered_addresses_are_bounded() {
        let addresses = Addresses::new(&limits());
        for i in 0..(ADDRESSES as u32 + 100) {
            addresses.command(IpAddr::from(i.to_be_bytes()), true);
        }
        assert!(addresses.len() <= ADDRESSES);
    }
}
