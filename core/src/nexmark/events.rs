//! Compact NEXMark events in logical time, made from the `nexmark` crate's generator.

use serde::{Deserialize, Serialize};

use super::NexmarkParams;
use crate::Time;
use crate::epoch::EpochLen;

/// A new person: a seller or bidder (Q3 and Q8 join on it).
#[derive(Clone, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub struct Person {
    /// The person's id, which auctions name as `seller` and bids as `bidder`.
    pub id: u64,
    /// Full name.
    pub name: String,
    /// City of residence.
    pub city: String,
    /// US state of residence (Q3 selects on it).
    pub state: String,
}

/// A new auction, open from its event's logical time until `expires`.
#[derive(Clone, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub struct Auction {
    /// The auction's id, which bids name as `auction`.
    pub id: u64,
    /// The selling person's id.
    pub seller: u64,
    /// The item's category (Q3 selects on it, Q4 averages per category).
    pub category: u64,
    /// The lowest price a winning bid may have, in cents.
    pub reserve: u64,
    /// Logical time at which the auction closes (bids at or after it do not count).
    pub expires: Time,
}

/// A bid on an open auction.
#[derive(Clone, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub struct Bid {
    /// The id of the auction bid on.
    pub auction: u64,
    /// The bidding person's id.
    pub bidder: u64,
    /// The amount bid, in (dollar) cents.
    pub price: u64,
}

/// One generated event, at the logical time of the epoch it is scheduled in.
#[derive(Clone, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub enum Event {
    /// A person registered.
    Person(Person),
    /// An auction opened.
    Auction(Auction),
    /// A bid was placed.
    Bid(Bid),
}

impl Event {
    /// Converts a generated event that is scheduled at logical time `time`, with `per_ms`
    /// logical times per millisecond.
    pub fn from_nexmark(event: nexmark::event::Event, time: Time, per_ms: u64) -> Self {
        use nexmark::event::Event as N;
        match event {
            N::Person(p) => Event::Person(Person {
                id: p.id as u64,
                name: p.name,
                city: p.city,
                state: p.state,
            }),
            N::Auction(a) => Event::Auction(Auction {
                id: a.id as u64,
                seller: a.seller as u64,
                category: a.category as u64,
                reserve: a.reserve as u64,
                expires: time + a.expires.saturating_sub(a.date_time).max(1) * per_ms,
            }),
            N::Bid(b) => Event::Bid(Bid {
                auction: b.auction as u64,
                bidder: b.bidder as u64,
                price: b.price as u64,
            }),
        }
    }
}

/// One worker's share of the event sequence: events `first + index, first + index + peers, ...`.
pub struct Source {
    generator: nexmark::EventGenerator,
    per_ms: u64,
    config: nexmark::config::NexmarkConfig,
    first: u64,
    step: u64,
    /// The index (from `first`) of the event the generator gives next.
    next: u64,
}

impl Source {
    /// The generator has no seed: NEXMark streams are the same for every `--seed`. (Shifting
    /// its `first_event_id` looks like one but makes auction ids repeat.)
    pub fn new(
        rate: u64,
        params: NexmarkParams,
        epoch: EpochLen,
        first: u64,
        index: usize,
        peers: usize,
    ) -> Self {
        let config = nexmark::config::NexmarkConfig {
            // Fixed: the wall clock would make every run different.
            base_time: 0,
            first_rate: rate.max(1) as usize,
            next_rate: rate.max(1) as usize,
            in_flight_auctions: params.in_flight_auctions.max(1),
            // Strings the queries never read cost generation time.
            avg_person_byte_size: 1,
            avg_auction_byte_size: 1,
            avg_bid_byte_size: 1,
            ..nexmark::config::NexmarkConfig::default()
        };
        Source {
            generator: nexmark::EventGenerator::new(config.clone())
                .with_offset(first + index as u64)
                .with_step(peers as u64),
            per_ms: epoch.per_ms(),
            config,
            first,
            step: peers as u64,
            next: index as u64,
        }
    }

    /// The next event of this worker's share, scheduled at `time`.
    pub fn next_at(&mut self, time: Time) -> Event {
        // The generator is an endless iterator.
        let event = self
            .generator
            .next()
            .unwrap_or_else(|| unreachable!("nexmark generators never end"));
        Event::from_nexmark(event, time, self.per_ms)
    }

    /// As a harness source: event `i` of the sequence. Indices arrive in order, so the
    /// generator's own position is used; one that starts elsewhere (a restarted computation
    /// sends its records again from the committed frontier) moves the generator there first.
    pub fn into_fn(mut self) -> impl FnMut(u64, Time) -> Event {
        move |i, time| {
            if i != self.next {
                self.generator = nexmark::EventGenerator::new(self.config.clone())
                    .with_offset(self.first + i)
                    .with_step(self.step);
            }
            self.next = i + self.step;
            self.next_at(time)
        }
    }
}
