//! The header above every view: the job's throughput, its last latency window, the bins
//! on the move and the running plan's progress, a warning when the feed went quiet, and
//! where the job reads and writes (last: a narrow terminal cuts it first).

use ratatui::Frame;
use ratatui::layout::Rect;
use ratatui::style::{Color, Modifier};
use ratatui::text::{Line, Span};
use ratatui::widgets::Paragraph;

use super::super::model::Dash;
use super::count;
use super::theme::Theme;

/// From this width on, the header also says what the operators applied.
const WIDE: u16 = 100;

/// A latency in milliseconds, short.
fn short_ms(ns: u64) -> String {
    let ms = ns as f64 / 1e6;
    if ms >= 100.0 {
        format!("{ms:.0}")
    } else if ms >= 10.0 {
        format!("{ms:.1}")
    } else {
        format!("{ms:.2}")
    }
}

pub(super) fn header(frame: &mut Frame, area: Rect, dash: &Dash, theme: Theme) {
    let job = dash.view();
    let sep = || Span::styled(" │ ", theme.fg(Color::DarkGray));
    let (sent, applied) = dash.throughput();
    let mut spans = vec![Span::styled(
        format!(" {} rec/s", count(sent as u64)),
        theme.accent(),
    )];
    // What the stateful operators applied, where there is room for it.
    if let Some(applied) = applied.filter(|_| area.width >= WIDE) {
        spans.push(Span::raw(format!(" (applied {}/s)", count(applied as u64))));
    }
    spans.push(sep());
    spans.push(Span::raw(match job.latency.last() {
        Some(w) => format!(
            "p50 {} p99 {} max {} ms",
            short_ms(w.p50),
            short_ms(w.p99),
            short_ms(w.max)
        ),
        None => "latency: no window yet".into(),
    }));
    spans.push(sep());
    let moving = job.moving.len();
    spans.push(if moving > 0 {
        Span::styled(
            format!("{moving} moving"),
            theme.fg(Color::Magenta).add_modifier(Modifier::BOLD),
        )
    } else {
        Span::raw("none moving")
    });
    if let Some(p) = &job.plan {
        spans.push(sep());
        // Wide: the counts come from the network.
        let done = u128::from(p.bins_completed) * 100 / u128::from(p.bins.max(1));
        let steps = if area.width >= WIDE {
            format!(" ({}/{} steps)", p.steps_issued, p.steps)
        } else {
            String::new()
        };
        spans.push(Span::raw(format!(
            "{}→{} {done}% done{steps}",
            p.strategy, p.target
        )));
    }
    if let Some(quiet) = dash.stale_s() {
        spans.push(sep());
        spans.push(Span::styled(
            format!("⚠ no events for {quiet:.0} s"),
            theme.fg(Color::Yellow).add_modifier(Modifier::BOLD),
        ));
    }
    match job.connectors() {
        (None, None) => {}
        (input, output) => {
            spans.push(sep());
            let said = |s: Option<String>, none: &str| s.unwrap_or_else(|| none.to_string());
            spans.push(Span::styled(
                format!("{} → {}", said(input, "generated"), said(output, "no output")),
                theme.fg(Color::Cyan),
            ));
        }
    }
    frame.render_widget(Paragraph::new(Line::from(spans)), area);
}
