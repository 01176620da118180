//! The bins view: every bin by owner as a heat map, and the bin under the cursor.

use std::collections::{BTreeMap, BTreeSet};

use ratatui::Frame;
use ratatui::layout::{Constraint, Layout, Rect};
use ratatui::style::{Color, Modifier};
use ratatui::text::{Line, Span};
use ratatui::widgets::{Block, Paragraph, Wrap};

use megaflux::size::human as bytes;

use megaflux_probe::model::BinView;

use super::super::model::{Dash, Heat, describe_bins};
use super::count;
use super::theme::*;

/// How the bins map lays out in `width` columns: (cell width, bins per cell).
pub(super) fn bin_layout(width: u16, height: u16, per_worker: &[usize]) -> (usize, usize) {
    let rows = |cw: usize, g: usize| -> usize {
        let per_row = (width as usize / cw).max(1);
        per_worker
            .iter()
            .map(|n| 1 + n.div_ceil(g).div_ceil(per_row))
            .sum()
    };
    for (cw, g) in [(2, 1), (1, 1), (1, 2), (1, 4), (1, 8), (1, 16), (1, 32), (1, 64)] {
        if rows(cw, g) <= height as usize {
            return (cw, g);
        }
    }
    (1, 128)
}

/// Bins per row of the bins map for a terminal `width` wide (what up and down step by).
pub fn bins_per_row(dash: &Dash, width: u16, height: u16) -> usize {
    let per_worker = per_worker(dash);
    let (cw, g) = bin_layout(width.saturating_sub(2), map_height(height), &per_worker);
    (width.saturating_sub(2) as usize / cw).max(1) * g
}

/// The height of the selected bin's details, borders included: its line, its load, a hot
/// bin, the selection, its history and the legend.
const DETAILS: u16 = 8;

/// A bin carrying this share of all load or more is called out: no placement of bins can
/// spread it.
const HOT_SHARE: f64 = 0.25;

pub(super) fn map_height(total: u16) -> u16 {
    // Tabs, header, status, borders, details and legend.
    total.saturating_sub(3 + 2 + DETAILS)
}

pub(super) fn per_worker(dash: &Dash) -> Vec<usize> {
    let mut n = vec![0usize; dash.peers().max(1)];
    for b in 0..dash.bins() {
        if let Some(o) = dash.owner(b)
            && let Some(c) = n.get_mut(o as usize)
        {
            *c += 1;
        }
    }
    n
}

