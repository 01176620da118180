//! A replay's timeline as the dashboard keeps it: the whole trace (its span and marks) and
//! where the player stands; and what the replay keys ask of the player.

use megaflux_replay::player::{Position, Request, Timeline};

use super::keys::{Action, SEEK_STEP_S};

/// The timeline of the trace a replay plays.
#[derive(Clone, Debug, PartialEq)]
pub struct Replay {
    /// The whole trace: its span and marks, as the player sent them first.
    pub timeline: Timeline,
    /// Where the player stands, as it last said ([`Msg::Position`](super::model::Msg::Position)).
    pub position: Position,
}

impl Replay {
    /// The timeline before the player says where it stands: at the trace's start, paused,
    /// at 1×.
    pub fn new(timeline: Timeline) -> Self {
        let position = Position {
            events: 0,
            at_s: timeline.start_s,
            playing: false,
            speed: 1.0,
        };
        Replay { timeline, position }
    }

    /// The label of the last mark at or before the position.
    pub fn last_mark(&self) -> Option<&str> {
        self.timeline
            .marks
            .iter()
            .rev()
            .find(|m| m.events_before < self.position.events)
            .map(|m| m.label.as_str())
    }

    /// What a replay key asks of the player, if it is one.
    pub fn request(&self, action: Action) -> Option<Request> {
        Some(match action {
            Action::Select | Action::Pause => Request::PlayPause,
            Action::Step => Request::Step,
            Action::StepBack => Request::StepBack,
            Action::NextMark => Request::NextMark,
            Action::PrevMark => Request::PrevMark,
            Action::Faster => Request::Faster,
            Action::Slower => Request::Slower,
            Action::SeekForward => Request::SeekBy(SEEK_STEP_S),
            Action::SeekBack => Request::SeekBy(-SEEK_STEP_S),
            _ => return None,
        })
    }
}

/// The go-to dialog's text after `action`, or `None` when the action is not typing.
pub fn typed(text: &str, action: Action) -> Option<String> {
    let mut text = text.to_string();
    match action {
        Action::Digit(d) if text.len() < 9 => text.push(char::from(b'0' + d)),
        Action::Step if !text.contains('.') && text.len() < 9 => text.push('.'),
        Action::Erase => {
            text.pop();
        }
        _ => return None,
    }
    Some(text)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::dash::model::{Connection, Dash, Effect, Msg};
    use megaflux_probe::model::JobModel;
    use megaflux_replay::seek::Mark;
    use ratatui::crossterm::event::{KeyCode, KeyEvent, KeyModifiers};

    fn key(c: char) -> Msg {
        Msg::Key(KeyEvent::new(KeyCode::Char(c), KeyModifiers::NONE))
    }

    fn replaying() -> Dash {
        let mut d = Dash::new(Connection::Trace("t.jsonl".into()), None);
        d.update(Msg::Timeline(Timeline {
            start_s: 0.0,
            end_s: 20.0,
            events: 100,
            marks: vec![Mark {
                events_before: 40,
                at_s: 8.0,
                label: "migration fluid to pack:1".into(),
            }],
        }));
        d
    }

    #[test]
    fn replay_keys_ask_the_player() {
        let mut d = replaying();
        assert_eq!(d.update(key(' ')), vec![Effect::Play(Request::PlayPause)]);
        assert_eq!(d.update(key(']')), vec![Effect::Play(Request::NextMark)]);
        assert_eq!(
            d.update(key('<')),
            vec![Effect::Play(Request::SeekBy(-SEEK_STEP_S))]
        );
        // Keys typed right after `g` go to its dialog, not to the views.
        for c in ['g', '1', '2', '.', '5'] {
            assert!(d.update(key(c)).is_empty());
        }
        let enter = Msg::Key(KeyEvent::new(KeyCode::Enter, KeyModifiers::NONE));
        assert_eq!(d.update(enter), vec![Effect::Play(Request::SeekTo(12.5))]);
        assert!(d.dialog.is_none());
        assert_eq!(d.tab, crate::dash::model::Tab::Bins);
    }

    #[test]
    fn a_reset_starts_the_view_over_and_the_position_sets_the_clock() {
        let mut d = replaying();
        d.update(Msg::Connection(Connection::Trace("t.jsonl".into())));
        assert!(!d.log.is_empty());
        let model = JobModel {
            now_s: 3.0,
            ..JobModel::new()
        };
        d.update(Msg::Reset(Box::new(model.clone())));
        assert!(d.log.is_empty());
        assert_eq!(d.now_s, 3.0);
        d.update(Msg::Position(Position {
            events: 41,
            at_s: 8.5,
            playing: false,
            speed: 4.0,
        }));
        let r = d.replay.as_ref().expect("a replay");
        assert_eq!(r.last_mark(), Some("migration fluid to pack:1"));
        assert_eq!(d.now_s, 8.5);
        // Back in time: the clock follows.
        d.update(Msg::Position(Position {
            events: 2,
            at_s: 1.0,
            playing: true,
            speed: 4.0,
        }));
        assert_eq!(d.now_s, 1.0);
        assert_eq!(d.replay.as_ref().and_then(Replay::last_mark), None);
    }

    #[test]
    fn live_dashboards_leave_replay_keys_alone() {
        let mut d = Dash::new(Connection::Live("x".into()), None);
        assert!(d.update(key(']')).is_empty());
        assert!(d.notice.as_deref().is_some_and(|n| n.contains("replay")));
        // Space still selects a range.
        d.update(key(' '));
        assert_eq!(d.anchor, Some(0));
    }

    #[test]
    fn typing_a_time() {
        let mut t = String::new();
        for a in [
            Action::Digit(1),
            Action::Digit(2),
            Action::Step,
            Action::Step,
            Action::Digit(5),
        ] {
            t = typed(&t, a).unwrap_or(t);
        }
        assert_eq!(t, "12.5");
        assert_eq!(typed(&t, Action::Erase).as_deref(), Some("12."));
        assert_eq!(typed(&t, Action::Left), None);
    }
}
