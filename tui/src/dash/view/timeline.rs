//! A replay's timeline bar: play state and speed, the position on the trace's clock, the
//! trace's span with its marks (migrations, failures) and the position on it, and the last
//! mark passed.

use ratatui::Frame;
use ratatui::layout::Rect;
use ratatui::style::{Color, Modifier};
use ratatui::text::{Line, Span};
use ratatui::widgets::Paragraph;

use super::super::timeline::Replay;
use super::Theme;

/// Columns the bar itself takes at least (the rest is text around it), and the columns it
/// keeps before the last mark's name gives way.
const MIN_BAR: usize = 10;
const GOOD_BAR: usize = 40;

pub(super) fn draw(frame: &mut Frame, area: Rect, replay: &Replay, theme: Theme) {
    let p = &replay.position;
    let t = &replay.timeline;
    let state = if p.playing { "▶" } else { "⏸" };
    let head = format!(" {state} {}x  {:.1} / {:.1} s  ", speed(p.speed), p.at_s, t.end_s);
    let mut tail = format!("  event {}/{}", p.events, t.events);
    let room = |tail: &str| (area.width as usize).saturating_sub(head.chars().count() + tail.chars().count());
    if let Some(mark) = replay.last_mark() {
        // The last mark's name, if the bar keeps its length.
        let with = format!("{tail}  {mark}");
        if room(&with) >= GOOD_BAR {
            tail = with;
        }
    }
    let width = room(&tail).max(MIN_BAR);
    let span = (t.end_s - t.start_s).max(f64::EPSILON);
    let column = |at: f64| (((at - t.start_s) / span).clamp(0.0, 1.0) * (width - 1) as f64).round() as usize;
    let mut cells = vec!['─'; width];
    for m in &t.marks {
        cells[column(m.at_s)] = '◆';
    }
    let here = column(p.at_s);
    let before: String = cells[..here].iter().collect();
    let after: String = cells[here + 1..].iter().collect();
    let line = Line::from(vec![
        Span::styled(head, theme.accent().add_modifier(Modifier::BOLD)),
        Span::styled(before, theme.accent()),
        Span::styled("●", theme.fg(Color::Yellow).add_modifier(Modifier::BOLD)),
        Span::styled(after, theme.fg(Color::DarkGray)),
        Span::raw(tail),
    ]);
    frame.render_widget(Paragraph::new(line), area);
}

/// `0.25`, `1`, `64`.
fn speed(x: f64) -> String {
    if x.fract() == 0.0 {
        format!("{x:.0}")
    } else {
        format!("{x}")
    }
}
