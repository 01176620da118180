//! Drawing: reads the [`Dash`] and nothing else. Every view is readable at 80×24; larger
//! terminals get more detail. Without colour (`NO_COLOR`), heat is drawn with shade
//! characters and phases with letters, which colour only adds to.

use ratatui::Frame;
use ratatui::layout::{Constraint, Layout, Rect};
use ratatui::style::{Color, Modifier, Style};
use ratatui::symbols::Marker;
use ratatui::text::{Line, Span};
use ratatui::widgets::{Axis, Block, Chart, Dataset, GraphType, Paragraph, Row, Table, Tabs, Wrap};

use megaflux::epoch::EpochLen;
use megaflux::size::human as bytes;
use megaflux_probe::event::Phase;
use megaflux_probe::model::{JobModel, PlanView};

use super::keys::{HINT, REPLAY_HINT};
use dialog::draw_dialog;

mod dialog;
mod timeline;
use super::model::{Connection, Dash, TABS, Tab, describe_bins};

/// Colours, or none.
#[derive(Clone, Copy, Debug)]
pub struct Theme {
    pub color: bool,
}

impl Theme {
    /// Colour unless `NO_COLOR` is set (to anything).
    pub fn from_env() -> Self {
        Theme {
            color: std::env::var_os("NO_COLOR").is_none(),
        }
    }
    fn fg(self, c: Color) -> Style {
        if self.color {
            Style::new().fg(c)
        } else {
            Style::new()
        }
    }
    fn accent(self) -> Style {
        self.fg(Color::Cyan).add_modifier(Modifier::BOLD)
    }
}

/// A bin with one replica left (its standby failed or took over), and a bin with none.
const DEGRADED_CHAR: char = '!';
const LOST_CHAR: char = '×';

/// Heat levels, coolest first: characters for every terminal, colours where allowed.
const HEAT_CHARS: [char; 5] = ['·', '░', '▒', '▓', '█'];
const HEAT_COLORS: [Color; 5] = [
    Color::DarkGray,
    Color::Blue,
    Color::Green,
    Color::Yellow,
    Color::Red,
];

fn heat_level(value: u64, max: u64) -> usize {
    if max == 0 || value == 0 {
        return 0;
    }
    (1 + (value * 4).saturating_sub(1) / max) as usize
}

fn phase_char(p: Phase) -> char {
    match p {
        Phase::Issued => 'i',
        Phase::Extracted => 'x',
        Phase::Received => 'r',
        Phase::Installed => 'n',
        Phase::Completed => 'c',
    }
}

fn count(n: u64) -> String {
    match n {
        n if n >= 10_000_000 => format!("{:.0}M", n as f64 / 1e6),
        n if n >= 1_000_000 => format!("{:.1}M", n as f64 / 1e6),
        n if n >= 10_000 => format!("{:.0}k", n as f64 / 1e3),
        n => n.to_string(),
    }
}

fn ms(ns: u64) -> String {
    format!("{:.2} ms", ns as f64 / 1e6)
}

