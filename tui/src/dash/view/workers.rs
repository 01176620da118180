//! The workers view: each worker's share of the bins, its load and its state.

use ratatui::Frame;
use ratatui::layout::{Constraint, Rect};
use ratatui::style::Color;
use ratatui::widgets::{Block, Row, Table};

use megaflux::size::human as bytes;

use super::super::model::Dash;
use super::count;
use super::theme::*;

pub(super) fn workers(frame: &mut Frame, area: Rect, dash: &Dash, theme: Theme) {
    let job = dash.view();
    let totals = dash.worker_totals(&[], 0);
    let mean = totals.iter().map(|t| t.1).sum::<u64>() as f64 / totals.len().max(1) as f64;
    let largest = totals.iter().map(|t| t.1).max().unwrap_or(0) as f64;
    let skew = if mean > 0.0 { largest / mean } else { 1.0 };
    let standbys = |w: u32| (0..dash.bins()).filter(|b| dash.standby(*b) == Some(w)).count();
    let rows: Vec<Row> = totals
        .iter()
        .enumerate()
        .map(|(w, (b, k, by))| {
            let stats = job.workers.get(&(w as u32)).cloned().unwrap_or_default();
            let failed = job.failed.contains(&(w as u32));
            let row = Row::new(vec![
                format!("{w}"),
                format!("{}", stats.process),
                format!("{b}"),
                format!("{}", standbys(w as u32)),
                count(*k),
                bytes(*by),
                count(stats.records_per_s as u64),
                format!("{:.0}%", stats.busy * 100.0),
                if failed {
                    "FAILED".into()
                } else if stats.finished {
                    "done".into()
                } else {
                    String::new()
                },
            ]);
            if failed {
                row.style(theme.fg(Color::Red))
            } else {
                row
            }
        })
        .collect();
    let header = Row::new([
        "worker",
        "process",
        "bins",
        "standbys",
        "keys",
        "state",
        "records/s",
        "busy",
        "",
    ])
    .style(theme.accent());
    let widths = [
        Constraint::Length(7),
        Constraint::Length(8),
        Constraint::Length(6),
        Constraint::Length(8),
        Constraint::Length(8),
        Constraint::Length(10),
        Constraint::Length(10),
        Constraint::Length(6),
        Constraint::Length(7),
    ];
    let mut title = format!("Workers: skew {skew:.2} (largest worker's primary keys ÷ mean)");
    if job.replicated {
        let degraded = (0..dash.bins()).filter(|b| dash.degraded(*b)).count();
        title.push_str(&format!("; {degraded} bins with one replica"));
    }
    frame.render_widget(
        Table::new(rows, widths)
            .header(header)
            .block(Block::bordered().title(title)),
        area,
    );
}
