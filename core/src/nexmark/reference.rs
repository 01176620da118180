//! Plain sequential meanings of the queries, for tests: given every event with its logical
//! time, the multiset of outputs at every time.

use std::collections::{BTreeMap, HashMap, VecDeque};

use super::queries::{Q3_CATEGORY, Q3_STATES, Q6_LAST};
use super::{Event, Output, Query, Windows};
use crate::Time;

/// The outputs of `query` on `events`, by time, each time's outputs sorted.
pub fn outputs(query: Query, windows: Windows, events: &[(Time, Event)]) -> BTreeMap<Time, Vec<Output>> {
    let Windows { window, slide } = windows;
    let mut out: BTreeMap<Time, Vec<Output>> = BTreeMap::new();
    let mut emit = |t: Time, o: Output| out.entry(t).or_default().push(o);
    let persons = || {
        events.iter().filter_map(|(t, e)| {
            if let Event::Person(p) = e {
                Some((*t, p))
            } else {
                None
            }
        })
    };
    let auctions = || {
        events.iter().filter_map(|(t, e)| {
            if let Event::Auction(a) = e {
                Some((*t, a))
            } else {
                None
            }
        })
    };
    let bids = || {
        events.iter().filter_map(|(t, e)| {
            if let Event::Bid(b) = e {
                Some((*t, b))
            } else {
                None
            }
        })
    };
    match query.0 {
        1 => bids().for_each(|(t, b)| emit(t, Output::Q1(b.auction, b.bidder, b.price * 908 / 1000))),
        2 => bids()
            .filter(|(_, b)| b.auction % 123 == 0)
            .for_each(|(t, b)| emit(t, Output::Q2(b.auction, b.price))),
        3 => {
            for (tp, p) in persons().filter(|(_, p)| Q3_STATES.contains(&p.state.as_str())) {
                for (ta, a) in auctions().filter(|(_, a)| a.category == Q3_CATEGORY && a.seller == p.id) {
                    emit(
                        tp.max(ta),
                        Output::Q3(p.name.clone(), p.city.clone(), p.state.clone(), a.id),
                    );
                }
            }
        }
        4 | 6 => {
            // Winning price of every auction, emitted at its expiry.
            let mut closings: BTreeMap<Time, Vec<(u64, u64, u64)>> = BTreeMap::new();
            for (ta, a) in auctions() {
                let best = bids()
                    .filter(|(tb, b)| {
                        b.auction == a.id && *tb >= ta && *tb < a.expires && b.price >= a.reserve
                    })
                    .map(|(_, b)| b.price)
                    .max();
                if let Some(price) = best {
                    closings
                        .entry(a.expires)
                        .or_default()
                        .push((a.category, a.seller, price));
                }
            }
            let mut by_category: HashMap<u64, (u64, u64)> = HashMap::new();
            let mut by_seller: HashMap<u64, VecDeque<u64>> = HashMap::new();
            for (t, mut closed) in closings {
                if query.0 == 4 {
                    let mut touched: BTreeMap<u64, ()> = BTreeMap::new();
                    for (category, _, price) in &closed {
                        let e = by_category.entry(*category).or_default();
                        e.0 += price;
                        e.1 += 1;
                        touched.insert(*category, ());
                    }
                    for category in touched.keys() {
                        let (sum, n) = by_category[category];
                        emit(t, Output::Q4(*category, sum / n));
                    }
                } else {
                    closed.sort_unstable_by_key(|c| (c.1, c.2));
                    let mut touched: BTreeMap<u64, ()> = BTreeMap::new();
                    for (_, seller, price) in &closed {
                        let last = by_seller.entry(*seller).or_default();
                        if last.len() == Q6_LAST {
                            last.pop_front();
                        }
                        last.push_back(*price);
                        touched.insert(*seller, ());
                    }
                    for seller in touched.keys() {
                        let last = &by_seller[seller];
                        emit(
                            t,
                            Output::Q6(*seller, last.iter().sum::<u64>() / last.len() as u64),
                        );
                    }
                }
            }
        }
        5 => {
            let Some(last) = bids().map(|(t, _)| t).max() else {
                return out;
            };
            let mut end = slide;
            while end < last + window + slide {
                let mut counts: BTreeMap<u64, u64> = BTreeMap::new();
                // A bid at t counts in its slot (t rounded up to the slide) and the windows
                // ending there and after.
                for (t, b) in bids() {
                    let slot = t.div_ceil(slide) * slide;
                    if slot + window > end && slot <= end {
                        *counts.entry(b.auction).or_default() += 1;
                    }
                }
                if let Some(&max) = counts.values().max() {
                    for (a, n) in counts.iter().filter(|(_, n)| **n == max) {
                        emit(end, Output::Q5(end, *a, *n));
                    }
                }
                end += slide;
            }
        }
        7 => {
            let mut best: BTreeMap<Time, Vec<(u64, u64, u64)>> = BTreeMap::new();
            for (t, b) in bids() {
                best.entry((t / window + 1) * window)
                    .or_default()
                    .push((b.price, b.auction, b.bidder));
            }
            for (end, all) in best {
                let max = all.iter().map(|x| x.0).max().unwrap_or(0);
                for (price, auction, bidder) in all.into_iter().filter(|x| x.0 == max) {
                    emit(end, Output::Q7(end, auction, price, bidder));
                }
            }
        }
        8 => {
            for (tp, p) in persons() {
                for (ta, a) in auctions().filter(|(ta, a)| a.seller == p.id && ta / window == tp / window) {
                    emit(
                        tp.max(ta),
                        Output::Q8(p.id, p.name.clone(), a.id, tp - tp % window),
                    );
                }
            }
        }
        // `Query` holds 1 to 8 only.
        other => unreachable!("query q{other} does not exist"),
    }
    for v in out.values_mut() {
        v.sort_unstable();
    }
    out
}
