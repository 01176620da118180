//! The queries, written once against [`Operators`], which makes either the migrateable
//! operators or their native twins.

use std::collections::{BTreeMap, VecDeque};

use rustc_hash::FxHashMap;
use serde::{Deserialize, Serialize};
use timely::ExchangeData;
use timely::dataflow::StreamVec;
use timely::dataflow::operators::vec::{Filter, Map};

use super::{Auction, Bid, Event, Person, Query, Windows};
use crate::Time;
use crate::bins::hash_key;
use crate::job::Operators;
use crate::operator::Bin;
use crate::size::StateSize;

/// Every query's output, in one type so that one harness runs them all.
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
pub enum Output {
    /// Q1: (auction, bidder, price in euro cents).
    Q1(u64, u64, u64),
    /// Q2: (auction, price).
    Q2(u64, u64),
    /// Q3: (name, city, state, auction).
    Q3(String, String, String, u64),
    /// Q4: (category, average closing price so far).
    Q4(u64, u64),
    /// Q5: (window end, auction, bids in the window): the auctions with the most bids.
    Q5(Time, u64, u64),
    /// Q6: (seller, average of its last ten closing prices).
    Q6(u64, u64),
    /// Q7: (window end, auction, price, bidder): the highest bids of the window.
    Q7(Time, u64, u64, u64),
    /// Q8: (person, name, auction, window start): new people with auctions in their window.
    Q8(u64, String, u64, Time),
}

/// The persons' states Q3 looks for.
pub(crate) const Q3_STATES: [&str; 3] = ["or", "id", "ca"];
/// The category Q3 looks for.
pub(crate) const Q3_CATEGORY: u64 = 10;
/// How many closing prices Q6 averages.
pub(crate) const Q6_LAST: usize = 10;

fn persons<'s>(data: StreamVec<'s, Time, Event>) -> StreamVec<'s, Time, Person> {
    data.flat_map(|e| match e {
        Event::Person(p) => Some(p),
        _ => None,
    })
}

fn auctions<'s>(data: StreamVec<'s, Time, Event>) -> StreamVec<'s, Time, Auction> {
    data.flat_map(|e| match e {
        Event::Auction(a) => Some(a),
        _ => None,
    })
}

fn bids<'s>(data: StreamVec<'s, Time, Event>) -> StreamVec<'s, Time, Bid> {
    data.flat_map(|e| match e {
        Event::Bid(b) => Some(b),
        _ => None,
    })
}

/// An auction Q4 and Q6 are following, and its best valid bid so far.
#[derive(Clone, Debug, Serialize, Deserialize)]
struct Open {
    category: u64,
    seller: u64,
    reserve: u64,
    expires: Time,
    best: Option<u64>,
}

/// Q4 and Q6's first stage state: open auctions, and their ids by closing time.
#[derive(Default, Serialize, Deserialize)]
struct Auctions {
    open: FxHashMap<u64, Open>,
    closing: BTreeMap<Time, Vec<u64>>,
}

impl StateSize for Auctions {
    /// Open auctions: `closing` indexes the same auctions by time.
    fn keys(&self) -> usize {
        self.open.len()
    }
    fn bytes(&self) -> usize {
        StateSize::bytes(&self.open)
            + StateSize::bytes(&self.closing)
            + self.open.len() * std::mem::size_of::<u64>()
    }
}

/// Q3: per person, the person once seen and the auctions waiting for them.
type Q3State = FxHashMap<u64, (Option<Person>, Vec<u64>)>;
/// Q7: per window end, this bin's highest bids as (price, auction, bidder).
type Q7State = BTreeMap<Time, Vec<(u64, u64, u64)>>;
/// Q8: per (window start, person), the person's name once seen and auctions waiting for it.
type Q8State = BTreeMap<(Time, u64), (Option<String>, Vec<u64>)>;

/// A closed auction with a winning bid: (category, seller, price).
type Closed = (u64, u64, u64);

/// Joins auctions with their bids; when an auction closes, emits its winning price: the
/// highest bid at or above the reserve, placed from the auction's creation until (not
/// including) its expiry.
fn closed_auctions<'s>(
    data: StreamVec<'s, Time, Event>,
    backend: &Operators<'s>,
) -> StreamVec<'s, Time, Closed> {
    backend.binary(
        auctions(data.clone()),
        bids(data),
        "closing",
        |a: &Auction| hash_key(&a.id),
        |b: &Bid| hash_key(&b.auction),
        |t, bin: &mut Bin<Auctions>, new: &mut Vec<Auction>, bids: &mut Vec<Bid>, out: &mut Vec<Closed>| {
            // Popping costs only the closing auctions; `split_off` would walk the open ones.
            while let Some(entry) = bin.state.closing.first_entry()
                && *entry.key() <= t
            {
                for id in entry.remove() {
                    if let Some(open) = bin.state.open.remove(&id)
                        && let Some(price) = open.best
                    {
                        out.push((open.category, open.seller, price));
                    }
                }
            }
            for a in new.drain(..) {
                bin.state.closing.entry(a.expires).or_default().push(a.id);
                bin.schedule(a.expires);
                let open = Open {
                    category: a.category,
                    seller: a.seller,
                    reserve: a.reserve,
                    expires: a.expires,
                    best: None,
                };
                bin.state.open.insert(a.id, open);
            }
            for b in bids.drain(..) {
                if let Some(open) = bin.state.open.get_mut(&b.auction)
                    && t < open.expires
                    && b.price >= open.reserve
                {
                    open.best = open.best.max(Some(b.price));
                }
            }
        },
    )
}

