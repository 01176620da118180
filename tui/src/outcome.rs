//! What a finished run tells: its summary for a person on stderr, as JSON on stdout
//! (headless) and in `--summary`'s file.

use anyhow::Context;
use megaflux::summary::Summary;

/// Prints the job's summary for a person (and, with `json`, as JSON on stdout) and writes
/// it to `summary_file`; only the process that hosts worker 0 has one.
pub(crate) fn print_summary(
    summary: Option<Summary>,
    summary_file: Option<&std::path::Path>,
    json: bool,
) -> anyhow::Result<()> {
    let Some(summary) = summary else { return Ok(()) };
    if let Some(path) = summary_file {
        let pretty = serde_json::to_string_pretty(&summary)?;
        std::fs::write(path, pretty + "\n")
            .with_context(|| format!("writing the summary to {}", path.display()))?;
    }
    eprintln!("{}", describe(&summary));
    if json {
        println!("{}", serde_json::to_string(&summary)?);
    }
    Ok(())
}

/// What the run's sink took: `wrote 12 outputs to FILE`, and for a run that resumed a sink
/// an earlier run left, from which time and how many outputs were already there.
pub(crate) fn output_line(o: &megaflux::sink::OutputSummary) -> String {
    let mut line = format!("wrote {} outputs to {}", o.rows, o.to);
    if o.resumed_from > 0 {
        let from = if o.resumed_from == u64::MAX {
            "the end: an earlier run had committed all of them".to_string()
        } else {
            format!("logical time {}", o.resumed_from)
        };
        line.push_str(&format!(
            ", resuming from {from} ({} outputs before it were already there)",
            o.skipped
        ));
    }
    line
}

/// What the balancer decided and how each issued plan did, in a line (or, with no decision,
/// the range of imbalance it measured).
fn balancer_line(b: &megaflux::balance::BalanceSummary) -> String {
    if b.decisions.is_empty() {
        let (lo, hi) = b
            .measured
            .iter()
            .fold((f64::INFINITY, 0.0f64), |(lo, hi), [_, i]| {
                (lo.min(*i), hi.max(*i))
            });
        return if b.measured.is_empty() {
            format!("\n  balancer ({}): nothing measured", b.mode)
        } else {
            format!(
                "\n  balancer ({}): no decision; measured {lo:.2}x to {hi:.2}x",
                b.mode
            )
        };
    }
    let each: Vec<String> = b
        .decisions
        .iter()
        .map(|d| {
            format!(
                "at {:.1}s {:.2}x, {:.2}x predicted{}{}",
                d.at_s,
                d.imbalance_before,
                d.imbalance_predicted,
                if d.issued { "" } else { " (proposed)" },
                d.imbalance_achieved
                    .map_or(String::new(), |a| format!(", {a:.2}x achieved"))
            )
        })
        .collect();
    let more = if b.unlisted > 0 {
        format!(" and {} more", b.unlisted)
    } else {
        String::new()
    };
    format!("\n  balancer ({}): {}{more}", b.mode, each.join("; "))
}

