//! Active users, reported every second: page views (`user,page,ts_ms` lines, CSV) count per
//! user, and every bin keeps a timer that fires every [`REPORT_EVERY`] of logical time and
//! re-arms itself for ever, as periodic reports do. Each firing counts the bin's users seen
//! in the last [`ACTIVE`], and reports the count when it changed.
//!
//! A timer that re-arms for ever would keep a drain going for ever: the job says how long
//! after the input's end its scheduled work matters (`Job::drain`: once every user has been
//! idle for [`ACTIVE`], no count changes again). `--drain all` lets it run until
//! `--duration` (or q, or SIGINT) cuts it, with every output of the times before the cut
//! written.
//!
//! `cargo run --release -p megaflux-tui --example active -- run --input views.csv
//! --output active.jsonl`

use std::collections::BTreeMap;
use std::process::ExitCode;
use std::time::Duration;

use megaflux::job::{Drain, Job, Operators};
use megaflux::timely::dataflow::StreamVec;
use megaflux::{Bin, RunConfig, Source, Time, bins::hash_key, size::StateSize};
use serde::{Deserialize, Serialize};

/// How often each bin reports.
const REPORT_EVERY: Duration = Duration::from_secs(1);
/// A user is active for this long after a view.
const ACTIVE: Duration = Duration::from_secs(10);

#[derive(Clone, Debug, Serialize, Deserialize)]
struct View {
    user: String,
    page: String,
    ts_ms: u64,
}

/// A user's views so far, or a bin's count of active users at a time.
#[derive(Clone, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
enum Out {
    Views { user: String, views: u64 },
    Active { time: Time, users: u64 },
}

/// One bin's users: views and the time of the latest, and the last count reported.
#[derive(Default, Serialize, Deserialize)]
struct Users {
    seen: BTreeMap<String, (u64, Time)>,
    reported: Option<u64>,
    next_report: Option<Time>,
}

impl StateSize for Users {
    fn keys(&self) -> usize {
        self.seen.len()
    }
    fn bytes(&self) -> usize {
        self.seen.bytes()
    }
}

struct ActiveUsers;

impl Job for ActiveUsers {
    type In = View;
    type Out = Out;

    fn name(&self) -> &str {
        "active"
    }

    fn source(&self, _run: &RunConfig) -> Source<View> {
        Source::csv().event_time(|v: &View| v.ts_ms)
    }

    /// After [`ACTIVE`] with no view every count is 0 and stays so: later reports change
    /// nothing.
    fn drain(&self, _run: &RunConfig) -> Drain {
        Drain::For(ACTIVE + REPORT_EVERY)
    }

    fn dataflow<'s>(
        &self,
        views: StreamVec<'s, Time, View>,
        ops: &Operators<'s>,
    ) -> StreamVec<'s, Time, Out> {
        ops.unary(
            views,
            "active",
            |v: &View| hash_key(&v.user),
            |time, bin: &mut Bin<Users>, views, out| {
                for view in views.drain(..) {
                    let seen = bin.state.seen.entry(view.user.clone()).or_insert((0, time));
                    seen.0 += 1;
                    seen.1 = time;
                    out.push(Out::Views {
                        user: view.user,
                        views: seen.0,
                    });
                }
                match bin.state.next_report {
                    // The timer: count, report a change, and re-arm.
                    Some(due) if due <= time => {
                        let active = ACTIVE;
                        let users = bin
                            .state
                            .seen
                            .values()
                            .filter(|(_, at)| bin.since(*at) < active)
                            .count() as u64;
                        if bin.state.reported != Some(users) {
                            bin.state.reported = Some(users);
                            out.push(Out::Active { time, users });
                        }
                        bin.state.next_report = Some(bin.schedule_after(REPORT_EVERY));
                    }
                    Some(_) => {}
                    None => bin.state.next_report = Some(bin.schedule_after(REPORT_EVERY)),
                }
            },
        )
    }
}

fn main() -> ExitCode {
    megaflux_tui::main(ActiveUsers)
}