/// Q4's running average per category: all closings of a time enter before its output.
fn average_by_category<'s>(
    closed: StreamVec<'s, Time, Closed>,
    backend: &Operators<'s>,
) -> StreamVec<'s, Time, Output> {
    backend.unary(
        closed,
        "q4.average",
        |c: &Closed| hash_key(&c.0),
        |_t, bin: &mut Bin<FxHashMap<u64, (u64, u64)>>, closed: &mut Vec<Closed>, out: &mut Vec<Output>| {
            closed.sort_unstable();
            let mut i = 0;
            while i < closed.len() {
                let category = closed[i].0;
                let entry = bin.state.entry(category).or_default();
                while i < closed.len() && closed[i].0 == category {
                    entry.0 += closed[i].2;
                    entry.1 += 1;
                    i += 1;
                }
                out.push(Output::Q4(category, entry.0 / entry.1));
            }
            closed.clear();
        },
    )
}

/// Q6's average of each seller's last closing prices (a time's prices enter in ascending order).
fn average_by_seller<'s>(
    closed: StreamVec<'s, Time, Closed>,
    backend: &Operators<'s>,
) -> StreamVec<'s, Time, Output> {
    backend.unary(
        closed,
        "q6.average",
        |c: &Closed| hash_key(&c.1),
        |_t,
         bin: &mut Bin<FxHashMap<u64, VecDeque<u64>>>,
         closed: &mut Vec<Closed>,
         out: &mut Vec<Output>| {
            closed.sort_unstable_by_key(|c| (c.1, c.2));
            let mut i = 0;
            while i < closed.len() {
                let seller = closed[i].1;
                let last = bin.state.entry(seller).or_default();
                while i < closed.len() && closed[i].1 == seller {
                    if last.len() == Q6_LAST {
                        last.pop_front();
                    }
                    last.push_back(closed[i].2);
                    i += 1;
                }
                out.push(Output::Q6(seller, last.iter().sum::<u64>() / last.len() as u64));
            }
            closed.clear();
        },
    )
}

