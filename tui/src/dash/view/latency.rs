//! The latency view: the windows' percentiles over time, migrations marked.

use ratatui::Frame;
use ratatui::layout::{Constraint, Layout, Rect};
use ratatui::style::Color;
use ratatui::symbols::Marker;
use ratatui::widgets::{Axis, Block, Chart, Dataset, GraphType, Paragraph};

use super::super::model::Dash;
use super::ms;
use super::theme::*;

/// log10 of a latency in ms, floored at 1 µs.
pub(super) fn log_ms(ns: u64) -> f64 {
    (ns as f64 / 1e6).max(0.001).log10()
}

pub(super) fn latency(frame: &mut Frame, area: Rect, dash: &Dash, theme: Theme) {
    let job = dash.view();
    let windows = &job.latency;
    let [head, chart_area] = Layout::vertical([Constraint::Length(1), Constraint::Min(3)]).areas(area);
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
    let p50: Vec<(f64, f64)> = windows.iter().map(|w| (w.at_s, log_ms(w.p50))).collect();
    let p99: Vec<(f64, f64)> = windows.iter().map(|w| (w.at_s, log_ms(w.p99))).collect();
    let max: Vec<(f64, f64)> = windows.iter().map(|w| (w.at_s, log_ms(w.max))).collect();
    let x0 = windows.first().map_or(0.0, |w| w.at_s);
    let x1 = windows.last().map_or(1.0, |w| w.at_s).max(x0 + 1.0);
    let (y0, y1) = (-2.0, 4.0);
    // Migrations as vertical bars at their start and end.
    let mut marks: Vec<Vec<(f64, f64)>> = Vec::new();
    for p in job.finished_plans.iter().chain(job.plan.iter()) {
        let end = p.seconds.map_or(dash.now_s, |s| p.started_s + s);
        for x in [p.started_s, end] {
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
}
