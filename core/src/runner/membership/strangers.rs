//! Connections that have not yet proved the cluster's secret, and what they may cost.
//!
//! Every listener of the cluster (process 0's coordinator, each process's timely port) keeps
//! its unproven connections in one [`Unproven`] set, read without blocking by the thread
//! that accepts them: a silent connection costs a slot, not a thread, and stalls nobody.
//! The set is bounded; when full, the oldest connection of the address with the most is
//! dropped, so that a flood from one address cannot push out another's, and a member that
//! proves itself at once (within a round trip) is never the oldest. Each connection has a
//! deadline, and the listener's own deadline is checked between reads.
//!
//! A wrong proof is never told why. An address that sent more than [`GUESS_BURST`] of them
//! is throttled ([`Guesses`]): its further wrong proofs are held silently until their
//! connection's deadline instead of being closed at once, so that guessing costs time, and
//! a right proof from the same address (a real member behind the same NAT or on loopback)
//! is still taken at once.

use std::collections::VecDeque;
use std::net::IpAddr;
use std::time::{Duration, Instant};

use crate::rate::{PerAddress, Rate, client, evictee};

/// Wrong proofs an address may send in a burst before it is throttled.
pub const GUESS_BURST: u32 = 5;
/// Wrong proofs an address may send per second once its burst is spent.
pub const GUESS_PER_S: u32 = 1;

/// Unproven connections, each with the address it came from and when.
pub struct Unproven<T> {
    entries: VecDeque<Entry<T>>,
    max: usize,
    wait: Duration,
}

/// One unproven connection.
pub struct Entry<T> {
    /// Where it came from (its client: an IPv6 address's /64).
    pub addr: IpAddr,
    /// When it was accepted.
    pub since: Instant,
    /// Whether a wrong proof of it is held until its deadline (see [`Guesses`]).
    pub held: bool,
    /// What its protocol keeps of it.
    pub item: T,
}

/// What became of one unproven connection when it was read.
pub enum Step<R> {
    /// Nothing yet: it stays.
    Wait,
    /// It proved the secret: it leaves the set, as this.
    Proved(R),
    /// It failed: drop it now.
    Drop,
    /// A wrong proof from a throttled address: keep it, unread, until its deadline.
    Hold,
}

impl<T> Unproven<T> {
    /// At most `max` connections, each for at most `wait`.
    pub fn new(max: usize, wait: Duration) -> Self {
        Unproven {
            entries: VecDeque::new(),
            max: max.max(1),
            wait,
        }
    }

    /// Adds a connection from `addr`; returns the one dropped to make room, if any: the
    /// oldest of the address with the most.
    pub fn push(&mut self, addr: IpAddr, item: T) -> Option<T> {
        let addr = client(addr);
        let dropped = if self.entries.len() >= self.max {
            self.evict()
        } else {
            None
        };
        self.entries.push_back(Entry {
            addr,
            since: Instant::now(),
            held: false,
            item,
        });
        dropped
    }

    fn evict(&mut self) -> Option<T> {
        let at = evictee(self.entries.iter().map(|e| e.addr))?;
        self.entries.remove(at).map(|e| e.item)
    }

    /// Reads every connection not held with `read`; returns those that proved the secret,
    /// and drops those that failed or are past their deadline (handing them to `dropped`).
    pub fn poll<R>(
        &mut self,
        mut read: impl FnMut(&mut Entry<T>) -> Step<R>,
        mut dropped: impl FnMut(T),
    ) -> Vec<R> {
        let mut proved = Vec::new();
        let mut kept = VecDeque::with_capacity(self.entries.len());
        while let Some(mut entry) = self.entries.pop_front() {
            if entry.since.elapsed() >= self.wait {
                dropped(entry.item);
                continue;
            }
            if entry.held {
                kept.push_back(entry);
                continue;
            }
            match read(&mut entry) {
                Step::Wait => kept.push_back(entry),
                Step::Hold => {
                    entry.held = true;
                    kept.push_back(entry);
                }
                Step::Proved(r) => proved.push(r),
                Step::Drop => dropped(entry.item),
            }
        }
        self.entries = kept;
        proved
    }