pub(super) fn bins(frame: &mut Frame, area: Rect, dash: &Dash, theme: Theme) {
    let [map_area, details] = Layout::vertical([Constraint::Min(4), Constraint::Length(DETAILS)]).areas(area);
    let Some((name, views)) = dash.operator_bins() else {
        frame.render_widget(
            Paragraph::new("waiting for the job's first bin sizes…").block(Block::bordered().title("Bins")),
            area,
        );
        return;
    };
    let job = dash.view();
    let now = dash.now_s;
    let load = |v: &BinView| v.load_at(now).map_or(0.0, |l| l.records_per_s);
    // What the heat shows of a bin, as a whole number.
    let measure = |v: &BinView| match dash.heat {
        Heat::Keys => v.keys,
        Heat::Bytes => v.bytes,
        Heat::Load => load(v) as u64,
    };
    let max_keys = views.iter().map(measure).max().unwrap_or(0);
    let selection = dash.selection();
    let inner_w = map_area.width.saturating_sub(2);
    let counts = per_worker(dash);
    let (cw, group) = bin_layout(inner_w, map_area.height.saturating_sub(2), &counts);
    let per_row = (inner_w as usize / cw).max(1);
    let order = dash.order();
    let mut lines: Vec<Line> = Vec::new();
    // Owners and standbys, found in one pass over the bins (not one per worker).
    let owners: BTreeSet<u32> = order.iter().filter_map(|b| dash.owner(*b)).collect();
    let mut standby_counts: BTreeMap<u32, usize> = BTreeMap::new();
    if job.replicated {
        for w in (0..dash.bins()).filter_map(|b| dash.standby(b)) {
            *standby_counts.entry(w).or_default() += 1;
        }
    }
    // Failed workers hold nothing: they would not show up among the owners.
    for w in &job.failed {
        if !owners.contains(w) {
            lines.push(Line::styled(
                format!("worker {w}: failed, holds nothing"),
                theme.fg(Color::Red).add_modifier(Modifier::BOLD),
            ));
        }
    }
    let mut i = 0;
    while i < order.len() {
        let owner = dash.owner(order[i]);
        let mine: Vec<usize> = order[i..]
            .iter()
            .take_while(|b| dash.owner(**b) == owner)
            .copied()
            .collect();
        i += mine.len();
        let (keys, size): (u64, u64) = mine
            .iter()
            .filter_map(|b| views.get(*b))
            .fold((0u64, 0u64), |a, v| {
                (a.0.saturating_add(v.keys), a.1.saturating_add(v.bytes))
            });
        let who = owner.map_or("no owner".to_string(), |w| format!("worker {w}"));
        let standbys = match owner {
            Some(w) if job.replicated => {
                format!(", {} standbys", standby_counts.get(&w).copied().unwrap_or(0))
            }
            _ => String::new(),
        };
        lines.push(Line::styled(
            format!(
                "{who}: {} bins{standbys}, {} keys, {}",
                mine.len(),
                count(keys),
                bytes(size)
            ),
            theme.accent(),
        ));
        for row in mine.chunks(per_row * group) {
            let spans: Vec<Span> = row
                .chunks(group)
                .map(|cell| {
                    let hottest = cell
                        .iter()
                        .filter_map(|b| views.get(*b))
                        .map(measure)
                        .max()
                        .unwrap_or(0);
                    let level = heat_level(hottest, max_keys);
                    let moving = cell.iter().find_map(|b| job.moving.get(&(*b as u32)));
                    let lost = cell.iter().any(|b| dash.lost(*b));
                    let degraded = cell.iter().any(|b| dash.degraded(*b));
                    let (ch, mut style) = match moving {
                        Some(m) => (
                            phase_char(m.phase),
                            theme.fg(Color::Magenta).add_modifier(Modifier::BOLD),
                        ),
                        None if lost => (LOST_CHAR, theme.fg(Color::Red).add_modifier(Modifier::BOLD)),
                        None if degraded => (DEGRADED_CHAR, theme.fg(Color::Red)),
                        None => (HEAT_CHARS[level], theme.fg(HEAT_COLORS[level])),
                    };
                    if cell.iter().any(|b| selection.contains(b)) {
                        style = style.add_modifier(Modifier::UNDERLINED);
                    }
                    if cell.contains(&dash.cursor) {
                        style = style.add_modifier(Modifier::REVERSED);
                    }
                    Span::styled(std::iter::repeat_n(ch, cw).collect::<String>(), style)
                })
                .collect();
            lines.push(Line::from(spans));
        }
    }
    let title = format!(
        "Bins of {name} ({} operators; o: next){}",
        job.operators.len(),
        if group > 1 {
            format!(", {group} bins per cell")
        } else {
            String::new()
        }
    );
    frame.render_widget(
        Paragraph::new(lines).block(Block::bordered().title(title)),
        map_area,
    );

    let b = dash.cursor;
    let view = views.get(b).cloned().unwrap_or_default();
    let worker = |w: Option<u32>| w.map_or("?".to_string(), |w| w.to_string());
    let holders = if job.replicated {
        format!(
            "  primary {}  standby {}",
            worker(dash.owner(b)),
            dash.standby(b)
                .map_or("none (one replica left)".to_string(), |w| w.to_string())
        )
    } else {
        format!("  owner {}", worker(dash.owner(b)))
    };
    let mut text = vec![Line::from(vec![
        Span::styled(format!("bin {b}"), theme.accent()),
        Span::raw(format!(
            "{holders}  keys {}  {}",
            count(view.keys),
            bytes(view.bytes)
        )),
        Span::raw(match job.moving.get(&(b as u32)) {
            Some(m) => format!("  moving at time {}: {:?}", m.time, m.phase).to_lowercase(),
            None => String::new(),
        }),
    ])];
    let total_load: f64 = views.iter().map(load).sum();
    if let Some(l) = view.load_at(now).filter(|_| total_load > 0.0) {
        let worker_load: f64 = (0..views.len())
            .filter(|c| dash.owner(*c).is_some() && dash.owner(*c) == dash.owner(b))
            .filter_map(|c| views.get(c))
            .map(load)
            .sum();
        text.push(Line::raw(format!(
            "load {} records/s ({:.0}% of its worker's, {:.0}% of all), busy {:.0}%",
            count(l.records_per_s as u64),
            l.records_per_s / worker_load.max(1e-9) * 100.0,
            l.records_per_s / total_load * 100.0,
            l.busy * 100.0
        )));
    }
    // A bin hot enough that its worker is loaded whatever else moves: moving bins cannot
    // split it (a key of its own may be most of it).
    if let Some((hot, hottest)) = views
        .iter()
        .enumerate()
        .map(|(i, v)| (i, load(v)))
        .max_by(|a, b| a.1.total_cmp(&b.1))
        .filter(|(_, l)| total_load > 0.0 && *l / total_load >= HOT_SHARE)
    {
        text.push(Line::styled(
            format!(
                "bin {hot} carries {:.0}% of all load: moving bins cannot split it",
                hottest / total_load * 100.0
            ),
            theme.fg(Color::Yellow),
        ));
    }
    if selection.len() > 1 {
        text.push(Line::raw(format!(
            "selected: {} ({} bins)",
            describe_bins(&selection),
            selection.len()
        )));
    }
    let history: Vec<String> = dash
        .history
        .get(&(b as u32))
        .map(|h| {
            h.iter()
                .map(|(t, f, to)| {
                    format!(
                        "t{t}: {}→{}",
                        f.map_or("?".into(), |w| w.to_string()),
                        to.map_or("?".into(), |w| w.to_string())
                    )
                })
                .collect()
        })
        .unwrap_or_default();
    text.push(Line::raw(if history.is_empty() {
        "history: never moved".to_string()
    } else {
        format!("history: {}", history.join(", "))
    }));
    let mut legend = vec![Span::raw(format!("heat ({}, v: next): ", dash.heat.name()))];
    for (lvl, c) in HEAT_CHARS.iter().enumerate() {
        // Wide: `max_keys` may be near `u64::MAX` (the sizes come from the network).
        let lo = if lvl == 0 {
            0
        } else {
            (u128::from(max_keys) * (lvl as u128 - 1) / 4) as u64
        };
        legend.push(Span::styled(format!("{c}{c}"), theme.fg(HEAT_COLORS[lvl])));
        legend.push(Span::raw(match (lvl, dash.heat) {
            (0, _) => " 0 ".to_string(),
            (_, Heat::Bytes) => format!(" >{} ", bytes(lo)),
            _ => format!(" >{} ", count(lo)),
        }));
    }
    legend.push(Span::raw(" moving: i issued x extracted r received n installed"));
    if job.replicated {
        legend.push(Span::styled(format!(" {DEGRADED_CHAR}"), theme.fg(Color::Red)));
        legend.push(Span::raw(" one replica left"));
        legend.push(Span::styled(format!(" {LOST_CHAR}"), theme.fg(Color::Red)));
        legend.push(Span::raw(" lost"));
    }
    text.push(Line::from(legend));
    frame.render_widget(
        Paragraph::new(text)
            .wrap(Wrap { trim: true })
            .block(Block::bordered().title("Selected")),
        details,
    );
}
