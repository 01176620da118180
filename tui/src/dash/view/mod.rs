//! Drawing: reads the [`Dash`] and nothing else. Every view is readable at 80×24; larger
//! terminals get more detail. Without colour (`NO_COLOR`), heat is drawn with shade
//! characters and phases with letters, which colour only adds to.
//!
//! One module per view (`bins`, `workers`, `latency`, `frontiers`, `migrations`,
//! `log`), the bars around them (`header`, `status`, `timeline`), the dialogs over them
//! (`dialog`) and the `theme`.

mod bins;
mod dialog;
mod frontiers;
mod header;
mod latency;
mod log;
mod migrations;
mod status;
mod theme;
mod timeline;
mod workers;

use ratatui::Frame;
use ratatui::layout::{Constraint, Layout};
use ratatui::style::Modifier;
use ratatui::widgets::Tabs;

use super::model::{Dash, TABS, Tab};
pub use bins::bins_per_row;
use dialog::draw_dialog;
pub use theme::Theme;

pub(super) fn count(n: u64) -> String {
    match n {
        n if n >= 10_000_000 => format!("{:.0}M", n as f64 / 1e6),
        n if n >= 1_000_000 => format!("{:.1}M", n as f64 / 1e6),
        n if n >= 10_000 => format!("{:.0}k", n as f64 / 1e3),
        n => n.to_string(),
    }
}

pub(super) fn ms(ns: u64) -> String {
    format!("{:.2} ms", ns as f64 / 1e6)
}

/// Draws the whole dashboard.
pub fn draw(frame: &mut Frame, dash: &Dash, theme: Theme) {
    let bar = u16::from(dash.replay.is_some());
    let [tabs, head, main, timeline_bar, status] = Layout::vertical([
        Constraint::Length(1),
        Constraint::Length(1),
        Constraint::Min(0),
        Constraint::Length(bar),
        Constraint::Length(1),
    ])
    .areas(frame.area());
    let titles: Vec<String> = TABS
        .iter()
        .enumerate()
        .map(|(i, t)| format!("{} {}", i + 1, t.title()))
        .collect();
    let selected = TABS.iter().position(|t| *t == dash.tab).unwrap_or(0);
    frame.render_widget(
        Tabs::new(titles)
            .select(selected)
            .highlight_style(theme.accent().add_modifier(Modifier::REVERSED))
            .divider("|"),
        tabs,
    );
    header::header(frame, head, dash, theme);
    match dash.tab {
        Tab::Bins => bins::bins(frame, main, dash, theme),
        Tab::Workers => workers::workers(frame, main, dash, theme),
        Tab::Latency => latency::latency(frame, main, dash, theme),
        Tab::Frontiers => frontiers::frontiers(frame, main, dash, theme),
        Tab::Migrations => migrations::migrations(frame, main, dash, theme),
        Tab::Log => log::log(frame, main, dash, theme),
    }
    if let Some(replay) = &dash.replay {
        timeline::draw(frame, timeline_bar, replay, theme);
    }
    status::status_bar(frame, status, dash, theme);
    if let Some(dialog) = &dash.dialog {
        draw_dialog(frame, main, dash, dialog, theme);
    }
}
