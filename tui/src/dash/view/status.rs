//! The status bar: where the events come from, recording, drops, and the key hints or
//! the last notice.

use ratatui::Frame;
use ratatui::layout::Rect;
use ratatui::style::{Color, Modifier};
use ratatui::text::{Line, Span};
use ratatui::widgets::Paragraph;

use super::super::keys::{HINT, REPLAY_HINT};
use super::super::model::{Connection, Dash};
use super::theme::*;

pub(super) fn status_bar(frame: &mut Frame, area: Rect, dash: &Dash, theme: Theme) {
    let conn = match &dash.connection {
        Connection::Connecting(a) => format!("connecting {a}"),
        Connection::Live(a) => format!("live {a}"),
        Connection::Trace(p) => format!("trace {p}"),
        Connection::Closed(w) => format!("closed: {w}"),
    };
    let mut spans = vec![Span::styled(
        format!(" {conn} "),
        theme.accent().add_modifier(Modifier::REVERSED),
    )];
    // A replay shows what was recorded; whether it was being recorded is no news.
    let recording = if dash.replay.is_some() {
        None
    } else {
        dash.job.recording
    };
    match (&dash.recording, recording) {
        (Some(r), Some(false)) => spans.push(Span::styled(
            format!(" ○ rec paused {r} "),
            theme.fg(Color::DarkGray),
        )),
        (Some(r), _) => spans.push(Span::styled(format!(" ● rec {r} "), theme.fg(Color::Red))),
        (None, Some(on)) => spans.push(Span::styled(
            if on { " ● rec " } else { " ○ rec paused " },
            theme.fg(Color::Red),
        )),
        (None, None) => {}
    }
    let dropped = dash.job.dropped_total();
    spans.push(Span::raw(format!(" dropped {dropped} ")));
    if let Some((time, _)) = &dash.job.lost {
        spans.push(Span::styled(
            format!(" STOPPED: bins lost at time {time} (q quits) "),
            theme
                .fg(Color::Red)
                .add_modifier(Modifier::BOLD | Modifier::REVERSED),
        ));
    }
    if dash.paused() {
        spans.push(Span::styled(
            " PAUSED ",
            theme.fg(Color::Yellow).add_modifier(Modifier::BOLD),
        ));
    }
    match &dash.notice {
        Some(n) => spans.push(Span::styled(format!(" {n}"), theme.fg(Color::Yellow))),
        None => {
            let hint = if dash.replay.is_some() { REPLAY_HINT } else { HINT };
            spans.push(Span::styled(format!(" {hint}"), theme.fg(Color::DarkGray)));
        }
    }
    frame.render_widget(Paragraph::new(Line::from(spans)), area);
}
