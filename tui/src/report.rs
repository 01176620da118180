//! `megaflux report`: turns run summaries, bench results or traces into an SVG of the
//! paper's figures — latency over time with migration windows shaded, and the latency CCDF —
//! and a trace into Chrome trace-event JSON for the Perfetto UI.

use std::path::{Path, PathBuf};

use anyhow::{Context, bail};
use clap::Args;
use megaflux::summary::Summary;
use megaflux_probe::Event;
use megaflux_probe::record::{BadLines, TraceReader};
use plotters::prelude::*;

/// `megaflux report`'s arguments: the inputs, and at least one output.
#[derive(Debug, Args)]
#[command(group = clap::ArgGroup::new("output").required(true).multiple(true).args(["svg", "perfetto"]))]
pub struct ReportArgs {
    /// Bench results (`megaflux bench --out`), run summaries (`megaflux run --summary`) or
    /// traces (`megaflux run --record`; their last line is the run's summary).
    #[arg(required = true, value_name = "TRACE|RESULTS")]
    inputs: Vec<PathBuf>,
    /// Where to write the figure of every input's latency, overlaid.
    #[arg(long, value_name = "OUT.svg")]
    svg: Option<PathBuf>,
    /// Where to write the one trace among the inputs as Chrome trace-event JSON, for the
    /// Perfetto UI (ui.perfetto.dev) or chrome://tracing.
    #[arg(long, value_name = "OUT.json")]
    perfetto: Option<PathBuf>,
}

/// A line of the figure: one run.
struct Series {
    label: String,
    summary: Summary,
}

/// The files could not be read as results: a usage error, reported with exit status 2.
#[derive(Debug, thiserror::Error)]
#[error("{0}")]
pub struct BadInput(String);

/// Runs `megaflux report`: writes the figure (`--svg`) and the Perfetto export
/// (`--perfetto`) asked for. Unreadable inputs, inputs with no runs, or a `--perfetto`
/// without exactly one trace fail with [`BadInput`] (exit status 2).
pub fn report(args: ReportArgs) -> anyhow::Result<()> {
    let (traces, results): (Vec<&PathBuf>, Vec<&PathBuf>) = args.inputs.iter().partition(|p| is_trace(p));
    if let Some(out) = &args.perfetto {
        // One input that is not a trace: the reader says what is wrong with it.
        let one = match (traces.as_slice(), args.inputs.as_slice()) {
            ([], [only]) => vec![only],
            _ => traces.clone(),
        };
        let [trace] = one.as_slice() else {
            bail!(BadInput(format!(
                "--perfetto exports one trace; the inputs hold {}",
                traces.len()
            )));
        };
        perfetto(trace, out)?;
    }
    if let Some(svg) = &args.svg {
        let mut series = Vec::new();
        for path in &args.inputs {
            if traces.contains(&path) {
                series.push(from_trace(path)?);
            } else {
                series.extend(read(path)?);
            }
        }
        if series.is_empty() {
            bail!(BadInput("the inputs hold no runs".into()));
        }
        draw(svg, &series).with_context(|| format!("drawing {}", svg.display()))?;
        eprintln!("{} runs drawn to {}", series.len(), svg.display());
    } else if let Some(path) = results.first() {
        bail!(BadInput(format!(
            "{} is not a trace: --perfetto needs one, give --svg OUT to draw results",
            path.display()
        )));
    }
    Ok(())
}

/// Whether `path` starts with a trace header line (anything else is read as results).
fn is_trace(path: &Path) -> bool {
    use std::io::{BufRead, Read};
    let Ok(file) = std::fs::File::open(path) else {
        return false;
    };
    let mut first = Vec::new();
    // A header is a few kilobytes; a file whose first line is longer is not a trace.
    let mut limited = std::io::BufReader::new(file).take(1 << 20);
    if limited.read_until(b'\n', &mut first).is_err() {
        return false;
    }
    serde_json::from_slice::<serde_json::Value>(&first)
        .is_ok_and(|v| v.get("format").and_then(|f| f.as_str()) == Some(megaflux_probe::record::FORMAT_NAME))
}

/// A trace's reader that skips the lines it cannot read (see [`warn_unreadable`]).
fn open_trace(path: &Path) -> anyhow::Result<TraceReader<std::io::BufReader<std::fs::File>>> {
    let mut reader = TraceReader::open(path).map_err(|e| BadInput(e.to_string()))?;
    reader.set_bad_lines(BadLines::Skip);
    Ok(reader)
}

