//! Page views per user, read from a CSV file of `user,page,ts_ms` lines: the state of each
//! user is their view count and last page, and each view outputs `(user, count)`.
//!
//! `cargo run --release -- run --input views.csv --output counts.jsonl` with the live
//! dashboard; every `megaflux` subcommand and flag works (`--migrate`, `--replicas 2`,
//! `--record`, `replay --rerun`, `bench`, `report`).

use std::collections::BTreeMap;
use std::process::ExitCode;

use megaflux::job::{Job, Operators};
use megaflux::timely::dataflow::StreamVec;
use megaflux::{Bin, RunConfig, Source, Time, bins::hash_key};
use serde::{Deserialize, Serialize};

/// One line of the input.
#[derive(Clone, Debug, Serialize, Deserialize)]
struct View {
    user: String,
    page: String,
    ts_ms: u64,
}

/// What the job keeps per user.
#[derive(Clone, Debug, Default, Serialize, Deserialize)]
struct Viewer {
    views: u64,
    last_page: String,
}

struct PageViews;

impl Job for PageViews {
    type In = View;
    type Out = (String, u64);

    fn name(&self) -> &str {
        "pageviews"
    }

    fn source(&self, _run: &RunConfig) -> Source<View> {
        // `--pace event-time` replays the views at the pace of their timestamps.
        Source::csv().event_time(|v: &View| v.ts_ms)
    }

    fn dataflow<'s>(
        &self,
        views: StreamVec<'s, Time, View>,
        ops: &Operators<'s>,
    ) -> StreamVec<'s, Time, (String, u64)> {
        ops.unary(
            views,
            "views",
            |v: &View| hash_key(&v.user),
            |_time, bin: &mut Bin<BTreeMap<String, Viewer>>, views, out| {
                for view in views.drain(..) {
                    let viewer = bin.state.entry(view.user.clone()).or_default();
                    viewer.views += 1;
                    viewer.last_page = view.page;
                    out.push((view.user, viewer.views));
                }
            },
        )
    }
}

fn main() -> ExitCode {
    megaflux_tui::main(PageViews)
}
