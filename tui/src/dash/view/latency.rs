//! The latency view: the windows' percentiles over time, migrations marked.

use ratatui::Frame;
use ratatui::layout::{Constraint, Layout, Rect};
use ratatui::style::Color;
use ratatui::symbols::Marker;
use ratatui::widgets::{Axis, Block, Chart, Dataset, GraphType, Paragraph, Row, Table};

use megaflux_probe::model::PlanView;

use super::super::model::Dash;
use super::ms;
use super::theme::*;

/// Plans listed under the chart.
const MAX_PLANS_SHOWN: usize = 4;
/// A latency window's length, in seconds of the run.
const WINDOW_S: f64 = 0.25;

/// log10 of a latency in ms, floored at 1 µs.
pub(super) fn log_ms(ns: u64) -> f64 {
    (ns as f64 / 1e6).max(0.001).log10()
}

pub(super) fn latency(frame: &mut Frame, area: Rect, dash: &Dash, theme: Theme) {
    let job = dash.view();
    let windows = &job.latency;
    let shown = plans(dash).count().min(MAX_PLANS_SHOWN) as u16;
    let table = if shown > 0 { shown + 3 } else { 0 };
    let [head, chart_area, plans_area] = Layout::vertical([
        Constraint::Length(1),
        Constraint::Min(3),
        Constraint::Length(table),
    ])
    .areas(area);
    let current = match windows.last() {
        Some(w) => format!(
            "last window (t {:.2} s, {} records): p50 {}  p99 {}  max {}",
            w.t_s,
            w.count,
            ms(w.p50),
            ms(w.p99),
            ms(w.max)
        ),
        None => "no latency windows yet".into(),
    };
    frame.render_widget(Paragraph::new(current), head);
    // Each window at its logical time (the start of its epochs in the run), so that a
    // window reported late still sits where its records were due; one without a finite
    // start has no place on the chart (the job's model keeps none such).
    let timed: Vec<&megaflux_probe::model::LatencyWindow> =
        windows.iter().filter(|w| w.t_s.is_finite()).collect();
    let p50: Vec<(f64, f64)> = timed.iter().map(|w| (w.t_s, log_ms(w.p50))).collect();
    let p99: Vec<(f64, f64)> = timed.iter().map(|w| (w.t_s, log_ms(w.p99))).collect();
    let max: Vec<(f64, f64)> = timed.iter().map(|w| (w.t_s, log_ms(w.max))).collect();
    let x0 = timed.first().map_or(0.0, |w| w.t_s);
    let x1 = timed.last().map_or(1.0, |w| w.t_s + WINDOW_S).max(x0 + 1.0);
    let (y0, y1) = (-2.0, 4.0);
    // Migrations as vertical bars at their start and end, on the run's clock too.
    let mut marks: Vec<Vec<(f64, f64)>> = Vec::new();
    for p in plans(dash) {
        let Some(start) = p.issued_run_s else { continue };
        let end = p.completed_run_s.unwrap_or(x1);
        for x in [start, end] {
            if (x0..=x1).contains(&x) {
                marks.push(vec![(x, y0), (x, y1)]);
            }
        }
    }
    let mut datasets = vec![
        Dataset::default()
            .name("max")
            .marker(Marker::Braille)
            .graph_type(GraphType::Line)
            .style(theme.fg(Color::Red))
            .data(&max),
        Dataset::default()
            .name("p99")
            .marker(Marker::Braille)
            .graph_type(GraphType::Line)
            .style(theme.fg(Color::Yellow))
            .data(&p99),
        Dataset::default()
            .name("p50")
            .marker(Marker::Braille)
            .graph_type(GraphType::Line)
            .style(theme.fg(Color::Green))
            .data(&p50),
    ];
    for m in &marks {
        datasets.push(
            Dataset::default()
                .marker(Marker::Dot)
                .graph_type(GraphType::Line)
                .style(theme.fg(Color::Magenta))
                .data(m),
        );
    }
    let chart = Chart::new(datasets)
        .block(Block::bordered().title("Latency per 250 ms window (ms, log scale; │ migration start/end)"))
        .x_axis(
            Axis::default()
                .bounds([x0, x1])
                .labels([format!("{x0:.0} s"), format!("{x1:.0} s")]),
        )
        .y_axis(
            Axis::default()
                .bounds([y0, y1])
                .labels(["0.01", "0.1", "1", "10", "100", "1000", "10k"]),
        );
    frame.render_widget(chart, chart_area);
    if shown > 0 {
        let rows: Vec<Row> = plans(dash)
            .rev()
            .take(MAX_PLANS_SHOWN)
            .map(|p| {
                let (p99, max) = during_cells(p);
                Row::new(vec![
                    p.issued_run_s.map_or("-".into(), |s| format!("{s:.1} s")),
                    format!("{} to {}", p.strategy, p.target),
                    p99,
                    max,
                ])
            })
            .collect();
        let widths = [
            Constraint::Length(9),
            Constraint::Min(16),
            Constraint::Length(12),
            Constraint::Length(12),
        ];
        let header = Row::new(["at", "plan", "p99 during", "max during"]).style(theme.accent());
        let title = "Latency during each plan (≈: whole windows, until the exact figure)";
        frame.render_widget(
            Table::new(rows, widths)
                .header(header)
                .block(Block::bordered().title(title)),
            plans_area,
        );
    }
}

/// Plans in the order they started: the finished ones, then the running one.
fn plans(dash: &Dash) -> impl DoubleEndedIterator<Item = &PlanView> {
    let job = dash.view();
    job.finished_plans.iter().chain(job.plan.iter())
}

/// The "p99 during" and "max during" cells of a plan: exact, estimated (≈) or unknown.
pub(super) fn during_cells(p: &PlanView) -> (String, String) {
    match p.during {
        Some(d) => {
            let mark = if d.exact { "" } else { "≈" };
            (format!("{mark}{}", ms(d.p99)), format!("{mark}{}", ms(d.max)))
        }
        None => ("-".into(), "-".into()),
    }
}
