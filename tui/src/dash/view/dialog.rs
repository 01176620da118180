//! The dialogs over the views: help, moving bins, failing or rejoining a worker, starting
//! a plan, the operator's word on placement (the balancer's mode, a worker excluded, bins
//! pinned), and a replay's go-to.

use ratatui::Frame;
use ratatui::layout::Rect;
use ratatui::text::{Line, Span};
use ratatui::widgets::{Block, Clear, Paragraph, Wrap};

use super::super::keys::BINDINGS;
use super::super::model::{Dash, Dialog, MODES, STRATEGIES, describe_bins};
use super::{Theme, count};

/// The height of a bordered dialog of `lines` lines (saturating: a dialog lists a line per
/// worker, as many as the job says it has).
fn tall(lines: usize) -> u16 {
    u16::try_from(lines).unwrap_or(u16::MAX).saturating_add(2)
}

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

/// Draws a bordered dialog of `lines` in the middle of `area`: at least `width` wide, wider
/// for a longer line while the area has room, and tall enough for every line wrapped to it,
/// so that no text is cut at the border.
fn show(frame: &mut Frame, area: Rect, lines: Vec<Line>, width: u16, title: &str) {
    let longest = lines.iter().map(Line::width).max().unwrap_or(0);
    let width = width
        .max(u16::try_from(longest).unwrap_or(u16::MAX).saturating_add(2))
        .min(area.width);
    let inner = usize::from(width.saturating_sub(2)).max(1);
    let rows: usize = lines.iter().map(|l| l.width().div_ceil(inner).max(1)).sum();
    let r = centered(area, width, tall(rows));
    frame.render_widget(Clear, r);
    frame.render_widget(
        Paragraph::new(lines)
            .wrap(Wrap { trim: false })
            .block(Block::bordered().title(title.to_string())),
        r,
    );
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
            show(frame, area, lines, 76, "Keys (esc closes)");
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
            show(frame, area, lines, 60, "Move bins");
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
            let title = if *rejoin {
                "Rejoin a worker"
            } else {
                "Fail a worker"
            };
            show(frame, area, lines, 64, title);
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
                Line::raw("uniform: bins spread evenly; balance: by measured load;"),
                Line::raw("pack:N onto workers 0..N; drain:W off worker W."),
                Line::raw("enter: start   esc: cancel"),
            ];
            show(frame, area, lines, 60, "Start a plan");
        }
        Dialog::Balance { mode } => {
            let lines = vec![
                Line::from(vec![
                    Span::raw("the balancer: ◀ "),
                    Span::styled(MODES.get(*mode).copied().unwrap_or("suggest"), theme.accent()),
                    Span::raw(" ▶"),
                ]),
                Line::raw(""),
                Line::raw("off: measures the load, proposes and moves nothing, and a rejoin"),
                Line::raw("spreads bins evenly; suggest: proposes a plan (a starts it);"),
                Line::raw("auto: starts its plans itself. A rejoin places bins by load"),
                Line::raw("unless off."),
                Line::raw("←→: mode   enter: set   esc: cancel"),
            ];
            show(frame, area, lines, 64, "The balancer");
        }
        Dialog::Exclude { worker, exclude } => {
            let what = if *exclude { "Exclude" } else { "Include" };
            let lines = vec![
                Line::styled(format!("{what} worker {worker}?"), theme.accent()),
                Line::raw(if *exclude {
                    "the balancer and rebalances neither count it nor put bins on it; its bins stay until a plan moves them (drain:W moves them)"
                } else {
                    "the balancer and rebalances count it and may put bins on it again"
                }),
                Line::raw("←→ or a digit: worker   ↑↓: exclude/include   enter: confirm   esc: cancel"),
            ];
            show(frame, area, lines, 64, "Exclude a worker");
        }
        Dialog::Pin { bins, pin } => {
            let what = if *pin { "Pin" } else { "Free" };
            let lines = vec![
                Line::styled(format!("{what} {}?", describe_bins(bins)), theme.accent()),
                Line::raw(if *pin {
                    "no placement by load (the balancer's, a rebalance's) moves them; your own plans and moves still do"
                } else {
                    "placements by load may move them again"
                }),
                Line::raw("↑↓: pin/free   enter: confirm   esc: cancel"),
            ];
            show(frame, area, lines, 64, "Pin bins");
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
            show(frame, area, lines, 52, "Go to a time");
        }
    }
}

#[cfg(test)]
mod tests {
    use ratatui::Terminal;
    use ratatui::backend::TestBackend;

    use super::*;

    fn screen(width: u16, lines: Vec<Line<'static>>) -> String {
        let mut terminal = Terminal::new(TestBackend::new(width, 12)).unwrap();
        terminal
            .draw(|frame| show(frame, frame.area(), lines, 64, "Fail a worker"))
            .unwrap();
        let buffer = terminal.backend().buffer();
        (0..buffer.area.height)
            .map(|y| {
                (0..buffer.area.width)
                    .map(|x| buffer[(x, y)].symbol())
                    .collect::<String>()
            })
            .collect::<Vec<_>>()
            .join("\n")
    }

    /// A line longer than the dialog's width widens it while the screen has room, and wraps
    /// when it has not: no word is cut at the border.
    #[test]
    fn dialog_text_fits_its_box() {
        let long = "their standbys take over; 45 bins keep one replica until recovery";
        let wide = screen(80, vec![Line::raw("Fail worker 0?"), Line::raw(long)]);
        assert!(wide.contains(long), "{wide}");
        let narrow = screen(40, vec![Line::raw(long)]);
        let text: String = narrow
            .lines()
            .map(|l| l.trim_matches(|c: char| c == '│' || c == ' ').to_string())
            .collect::<Vec<_>>()
            .join(" ");
        assert!(text.contains("until recovery"), "{narrow}");
    }
}
