//! NEXMark queries Q1–Q8 on migrateable operators, each with a native-timely twin, and the
//! job that runs them open-loop.
//!
//! Events come from the `nexmark` crate's generator, deterministic per event index. Every
//! query works in logical time: an event's time is its scheduled epoch, and auction
//! expiries keep the generator's distance (in ms) from the auction's creation.

pub mod events;
mod queries;
pub mod reference;

use std::fmt;
use std::str::FromStr;

use serde::{Deserialize, Serialize};
use timely::dataflow::StreamVec;

pub use events::{Auction, Bid, Event, Person};
pub use queries::Output;

use crate::Time;
use crate::epoch::EpochLen;
use crate::error::ConfigError;
use crate::harness::RunConfig;
use crate::job::{Flag, Job, Operators, ParamValues, Params};
use crate::source::{Generator, Source};

/// Auctions among every `EVENT_PROPORTION` generated events (the generator's default mix:
/// 1 person, 3 auctions, 46 bids).
const AUCTION_PROPORTION: u64 = 3;
const EVENT_PROPORTION: u64 = 50;

/// One of the eight queries: its number is 1 to 8 (only [`Query::new`] and parsing make one).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Query(u8);

impl Query {
    /// Query `q<number>`, if there is one.
    pub fn new(number: u8) -> Result<Query, ConfigError> {
        match number {
            1..=8 => Ok(Query(number)),
            n => Err(ConfigError::Invalid(format!(
                "there is no NEXMark query q{n} (q1 to q8)"
            ))),
        }
    }

    /// The query's number, 1 to 8.
    pub fn number(self) -> u8 {
        self.0
    }
}

impl fmt::Display for Query {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "q{}", self.0)
    }
}

impl FromStr for Query {
    type Err = ConfigError;
    fn from_str(s: &str) -> Result<Self, ConfigError> {
        match s.strip_prefix('q').and_then(|n| n.parse::<u8>().ok()) {
            Some(n) => Query::new(n),
            None => Err(ConfigError::Invalid(format!(
                "`{s}` is not a NEXMark query (q1 to q8)"
            ))),
        }
    }
}

/// Window sizes and state sizes of the queries.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct NexmarkParams {
    /// Window length of Q5 (sliding), Q7 and Q8 (tumbling), in ms.
    pub window_ms: u64,
    /// Slide of Q5's window, in ms; divides `window_ms`.
    pub slide_ms: u64,
    /// Auctions open at any time (the generator's `in_flight_auctions`): Q3, Q4 and Q6
    /// keep state for each.
    pub in_flight_auctions: usize,
}

/// `--window-ms`: see [`NexmarkParams::window_ms`].
pub const WINDOW_MS: Flag<u64> = Flag::parsed_by(
    "window-ms",
    "2000",
    "Window length of Q5 (sliding), Q7 and Q8 (tumbling), in ms",
    at_least_one,
)
.value_name("MS");
/// `--slide-ms`: see [`NexmarkParams::slide_ms`].
pub const SLIDE_MS: Flag<u64> = Flag::parsed_by(
    "slide-ms",
    "500",
    "Slide of Q5's window in ms (must divide --window-ms)",
    at_least_one,
)
.value_name("MS");
/// `--in-flight-auctions`: see [`NexmarkParams::in_flight_auctions`].
pub const IN_FLIGHT_AUCTIONS: Flag<usize> = Flag::parsed_by(
    "in-flight-auctions",
    "10000",
    "Auctions open at any time (state of Q3, Q4, Q6)",
    |text| match text.parse::<usize>() {
        Ok(n) if n >= 1 => Ok(n),
        _ => Err(format!("`{text}` is not a number of auctions (at least 1)")),
    },
)
.value_name("N");

fn at_least_one(text: &str) -> Result<u64, String> {
    match text.parse::<u64>() {
        Ok(n) if n >= 1 => Ok(n),
        _ => Err(format!("`{text}` is not a whole number of at least 1")),
    }
}

impl NexmarkParams {
    /// The queries' settings in the run `run` describes (`--window-ms`, `--slide-ms`,
    /// `--in-flight-auctions`).
    pub fn of(run: &RunConfig) -> Self {
        NexmarkParams {
            window_ms: run.get(&WINDOW_MS),
            slide_ms: run.get(&SLIDE_MS),
            in_flight_auctions: run.get(&IN_FLIGHT_AUCTIONS),
        }
    }

