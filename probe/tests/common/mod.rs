//! What the collector's TCP tests share: a client that asks and waits for answers, and
//! one that waits to be closed (each test uses some of them).
#![allow(dead_code)]

use std::time::Duration;

use megaflux::Bins;
use megaflux::harness::RunConfig;
use megaflux_probe::event::Outcome;
use megaflux_probe::wire::{ClientFrame, CommandRequest, Connection, ServerFrame, Subscription};
use tokio::net::TcpStream;

/// Reads until the collector closes `conn`; the refusal's reason, if it sent one.
pub async fn closed(mut conn: Connection<TcpStream>) -> Option<String> {
    let mut refused = None;
    loop {
        match tokio::time::timeout(Duration::from_secs(20), conn.recv::<ServerFrame>()).await {
            Ok(Ok(Some(ServerFrame::Refused { reason }))) => refused = Some(reason),
            Ok(Ok(Some(_))) => {}
            Ok(Ok(None)) | Ok(Err(_)) => return refused,
            Err(_) => panic!("the collector kept a bad connection open"),
        }
    }
}

/// Sends `commands` as requests 0, 1, ... and collects every answer: (outcome, reason).
pub async fn ask(conn: &mut Subscription, commands: Vec<CommandRequest>) -> Vec<(Outcome, String)> {
    let n = commands.len();
    for (request, command) in commands.into_iter().enumerate() {
        let frame = ClientFrame::Command {
            request: request as u64,
            command,
        };
        conn.send(&frame).await.unwrap();
    }
    let mut answers = vec![None; n];
    let wait = async {
        while answers.iter().any(Option::is_none) {
            match conn.recv().await.unwrap() {
                Some(ServerFrame::Answer {
                    request,
                    outcome,
                    reason,
                }) => answers[request as usize] = Some((outcome, reason.unwrap_or_default())),
                Some(_) => {}
                None => panic!("the collector closed the connection"),
            }
        }
    };
    tokio::time::timeout(Duration::from_secs(60), wait)
        .await
        .expect("every command answered");
    answers.into_iter().map(Option::unwrap).collect()
}

/// A small job of two workers and 16 bins that runs for `seconds`.
pub fn job(seconds: u64) -> RunConfig {
    RunConfig {
        workload: "hashcount".into(),
        workers: 2,
        bins: Bins::new(16).unwrap(),
        params: megaflux::job::ParamValues::new().with("keys", 5_000),
        rate: 20_000,
        duration: Duration::from_secs(seconds),
        ..RunConfig::default()
    }
}

/// A runtime for a test's clients, on the test's thread.
pub fn runtime() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap()
}
