//! The native twin of the migrateable operators: the same per-bin logic in plain timely
//! (an exchange by the initial bin owner and one frontier operator), with no control input
//! and no migration. Comparing the two measures what migration costs.

use std::cell::{Cell, RefCell};
use std::rc::Rc;

use timely::ExchangeData;
use timely::dataflow::StreamVec;
use timely::dataflow::channels::pact::Exchange;
use timely::dataflow::operators::generic::Operator;

use super::apply::{Hooks, apply_time};
use super::load::BinLoads;
use super::pending::Pending;
use super::route::bin_key as order_key;
use super::{Bin, BinTable, Frontiers, StatefulConfig};
use crate::Time;
use crate::size::BinState;

struct Work<R> {
    /// Records with their order keys (the bin: no agreed order is needed without replicas).
    records: Vec<(u64, R)>,
    scheduled: Vec<u32>,
}

/// The native twin only schedules later work, and counts what each bin cost.
struct Later<'a, R>(&'a mut Pending<Work<R>>, &'a BinLoads);

impl<R, O> Hooks<O> for Later<'_, R> {
    fn later(&mut self, at: Time, bin: u32) {
        self.0.later(at).scheduled.push(bin);
    }

    fn applied(&mut self, bin: u32, records: usize) {
        self.1.applied(bin, records);
    }
}

impl<R> Default for Work<R> {
    fn default() -> Self {
        Work {
            records: Vec::new(),
            scheduled: Vec::new(),
        }
    }
}

/// [`crate::stateful_unary`] without migration: bins stay on their initial owners.
pub fn native_unary<'s, R, S, O, K, L>(
    data: StreamVec<'s, Time, R>,
    config: &StatefulConfig,
    name: &str,
    bin_key: K,
    logic: L,
) -> StreamVec<'s, Time, O>
where
    R: ExchangeData + Clone,
    S: BinState,
    O: Clone + 'static,
    K: Fn(&R) -> u64 + 'static,
    L: FnMut(Time, &mut Bin<S>, &mut Vec<R>, &mut Vec<O>) + 'static,
{
    let mut logic = super::clocked(config.epoch, logic);
    let me = data.scope().index() as u32;
    let bins = config.bins;
    let owners: Vec<u32> = config.initial.iter().map(|r| r.primary).collect();
    // The exchange and the operator both need the bin of a record.
    let bin_key = Rc::new(bin_key);
    let route_key = Rc::clone(&bin_key);
    let route_owners = owners.clone();
    let route = Exchange::new(move |r: &R| u64::from(route_owners[bins.bin_of(route_key(r)) as usize]));
    let table: BinTable<S> = Rc::new(RefCell::new(
        owners
            .iter()
            .map(|w| (*w == me).then(|| Bin::new(S::default())))
            .collect(),
    ));
    let applied = Rc::new(Cell::new(0));
    let frontiers = {
        let applied = Rc::clone(&applied);
        move || Frontiers {
            applied: applied.get(),
            control: None,
        }
    };
    // A native run cannot restart: its bins are handed out with no resume point.
    let (handing, handed) = (name.to_string(), Rc::clone(&table));
    let handout = move || {
        super::encoded(&handing, &handed)
            .map(|(bin, bytes)| (bin, super::HandedBin::primary(bytes)))
            .collect()
    };
    let no_standby = |_| false;
    let loads = Rc::new(BinLoads::new(bins.count()));
    super::observe_table(
        config,
        name,
        (&table, &loads),
        frontiers,
        no_standby,
        super::Holds::default,
        handout,
    );
    let mut work: Pending<Work<R>> = Pending::new();
    let mut batch = Vec::new();
    let mut produced = Vec::new();
    let name = name.to_string();
    let busy = config.observers.busy();
    data.unary_frontier(route, &format!("{name}.native"), move |_cap, _info| {
        move |(input, frontier), output| {
            let timed = busy.activation();
            input.for_each_stamp(|cap, batches| {
                let Some(&time) = cap.least() else { return };
                let entry = work.arrived(time, || vec![cap.delayed(&time, 0)]);
                for b in batches {
                    entry
                        .records
                        .extend(b.drain(..).map(|r| (order_key(bins.bin_of(bin_key(&r))), r)));
                }
            });
            while let Some((time, Work { records, scheduled })) =
                work.next(|time| !frontier.less_equal(&time))
            {
                busy.applied(records.len());
                let applied = apply_time(
                    time,
                    records,
                    scheduled,
                    &mut table.borrow_mut(),
                    &mut batch,
                    &mut produced,
                    &mut logic,
                    &mut Later(&mut work, &loads),
                );
                if let Err(bin) = applied {
                    panic!("{name}: worker {me} got records for bin {bin} it does not own");
                }
                if !produced.is_empty()
                    && let Some(cap) = work.capability(0)
                {
                    output.session(cap).give_container(&mut produced);
                    produced.clear();
                }
            }
            work.settle();
            applied.set(frontier.frontier().first().copied().unwrap_or(Time::MAX));
            loads.attribute(timed.end());
        }
    })
    .container::<Vec<O>>()
}

/// [`crate::stateful_binary`] without migration.
pub fn native_binary<'s, R1, R2, S, O, K1, K2, L>(
    left: StreamVec<'s, Time, R1>,
    right: StreamVec<'s, Time, R2>,
    config: &StatefulConfig,
    name: &str,
    bin_key_left: K1,
    bin_key_right: K2,
    logic: L,
) -> StreamVec<'s, Time, O>
where
    R1: ExchangeData + Clone,
    R2: ExchangeData + Clone,
    S: BinState,
    O: Clone + 'static,
    K1: Fn(&R1) -> u64 + 'static,
    K2: Fn(&R2) -> u64 + 'static,
    L: FnMut(Time, &mut Bin<S>, &mut Vec<R1>, &mut Vec<R2>, &mut Vec<O>) + 'static,
{
    let (merged, key, logic) = super::sides(left, right, bin_key_left, bin_key_right, logic);
    native_unary(merged, config, name, key, logic)
}
