//! The cluster's life, said on standard error in one line each, for whoever runs a
//! process without a dashboard: when its computation formed, and when it restarted
//! without (or with) a process. An operator watching a cluster's terminals reads them;
//! scripts and tests wait for them rather than for a guessed number of seconds.
//!
//! The lines are read from the runner's own `megaflux::job` events, so they say exactly
//! what the runner did.

use std::fmt::Write as _;

use tracing::field::{Field, Visit};
use tracing::{Event, Subscriber};
use tracing_subscriber::filter::{FilterFn, Filtered, filter_fn};
use tracing_subscriber::layer::{Context, Layer};

/// The target of the runner's job events.
const TARGET: &str = "megaflux::job";

/// Prints a line for each `formed` and `restart` event of the runner.
pub struct Lifecycle;

/// The layer, hearing the runner's job events only: every other callsite stays disabled
/// (a filter on metadata alone is decided once per callsite), so the hot paths pay nothing.
pub fn layer<S: Subscriber>() -> Filtered<Lifecycle, FilterFn, S> {
    Lifecycle.with_filter(filter_fn(|meta| meta.target() == TARGET))
}

impl<S: Subscriber> Layer<S> for Lifecycle {
    fn on_event(&self, event: &Event<'_>, _ctx: Context<'_, S>) {
        if event.metadata().target() != TARGET {
            return;
        }
        let mut fields = Fields::default();
        event.record(&mut fields);
        if let Some(line) = fields.line() {
            eprintln!("megaflux: {line}");
        }
    }
}

/// The fields of one job event, as text.
#[derive(Default)]
struct Fields(Vec<(&'static str, String)>);

impl Fields {
    fn get(&self, name: &str) -> &str {
        self.0
            .iter()
            .find(|(n, _)| *n == name)
            .map_or("?", |(_, v)| v.as_str())
    }

    /// The line this event is said with, if it is one of the cluster's life.
    fn line(&self) -> Option<String> {
        match self.get("phase") {
            "formed" => Some(format!(
                "cluster formed: generation {}, {} processes x {} workers",
                self.get("generation"),
                self.get("processes"),
                self.get("workers")
            )),
            "restart" => {
                let mut line = format!(
                    "cluster restarted: generation {} from time {}, processes {}",
                    self.get("generation"),
                    self.get("from"),
                    self.get("survivors")
                );
                for (what, field) in [("lost", "lost"), ("joined", "joined")] {
                    let value = self.get(field);
                    if !value.is_empty() && value != "?" {
                        let _ = write!(line, ", {what} {value}");
                    }
                }
                Some(line)
            }
            _ => None,
        }
    }
}

impl Visit for Fields {
    fn record_str(&mut self, field: &Field, value: &str) {
        self.0.push((field.name(), value.to_string()));
    }

    fn record_u64(&mut self, field: &Field, value: u64) {
        self.0.push((field.name(), value.to_string()));
    }

    fn record_i64(&mut self, field: &Field, value: i64) {
        self.0.push((field.name(), value.to_string()));
    }

    fn record_debug(&mut self, field: &Field, value: &dyn std::fmt::Debug) {
        self.0.push((field.name(), format!("{value:?}")));
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use tracing_subscriber::layer::SubscriberExt;

    /// What the layer prints is checked through its line-maker; that it hears the runner's
    /// events is checked end to end by the cluster tests, which wait for these lines.
    #[test]
    fn formed_and_restart_events_become_one_line_each_and_others_none() {
        let mut f = Fields(vec![
            ("phase", "formed".into()),
            ("generation", "0".into()),
            ("processes", "3".into()),
            ("workers", "1".into()),
        ]);
        assert_eq!(
            f.line().as_deref(),
            Some("cluster formed: generation 0, 3 processes x 1 workers")
        );
        f.0 = vec![
            ("phase", "restart".into()),
            ("generation", "1".into()),
            ("from", "1200".into()),
            ("survivors", "0-1".into()),
            ("lost", "2".into()),
            ("joined", "".into()),
        ];
        assert_eq!(
            f.line().as_deref(),
            Some("cluster restarted: generation 1 from time 1200, processes 0-1, lost 2")
        );
        f.0 = vec![("phase", "started".into())];
        assert_eq!(f.line(), None);
        // The layer installs on a subscriber (its bounds hold).
        let _ = tracing_subscriber::registry().with(layer());
    }
}
