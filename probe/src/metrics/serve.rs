//! `GET /metrics` over HTTP/1.1 (hyper), on the runtime of whoever owns the model.
//!
//! The server never touches the model: each scrape asks its owner for a [`Snapshot`]
//! through a bounded channel ([`Scrapes`]), which the owner answers between its other work,
//! and the encoding happens here. So a scrape costs the owner one snapshot (bounded by the
//! job's workers, operators and partitions), and a flood of scrapes costs it nothing more:
//! past [`REQUESTS`] waiting, or [`MAX_CONNECTIONS`] open, scrapers are turned away.

use std::convert::Infallible;
use std::sync::Arc;
use std::time::Duration;

use http_body_util::Full;
use hyper::body::{Bytes, Incoming};
use hyper::header::{ACCEPT, ALLOW, CONTENT_TYPE};
use hyper::server::conn::http1;
use hyper::service::service_fn;
use hyper::{Method, Request, Response, StatusCode};
use hyper_util::rt::{TokioIo, TokioTimer};
use tokio::net::TcpListener;
use tokio::sync::{Semaphore, mpsc, oneshot};

use super::{Format, Snapshot};

/// Connections served at once; more are closed as they arrive.
pub const MAX_CONNECTIONS: usize = 32;
/// How long a scrape waits for the model's owner before it answers 503.
pub const SCRAPE_WAIT: Duration = Duration::from_secs(5);
/// How long a client may take to send a request's head.
const HEADER_WAIT: Duration = Duration::from_secs(10);
/// How long one connection may stay open, idle or not (a scraper reconnects).
const CONNECTION_LIFE: Duration = Duration::from_secs(600);
/// Scrapes waiting for the model's owner at most.
const REQUESTS: usize = 16;

/// A scrape's request for the job's numbers: the model's owner answers it.
pub type Scrape = oneshot::Sender<Snapshot>;
/// Where the model's owner takes scrapes from (`recv` in its loop, then answer).
pub type Requests = mpsc::Receiver<Scrape>;
/// Where the server asks.
pub type Scrapes = mpsc::Sender<Scrape>;

/// The next scrape waiting for the model's numbers, for an owner's `select!`: never, when
/// there is no endpoint (`None`).
pub async fn next_scrape(requests: &mut Option<Requests>) -> Option<Scrape> {
    match requests {
        Some(r) => r.recv().await,
        None => std::future::pending().await,
    }
}

/// A server's end and the model owner's end of the scrapes' channel.
pub fn channel() -> (Scrapes, Requests) {
    mpsc::channel(REQUESTS)
}

/// Serves `GET /metrics` on `listener` until the task is dropped, asking `scrapes` for each
/// response's numbers.
pub async fn serve(listener: TcpListener, scrapes: Scrapes) {
    let slots = Arc::new(Semaphore::new(MAX_CONNECTIONS));
    loop {
        let stream = match listener.accept().await {
            Ok((stream, _)) => stream,
            // Out of file descriptors, say: the next accept may do better.
            Err(_) => {
                tokio::time::sleep(Duration::from_millis(100)).await;
                continue;
            }
        };
        let Ok(slot) = Arc::clone(&slots).try_acquire_owned() else {
            continue;
        };
        let scrapes = scrapes.clone();
        tokio::spawn(async move {
            let _slot = slot;
            let service = service_fn(move |request| respond(request, scrapes.clone()));
            let connection = http1::Builder::new()
                .timer(TokioTimer::new())
                .header_read_timeout(HEADER_WAIT)
                .serve_connection(TokioIo::new(stream), service);
            let _ = tokio::time::timeout(CONNECTION_LIFE, connection).await;
        });
    }
}

/// The response to one request.
async fn respond(request: Request<Incoming>, scrapes: Scrapes) -> Result<Response<Full<Bytes>>, Infallible> {
    if request.uri().path() != "/metrics" {
        return Ok(plain(
            StatusCode::NOT_FOUND,
            "megaflux serves its metrics at /metrics\n",
        ));
    }
    if request.method() != Method::GET && request.method() != Method::HEAD {
        let mut response = plain(StatusCode::METHOD_NOT_ALLOWED, "/metrics takes GET\n");
        response
            .headers_mut()
            .insert(ALLOW, hyper::header::HeaderValue::from_static("GET, HEAD"));
        return Ok(response);
    }
    let format = Format::of_accept(request.headers().get(ACCEPT).and_then(|v| v.to_str().ok()));
    let (reply, answer) = oneshot::channel();
    if let Err(e) = scrapes.try_send(reply) {
        let why = match e {
            mpsc::error::TrySendError::Full(_) => "too many scrapes are waiting; try again\n",
            mpsc::error::TrySendError::Closed(_) => "the job's metrics are no longer kept\n",
        };
        return Ok(plain(StatusCode::SERVICE_UNAVAILABLE, why));
    }
    let snapshot = match tokio::time::timeout(SCRAPE_WAIT, answer).await {
        Ok(Ok(snapshot)) => snapshot,
        _ => {
            return Ok(plain(
                StatusCode::SERVICE_UNAVAILABLE,
                "the job's numbers did not come in time\n",
            ));
        }
    };
    Ok(match snapshot.encode(format) {
        Ok(body) => {
            let mut response = Response::new(Full::new(Bytes::from(body)));
            if let Ok(v) = hyper::header::HeaderValue::from_str(format.content_type()) {
                response.headers_mut().insert(CONTENT_TYPE, v);
            }
            response
        }
        Err(_) => plain(StatusCode::INTERNAL_SERVER_ERROR, "the metrics did not encode\n"),
    })
}

fn plain(status: StatusCode, text: &'static str) -> Response<Full<Bytes>> {
    let mut response = Response::new(Full::new(Bytes::from_static(text.as_bytes())));
    *response.status_mut() = status;
    response.headers_mut().insert(
        CONTENT_TYPE,
        hyper::header::HeaderValue::from_static("text/plain; charset=utf-8"),
    );
    response
}
