//! The frontiers view: how far each operator has applied, and why a move waits.

use ratatui::Frame;
use ratatui::layout::{Constraint, Layout, Rect};
use ratatui::text::Line;
use ratatui::widgets::{Block, Paragraph, Row, Table};

use megaflux::epoch::EpochLen;

use super::super::model::Dash;
use super::theme::*;

/// A lag of `epochs` epochs of `epoch`, in milliseconds.
/// (Saturating: the frontiers come from the network, a lag may be near `u64::MAX`.)
pub(super) fn lag(epochs: u64, epoch: EpochLen) -> String {
    if epoch.us().is_multiple_of(1000) {
        format!("{} ms", epochs.saturating_mul(epoch.us() / 1000))
    } else {
        format!("{:.1} ms", epochs.saturating_mul(epoch.us()) as f64 / 1000.0)
    }
}

/// How far each partition of a Kafka input is read.
fn partitions(
    frame: &mut Frame,
    area: Rect,
    partitions: &std::collections::BTreeMap<u32, megaflux_probe::model::PartitionView>,
    theme: Theme,
) {
    let rows = partitions.iter().map(|(id, p)| {
        Row::new(vec![
            id.to_string(),
            p.offset.to_string(),
            p.end.to_string(),
            p.lag().to_string(),
        ])
    });
    let header = Row::new(["partition", "offset", "end", "lag (messages)"]).style(theme.accent());
    let widths = [
        Constraint::Length(10),
        Constraint::Length(14),
        Constraint::Length(14),
        Constraint::Min(14),
    ];
    frame.render_widget(
        Table::new(rows, widths)
            .header(header)
            .block(Block::bordered().title("Input: each partition read up to offset, of its end")),
        area,
    );
}

pub(super) fn frontiers(frame: &mut Frame, area: Rect, dash: &Dash, theme: Theme) {
    let job = dash.view();
    // A Kafka input's partitions, under the frontiers: how far each is read, and its lag.
    let read = if job.partitions.is_empty() {
        0
    } else {
        (job.partitions.len() as u16)
            .saturating_add(3)
            .min(area.height / 3)
    };
    let [table_area, partitions_area, why] = Layout::vertical([
        Constraint::Min(3),
        Constraint::Length(read),
        Constraint::Length(6),
    ])
    .areas(area);
    if read > 0 {
        partitions(frame, partitions_area, &job.partitions, theme);
    }
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
