//! Where a live dashboard's messages come from: a collector, over TCP. A replay's come from
//! its player ([`super::replay`]); both produce the same [`Msg`]s, and tests make them by hand.
//!
//! The dashboard's queue is bounded ([`super::QUEUE`]): when the terminal cannot keep up
//! (a stalled terminal, a slow link), this source keeps reading the collector and drops the
//! events that do not fit, counted and told to the dashboard ([`Msg::Lost`]), so that
//! memory stays bounded and the collector never sees a slow subscriber.
//!
//! With a metrics listener (`attach --metrics`), the subscription keeps a model of its own,
//! from every event the collector sent (not only those the dashboard had room for), and
//! answers scrapes from it.

use std::net::SocketAddr;
use std::sync::mpsc::{SyncSender, TrySendError};
use std::time::Duration;

use megaflux_probe::JobModel;
use megaflux_probe::metrics::{self, Snapshot};
use megaflux_probe::wire::{self, ClientFrame, CommandRequest, ServerFrame};
use tokio::sync::mpsc;

use super::model::{Connection, Msg};

/// Commands queued for the collector before the dashboard reports them lost.
const COMMAND_QUEUE: usize = 64;
/// How long to keep trying to reach a collector.
const CONNECT_FOR: Duration = Duration::from_secs(10);

/// Sends a live collector's messages to `out`; returns where to send commands. The
/// subscription runs on its own thread until the collector closes it or `out` is gone; with
/// `metrics` (a listener, non-blocking), it serves the job's metrics there meanwhile.
pub fn live(
    addr: SocketAddr,
    token: Option<String>,
    out: SyncSender<Msg>,
    metrics: Option<std::net::TcpListener>,
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
            let reason = runtime.block_on(async {
                let requests = match metrics.map(tokio::net::TcpListener::from_std).transpose() {
                    Ok(listener) => listener.map(|l| {
                        let (scrapes, requests) = metrics::channel();
                        tokio::spawn(metrics::serve(l, scrapes));
                        requests
                    }),
                    Err(e) => return format!("serving metrics: {e}"),
                };
                subscribe(addr, token, &out, rx, requests).await
            });
            let _ = out.send(Msg::Connection(Connection::Closed(reason)));
        })
        .ok();
    tx
}

/// Events the dashboard's queue had no room for.
#[derive(Default)]
struct Lost {
    total: u64,
    told: u64,
}

impl Lost {
    /// Offers `events` to the dashboard; `false` when it is gone.
    fn offer(&mut self, out: &SyncSender<Msg>, events: Vec<megaflux_probe::Stamped>) -> bool {
        // The count first: it says what the view is missing, the events only add to it.
        if self.total != self.told {
            match out.try_send(Msg::Lost(self.total)) {
                Ok(()) => self.told = self.total,
                Err(TrySendError::Full(_)) => {}
                Err(TrySendError::Disconnected(_)) => return false,
            }
        }
        let n = events.len() as u64;
        match out.try_send(Msg::Events(events)) {
            Ok(()) => true,
            Err(TrySendError::Full(_)) => {
                self.total = self.total.saturating_add(n);
                true
            }
            Err(TrySendError::Disconnected(_)) => false,
        }
    }
}

/// Follows the collector until it closes; returns why it ended.
async fn subscribe(
    addr: SocketAddr,
    token: Option<String>,
    out: &SyncSender<Msg>,
    mut commands: mpsc::Receiver<(u64, CommandRequest)>,
    mut scrapes: Option<metrics::Requests>,
) -> String {
    // Only kept for scrapes.
    let mut model = scrapes.as_ref().map(|_| JobModel::new());
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
    if let Some(id) = conn.id() {
        let _ = out.send(Msg::Subscribed(id));
    }
    let mut lost = Lost::default();
    loop {
        tokio::select! {
            frame = conn.recv() => {
                // Events may be dropped when the dashboard is behind; the rest may not.
                let msg = match frame {
                    Ok(Some(ServerFrame::Events { events })) => {
                        if let Some(model) = model.as_mut() {
                            events.iter().for_each(|e| model.apply(e));
                        }
                        if !lost.offer(out, events) {
                            return "the dashboard quit".into();
                        }
                        continue;
                    }
                    Ok(Some(ServerFrame::Snapshot { model: snapshot })) => {
                        if let Some(model) = model.as_mut() {
                            *model = (*snapshot).clone();
                        }
                        Msg::Snapshot(snapshot)
                    }
                    Ok(Some(ServerFrame::Answer { request, outcome, reason })) => Msg::Answer { request, outcome, reason },
                    Ok(Some(_)) => continue,
                    Ok(None) => return format!("the collector at {addr} closed the connection"),
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
            Some(reply) = metrics::next_scrape(&mut scrapes) => {
                if let Some(model) = model.as_ref() {
                    let _ = reply.send(Snapshot::of(model, false));
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn events(n: usize) -> Vec<megaflux_probe::Stamped> {
        let e = megaflux_probe::Stamped {
            at_s: 0.0,
            process: 0,
            event: megaflux_probe::Event::Recording {
                on: true,
                failed: None,
            },
        };
        vec![e; n]
    }

    /// A full queue loses events, counted, and the count reaches the dashboard once
    /// there is room.
    #[test]
    fn a_full_queue_loses_events_and_says_how_many() {
        let (out, rx) = std::sync::mpsc::sync_channel(1);
        let mut lost = Lost::default();
        assert!(lost.offer(&out, events(2)));
        assert!(lost.offer(&out, events(3)));
        assert!(lost.offer(&out, events(4)));
        assert_eq!(lost.total, 7);
        assert!(matches!(rx.try_recv(), Ok(Msg::Events(e)) if e.len() == 2));
        assert!(lost.offer(&out, events(1)));
        // The count took the room; the events did not fit.
        assert!(matches!(rx.try_recv(), Ok(Msg::Lost(7))));
        assert_eq!(lost.total, 8);
        drop(rx);
        assert!(!lost.offer(&out, events(1)));
    }
}
