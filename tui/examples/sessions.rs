//! Sessions per user: clicks (`user,ts_ms` lines, CSV) separated by less than the gap
//! (`--gap-ms`, the job's own flag: [`GAP_MS`]) of the run's logical time make one session; a session closes once the gap passes with no click,
//! and outputs `(user, first_ms, last_ms, clicks)`.
//!
//! Each click schedules its session's closing for when the gap ends
//! (`Bin::schedule_after`): that scheduled work moves with the user's bin when it migrates,
//! and survives a failover on the bin's standby. When the input ends, the run lets the open
//! sessions close (the job drains for one gap: `Job::drain`), so the last sessions are
//! output too. Durations are the same in every build and with any `--epoch-us`; with
//! `--pace event-time` the logical time of a click is its event time (divided by
//! `--speed`).
//!
//! `cargo run --release -p megaflux-tui --example sessions -- run --input clicks.csv
//! --pace event-time --gap-ms 500 --output sessions.jsonl`

use std::collections::BTreeMap;
use std::process::ExitCode;
use std::time::Duration;

use megaflux::job::{Drain, Flag, Job, Operators, Params};
use megaflux::timely::dataflow::StreamVec;
use megaflux::{Bin, RunConfig, Source, Time, bins::hash_key, size::StateSize};
use serde::{Deserialize, Serialize};

/// A session ends after this many ms without a click, in logical time.
const GAP_MS: Flag<u64> = Flag::new(
    "gap-ms",
    "200",
    "A session ends after this many ms without a click",
)
.value_name("MS");

/// The run's gap.
fn gap(run: &RunConfig) -> Duration {
    Duration::from_millis(run.get(&GAP_MS))
}

#[derive(Clone, Debug, Serialize, Deserialize)]
struct Click {
    user: String,
    ts_ms: u64,
}

/// A session so far.
#[derive(Clone, Debug, Serialize, Deserialize)]
struct Session {
    first_ms: u64,
    last_ms: u64,
    clicks: u64,
    /// The logical time of its last click.
    last_time: Time,
}

/// One bin's open sessions, and when each may close.
#[derive(Default, Serialize, Deserialize)]
struct Open {
    sessions: BTreeMap<String, Session>,
    /// Users whose session may close at a time (a later click leaves a stale entry).
    closing: BTreeMap<Time, Vec<String>>,
}

impl StateSize for Open {
    fn keys(&self) -> usize {
        self.sessions.len()
    }
    fn bytes(&self) -> usize {
        self.sessions.bytes() + self.closing.bytes()
    }
}

/// `(user, first_ms, last_ms, clicks)`.
type Closed = (String, u64, u64, u64);

struct Sessions;

impl Job for Sessions {
    type In = Click;
    type Out = Closed;

    fn name(&self) -> &str {
        "sessions"
    }

    fn source(&self, _run: &RunConfig) -> Source<Click> {
        Source::csv().event_time(|c: &Click| c.ts_ms)
    }

    fn params(&self) -> Params {
        Params::new().with(&GAP_MS)
    }

    fn validate(&self, run: &RunConfig) -> Result<(), String> {
        match run.get(&GAP_MS) {
            0 => Err("--gap-ms 0: a session needs a gap of at least 1 ms".into()),
            _ => Ok(()),
        }
    }

    /// The last sessions close one gap after the last click.
    fn drain(&self, run: &RunConfig) -> Drain {
        Drain::For(gap(run))
    }

    fn dataflow<'s>(
        &self,
        clicks: StreamVec<'s, Time, Click>,
        ops: &Operators<'s>,
    ) -> StreamVec<'s, Time, Closed> {
        let gap = gap(ops.run());
        ops.unary(
            clicks,
            "sessions",
            |c: &Click| hash_key(&c.user),
            move |time, bin: &mut Bin<Open>, clicks, out| {
                // Sessions whose gap has passed close first: a click at exactly the end of
                // the gap starts a new session.
                while let Some(entry) = bin.state.closing.first_entry()
                    && *entry.key() <= time
                {
                    for user in entry.remove() {
                        if let Some(s) = bin.state.sessions.get(&user)
                            && bin.since(s.last_time) >= gap
                            && let Some(s) = bin.state.sessions.remove(&user)
                        {
                            out.push((user, s.first_ms, s.last_ms, s.clicks));
                        }
                    }
                }
                for click in clicks.drain(..) {
                    let session = bin.state.sessions.entry(click.user.clone()).or_insert(Session {
                        first_ms: click.ts_ms,
                        last_ms: click.ts_ms,
                        clicks: 0,
                        last_time: time,
                    });
                    session.last_ms = session.last_ms.max(click.ts_ms);
                    session.clicks += 1;
                    session.last_time = time;
                    let closes = bin.schedule_after(gap);
                    bin.state.closing.entry(closes).or_default().push(click.user);
                }
            },
        )
    }
}

fn main() -> ExitCode {
    megaflux_tui::main(Sessions)
}
