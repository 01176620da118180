//! `megaflux report`: turns run summaries or bench results into an SVG of the paper's
//! figures — latency over time with migration windows shaded, and the latency CCDF.

use std::path::{Path, PathBuf};

use anyhow::{Context, bail};
use clap::Args;
use megaflux::summary::Summary;
use plotters::prelude::*;

#[derive(Debug, Args)]
pub struct ReportArgs {
    /// Bench results (`megaflux bench --out`) or run summaries (`megaflux run --summary`).
    #[arg(required = true, value_name = "RESULTS.json")]
    inputs: Vec<PathBuf>,
    /// Where to write the figure.
    #[arg(long, value_name = "OUT.svg")]
    svg: PathBuf,
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

pub fn report(args: ReportArgs) -> anyhow::Result<()> {
    let mut series = Vec::new();
    for path in &args.inputs {
        series.extend(read(path)?);
    }
    if series.is_empty() {
        bail!(BadInput("the inputs hold no runs".into()));
    }
    draw(&args.svg, &series).with_context(|| format!("drawing {}", args.svg.display()))?;
    eprintln!("{} runs drawn to {}", series.len(), args.svg.display());
    Ok(())
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
            let variant = match (summary.native, summary.migrations.first()) {
                (true, _) => "native".to_string(),
                (false, Some(m)) => m.strategy.clone(),
                (false, None) => "none".to_string(),
            };
            Ok(vec![Series {
                label: format!("{} {variant}", summary.workload),
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
            "latency CCDF: fraction of epochs slower than x",
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
