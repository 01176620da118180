//! The workers view: each worker's share of the bins, its load and its state.

use ratatui::Frame;
use ratatui::layout::{Constraint, Layout, Rect};
use ratatui::style::Color;
use ratatui::widgets::{Block, Paragraph, Row, Table, Wrap};

use megaflux::size::human as bytes;

use super::super::model::Dash;
use super::count;
use super::theme::*;

pub(super) fn workers(frame: &mut Frame, area: Rect, dash: &Dash, theme: Theme) {
    let job = dash.view();
    let totals = dash.worker_totals(&[], 0);
    let stats = |w: usize| job.workers.get(&(w as u32)).cloned().unwrap_or_default();
    // Exact totals as each worker last sampled them; per-bin samples until then.
    let held = |w: usize, k: u64, by: u64| {
        let s = stats(w);
        if s.held.is_empty() {
            (k, by)
        } else {
            // Saturating: the sizes come from the network.
            s.held.values().fold((0u64, 0u64), |(k, b), h| {
                (k.saturating_add(h.keys), b.saturating_add(h.bytes))
            })
        }
    };
    let shown: Vec<(u64, u64)> = totals
        .iter()
        .enumerate()
        .map(|(w, (_, k, by))| held(w, *k, *by))
        .collect();
    let mean = shown.iter().map(|t| t.0 as f64).sum::<f64>() / shown.len().max(1) as f64;
    let largest = shown.iter().map(|t| t.0).max().unwrap_or(0) as f64;
    let skew = if mean > 0.0 { largest / mean } else { 1.0 };
    // Each worker's standbys, counted in one pass over the bins (not one per worker).
    let mut standby_counts = vec![0usize; totals.len()];
    for b in 0..dash.bins() {
        if let Some(c) = dash.standby(b).and_then(|w| standby_counts.get_mut(w as usize)) {
            *c += 1;
        }
    }
    let standbys = |w: u32| standby_counts.get(w as usize).copied().unwrap_or(0);
    // Each live worker's share of the records applied: its load.
    let applied_total: f64 = job
        .workers
        .iter()
        .filter(|(w, _)| !job.failed.contains(w))
        .filter_map(|(_, s)| s.applied_per_s)
        .sum();
    let share = |s: &megaflux_probe::model::WorkerView| {
        s.applied_per_s
            .filter(|_| applied_total > 0.0)
            .map_or("-".into(), |a| format!("{:.0}%", a / applied_total * 100.0))
    };
    let rows: Vec<Row> = totals
        .iter()
        .enumerate()
        .map(|(w, (b, _, _))| {
            let stats = stats(w);
            let failed = job.failed.contains(&(w as u32));
            let (keys, state) = shown[w];
            let row = Row::new(vec![
                format!("{w}"),
                format!("{}", stats.process),
                format!("{b}"),
                format!("{}", standbys(w as u32)),
                count(keys),
                bytes(state),
                stats.applied_per_s.map_or("-".into(), |a| count(a as u64)),
                share(&stats),
                stats.true_rate().map_or("-".into(), |r| count(r as u64)),
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
        "proc",
        "bins",
        "stby",
        "keys",
        "state",
        "applied/s",
        "load",
        "true/s",
        "sent/s",
        "busy",
        "",
    ])
    .style(theme.accent());
    let widths = [
        Constraint::Length(6),
        Constraint::Length(4),
        Constraint::Length(5),
        Constraint::Length(5),
        Constraint::Length(8),
        Constraint::Length(9),
        Constraint::Length(9),
        Constraint::Length(5),
        Constraint::Length(9),
        Constraint::Length(8),
        Constraint::Length(5),
        Constraint::Length(6),
    ];
    let mut title = format!("Workers: skew {skew:.2} (keys held, largest ÷ mean)");
    if let Some(imbalance) = job.imbalance() {
        title.push_str(&format!("; imbalance {imbalance:.2}x (load, busiest ÷ mean)"));
    }
    if job.replicated {
        let degraded = (0..dash.bins()).filter(|b| dash.degraded(*b)).count();
        title.push_str(&format!("; {degraded} bins with one replica"));
    }
    let note = "keys, state: as each last sampled them, standbys included · applied/s: by its \
                stateful operators · load: its share of all applied · true/s: applied per busy \
                second, the rate it could sustain · sent/s: by its source";
    let note_lines = (note.chars().count() as u16).div_ceil(area.width.max(1)).max(1);
    let [table, notes] = Layout::vertical([Constraint::Min(3), Constraint::Length(note_lines)]).areas(area);
    frame.render_widget(
        Table::new(rows, widths)
            .header(header)
            .block(Block::bordered().title(title)),
        table,
    );
    frame.render_widget(
        Paragraph::new(note)
            .style(theme.fg(Color::DarkGray))
            .wrap(Wrap { trim: true }),
        notes,
    );
}