    /// These settings as the queries' flags take them, for [`RunConfig::params`].
    pub fn values(&self) -> ParamValues {
        ParamValues::new()
            .with(WINDOW_MS.name(), self.window_ms)
            .with(SLIDE_MS.name(), self.slide_ms)
            .with(IN_FLIGHT_AUCTIONS.name(), self.in_flight_auctions)
    }

    /// The windows in logical time, for epochs of `len`.
    pub fn windows(&self, len: EpochLen) -> Windows {
        let window = self.window_ms.max(1);
        let slide = self.slide_ms.clamp(1, window);
        Windows {
            window: window * len.per_ms(),
            slide: slide * len.per_ms(),
        }
    }
}

/// The windows of Q5, Q7 and Q8 in logical time.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Windows {
    /// Window length, in logical times (epochs).
    pub window: Time,
    /// Divides `window`.
    pub slide: Time,
}

/// The flags' defaults.
impl Default for NexmarkParams {
    fn default() -> Self {
        NexmarkParams::of(&RunConfig::default())
    }
}

/// A NEXMark query as a [`Job`]: its events come from the `nexmark` generator at `--rate`.
pub struct NexmarkJob {
    query: Query,
    name: String,
}

impl NexmarkJob {
    /// The job of `query`.
    pub fn new(query: Query) -> Self {
        NexmarkJob {
            query,
            name: query.to_string(),
        }
    }
}

/// The query's events by index, at the run's rate, in its epochs.
struct Events {
    rate: u64,
    params: NexmarkParams,
    epoch: EpochLen,
}

impl Events {
    /// The stream's first events, enough to open `in_flight_auctions` auctions, so that the
    /// measured run starts with the queries' state at its steady size (filling it at the
    /// offered rate would take `in_flight_auctions` / (rate × 3/50) seconds).
    fn preloaded(&self) -> u64 {
        (self.params.in_flight_auctions as u64).div_ceil(AUCTION_PROPORTION) * EVENT_PROPORTION
    }
}

impl Generator<Event> for Events {
    fn preload_len(&self) -> u64 {
        self.preloaded()
    }

    /// Preloaded events get the harness's compressed preload times, but auctions keep the
    /// generator's lengths, so they close during (or after) the measured run, as they would
    /// have had the stream run that long already.
    fn preload(&self, index: usize, peers: usize) -> Box<dyn FnMut(u64, Time) -> Event> {
        Box::new(events::Source::new(self.rate, self.params, self.epoch, 0, index, peers).into_fn())
    }

    fn records(&self, index: usize, peers: usize) -> Box<dyn FnMut(u64, Time) -> Event> {
        let first = self.preloaded();
        Box::new(events::Source::new(self.rate, self.params, self.epoch, first, index, peers).into_fn())
    }
}

impl Job for NexmarkJob {
    type In = Event;
    type Out = Output;

    fn name(&self) -> &str {
        &self.name
    }

    fn source(&self, run: &RunConfig) -> Source<Event> {
        Source::generated(Events {
            rate: run.rate,
            params: NexmarkParams::of(run),
            epoch: run.epoch,
        })
    }

    fn dataflow<'s>(
        &self,
        data: StreamVec<'s, Time, Event>,
        ops: &Operators<'s>,
    ) -> StreamVec<'s, Time, Output> {
        let run = ops.run();
        queries::build(self.query, NexmarkParams::of(run).windows(run.epoch), data, ops)
    }

    fn params(&self) -> Params {
        Params::new()
            .with(&WINDOW_MS)
            .with(&SLIDE_MS)
            .with(&IN_FLIGHT_AUCTIONS)
    }

    fn validate(&self, run: &RunConfig) -> Result<(), String> {
        let n = NexmarkParams::of(run);
        if n.window_ms.is_multiple_of(n.slide_ms) {
            Ok(())
        } else {
            Err(format!(
                "--slide-ms {} must divide --window-ms {}",
                n.slide_ms, n.window_ms
            ))
        }
    }

    fn describe(&self, run: &RunConfig) -> Option<String> {
        Some(format!(
            "{} in-flight auctions{}",
            run.get(&IN_FLIGHT_AUCTIONS),
            if run.preload {
                "; preloading the events that open the in-flight auctions"
            } else {
                ""
            }
        ))
    }

    fn drain(&self, _run: &RunConfig) -> crate::job::Drain {
        crate::job::Drain::Off
    }

    /// Q1 and Q2 map each bid, Q3 joins people and auctions whichever comes first; Q4 to Q8
    /// read times: bids count only after their auction and before it expires, windows hold
    /// the records of their times.
    fn allows_adaptive_epochs(&self) -> bool {
        self.query.0 <= 3
    }
}
