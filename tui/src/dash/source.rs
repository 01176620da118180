//! Where a live dashboard's messages come from: a collector, over TCP. A replay's come from
//! its player ([`super::replay`]); both produce the same [`Msg`]s, and tests make them by hand.

use std::net::SocketAddr;
use std::sync::mpsc::Sender;
use std::time::Duration;

use megaflux_probe::wire::{self, ClientFrame, CommandRequest, ServerFrame};
use tokio::sync::mpsc;

use super::model::{Connection, Msg};

/// Commands queued for the collector before the dashboard reports them lost.
const COMMAND_QUEUE: usize = 64;
/// How long to keep trying to reach a collector.
const CONNECT_FOR: Duration = Duration::from_secs(10);

/// Sends a live collector's messages to `out`; returns where to send commands. The
/// subscription runs on its own thread until the collector closes it or `out` is gone.
pub fn live(
    addr: SocketAddr,
    token: Option<String>,
    out: Sender<Msg>,
) -> mpsc::Sender<(u64, CommandRequest)> {
    let (tx, rx) = mpsc::channel(COMMAND_QUEUE);
    std::thread::Builder::new()
        .name("megaflux-subscriber".into())
        .spawn(move || {
            let runtime = match tokio::runtime::Builder::new_current_thread().enable_all().build() {
                Ok(r) => r,
                Err(e) => {
                    let _ = out.send(Msg::Connection(Connection::Closed(format!("no runtime: {e}"))));
                    return;
                }
            };
            let reason = runtime.block_on(subscribe(addr, token, &out, rx));
            let _ = out.send(Msg::Connection(Connection::Closed(reason)));
        })
        .ok();
    tx
}

/// Follows the collector until it closes; returns why it ended.
async fn subscribe(
    addr: SocketAddr,
    token: Option<String>,
    out: &Sender<Msg>,
    mut commands: mpsc::Receiver<(u64, CommandRequest)>,
) -> String {
    let _ = out.send(Msg::Connection(Connection::Connecting(addr.to_string())));
    let deadline = tokio::time::Instant::now() + CONNECT_FOR;
    let mut conn = loop {
        match wire::subscribe(addr, token.clone()).await {
            Ok(c) => break c,
            Err(e) if tokio::time::Instant::now() >= deadline => return e.to_string(),
            Err(_) => tokio::time::sleep(Duration::from_millis(200)).await,
        }
    };
    let _ = out.send(Msg::Connection(Connection::Live(addr.to_string())));
    loop {
        tokio::select! {
            frame = conn.recv::<ServerFrame>() => {
                let msg = match frame {
                    Ok(Some(ServerFrame::Snapshot { model })) => Msg::Snapshot(model),
                    Ok(Some(ServerFrame::Events { events })) => Msg::Events(events),
                    Ok(Some(ServerFrame::Answer { request, outcome, reason })) => Msg::Answer { request, outcome, reason },
                    Ok(Some(_)) => continue,
                    Ok(None) => return "the collector closed the connection".into(),
                    Err(e) => return e.to_string(),
                };
                if out.send(msg).is_err() {
                    return "the dashboard quit".into();
                }
            }
            Some((request, command)) = commands.recv() => {
                if let Err(e) = conn.send(&ClientFrame::Command { request, command }).await {
                    return e.to_string();
                }
            }
        }
    }
}
