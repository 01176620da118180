//! What a person is told of a run's drain (the work scheduled past the input's end): where
//! it stands while it runs, and what was left when it was cut.

use megaflux::Time;
use megaflux::epoch::EpochLen;
use megaflux::summary::DrainSummary;
use megaflux_probe::model::DrainView;

/// `+1.250 s`: a logical time past the input's end, in seconds.
fn past(time: Time, input_end: Time, epoch: EpochLen) -> String {
    let us = time.saturating_sub(input_end).saturating_mul(epoch.us());
    format!("+{:.3} s", us as f64 / 1e6)
}

/// One line on the drain's progress: `draining for 3 s: input ended at time 20500; outputs
/// out to +1.250 s past it; 16 bins have scheduled work, the next at +1.260 s`.
pub(crate) fn progress(d: &DrainView, epoch: EpochLen) -> String {
    let work = match (d.bins, d.next) {
        (0, _) | (_, None) => "no scheduled work left".to_string(),
        (bins, Some(next)) => format!(
            "{bins} bin{} with scheduled work, the next at {}",
            if bins == 1 { "" } else { "s" },
            past(next, d.input_end, epoch)
        ),
    };
    format!(
        "draining for {:.0} s: input ended at time {}; outputs out to {} past it; {work}",
        d.for_ms as f64 / 1e3,
        d.input_end,
        past(d.gate, d.input_end, epoch),
    )
}

/// The line that says what a cut drain left undone, if it was cut.
pub(crate) fn cut(d: &DrainSummary, epoch: EpochLen) -> Option<String> {
    if !d.cut {
        return None;
    }
    let next = d.next_time.map_or(String::new(), |t| {
        format!(
            ", the earliest at time {t} ({} past the input's end)",
            past(t, d.input_end, epoch)
        )
    });
    Some(format!(
        "the drain was cut after {:.1} s at time {} ({} past the input's end): every output before it is written; {} bin{} still had scheduled work{next} (a job says how long its scheduled work matters with Job::drain, or --drain)",
        d.took_s,
        d.ended_at,
        past(d.ended_at, d.input_end, epoch),
        d.bins_pending,
        if d.bins_pending == 1 { "" } else { "s" },
    ))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn progress_says_where_the_drain_stands_in_seconds_past_the_input() {
        let epoch = EpochLen::from_us(100).unwrap();
        let view = DrainView {
            input_end: 20_000,
            gate: 32_500,
            bins: 16,
            next: Some(32_600),
            for_ms: 3_200,
        };
        assert_eq!(
            progress(&view, epoch),
            "draining for 3 s: input ended at time 20000; outputs out to +1.250 s past it; 16 bins with scheduled work, the next at +1.260 s"
        );
        let done = DrainView {
            bins: 0,
            next: None,
            ..view
        };
        assert!(progress(&done, epoch).ends_with("no scheduled work left"));
    }

    #[test]
    fn a_cut_names_what_was_left() {
        let d = DrainSummary {
            input_end: 100,
            ended_at: 600,
            cut: true,
            bins_pending: 1,
            next_time: Some(605),
            took_s: 4.04,
        };
        let line = cut(&d, EpochLen::MS).unwrap();
        assert!(
            line.starts_with("the drain was cut after 4.0 s at time 600 (+0.500 s past the input's end)"),
            "{line}"
        );
        assert!(
            line.contains("1 bin still had scheduled work, the earliest at time 605 (+0.505 s past"),
            "{line}"
        );
        assert_eq!(cut(&DrainSummary { cut: false, ..d }, EpochLen::MS), None);
    }
}