    /// Connections waiting now.
    pub fn len(&self) -> usize {
        self.entries.len()
    }

    /// Whether none is waiting.
    pub fn is_empty(&self) -> bool {
        self.entries.is_empty()
    }
}

/// Wrong proofs per address, kept across connections.
#[derive(Default)]
pub struct Guesses {
    rates: PerAddress<Rate>,
}

impl Guesses {
    /// Notes a wrong proof from `addr`: [`Step::Drop`] while its burst lasts, then
    /// [`Step::Hold`].
    pub fn wrong<R>(&mut self, addr: IpAddr) -> Step<R> {
        let new = || Rate::new(GUESS_BURST, GUESS_PER_S);
        if self.rates.get(addr, new, Rate::is_full).take() {
            Step::Drop
        } else {
            Step::Hold
        }
    }

    /// Addresses remembered now.
    pub fn len(&self) -> usize {
        self.rates.len()
    }

    /// Whether no address is remembered.
    pub fn is_empty(&self) -> bool {
        self.rates.is_empty()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn at(last: u8) -> IpAddr {
        IpAddr::from([10, 0, 0, last])
    }

    #[test]
    fn a_flood_from_one_address_pushes_out_its_own_oldest_not_anothers() {
        let mut set = Unproven::new(4, Duration::from_secs(60));
        assert!(set.push(at(1), "member").is_none());
        for i in 0..3 {
            assert!(set.push(at(9), format!("flood {i}").leak() as &str).is_none());
        }
        for i in 3..20 {
            let dropped = set.push(at(9), format!("flood {i}").leak() as &str);
            assert!(dropped.is_some_and(|d| d.starts_with("flood")), "{dropped:?}");
        }
        let proved = set.poll(
            |e| {
                if e.item == "member" {
                    Step::Proved(e.item)
                } else {
                    Step::Wait
                }
            },
            drop,
        );
        assert_eq!(proved, vec!["member"]);
    }

    #[test]
    fn on_one_address_the_newest_survives_a_flood() {
        let mut set = Unproven::new(4, Duration::from_secs(60));
        for i in 0..10 {
            set.push(at(1), i);
        }
        set.push(at(1), 99);
        let proved = set.poll(
            |e| {
                if e.item == 99 {
                    Step::Proved(99)
                } else {
                    Step::Wait
                }
            },
            drop,
        );
        assert_eq!(proved, vec![99]);
        assert_eq!(set.len(), 3);
    }

    #[test]
    fn connections_past_their_deadline_and_failed_ones_are_dropped_held_ones_kept_unread() {
        let mut set = Unproven::new(8, Duration::ZERO);
        set.push(at(1), 1);
        let mut dropped = Vec::new();
        let proved: Vec<i32> = set.poll(|_| Step::Proved(1), |d| dropped.push(d));
        assert!(
            proved.is_empty() && dropped == vec![1],
            "a connection out of time is not read"
        );

        let mut set = Unproven::new(8, Duration::from_secs(60));
        set.push(at(1), 1);
        set.push(at(1), 2);
        let mut reads = 0;
        let mut dropped = Vec::new();
        for _ in 0..3 {
            let _: Vec<()> = set.poll(
                |e| {
                    reads += 1;
                    if e.item == 1 { Step::Drop } else { Step::Hold }
                },
                |d| dropped.push(d),
            );
        }
        assert_eq!((reads, dropped, set.len()), (2, vec![1], 1));
    }

    #[test]
    fn wrong_proofs_are_dropped_at_once_for_a_burst_then_held() {
        let mut guesses = Guesses::default();
        for _ in 0..GUESS_BURST {
            assert!(matches!(guesses.wrong::<()>(at(1)), Step::Drop));
        }
        assert!(matches!(guesses.wrong::<()>(at(1)), Step::Hold));
        assert!(
            matches!(guesses.wrong::<()>(at(2)), Step::Drop),
            "another address is not throttled"
        );
        for i in 0..(crate::rate::ADDRESSES as u32 + 10) {
            guesses.wrong::<()>(IpAddr::from(i.to_be_bytes()));
        }
        assert!(guesses.len() <= crate::rate::ADDRESSES);
    }
}
