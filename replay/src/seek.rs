//! Seeking in a trace: the job model after any number of its events, from the last
//! keyframe before that point instead of from the start.
//!
//! A keyframe is the model its preceding events make, less the latency history and with the
//! collector's own event count (`traces/FORMAT.md`). [`Index`] remembers where each keyframe
//! starts, how many events came before it, and every latency window (a few per second, so
//! an hour is a few tens of thousands); [`Index::model_after`] starts from the keyframe,
//! puts back the latency history (as much of it as a model keeps, [`LATENCY_WINDOWS`]) and
//! the count, and applies the events after it. The result equals applying every event from
//! the start (`tests/seek.rs` checks it).
//!
//! The index skips the lines it cannot read ([`BadLines::Skip`]) and names them in
//! [`Index::unreadable`]; it counts as events the lines that have a clock and a kind. Reading
//! events to rebuild a model refuses a bad line as the reader given does ([`BadLines::Refuse`]
//! for a new one), so a player stops there.

use std::io::{BufRead, Seek};

use megaflux_probe::event::{Event, Stamped};
use megaflux_probe::model::{JobModel, LATENCY_WINDOWS, LatencyWindow};
use megaflux_probe::record::{BadLines, Skimmed, TraceReader, Unreadable};

use crate::error::ReplayError;

/// Where a keyframe starts in the trace.
#[derive(Clone, Debug, PartialEq)]
pub struct KeyframeAt {
    /// Events before it.
    pub events_before: u64,
    /// Byte offset of its line, and the number of the line before it.
    pub offset: u64,
    /// The number of the line before it: with `offset`, what [`TraceReader::seek`] takes.
    pub line: usize,
    /// The trace's clock there.
    pub at_s: f64,
}

/// A place worth jumping to: a plan started, a worker failed or rejoined, bins were lost.
#[derive(Clone, Debug, PartialEq)]
pub struct Mark {
    /// Events before it.
    pub events_before: u64,
    /// The trace's clock there (see [`Clock`]).
    pub at_s: f64,
    /// What happened there, for people (`worker 1 failed`, ...).
    pub label: String,
}

/// What seeking in one trace needs, from one pass over it.
#[derive(Clone, Debug, Default)]
pub struct Index {
    /// Every keyframe of the trace, in order.
    pub keyframes: Vec<KeyframeAt>,
    /// Every latency window, with the number of events before it.
    latency: Vec<(u64, LatencyWindow)>,
    /// Every mark of the trace, in order.
    pub marks: Vec<Mark>,
    /// Events in the trace (the keyframes included).
    pub events: u64,
    /// The trace's clock at its first and last event.
    pub start_s: f64,
    /// The trace's clock at its last event: its largest `at_s`.
    pub end_s: f64,
    /// The lines the index skipped because they could not be read.
    pub unreadable: Unreadable,
}

impl Index {
    /// Reads the trace from where `reader` stands (just after its header) to its end,
    /// skimming the events it does not need (see [`TraceReader::next_skimmed`]) and skipping
    /// the lines it cannot read (named in [`Index::unreadable`]). The reader is left as it
    /// was given as to bad lines.
    pub fn build<R: BufRead>(reader: &mut TraceReader<R>) -> Result<Index, ReplayError> {
        let mut index = skipping(reader, Index::scan)?;
        index.unreadable = reader.unreadable().clone();
        Ok(index)
    }