/// Draws the whole dashboard.
pub fn draw(frame: &mut Frame, dash: &Dash, theme: Theme) {
    let bar = u16::from(dash.replay.is_some());
    let [tabs, main, timeline_bar, status] = Layout::vertical([
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
    match dash.tab {
        Tab::Bins => bins(frame, main, dash, theme),
        Tab::Workers => workers(frame, main, dash, theme),
        Tab::Latency => latency(frame, main, dash, theme),
        Tab::Frontiers => frontiers(frame, main, dash, theme),
        Tab::Migrations => migrations(frame, main, dash, theme),
        Tab::Log => log(frame, main, dash, theme),
    }
    if let Some(replay) = &dash.replay {
        timeline::draw(frame, timeline_bar, replay, theme);
    }
    status_bar(frame, status, dash, theme);
    if let Some(dialog) = &dash.dialog {
        draw_dialog(frame, main, dash, dialog, theme);
    }
}

fn status_bar(frame: &mut Frame, area: Rect, dash: &Dash, theme: Theme) {
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

/// How the bins map lays out in `width` columns: (cell width, bins per cell).
fn bin_layout(width: u16, height: u16, per_worker: &[usize]) -> (usize, usize) {
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

fn map_height(total: u16) -> u16 {
    // Tabs, status, borders, details and legend.
    total.saturating_sub(2 + 2 + 6)
}

fn per_worker(dash: &Dash) -> Vec<usize> {
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

fn bins(frame: &mut Frame, area: Rect, dash: &Dash, theme: Theme) {
    let [map_area, details] = Layout::vertical([Constraint::Min(4), Constraint::Length(6)]).areas(area);
    let Some((name, views)) = dash.operator_bins() else {
        frame.render_widget(
            Paragraph::new("waiting for the job's first bin sizes…").block(Block::bordered().title("Bins")),
            area,
        );
        return;
    };
    let job = dash.view();
    let max_keys = views.iter().map(|b| b.keys).max().unwrap_or(0);
    let selection = dash.selection();
    let inner_w = map_area.width.saturating_sub(2);
    let counts = per_worker(dash);
    let (cw, group) = bin_layout(inner_w, map_area.height.saturating_sub(2), &counts);
    let per_row = (inner_w as usize / cw).max(1);
    let order = dash.order();
    let mut lines: Vec<Line> = Vec::new();
    // Failed workers hold nothing: they would not show up among the owners.
    for w in &job.failed {
        if !order.iter().any(|b| dash.owner(*b) == Some(*w)) {
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
            .fold((0, 0), |a, v| (a.0 + v.keys, a.1 + v.bytes));
        let who = owner.map_or("no owner".to_string(), |w| format!("worker {w}"));
        let standbys = match owner {
            Some(w) if job.replicated => {
                format!(
                    ", {} standbys",
                    (0..dash.bins()).filter(|b| dash.standby(*b) == Some(w)).count()
                )
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
                        .map(|v| v.keys)
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
    let mut legend = vec![Span::raw("heat (keys): ")];
    for (lvl, c) in HEAT_CHARS.iter().enumerate() {
        let lo = if lvl == 0 {
            0
        } else {
            max_keys * (lvl as u64 - 1) / 4
        };
        legend.push(Span::styled(format!("{c}{c}"), theme.fg(HEAT_COLORS[lvl])));
        legend.push(Span::raw(if lvl == 0 {
            " 0 ".to_string()
        } else {
            format!(" >{} ", count(lo))
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

fn workers(frame: &mut Frame, area: Rect, dash: &Dash, theme: Theme) {
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

/// log10 of a latency in ms, floored at 1 µs.
fn log_ms(ns: u64) -> f64 {
    (ns as f64 / 1e6).max(0.001).log10()
}

fn latency(frame: &mut Frame, area: Rect, dash: &Dash, theme: Theme) {
    let job = dash.view();
    let windows = &job.latency;
    let [head, chart_area] = Layout::vertical([Constraint::Length(1), Constraint::Min(3)]).areas(area);
    let current = match windows.last() {
        Some(w) => format!(
            "last window (t {:.2} s, {} records): p50 {}  p99 {}  max {}",
            w.t_s,
            w.count,
            ms(w.p50),
            ms(w.p99),
            ms(w.max)
        ),
        None => "no latency windows yet".into(),
    };
    frame.render_widget(Paragraph::new(current), head);
    let p50: Vec<(f64, f64)> = windows.iter().map(|w| (w.at_s, log_ms(w.p50))).collect();
    let p99: Vec<(f64, f64)> = windows.iter().map(|w| (w.at_s, log_ms(w.p99))).collect();
    let max: Vec<(f64, f64)> = windows.iter().map(|w| (w.at_s, log_ms(w.max))).collect();
    let x0 = windows.first().map_or(0.0, |w| w.at_s);
    let x1 = windows.last().map_or(1.0, |w| w.at_s).max(x0 + 1.0);
    let (y0, y1) = (-2.0, 4.0);
    // Migrations as vertical bars at their start and end.
    let mut marks: Vec<Vec<(f64, f64)>> = Vec::new();
    for p in job.finished_plans.iter().chain(job.plan.iter()) {
        let end = p.seconds.map_or(dash.now_s, |s| p.started_s + s);
        for x in [p.started_s, end] {
            if (x0..=x1).contains(&x) {
                marks.push(vec![(x, y0), (x, y1)]);
            }
        }
    }
    let mut datasets = vec![
        Dataset::default()
            .name("max")
            .marker(Marker::Braille)
            .graph_type(GraphType::Line)
            .style(theme.fg(Color::Red))
            .data(&max),
        Dataset::default()
            .name("p99")
            .marker(Marker::Braille)
            .graph_type(GraphType::Line)
            .style(theme.fg(Color::Yellow))
            .data(&p99),
        Dataset::default()
            .name("p50")
            .marker(Marker::Braille)
            .graph_type(GraphType::Line)
            .style(theme.fg(Color::Green))
            .data(&p50),
    ];
    for m in &marks {
        datasets.push(
            Dataset::default()
                .marker(Marker::Dot)
                .graph_type(GraphType::Line)
                .style(theme.fg(Color::Magenta))
                .data(m),
        );
    }
    let chart = Chart::new(datasets)
        .block(Block::bordered().title("Latency per 250 ms window (ms, log scale; │ migration start/end)"))
        .x_axis(
            Axis::default()
                .bounds([x0, x1])
                .labels([format!("{x0:.0} s"), format!("{x1:.0} s")]),
        )
        .y_axis(
            Axis::default()
                .bounds([y0, y1])
                .labels(["0.01", "0.1", "1", "10", "100", "1000", "10k"]),
        );
    frame.render_widget(chart, chart_area);
}

/// A lag of `epochs` epochs of `epoch`, in milliseconds.
fn lag(epochs: u64, epoch: EpochLen) -> String {
    if epoch.us().is_multiple_of(1000) {
        format!("{} ms", epochs * (epoch.us() / 1000))
    } else {
        format!("{:.1} ms", (epochs * epoch.us()) as f64 / 1000.0)
    }
}

fn frontiers(frame: &mut Frame, area: Rect, dash: &Dash, theme: Theme) {
    let job = dash.view();
    let [table_area, why] = Layout::vertical([Constraint::Min(3), Constraint::Length(6)]).areas(area);
    let t = |v: Option<u64>| v.map_or("done".to_string(), |t| t.to_string());
    let epoch = job.epoch();
    let mut rows = Vec::new();
    for (worker, ops) in &job.frontiers {
        for (op, f) in ops {
            rows.push(Row::new(vec![
                worker.to_string(),
                op.clone(),
                t(f.applied),
                f.control.map_or("-".into(), |c| c.to_string()),
                f.input.to_string(),
                f.lag().map_or("-".into(), |l| lag(l, epoch)),
            ]));
        }
    }
    let header = Row::new(["worker", "operator", "applied", "control", "input", "lag"]).style(theme.accent());
    let widths = [
        Constraint::Length(7),
        Constraint::Min(10),
        Constraint::Length(10),
        Constraint::Length(10),
        Constraint::Length(10),
        Constraint::Length(9),
    ];
    frame.render_widget(
        Table::new(rows, widths)
            .header(header)
            .block(Block::bordered().title(format!(
                "Frontiers, in epochs of {epoch}: applied = all before it is done"
            ))),
        table_area,
    );
    // The control frontier is the least any operator has seen: moves before it are final.
    let control = job
        .frontiers
        .values()
        .flat_map(|ops| ops.values().filter_map(|f| f.control))
        .min();
    let mut lines = vec![Line::raw(format!(
        "control frontier: {}",
        control.map_or("-".into(), |c| c.to_string())
    ))];
    for m in job.moving.values().take(4) {
        let slowest = job
            .frontiers
            .iter()
            .filter_map(|(w, ops)| ops.values().filter_map(|f| f.applied).min().map(|a| (*w, a)))
            .min_by_key(|(_, a)| *a);
        let text = match slowest {
            Some((w, a)) if a <= m.time => format!(
                "bin {} moves at time {}: worker {w} has applied up to {a} ({} ms to go), phase {:?}",
                m.bin,
                m.time,
                m.time - a,
                m.phase
            ),
            _ => format!("bin {} moves at time {}: phase {:?}", m.bin, m.time, m.phase),
        };
        lines.push(Line::raw(text.to_lowercase()));
    }
    frame.render_widget(
        Paragraph::new(lines).block(Block::bordered().title("Why has my move not applied yet?")),
        why,
    );
}

/// Worst p99 and max of the latency windows that arrived during a plan.
fn during(job: &JobModel, plan: &PlanView, now: f64) -> (u64, u64) {
    let end = plan.seconds.map_or(now, |s| plan.started_s + s) + 0.25;
    job.latency
        .iter()
        .filter(|w| w.at_s >= plan.started_s && w.at_s <= end)
        .fold((0, 0), |a, w| (a.0.max(w.p99), a.1.max(w.max)))
}

fn migrations(frame: &mut Frame, area: Rect, dash: &Dash, theme: Theme) {
    let job = dash.view();
    let [running, history] = Layout::vertical([Constraint::Length(8), Constraint::Min(3)]).areas(area);
    let lines: Vec<Line> = match &job.plan {
        Some(p) => {
            let elapsed = (dash.now_s - p.started_s).max(0.0);
            let done = p.bins_completed as f64 / p.bins.max(1) as f64;
            let eta = if done > 0.0 {
                format!("{:.1} s", elapsed / done - elapsed)
            } else {
                "-".into()
            };
            let mut l = vec![
                Line::styled(format!("{} to {}", p.strategy, p.target), theme.accent()),
                Line::raw(format!(
                    "steps {}/{}  bins {}/{}  moved {}  elapsed {elapsed:.1} s  ETA {eta}",
                    p.steps_issued,
                    p.steps,
                    p.bins_completed,
                    p.bins,
                    bytes(p.bytes_moved)
                )),
            ];
            let in_flight: Vec<String> = job
                .moving
                .values()
                .take(12)
                .map(|m| format!("{}:{}", m.bin, phase_char(m.phase)))
                .collect();
            l.push(Line::raw(format!(
                "in flight (bin:phase): {}",
                in_flight.join(" ")
            )));
            l
        }
        None => vec![Line::raw("no plan running (p starts one)")],
    };
    frame.render_widget(
        Paragraph::new(lines).block(Block::bordered().title("Running plan")),
        running,
    );
    let rows: Vec<Row> = job
        .finished_plans
        .iter()
        .rev()
        .map(|p| {
            let (p99, max) = during(job, p, dash.now_s);
            Row::new(vec![
                p.strategy.clone(),
                p.target.clone(),
                p.bins.to_string(),
                bytes(p.bytes_moved),
                p.seconds.map_or("-".into(), |s| format!("{s:.3} s")),
                ms(p99),
                ms(max),
            ])
        })
        .collect();
    let header = Row::new([
        "strategy",
        "target",
        "bins",
        "moved",
        "took",
        "p99 during",
        "max during",
    ])
    .style(theme.accent());
    let widths = [
        Constraint::Min(12),
        Constraint::Length(10),
        Constraint::Length(6),
        Constraint::Length(9),
        Constraint::Length(9),
        Constraint::Length(11),
        Constraint::Length(11),
    ];
    frame.render_widget(
        Table::new(rows, widths)
            .header(header)
            .block(Block::bordered().title("Finished migrations")),
        history,
    );
}

fn log(frame: &mut Frame, area: Rect, dash: &Dash, theme: Theme) {
    let height = area.height.saturating_sub(2) as usize;
    let lines: Vec<&super::model::LogLine> = dash.filtered_log().rev().take(height).collect();
    let text: Vec<Line> = lines
        .into_iter()
        .rev()
        .map(|l| {
            let style = match l.kind {
                super::model::LogKind::Problem => theme.fg(Color::Red),
                super::model::LogKind::Command => theme.fg(Color::Cyan),
                super::model::LogKind::Migration => theme.fg(Color::Magenta),
                super::model::LogKind::Job => Style::new(),
            };
            Line::styled(format!("{:>8.3}s  {}", l.at_s, l.text), style)
        })
        .collect();
    let title = format!("Log ({}; f: filter)", dash.log_filter.name());
    frame.render_widget(Paragraph::new(text).block(Block::bordered().title(title)), area);
}

#[cfg(test)]
mod tests {
    use megaflux::epoch::EpochLen;

    use super::lag;

    #[test]
    fn lags_are_said_in_milliseconds() {
        let us = |n| EpochLen::from_us(n).unwrap();
        assert_eq!(lag(3, EpochLen::MS), "3 ms");
        assert_eq!(lag(3, us(100)), "0.3 ms");
        assert_eq!(lag(0, us(250)), "0.0 ms");
    }
}