/// Says which lines of the trace at `path` were skipped, if any.
fn warn_unreadable<R: std::io::BufRead>(path: &Path, reader: &TraceReader<R>) {
    if !reader.unreadable().is_empty() {
        eprintln!("megaflux: warning: {}: {}", path.display(), reader.unreadable());
    }
}

fn perfetto(trace: &Path, out: &Path) -> anyhow::Result<()> {
    let mut reader = open_trace(trace)?;
    let file = std::fs::File::create(out).with_context(|| format!("creating {}", out.display()))?;
    let what = out.display().to_string();
    let stats = megaflux_replay::perfetto::export(&mut reader, std::io::BufWriter::new(file), &what)
        .map_err(|e| match e.is_bad_input() {
            true => anyhow::Error::new(BadInput(e.to_string())),
            false => anyhow::Error::new(e),
        })?;
    warn_unreadable(trace, &reader);
    eprintln!(
        "{} trace events ({} bin moves, {} plan{}{}) written to {}; open it in ui.perfetto.dev",
        stats.events,
        stats.moves,
        stats.plans,
        if stats.plans == 1 { "" } else { "s" },
        match stats.incomplete {
            0 => String::new(),
            n => format!(", {n} left open by the trace"),
        },
        out.display()
    );
    Ok(())
}

/// The run a trace recorded, from its last line.
fn from_trace(path: &Path) -> anyhow::Result<Series> {
    let mut reader = open_trace(path)?;
    let mut last = None;
    while let Some(event) = reader.next_event().map_err(|e| BadInput(e.to_string()))? {
        if let Event::Summary { summary } = event.event {
            last = Some(summary);
        }
    }
    warn_unreadable(path, &reader);
    let Some(summary) = last else {
        bail!(BadInput(format!(
            "{} has no summary line (a version 1 trace, or one cut short): it can be exported \
             with --perfetto but not drawn",
            path.display()
        )));
    };
    let summary: Summary = serde_json::from_value(summary).map_err(|e| {
        BadInput(format!(
            "{}: the summary line is not a run summary: {e}",
            path.display()
        ))
    })?;
    let name = path
        .file_stem()
        .map(|s| s.to_string_lossy().into_owned())
        .unwrap_or_default();
    Ok(Series {
        label: format!("{} {}", label(&summary), name),
        summary,
    })
}

fn label(summary: &Summary) -> String {
    let variant = match (summary.native, summary.migrations.first()) {
        (true, _) => "native".to_string(),
        (false, Some(m)) => m.strategy.clone(),
        (false, None) => "none".to_string(),
    };
    format!("{} {variant}", summary.workload)
}

fn read(path: &Path) -> anyhow::Result<Vec<Series>> {
    let text = std::fs::read_to_string(path)
        .map_err(|e| BadInput(format!("cannot read {}: {e}", path.display())))?;
    let value: serde_json::Value =
        serde_json::from_str(&text).map_err(|e| BadInput(format!("{} is not JSON: {e}", path.display())))?;
    let bad = |e: serde_json::Error| {
        BadInput(format!(
            "{} is not a megaflux summary or bench result: {e}",
            path.display()
        ))
    };
    match value.get("rows").and_then(|r| r.as_array()) {
        Some(rows) => rows
            .iter()
            .map(|row| {
                let summary: Summary = serde_json::from_value(row["summary"].clone()).map_err(bad)?;
                let variant = row["variant"].as_str().unwrap_or("?");
                Ok(Series {
                    label: format!("{} {variant}", summary.workload),
                    summary,
                })
            })
            .collect(),
        None => {
            let summary: Summary = serde_json::from_value(value).map_err(bad)?;
            Ok(vec![Series {
                label: label(&summary),
                summary,
            }])
        }
    }
}

/// Latencies below this (ms) are drawn at it: a log axis has no zero.
const FLOOR_MS: f64 = 0.01;