    /// [`Index::build`]'s pass over the trace.
    fn scan<R: BufRead>(reader: &mut TraceReader<R>) -> Result<Index, ReplayError> {
        let mut index = Index::default();
        let mut clock = Clock::default();
        loop {
            let (offset, line) = (reader.offset(), reader.line());
            let Some(skimmed) = reader.next_skimmed(WHOLE)? else {
                break;
            };
            let at_s = clock.tick_at(skimmed.at_s());
            if index.events == 0 {
                index.start_s = at_s;
            }
            index.end_s = at_s;
            match skimmed {
                Skimmed::Head { kind: "keyframe", .. } => index.keyframes.push(KeyframeAt {
                    events_before: index.events,
                    offset,
                    line,
                    at_s,
                }),
                Skimmed::Head { .. } => {}
                Skimmed::Event(event) => {
                    if let Some(w) = LatencyWindow::of(&event) {
                        index.latency.push((index.events, w));
                    }
                    if let Some(label) = mark(&event.event) {
                        index.marks.push(Mark {
                            events_before: index.events,
                            at_s,
                            label,
                        });
                    }
                }
            }
            index.events += 1;
        }
        Ok(index)
    }

    /// The number of events up to the trace's clock `at_s`: the first `n` events all have a
    /// clock at or before it. Reads from the last keyframe before it, counting events as
    /// [`Index::build`] does (the lines it cannot read skipped).
    pub fn events_until<R: BufRead + Seek>(
        &self,
        reader: &mut TraceReader<R>,
        at_s: f64,
    ) -> Result<u64, ReplayError> {
        let from = self.keyframes.iter().rev().find(|k| k.at_s <= at_s);
        skipping(reader, |reader| {
            let (mut n, mut clock) = start_at(reader, from)?;
            while let Some(event) = reader.next_skimmed(&[])? {
                if clock.tick_at(event.at_s()) > at_s {
                    break;
                }
                n += 1;
            }
            Ok(n)
        })
    }

    /// The model after the first `n` events of the trace `reader` reads (the trace this index
    /// was built from).
    pub fn model_after<R: BufRead + Seek>(
        &self,
        reader: &mut TraceReader<R>,
        n: u64,
    ) -> Result<JobModel, ReplayError> {
        Ok(self.model_and_clock_after(reader, n)?.0)
    }

    /// The model after the first `n` events, and the trace's clock there; the reader is left
    /// just after them.
    pub fn model_and_clock_after<R: BufRead + Seek>(
        &self,
        reader: &mut TraceReader<R>,
        n: u64,
    ) -> Result<(JobModel, Clock), ReplayError> {
        let n = n.min(self.events);
        let mut model = JobModel::from_header(reader.header());
        let from = self.keyframes.iter().rev().find(|k| k.events_before < n);
        let (mut done, mut clock) = start_at(reader, from)?;
        if let Some(k) = from {
            model.events = k.events_before;
            model.latency = self.latency_before(k.events_before);
        }
        while done < n {
            let Some(event) = reader.next_event()? else { break };
            clock.tick(&event);
            model.apply(&event);
            done += 1;
        }
        Ok((model, clock))
    }
}

impl Index {
    /// The latency history a model has after the first `events` events: of the windows among
    /// them, the last [`kept_windows`], as [`JobModel::apply`] keeps them.
    fn latency_before(&self, events: u64) -> Vec<LatencyWindow> {
        let arrived = self.latency.partition_point(|(before, _)| *before < events);
        let first = arrived - kept_windows(arrived);
        self.latency[first..arrived]
            .iter()
            .map(|(_, w)| w.clone())
            .collect()
    }
}

/// How many of `n` latency windows, taken one after another, a model keeps: every one up to
/// [`LATENCY_WINDOWS`]; a model that holds that many drops the oldest eighth before it takes
/// the next.
pub fn kept_windows(n: usize) -> usize {
    let dropped = LATENCY_WINDOWS / 8;
    if n <= LATENCY_WINDOWS {
        return n;
    }
    // The window after a full history leaves `LATENCY_WINDOWS - dropped + 1`; the history
    // then grows by one a window until it is full again, every `dropped` windows.
    LATENCY_WINDOWS - dropped + 1 + (n - LATENCY_WINDOWS - 1) % dropped
}

