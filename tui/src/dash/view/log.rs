//! The log view.

use ratatui::Frame;
use ratatui::layout::Rect;
use ratatui::style::{Color, Style};
use ratatui::text::Line;
use ratatui::widgets::{Block, Paragraph};

use super::super::model::Dash;
use super::theme::*;

pub(super) fn log(frame: &mut Frame, area: Rect, dash: &Dash, theme: Theme) {
    let height = area.height.saturating_sub(2) as usize;
    let lines: Vec<&super::super::model::LogLine> = dash.filtered_log().rev().take(height).collect();
    let text: Vec<Line> = lines
        .into_iter()
        .rev()
        .map(|l| {
            let style = match l.kind {
                super::super::model::LogKind::Problem => theme.fg(Color::Red),
                super::super::model::LogKind::Command => theme.fg(Color::Cyan),
                super::super::model::LogKind::Migration => theme.fg(Color::Magenta),
                super::super::model::LogKind::Job => Style::new(),
            };
            Line::styled(format!("{:>8.3}s  {}", l.at_s, l.text), style)
        })
        .collect();
    let title = format!("Log ({}; f: filter)", dash.log_filter.name());
    frame.render_widget(Paragraph::new(text).block(Block::bordered().title(title)), area);
}