/// A few human-readable lines about a finished run.
fn describe(s: &Summary) -> String {
    let ms = |ns: u64| ns as f64 / 1e6;
    let mut text = format!(
        "{}{} on {} workers, {} bins: {} records in, {} outputs, latency p50 {:.2} ms p99 {:.2} ms max {:.2} ms",
        s.workload,
        if s.native { " (native)" } else { "" },
        s.workers,
        s.bins,
        s.records_in,
        s.outputs,
        ms(s.latency_ns.p50),
        ms(s.latency_ns.p99),
        ms(s.latency_ns.max)
    );
    for m in &s.migrations {
        text.push_str(&format!(
            "\n  {} to {} at {:.1}s: {} steps, {} bins, {} bytes in {}; during it p99 {:.2} ms max {:.2} ms",
            m.strategy,
            m.target,
            m.issued_s,
            m.steps,
            m.bins_moved,
            m.bytes_moved,
            m.duration_s
                .map_or("(unfinished)".to_string(), |d| format!("{d:.3}s")),
            ms(m.latency_ns_during.p99),
            ms(m.latency_ns_during.max)
        ));
    }
    if let Some(b) = &s.balance {
        text.push_str(&balancer_line(b));
    }
    for f in &s.failures {
        text.push_str(&format!(
            "\n  worker {} failed at {:.1}s (time {}): {} bins promoted, takeover {}",
            f.worker,
            f.at_s,
            f.time,
            f.bins_promoted,
            f.takeover_ms
                .map_or("not seen".to_string(), |t| format!("{t:.1} ms")),
        ));
        if !f.bins_lost.is_empty() {
            text.push_str(&format!("; {} bins lost their last replica", f.bins_lost.len()));
        }
        match &f.recovery {
            Some(r) => text.push_str(&format!(
                "; recovery {}: {} bins, {} bytes in {}{}, during it p99 {:.2} ms max {:.2} ms",
                r.strategy,
                r.bins_copied,
                r.bytes,
                r.duration_s
                    .map_or("(unfinished)".to_string(), |d| format!("{d:.3}s")),
                match f.rejoined_s {
                    Some(at) if r.issued_s >= at => format!(" after its rejoin at {at:.1}s"),
                    _ => String::new(),
                },
                ms(r.latency_ns_during.p99),
                ms(r.latency_ns_during.max)
            )),
            None if f.bins_degraded > 0 && f.bins_lost.is_empty() => text.push_str(&format!(
                "; no live worker could hold the standbys of its {} degraded bins: they stay degraded until it rejoins (--rejoin {}@SECS)",
                f.bins_degraded, f.worker
            )),
            None => {}
        }
        if let (Some(at), Some(r)) = (f.rejoined_s, &f.recovery)
            && r.issued_s < at
        {
            text.push_str(&format!("; it rejoined at {at:.1}s"));
        }
    }
    text
}

#[cfg(test)]
mod tests {
    use megaflux::balance::{BalanceSummary, Decision};

    use super::balancer_line;

    #[test]
    fn the_output_line_says_where_the_outputs_went_and_what_was_resumed() {
        let mut o = megaflux::sink::OutputSummary {
            kind: "postgresql".into(),
            to: "postgresql://me@db/jobs?table=t".into(),
            committed_time: u64::MAX,
            rows: 7,
            ..Default::default()
        };
        assert_eq!(
            super::output_line(&o),
            "wrote 7 outputs to postgresql://me@db/jobs?table=t"
        );
        o.resumed_from = 1200;
        o.skipped = 40;
        assert_eq!(
            super::output_line(&o),
            "wrote 7 outputs to postgresql://me@db/jobs?table=t, resuming from logical time 1200 (40 outputs before it were already there)"
        );
    }

    #[test]
    fn the_balancer_says_each_decision_and_what_it_achieved() {
        let decision = |at_s, issued, achieved| Decision {
            at_s,
            imbalance_before: 1.35,
            imbalance_predicted: 1.04,
            bins: 87,
            bytes: 1 << 20,
            strategy: "fluid".into(),
            issued,
            workers: None,
            imbalance_achieved: achieved,
        };
        let mut b = BalanceSummary {
            mode: "auto".into(),
            decisions: vec![decision(3.0, true, Some(1.06)), decision(9.0, false, None)],
            unlisted: 2,
            measured: vec![[1.0, 1.3], [2.0, 1.1]],
        };
        assert_eq!(
            balancer_line(&b),
            "\n  balancer (auto): at 3.0s 1.35x, 1.04x predicted, 1.06x achieved; at 9.0s 1.35x, 1.04x predicted (proposed) and 2 more"
        );
        b.decisions.clear();
        assert_eq!(
            balancer_line(&b),
            "\n  balancer (auto): no decision; measured 1.10x to 1.30x"
        );
        b.measured.clear();
        assert_eq!(balancer_line(&b), "\n  balancer (auto): nothing measured");
    }
}
