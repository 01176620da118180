//! The migrations view: the running plan's progress and the finished ones.

use ratatui::Frame;
use ratatui::layout::{Constraint, Layout, Rect};
use ratatui::text::Line;
use ratatui::widgets::{Block, Paragraph, Row, Table};

use megaflux::size::human as bytes;

use super::super::model::Dash;
use super::theme::*;

pub(super) fn migrations(frame: &mut Frame, area: Rect, dash: &Dash, theme: Theme) {
    let job = dash.view();
    let [running, history] = Layout::vertical([Constraint::Length(8), Constraint::Min(3)]).areas(area);
    let lines: Vec<Line> = match &job.plan {
        Some(p) => {
            let elapsed = (dash.now_s - p.started_s).max(0.0);
            let done = p.bins_completed as f64 / p.bins.max(1) as f64;
            let eta = if done > 0.0 {
                format!("{:.1} s", elapsed / done - elapsed)
            } else {
                "-".into()
            };
            let mut l = vec![
                Line::styled(format!("{} to {}", p.strategy, p.target), theme.accent()),
                Line::raw(format!(
                    "steps {}/{}  bins {}/{}  moved {}  elapsed {elapsed:.1} s  ETA {eta}",
                    p.steps_issued,
                    p.steps,
                    p.bins_completed,
                    p.bins,
                    bytes(p.bytes_moved)
                )),
            ];
            let in_flight: Vec<String> = job
                .moving
                .values()
                .take(12)
                .map(|m| format!("{}:{}", m.bin, phase_char(m.phase)))
                .collect();
            l.push(Line::raw(format!(
                "in flight (bin:phase): {}",
                in_flight.join(" ")
            )));
            l
        }
        None => vec![Line::raw("no plan running (p starts one)")],
    };
    frame.render_widget(
        Paragraph::new(lines).block(Block::bordered().title("Running plan")),
        running,
    );
    let rows: Vec<Row> = job
        .finished_plans
        .iter()
        .rev()
        .map(|p| {
            let (p99, max) = super::latency::during_cells(p);
            Row::new(vec![
                p.strategy.clone(),
                p.target.clone(),
                p.bins.to_string(),
                bytes(p.bytes_moved),
                p.seconds.map_or("-".into(), |s| format!("{s:.3} s")),
                p99,
                max,
            ])
        })
        .collect();
    let header = Row::new([
        "strategy",
        "target",
        "bins",
        "moved",
        "took",
        "p99 during",
        "max during",
    ])
    .style(theme.accent());
    // The strategy is a word or two; the target can be a sentence ("standbys lost with
    // worker 1"): the target takes what the other columns leave.
    let strategy = job
        .finished_plans
        .iter()
        .map(|p| p.strategy.chars().count())
        .max()
        .unwrap_or(0)
        .clamp("strategy".len(), 22) as u16;
    let widths = [
        Constraint::Length(strategy),
        Constraint::Min(10),
        Constraint::Length(6),
        Constraint::Length(9),
        Constraint::Length(9),
        Constraint::Length(11),
        Constraint::Length(11),
    ];
    frame.render_widget(
        Table::new(rows, widths)
            .header(header)
            .block(Block::bordered().title("Finished migrations")),
        history,
    );
}
