//! Rates that bound what a stranger on the network may cost: a token bucket, the client an
//! address stands for, what is kept per client, and which waiting connection gives way when
//! all places are taken. The collector's per-address budgets and waiting connections, and
//! the cluster's throttle on failed proofs of its secret and its unproven connections, are
//! all built of these.

use std::collections::HashMap;
use std::net::IpAddr;
use std::time::{Duration, Instant};

/// A token bucket: `burst` at once, refilled at `per_s`.
#[derive(Debug)]
pub struct Rate {
    tokens: f64,
    burst: f64,
    per_s: f64,
    at: Instant,
}

impl Rate {
    /// A full bucket of `burst` tokens, refilled at `per_s` tokens a second.
    pub fn new(burst: u32, per_s: u32) -> Self {
        Rate {
            tokens: f64::from(burst),
            burst: f64::from(burst),
            per_s: f64::from(per_s),
            at: Instant::now(),
        }
    }

    fn refill(&mut self) {
        let now = Instant::now();
        let refill = now.duration_since(self.at).as_secs_f64() * self.per_s;
        self.tokens = (self.tokens + refill).min(self.burst);
        self.at = now;
    }

    /// Whether a token is there, without taking it.
    pub fn peek(&mut self) -> bool {
        self.refill();
        self.tokens >= 1.0
    }

    /// Whether the bucket is full (it has been idle long enough to forget).
    pub fn is_full(&mut self) -> bool {
        self.refill();
        self.tokens >= self.burst
    }

    /// How long until a token is there (a minute for a bucket that never refills).
    pub fn until_next(&mut self) -> Duration {
        self.refill();
        if self.tokens >= 1.0 {
            Duration::ZERO
        } else if self.per_s <= 0.0 {
            Duration::from_secs(60)
        } else {
            Duration::from_secs_f64(((1.0 - self.tokens) / self.per_s).min(60.0))
        }
    }

    /// Takes one token if there is one.
    pub fn take(&mut self) -> bool {
        self.refill();
        if self.tokens >= 1.0 {
            self.tokens -= 1.0;
            true
        } else {
            false
        }
    }
}

/// The client an address stands for: an IPv6 address's /64 (one host is given a whole
/// /64, and would otherwise have a fresh budget per address), an IPv4 address as itself.
pub fn client(addr: IpAddr) -> IpAddr {
    match addr {
        IpAddr::V6(v6) => match v6.to_ipv4_mapped() {
            Some(v4) => IpAddr::V4(v4),
            None => IpAddr::V6((u128::from(v6) & !((1u128 << 64) - 1)).into()),
        },
        v4 => v4,
    }
}

/// Client addresses remembered at once by a [`PerAddress`] of the default size.
pub const ADDRESSES: usize = 4096;

/// Something kept per client (see [`client`]) across its connections, for at most a bounded
/// number of clients: when full, those back at rest are forgotten first, then any one (which
/// regains a fresh entry, once), so that a stranger cycling through addresses costs a bounded
/// table, not memory without end.
#[derive(Debug)]
pub struct PerAddress<B> {
    max: usize,
    entries: HashMap<IpAddr, B>,
}

impl<B> Default for PerAddress<B> {
    fn default() -> Self {
        PerAddress::new(ADDRESSES)
    }
}

impl<B> PerAddress<B> {
    /// Room for `max` clients (at least one).
    pub fn new(max: usize) -> Self {
        PerAddress {
            max: max.max(1),
            entries: HashMap::new(),
        }
    }

    /// The entry of `addr`'s client, made by `make` if it has none; making room first, if
    /// the table is full, by forgetting those `at_rest` says are.
    pub fn get(
        &mut self,
        addr: IpAddr,
        make: impl FnOnce() -> B,
        mut at_rest: impl FnMut(&mut B) -> bool,
    ) -> &mut B {
        let addr = client(addr);
        if !self.entries.contains_key(&addr) && self.entries.len() >= self.max {
            self.entries.retain(|_, b| !at_rest(b));
            if self.entries.len() >= self.max
                && let Some(any) = self.entries.keys().next().copied()
            {
                self.entries.remove(&any);
            }
        }
        self.entries.entry(addr).or_insert_with(make)
    }

    /// Clients remembered now.
    pub fn len(&self) -> usize {
        self.entries.len()
    }

    /// Whether no client is remembered.
    pub fn is_empty(&self) -> bool {
        self.entries.is_empty()
    }
}

/// Which of the waiting connections, given by their clients oldest first, gives way to a new
/// one when every place is taken: the oldest of the client holding the most places (of the
/// client that came first, on a tie). A flood from one client pushes out its own, and a
/// member that proves itself within a round trip is never the oldest of the most.
pub fn evictee(clients: impl IntoIterator<Item = IpAddr>) -> Option<usize> {
    // (client, places, its oldest): few places are waiting, so a list beats a map.
    let mut held: Vec<(IpAddr, usize, usize)> = Vec::new();
    for (i, ip) in clients.into_iter().enumerate() {
        match held.iter_mut().find(|(a, _, _)| *a == ip) {
            Some(entry) => entry.1 += 1,
            None => held.push((ip, 1, i)),
        }
    }
    let most = held.iter().map(|(_, n, _)| *n).max()?;
    held.iter()
        .find(|(_, n, _)| *n == most)
        .map(|(_, _, first)| *first)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_client_holding_the_most_places_gives_its_oldest_up() {
        let a: IpAddr = [10, 0, 0, 1].into();
        let b: IpAddr = [10, 0, 0, 2].into();
        assert_eq!(evictee([b, a, a, b, a]), Some(1), "a's oldest, not b's older one");
        assert_eq!(evictee([b, a]), Some(0), "a tie: the client that came first");
        assert_eq!(evictee([]), None);
    }

    #[test]
    fn the_remembered_clients_are_bounded_and_those_at_rest_go_first() {
        let mut table: PerAddress<u32> = PerAddress::new(3);
        let at = |last: u8| IpAddr::from([10, 0, 0, last]);
        *table.get(at(1), || 0, |_| false) += 1;
        *table.get(at(2), || 0, |_| false) += 5;
        *table.get(at(3), || 0, |_| false) += 5;
        // Full: the one at rest (count 1) goes, the busy ones stay.
        table.get(at(4), || 0, |n| *n < 2);
        assert_eq!(table.len(), 3);
        assert_eq!(*table.get(at(2), || 0, |_| false), 5);
        assert_eq!(*table.get(at(1), || 0, |_| true), 0, "forgotten, made anew");
        for i in 0..100 {
            table.get(IpAddr::from([10, 1, 0, i]), || 0, |_| false);
        }
        assert_eq!(table.len(), 3);
    }

    #[test]
    fn a_bucket_allows_its_burst_then_refuses() {
        let mut rate = Rate::new(3, 0);
        assert!((0..3).all(|_| rate.take()));
        assert!(!rate.take());
    }

    #[test]
    fn an_ipv6_host_is_its_64_and_a_mapped_v4_is_itself() {
        let a: IpAddr = "2001:db8:0:1::5".parse().unwrap();
        let b: IpAddr = "2001:db8:0:1::9".parse().unwrap();
        assert_eq!(client(a), client(b));
        let mapped: IpAddr = "::ffff:10.0.0.1".parse().unwrap();
        assert_eq!(client(mapped), IpAddr::from([10, 0, 0, 1]));
    }
}