fn draw(path: &Path, series: &[Series]) -> anyhow::Result<()> {
    let root = SVGBackend::new(path, (1200, 900)).into_drawing_area();
    root.fill(&WHITE)?;
    let (top, bottom) = root.split_vertically(520);
    let ms = |ns: u64| (ns as f64 / 1e6).max(FLOOR_MS);
    let colour = |i: usize| Palette99::pick(i).to_rgba();

    let x_end = series.iter().map(|s| s.summary.duration_s).fold(1.0, f64::max);
    let y_max = series
        .iter()
        .flat_map(|s| s.summary.timeline.iter().map(|w| ms(w.latency_ns.max)))
        .fold(1.0, f64::max)
        // Head room on the log scale for the legend, above every line.
        * 40.0;
    let mut chart = ChartBuilder::on(&top)
        .caption(
            "latency over time: p99 (thick), max (thin), p50 (faint); migrations shaded",
            ("sans-serif", 20),
        )
        .margin(12)
        .x_label_area_size(36)
        .y_label_area_size(60)
        .build_cartesian_2d(0f64..x_end, (FLOOR_MS..y_max).log_scale())?;
    chart
        .configure_mesh()
        .x_desc("seconds")
        .y_desc("latency (ms, log)")
        .draw()?;
    for (i, s) in series.iter().enumerate() {
        let c = colour(i);
        for m in &s.summary.migrations {
            let end = m.completed_s.unwrap_or(x_end).max(m.issued_s + 0.05);
            chart.draw_series(std::iter::once(Rectangle::new(
                [(m.issued_s, FLOOR_MS), (end, y_max)],
                c.mix(0.2).filled(),
            )))?;
        }
        let at = |w: &megaflux::latency::WindowStats, v: u64| (w.t_s + 0.125, ms(v));
        let tl = &s.summary.timeline;
        chart.draw_series(LineSeries::new(
            tl.iter().map(|w| at(w, w.latency_ns.p50)),
            c.mix(0.35).stroke_width(1),
        ))?;
        chart.draw_series(LineSeries::new(
            tl.iter().map(|w| at(w, w.latency_ns.max)),
            c.mix(0.7).stroke_width(1),
        ))?;
        chart
            .draw_series(LineSeries::new(
                tl.iter().map(|w| at(w, w.latency_ns.p99)),
                c.stroke_width(3),
            ))?
            .label(timeline_label(s))
            .legend(move |(x, y)| PathElement::new([(x, y), (x + 20, y)], c.stroke_width(3)));
    }
    chart
        .configure_series_labels()
        .position(SeriesLabelPosition::UpperLeft)
        .border_style(BLACK)
        .background_style(WHITE.mix(0.9))
        .draw()?;

    let x_max = series
        .iter()
        .flat_map(|s| s.summary.latency_ccdf.iter().map(|(v, _)| ms(*v)))
        .fold(1.0, f64::max)
        * 1.5;
    let mut ccdf = ChartBuilder::on(&bottom)
        .caption(
            "latency CCDF: fraction of records slower than x",
            ("sans-serif", 20),
        )
        .margin(12)
        .x_label_area_size(36)
        .y_label_area_size(60)
        .build_cartesian_2d((FLOOR_MS..x_max).log_scale(), (1e-5f64..1.0).log_scale())?;
    ccdf.configure_mesh()
        .x_desc("latency (ms, log)")
        .y_desc("fraction (log)")
        .draw()?;
    for (i, s) in series.iter().enumerate() {
        let c = colour(i);
        let points = s
            .summary
            .latency_ccdf
            .iter()
            .filter(|(_, f)| *f >= 1e-5)
            .map(|(v, f)| (ms(*v), *f));
        ccdf.draw_series(LineSeries::new(points, c.stroke_width(2)))?
            .label(&s.label)
            .legend(move |(x, y)| PathElement::new([(x, y), (x + 20, y)], c.stroke_width(2)));
    }
    // Bottom left: the curves start at the top and fall to the right.
    ccdf.configure_series_labels()
        .position(SeriesLabelPosition::LowerLeft)
        .border_style(BLACK)
        .background_style(WHITE.mix(0.9))
        .draw()?;
    root.present()?;
    Ok(())
}

/// A run's legend entry: its label and the worst latency during its migrations.
fn timeline_label(s: &Series) -> String {
    match s.summary.migrations.iter().map(|m| m.latency_ns_during.max).max() {
        Some(max) => format!("{} (max during migrations {:.1} ms)", s.label, max as f64 / 1e6),
        None => s.label.clone(),
    }
}
