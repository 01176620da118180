//! The status bar: where the events come from, recording, drops, and the key hints or
//! the last notice.

use ratatui::Frame;
use ratatui::layout::Rect;
use ratatui::style::{Color, Modifier};
use ratatui::text::{Line, Span};
use ratatui::widgets::Paragraph;

use super::super::keys;
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
    // Recording is a live job's: a trace or its replay shows what was recorded.
    let live = !matches!(dash.connection, Connection::Trace(_)) && dash.replay.is_none();
    if live {
        spans.extend(recording(dash, theme));
    }
    let (job_lost, view_lost) = (dash.job_lost(), dash.view_lost());
    if job_lost > 0 {
        let what = if live { "trace" } else { "when recorded" };
        spans.push(Span::styled(
            format!(" lost {job_lost} ({what}) "),
            theme.fg(Color::Red),
        ));
    }
    if view_lost > 0 {
        spans.push(Span::styled(
            format!(" lost {view_lost} (this view) "),
            theme.fg(Color::Red),
        ));
    }
    if let Some((time, _)) = &dash.view().lost {
        spans.push(Span::styled(
            format!(" STOPPED: bins lost at time {time} (q quits) "),
            theme
                .fg(Color::Red)
                .add_modifier(Modifier::BOLD | Modifier::REVERSED),
        ));
    }
    if let Some(drain) = &dash.view().draining {
        let line = crate::drain::progress(drain, dash.view().epoch());
        spans.push(Span::styled(format!(" {line} "), theme.fg(Color::Cyan)));
    }
    if let Some(s) = &dash.view().balance.suggestion {
        let what = match s.workers {
            Some([from, to]) => format!("{from} to {to} workers"),
            None => format!("{:.2}x now, {:.2}x", s.imbalance, s.predicted),
        };
        let line = format!(
            " balancer: {what} if {} bins ({}) move{} ",
            s.bins,
            megaflux::size::human(s.bytes),
            if dash.commandable { "; a accepts" } else { "" }
        );
        spans.push(Span::styled(
            line,
            theme.fg(Color::Magenta).add_modifier(Modifier::BOLD),
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
            let hint = keys::hint(dash.replay.is_some());
            spans.push(Span::styled(format!(" {hint}"), theme.fg(Color::DarkGray)));
        }
    }
    frame.render_widget(Paragraph::new(Line::from(spans)), area);
}

/// What the status bar says of a live job's trace: written, paused, failed, or nothing.
fn recording(dash: &Dash, theme: Theme) -> Option<Span<'static>> {
    let job = &dash.job;
    let name = dash
        .recording
        .as_deref()
        .map_or(String::new(), |r| format!(" {r}"));
    if let Some(why) = &job.recording_failed {
        let style = theme.fg(Color::Red).add_modifier(Modifier::BOLD);
        return Some(Span::styled(format!(" ✗ rec failed{name}: {why} "), style));
    }
    match job.recording {
        Some(true) => Some(Span::styled(format!(" ● rec{name} "), theme.fg(Color::Red))),
        Some(false) => Some(Span::styled(
            format!(" ○ rec paused{name} "),
            theme.fg(Color::DarkGray),
        )),
        None => None,
    }
}