/// Builds `query` with the stateful operators `backend` makes.
pub(crate) fn build<'s>(
    query: Query,
    windows: Windows,
    data: StreamVec<'s, Time, Event>,
    backend: &Operators<'s>,
) -> StreamVec<'s, Time, Output> {
    let Windows { window, slide } = windows;
    match query.0 {
        1 => bids(data).map(|b| Output::Q1(b.auction, b.bidder, b.price * 908 / 1000)),
        2 => bids(data)
            .filter(|b| b.auction % 123 == 0)
            .map(|b| Output::Q2(b.auction, b.price)),
        3 => backend.binary(
            persons(data.clone()).filter(|p| Q3_STATES.contains(&p.state.as_str())),
            auctions(data).filter(|a| a.category == Q3_CATEGORY),
            "q3",
            |p: &Person| hash_key(&p.id),
            |a: &Auction| hash_key(&a.seller),
            |_t,
             bin: &mut Bin<Q3State>,
             people: &mut Vec<Person>,
             new: &mut Vec<Auction>,
             out: &mut Vec<Output>| {
                for p in people.drain(..) {
                    let entry = bin.state.entry(p.id).or_default();
                    for a in entry.1.drain(..) {
                        out.push(Output::Q3(p.name.clone(), p.city.clone(), p.state.clone(), a));
                    }
                    entry.0 = Some(p);
                }
                for a in new.drain(..) {
                    let entry = bin.state.entry(a.seller).or_default();
                    match &entry.0 {
                        Some(p) => {
                            out.push(Output::Q3(p.name.clone(), p.city.clone(), p.state.clone(), a.id))
                        }
                        None => entry.1.push(a.id),
                    }
                }
            },
        ),
        4 => average_by_category(closed_auctions(data, backend), backend),
        6 => average_by_seller(closed_auctions(data, backend), backend),
        5 => {
            // Per auction, bids per slide; at each slide's end, each bin's leaders of the
            // window ending there. The global leaders are among them.
            let candidates = backend.unary(
                bids(data),
                "q5.count",
                |b: &Bid| hash_key(&b.auction),
                move |t,
                      bin: &mut Bin<BTreeMap<(Time, u64), u64>>,
                      bids: &mut Vec<Bid>,
                      out: &mut Vec<(Time, u64, u64)>| {
                    let slot = t.div_ceil(slide) * slide;
                    if !bids.is_empty() {
                        // Every window that covers this slot ends at one of these times.
                        let mut end = slot;
                        while end < slot + window {
                            bin.schedule(end);
                            end += slide;
                        }
                    }
                    for b in bids.drain(..) {
                        *bin.state.entry((slot, b.auction)).or_default() += 1;
                    }
                    if t % slide == 0 {
                        let mut counts: BTreeMap<u64, u64> = BTreeMap::new();
                        for ((s, auction), n) in bin.state.range((t.saturating_sub(window) + 1, 0)..) {
                            if *s <= t {
                                *counts.entry(*auction).or_default() += n;
                            }
                        }
                        if let Some(&max) = counts.values().max() {
                            out.extend(
                                counts
                                    .iter()
                                    .filter(|(_, n)| **n == max)
                                    .map(|(a, n)| (t, *a, *n)),
                            );
                        }
                        // Slots that no later window covers.
                        let keep = bin.state.split_off(&((t + slide).saturating_sub(window) + 1, 0));
                        bin.state = keep;
                    }
                },
            );
            global_leaders(candidates, backend, "q5.max", |(t, a, n)| {
                (*n, Output::Q5(*t, *a, *n))
            })
        }
        7 => {
            let candidates = backend.unary(
                bids(data),
                "q7.max",
                |b: &Bid| hash_key(&b.auction),
                move |t,
                      bin: &mut Bin<Q7State>,
                      bids: &mut Vec<Bid>,
                      out: &mut Vec<(Time, u64, u64, u64)>| {
                    let later = bin.state.split_off(&(t + 1));
                    for (end, best) in std::mem::replace(&mut bin.state, later) {
                        out.extend(
                            best.into_iter()
                                .map(|(price, auction, bidder)| (end, auction, price, bidder)),
                        );
                    }
                    let end = (t / window + 1) * window;
                    for b in bids.drain(..) {
                        let best = bin.state.entry(end).or_default();
                        match best.first().map(|x| x.0) {
                            Some(p) if p > b.price => {}
                            Some(p) if p == b.price => best.push((b.price, b.auction, b.bidder)),
                            _ => *best = vec![(b.price, b.auction, b.bidder)],
                        }
                        bin.schedule(end);
                    }
                },
            );
            global_leaders(candidates, backend, "q7.global", |(t, a, p, b)| {
                (*p, Output::Q7(*t, *a, *p, *b))
            })
        }
        8 => backend.binary(
            persons(data.clone()),
            auctions(data),
            "q8",
            |p: &Person| hash_key(&p.id),
            |a: &Auction| hash_key(&a.seller),
            move |t,
                  bin: &mut Bin<Q8State>,
                  people: &mut Vec<Person>,
                  new: &mut Vec<Auction>,
                  out: &mut Vec<Output>| {
                let start = t - t % window;
                // Windows that have ended hold nothing that can still join.
                let keep = bin.state.split_off(&(start, 0));
                bin.state = keep;
                for p in people.drain(..) {
                    let entry = bin.state.entry((start, p.id)).or_default();
                    for a in entry.1.drain(..) {
                        out.push(Output::Q8(p.id, p.name.clone(), a, start));
                    }
                    entry.0 = Some(p.name);
                    bin.schedule(start + window);
                }
                for a in new.drain(..) {
                    let entry = bin.state.entry((start, a.seller)).or_default();
                    match &entry.0 {
                        Some(name) => out.push(Output::Q8(a.seller, name.clone(), a.id, start)),
                        None => entry.1.push(a.id),
                    }
                    bin.schedule(start + window);
                }
            },
        ),
        // `Query` holds 1 to 8 only.
        other => unreachable!("query q{other} does not exist"),
    }
}

/// Gathers every bin's candidates of a time into one bin and keeps those with the largest
/// score: the global leaders, not each bin's.
fn global_leaders<'s, C, F>(
    candidates: StreamVec<'s, Time, C>,
    backend: &Operators<'s>,
    name: &str,
    score: F,
) -> StreamVec<'s, Time, Output>
where
    C: ExchangeData + Clone,
    F: Fn(&C) -> (u64, Output) + 'static,
{
    backend.unary(
        candidates,
        name,
        |_: &C| 0,
        move |_t, _bin: &mut Bin<()>, candidates: &mut Vec<C>, out: &mut Vec<Output>| {
            let scored: Vec<(u64, Output)> = candidates.drain(..).map(|c| score(&c)).collect();
            if let Some(max) = scored.iter().map(|(s, _)| *s).max() {
                out.extend(scored.into_iter().filter(|(s, _)| *s == max).map(|(_, o)| o));
            }
        },
    )
}
