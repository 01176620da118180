//! `megaflux replay FILE`: the dashboard over a recorded trace, fed by the replay crate's
//! player on a thread of its own; the replay keys become player requests.

use std::path::Path;
use std::sync::mpsc;

use anyhow::Context;
use megaflux_probe::record::TraceReader;
use megaflux_replay::player::Player;

use super::model::{Connection, Dash, Msg};
use super::{Sinks, run as show};

/// Indexes the trace (the whole file is read once, a line at a time) and shows it, playing
/// from the start at 1x.
pub fn run(path: &Path) -> anyhow::Result<()> {
    let reader = TraceReader::open(path).map_err(megaflux_replay::ReplayError::from)?;
    let player = Player::new(reader)?;
    let events = player.index().events;
    let name = path.display().to_string();
    eprintln!("megaflux: {name}: {events} events");
    let (tx, rx) = super::queue();
    let (requests, player_rx) = mpsc::channel();
    let out = tx.clone();
    std::thread::Builder::new()
        .name("megaflux-player".into())
        .spawn(move || player.run(player_rx, |o| out.send(Msg::from(o)).is_ok()))
        .context("starting the player")?;
    let dash = Dash::new(Connection::Trace(name), None);
    show(
        dash,
        rx,
        tx,
        Sinks {
            commands: None,
            player: Some(requests),
        },
    )?;
    Ok(())
}
