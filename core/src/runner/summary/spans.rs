//! The output digest cut into spans of logical time, so that two runs whose digests differ
//! can say where their outputs first part: a drain that ended elsewhere parts at the input's
//! end, a real difference wherever it began.
//!
//! Invariant: a span's digest is the wrapping sum of its outputs' hashes, so spans add up
//! across workers and merge into wider ones; the width is the smallest power of two (of
//! logical time units) at which the run's outputs fill at most [`MAX_SPANS`] spans, whatever
//! order they were counted in.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

use crate::Time;

/// The most spans a run keeps: enough to place a parting within 1/512 of the run's logical
/// time, small enough for the summary line.
pub const MAX_SPANS: usize = 512;

/// The outputs per span of logical time: each non-empty span's hash sum and count.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct OutputSpans {
    /// Every span's width, in logical time units (a power of two).
    pub width: Time,
    /// The non-empty spans in time order: the first time of the span, the hash sum of its
    /// outputs (hex, as `output_digest`), and how many outputs it holds.
    pub spans: Vec<(Time, String, u64)>,
}

/// Where two runs' outputs first part.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Parting {
    /// The first logical time of the first span whose outputs differ.
    pub from: Time,
    /// The span's end (exclusive).
    pub to: Time,
    /// Outputs in that span in the first run and in the second.
    pub outputs: (u64, u64),
}

/// Spans as they are counted: the hash sum and count per span start.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub(crate) struct SpanSums {
    width_log2: u32,
    sums: BTreeMap<Time, (u64, u64)>,
}

impl SpanSums {
    fn width(&self) -> Time {
        1 << self.width_log2
    }

    /// Counts `count` outputs at `time` whose hashes sum to `hash`.
    pub(crate) fn add(&mut self, time: Time, hash: u64, count: u64) {
        if count == 0 {
            return;
        }
        let start = time & !(self.width() - 1);
        let entry = self.sums.entry(start).or_default();
        entry.0 = entry.0.wrapping_add(hash);
        entry.1 += count;
        while self.sums.len() > MAX_SPANS {
            self.widen(self.width_log2 + 1);
        }
    }

    /// Merges its spans into ones of width `2^log2` (no narrower than now).
    fn widen(&mut self, log2: u32) {
        if log2 <= self.width_log2 {
            return;
        }
        self.width_log2 = log2;
        let mask = !(self.width() - 1);
        let mut wider: BTreeMap<Time, (u64, u64)> = BTreeMap::new();
        for (start, (hash, count)) in std::mem::take(&mut self.sums) {
            let entry = wider.entry(start & mask).or_default();
            entry.0 = entry.0.wrapping_add(hash);
            entry.1 += count;
        }
        self.sums = wider;
    }

    /// Adds `other`'s spans in (another worker's).
    pub(crate) fn merge(&mut self, other: &SpanSums) {
        let mut other = other.clone();
        other.widen(self.width_log2);
        self.widen(other.width_log2);
        for (start, (hash, count)) in other.sums {
            self.add(start, hash, count);
        }
    }

    /// The spans as a summary spells them.
    pub(crate) fn spans(&self) -> OutputSpans {
        OutputSpans {
            width: self.width(),
            spans: self
                .sums
                .iter()
                .map(|(start, (hash, count))| (*start, format!("{hash:016x}"), *count))
                .collect(),
        }
    }
}

impl OutputSpans {
    /// Where `self`'s outputs and `other`'s first part, at the wider of their widths; `None`
    /// if their spans agree (or a width is not a power of two: not a summary's).
    pub fn parting(&self, other: &OutputSpans) -> Option<Parting> {
        let width = self.width.max(other.width);
        if !self.width.is_power_of_two() || !other.width.is_power_of_two() {
            return None;
        }
        let (a, b) = (self.at_width(width), other.at_width(width));
        let starts = a
            .keys()
            .chain(b.keys())
            .copied()
            .collect::<std::collections::BTreeSet<_>>();
        starts.into_iter().find_map(|from| {
            let (x, y) = (a.get(&from).copied(), b.get(&from).copied());
            (x != y).then(|| Parting {
                from,
                to: from.saturating_add(width),
                outputs: (x.map_or(0, |s| s.1), y.map_or(0, |s| s.1)),
            })
        })
    }

    /// Its spans merged to `width` (a power of two no narrower than its own), hashes parsed
    /// (one that does not parse counts as a hash of its own, so it still differs).
    fn at_width(&self, width: Time) -> BTreeMap<Time, (u64, u64)> {
        let mask = !(width - 1);
        let mut wider: BTreeMap<Time, (u64, u64)> = BTreeMap::new();
        for (start, hash, count) in &self.spans {
            let hash = u64::from_str_radix(hash, 16).unwrap_or(u64::MAX);
            let entry = wider.entry(start & mask).or_default();
            entry.0 = entry.0.wrapping_add(hash);
            entry.1 += count;
        }
        wider
    }
}

#[cfg(test)]
mod tests {
    use proptest::prelude::*;

    use super::*;

    fn counted(outputs: &[(Time, u64)]) -> SpanSums {
        let mut s = SpanSums::default();
        for (time, hash) in outputs {
            s.add(*time, *hash, 1);
        }
        s
    }

    #[test]
    fn a_run_within_the_limit_keeps_every_time() {
        let s = counted(&[(3, 10), (3, 5), (7, 1)]).spans();
        assert_eq!(s.width, 1);
        assert_eq!(
            s.spans,
            vec![(3, format!("{:016x}", 15), 2), (7, format!("{:016x}", 1), 1)]
        );
    }

    #[test]
    fn the_first_parting_is_the_first_span_that_differs() {
        let a = counted(&(0..2000).map(|t| (t, t)).collect::<Vec<_>>()).spans();
        let mut cut: Vec<(Time, u64)> = (0..2000).map(|t| (t, t)).collect();
        cut.truncate(1500);
        let b = counted(&cut).spans();
        let parting = a.parting(&b).expect("they part");
        assert!(parting.from <= 1500 && 1500 < parting.to, "{parting:?}");
        assert_eq!(a.width, 4, "2000 times in at most 512 spans");
        assert_eq!(a.parting(&a), None);
    }

    proptest! {
        /// Spans do not depend on how the outputs were split among workers or ordered, and a
        /// single changed output is found in its span.
        #[test]
        fn spans_add_up_in_any_order(
            outputs in prop::collection::vec((0u64..100_000, any::<u64>()), 1..3000),
            split in prop::collection::vec(0usize..3, 3000),
            changed in any::<prop::sample::Index>(),
        ) {
            let whole = counted(&outputs);
            let mut parts = vec![SpanSums::default(), SpanSums::default(), SpanSums::default()];
            for (i, (time, hash)) in outputs.iter().enumerate().rev() {
                parts[split[i]].add(*time, *hash, 1);
            }
            let mut merged = SpanSums::default();
            for p in &parts {
                merged.merge(p);
            }
            prop_assert_eq!(whole.spans().parting(&merged.spans()), None);
            prop_assert_eq!(&whole.spans(), &merged.spans());

            let i = changed.index(outputs.len());
            let mut other = outputs.clone();
            other[i].1 = other[i].1.wrapping_add(1);
            let parting = whole.spans().parting(&counted(&other).spans()).expect("one output changed");
            prop_assert!(parting.from <= outputs[i].0 && outputs[i].0 < parting.to);
        }
    }
}
