//! The dialogs over the views: help, moving bins, failing or rejoining a worker, starting
//! a plan, and a replay's go-to.

use ratatui::Frame;
use ratatui::layout::Rect;
use ratatui::text::{Line, Span};
use ratatui::widgets::{Block, Clear, Paragraph};

use super::super::keys::BINDINGS;
use super::super::model::{Dash, Dialog, STRATEGIES, describe_bins};
use super::{Theme, count};

pub(super) fn centered(area: Rect, width: u16, height: u16) -> Rect {
    let w = width.min(area.width);
    let h = height.min(area.height);
    Rect::new(
        area.x + (area.width - w) / 2,
        area.y + (area.height - h) / 2,
        w,
        h,
    )
}

pub(super) fn draw_dialog(frame: &mut Frame, area: Rect, dash: &Dash, dialog: &Dialog, theme: Theme) {
    match dialog {
        Dialog::Help => {
            let lines: Vec<Line> = BINDINGS
                .iter()
                .map(|b| {
                    Line::from(vec![
                        Span::styled(format!("{:>10}  ", b.label), theme.accent()),
                        Span::raw(b.help),
                    ])
                })
                .collect();
            let r = centered(area, 76, lines.len() as u16 + 2);
            frame.render_widget(Clear, r);
            frame.render_widget(
                Paragraph::new(lines).block(Block::bordered().title("Keys (esc closes)")),
                r,
            );
        }
        Dialog::Move { bins, worker } => {
            let before = dash.worker_totals(&[], 0);
            let after = dash.worker_totals(bins, *worker);
            let mut lines = vec![
                Line::styled(
                    format!("Move {} to worker {worker}?", describe_bins(bins)),
                    theme.accent(),
                ),
                Line::raw("worker: bins, keys before → after"),
            ];
            for (w, (b, a)) in before.iter().zip(&after).enumerate() {
                let mark = if w == *worker { "▶" } else { " " };
                lines.push(Line::raw(format!(
                    "{mark} {w}: {} → {} bins, {} → {} keys",
                    b.0,
                    a.0,
                    count(b.1),
                    count(a.1)
                )));
            }
            lines.push(Line::raw("←→ or a digit: worker   enter: move   esc: cancel"));
            let r = centered(area, 60, lines.len() as u16 + 2);
            frame.render_widget(Clear, r);
            frame.render_widget(
                Paragraph::new(lines).block(Block::bordered().title("Move bins")),
                r,
            );
        }
        Dialog::Worker { worker, rejoin } => {
            let w = *worker as u32;
            let bins = dash.bins();
            let primaries = (0..bins).filter(|b| dash.owner(*b) == Some(w)).count();
            let standbys = (0..bins).filter(|b| dash.standby(*b) == Some(w)).count();
            let lost = (0..bins)
                .filter(|b| dash.owner(*b) == Some(w) && dash.standby(*b).is_none())
                .count();
            let failed = dash.view().failed.contains(&w);
            let mut lines = vec![Line::styled(
                if *rejoin {
                    format!("Worker {worker} rejoins, empty?")
                } else {
                    format!("Fail worker {worker}?")
                },
                theme.accent(),
            )];
            if *rejoin {
                lines.push(Line::raw(if failed {
                    "bins then rebalance onto it (recovery strategy)".to_string()
                } else {
                    format!("worker {worker} has not failed: the job will refuse")
                }));
            } else if failed {
                lines.push(Line::raw(format!(
                    "worker {worker} has failed already: the job will refuse"
                )));
            } else {
                lines.push(Line::raw(format!(
                    "it holds {primaries} primaries and {standbys} standbys;"
                )));
                lines.push(Line::raw(if lost > 0 {
                    format!("{lost} bins have no other replica: the job stops (exit 3)")
                } else {
                    format!(
                        "their standbys take over; {} bins keep one replica until recovery",
                        primaries + standbys
                    )
                }));
            }
            lines.push(Line::raw("←→ or a digit: worker   enter: confirm   esc: cancel"));
            let r = centered(area, 64, lines.len() as u16 + 2);
            frame.render_widget(Clear, r);
            let title = if *rejoin {
                "Rejoin a worker"
            } else {
                "Fail a worker"
            };
            frame.render_widget(Paragraph::new(lines).block(Block::bordered().title(title)), r);
        }
        Dialog::Plan { strategy, target } => {
            let targets = dash.targets();
            let lines = vec![
                Line::from(vec![
                    Span::raw("strategy: ◀ "),
                    Span::styled(STRATEGIES[*strategy], theme.accent()),
                    Span::raw(" ▶"),
                ]),
                Line::from(vec![
                    Span::raw("target:   ▲ "),
                    Span::styled(targets.get(*target).cloned().unwrap_or_default(), theme.accent()),
                    Span::raw(" ▼"),
                ]),
                Line::raw(""),
                Line::raw("uniform: bins spread evenly; pack:N onto workers 0..N;"),
                Line::raw("drain:W off worker W.  enter: start   esc: cancel"),
            ];
            let r = centered(area, 60, lines.len() as u16 + 2);
            frame.render_widget(Clear, r);
            frame.render_widget(
                Paragraph::new(lines).block(Block::bordered().title("Start a plan")),
                r,
            );
        }
        Dialog::GoTo { typed } => {
            let lines = vec![
                Line::from(vec![
                    Span::raw("go to second: "),
                    Span::styled(format!("{typed}_"), theme.accent()),
                ]),
                Line::raw(dash.replay.as_ref().map_or(String::new(), |r| {
                    format!(
                        "the trace runs from {:.1} s to {:.1} s",
                        r.timeline.start_s, r.timeline.end_s
                    )
                })),
                Line::raw("digits and .: the time   enter: go   esc: cancel"),
            ];
            let r = centered(area, 52, lines.len() as u16 + 2);
            frame.render_widget(Clear, r);
            frame.render_widget(
                Paragraph::new(lines).block(Block::bordered().title("Go to a time")),
                r,
            );
        }
    }
}
