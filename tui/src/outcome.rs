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
