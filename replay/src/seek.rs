//! Seeking in a trace: the job model after any number of its events, from the last
//! keyframe before that point instead of from the start.
//!
//! A keyframe is the model its preceding events make, less the latency history and with the
//! collector's own event count (`traces/FORMAT.md`). [`Index`] remembers where each keyframe
//! starts, how many events came before it, and every latency window (a few per second, so
//! an hour is a few tens of thousands); [`Index::model_after`] starts from the keyframe,
//! puts back the latency history and the count, and applies the events after it. The
//! result equals applying every event from the start (`tests/seek.rs` checks it).

use std::io::{BufRead, Seek};

use megaflux_probe::event::Event;
use megaflux_probe::model::{JobModel, LatencyWindow};
use megaflux_probe::record::TraceReader;

use crate::error::ReplayError;

/// Where a keyframe starts in the trace.
#[derive(Clone, Debug, PartialEq)]
pub struct KeyframeAt {
    /// Events before it.
    pub events_before: u64,
    /// Byte offset of its line, and the number of the line before it.
    pub offset: u64,
    pub line: usize,
    pub at_s: f64,
}

/// What seeking in one trace needs, from one pass over it.
#[derive(Clone, Debug, Default)]
pub struct Index {
    pub keyframes: Vec<KeyframeAt>,
    /// Every latency window, with the number of events before it.
    latency: Vec<(u64, LatencyWindow)>,
    /// Events in the trace (the keyframes included).
    pub events: u64,
}

impl Index {
    /// Reads the trace from where `reader` stands (just after its header) to its end.
    pub fn build<R: BufRead>(reader: &mut TraceReader<R>) -> Result<Index, ReplayError> {
        let mut index = Index::default();
        loop {
            let (offset, line) = (reader.offset(), reader.line());
            let Some(event) = reader.next_event()? else { break };
            match &event.event {
                Event::Keyframe { .. } => index.keyframes.push(KeyframeAt {
                    events_before: index.events,
                    offset,
                    line,
                    at_s: event.at_s,
                }),
                _ => {
                    if let Some(w) = LatencyWindow::of(&event) {
                        index.latency.push((index.events, w));
                    }
                }
            }
            index.events += 1;
        }
        Ok(index)
    }

    /// The model after the first `n` events of the trace `reader` reads (the trace this index
    /// was built from).
    pub fn model_after<R: BufRead + Seek>(
        &self,
        reader: &mut TraceReader<R>,
        n: u64,
    ) -> Result<JobModel, ReplayError> {
        let n = n.min(self.events);
        let mut model = JobModel::new();
        let mut done = 0;
        match self.keyframes.iter().rev().find(|k| k.events_before < n) {
            Some(k) => {
                reader.seek(k.offset, k.line)?;
                model.events = k.events_before;
                model.latency = self
                    .latency
                    .iter()
                    .take_while(|(before, _)| *before < k.events_before)
                    .map(|(_, w)| w.clone())
                    .collect();
                done = k.events_before;
            }
            None => reader.seek(reader.header_bytes(), 1)?,
        }
        while done < n {
            let Some(event) = reader.next_event()? else { break };
            model.apply(&event);
            done += 1;
        }
        Ok(model)
    }
}