/// Runs `read` on `reader` with bad lines skipped, then puts back what the reader did with
/// them before.
fn skipping<R: BufRead, T>(
    reader: &mut TraceReader<R>,
    read: impl FnOnce(&mut TraceReader<R>) -> Result<T, ReplayError>,
) -> Result<T, ReplayError> {
    let before = reader.set_bad_lines(BadLines::Skip);
    let result = read(&mut *reader);
    reader.set_bad_lines(before);
    result
}

/// Puts `reader` at keyframe `from` (or the first event without one); returns the events
/// before that place and the clock there (the keyframe's, which the reading applies first).
fn start_at<R: BufRead + Seek>(
    reader: &mut TraceReader<R>,
    from: Option<&KeyframeAt>,
) -> Result<(u64, Clock), ReplayError> {
    match from {
        Some(k) => {
            reader.seek(k.offset, k.line)?;
            Ok((k.events_before, Clock(k.at_s)))
        }
        None => {
            reader.seek(reader.header_bytes(), 1)?;
            Ok((0, Clock::default()))
        }
    }
}

/// A trace's clock: the largest `at_s` so far (the job model's `now_s`). Events of several
/// processes arrive in any order; their clocks differ by their probes' start times.
#[derive(Clone, Copy, Debug)]
pub struct Clock(pub f64);

impl Default for Clock {
    fn default() -> Self {
        Clock(f64::MIN)
    }
}

impl Clock {
    /// Moves the clock on with `event`; returns its reading.
    pub fn tick(&mut self, event: &Stamped) -> f64 {
        self.tick_at(event.at_s)
    }

    /// Moves the clock on with an event's `at_s`; returns its reading.
    pub fn tick_at(&mut self, at_s: f64) -> f64 {
        // The times the model takes, no others: a line stamped 1e300 cannot pin the clock.
        if (0.0..=megaflux_probe::model::MAX_AT_S).contains(&at_s) {
            self.0 = self.0.max(at_s);
        }
        self.0.max(0.0)
    }
}

/// The kinds an index reads whole: latency windows and marks.
const WHOLE: &[&str] = &["latency", "plan_started", "failure", "rejoin", "lost"];

/// What a mark on the timeline says about `event`, if it is one.
pub fn mark(event: &Event) -> Option<String> {
    Some(match event {
        Event::PlanStarted {
            strategy,
            target,
            purpose,
            ..
        } => format!(
            "{} {strategy} to {target}",
            purpose.as_deref().unwrap_or("migration")
        ),
        Event::Failure { worker, .. } => format!("worker {worker} failed"),
        Event::Rejoin { worker, .. } => format!("worker {worker} rejoined"),
        Event::Restart {
            lost,
            joined,
            generation,
            ..
        } => restart_name(lost, joined, *generation),
        Event::Lost { bins, .. } => format!("bins {bins} lost"),
        _ => return None,
    })
}

/// A restart's name in marks and timelines: what started it, and its number.
pub(crate) fn restart_name(lost: &str, joined: &str, generation: u32) -> String {
    match (lost.is_empty(), joined.is_empty()) {
        (false, true) => format!("process {lost} lost: restart {generation}"),
        (true, false) => format!("process {joined} joined: restart {generation}"),
        (false, false) => format!("process {lost} lost, {joined} joined: restart {generation}"),
        (true, true) => format!("restart {generation}"),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// [`kept_windows`] is what a model applying that many windows keeps.
    #[test]
    fn kept_windows_is_what_a_model_keeps() {
        let window = Stamped {
            at_s: 0.0,
            process: 0,
            event: Event::Latency {
                window: 0,
                t_s: 0.0,
                count: 0,
                p50: 0,
                p99: 0,
                max: 0,
                histogram: String::new(),
            },
        };
        let mut model = JobModel::new();
        assert_eq!(kept_windows(0), 0);
        for n in 1..=2 * LATENCY_WINDOWS + 10 {
            model.apply(&window);
            assert_eq!(model.latency.len(), kept_windows(n), "after {n} windows");
        }
    }
}
