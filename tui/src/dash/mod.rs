//! The live terminal dashboard: a pure model ([`model`]) updated by messages from a source
//! ([`source`]) and by keys ([`keys`]), drawn by views that only read it ([`view`]).
//!
//! The terminal is restored on quit, on error and on panic (ratatui's hook); Ctrl-C arrives
//! as a key in raw mode and quits. Drawing happens at most [`FRAME`] apart and never holds
//! up the messages: every message is applied, frames are skipped.

pub mod keys;
pub mod model;
pub mod replay;
pub mod source;
pub mod timeline;
pub mod view;

use std::sync::mpsc::{self, RecvTimeoutError};
use std::time::{Duration, Instant};

use megaflux_probe::wire::CommandRequest;
use megaflux_replay::player::Request;
use ratatui::crossterm::event::{self, Event as TermEvent};

use model::{Dash, Effect, Msg};
use view::Theme;

/// The shortest time between two frames.
pub const FRAME: Duration = Duration::from_millis(50);
/// Messages queued for the dashboard: a live source drops events past it (counted), a
/// replay's player waits.
pub const QUEUE: usize = 1024;

/// The dashboard's bounded queue.
pub fn queue() -> (mpsc::SyncSender<Msg>, mpsc::Receiver<Msg>) {
    mpsc::sync_channel(QUEUE)
}

/// Where the person's requests go: commands to a live job, requests to a replay's player.
#[derive(Default)]
pub struct Sinks {
    /// Where commands to a live job go, with the dashboard's number for each (`None`: the
    /// status bar says a command could not be sent).
    pub commands: Option<tokio::sync::mpsc::Sender<(u64, CommandRequest)>>,
    /// Where a replay's requests go (`None`: the status bar says the player has stopped).
    pub player: Option<mpsc::Sender<Request>>,
}

/// Runs the dashboard until the person quits. `messages` feeds it; `sinks` receive what the
/// person asks for. Returns the dashboard as it was at the end (how its feed stood).
pub fn run(
    mut dash: Dash,
    messages: mpsc::Receiver<Msg>,
    keys_to: mpsc::SyncSender<Msg>,
    sinks: Sinks,
) -> anyhow::Result<Dash> {
    let Sinks { commands, player } = sinks;
    let theme = Theme::from_env();
    let mut terminal = ratatui::try_init()?;
    let result = (|| -> anyhow::Result<()> {
        spawn_keys(keys_to);
        let mut last_draw: Option<Instant> = None;
        let mut dirty = true;
        loop {
            let wait = last_draw.map_or(Duration::ZERO, |t| FRAME.saturating_sub(t.elapsed()));
            let first = match messages.recv_timeout(wait.max(Duration::from_millis(1))) {
                Ok(m) => Some(m),
                Err(RecvTimeoutError::Timeout) => None,
                Err(RecvTimeoutError::Disconnected) => return Ok(()),
            };
            for msg in first.into_iter().chain(messages.try_iter()) {
                dirty = true;
                for effect in dash.update(msg) {
                    match effect {
                        Effect::Quit => return Ok(()),
                        Effect::Repaint => terminal.clear()?,
                        Effect::Play(request) => {
                            let sent = player.as_ref().is_some_and(|p| p.send(request).is_ok());
                            if !sent {
                                dash.notice = Some("the player has stopped".into());
                            }
                        }
                        Effect::Send { request, command } => {
                            let sent = commands
                                .as_ref()
                                .is_some_and(|c| c.try_send((request, command)).is_ok());
                            if !sent {
                                dash.notice = Some("the command could not be sent: not connected".into());
                            }
                        }
                    }
                }
            }
            if dirty && last_draw.is_none_or(|t| t.elapsed() >= FRAME) {
                let size = terminal.size()?;
                dash.row_len = view::bins_per_row(&dash, size.width, size.height);
                terminal.draw(|f| view::draw(f, &dash, theme))?;
                last_draw = Some(Instant::now());
                dirty = false;
            }
        }
    })();
    ratatui::restore();
    result.map(|()| dash)
}

/// Reads the terminal's keys on a thread of its own and sends them on.
fn spawn_keys(out: mpsc::SyncSender<Msg>) {
    let started = Instant::now();
    let _ = std::thread::Builder::new()
        .name("megaflux-keys".into())
        .spawn(move || {
            loop {
                let msg = match event::poll(Duration::from_millis(200)) {
                    Ok(true) => match event::read() {
                        Ok(TermEvent::Key(key)) => Msg::Key(key),
                        Ok(TermEvent::Resize(..)) => Msg::Tick(started.elapsed().as_secs_f64()),
                        Ok(_) => continue,
                        Err(_) => return,
                    },
                    // A tick: redraws what moves with time (ETA, elapsed, how long the feed
                    // has been quiet), and notices the dashboard has quit.
                    Ok(false) => Msg::Tick(started.elapsed().as_secs_f64()),
                    Err(_) => return,
                };
                if out.send(msg).is_err() {
                    return;
                }
            }
        });
}
