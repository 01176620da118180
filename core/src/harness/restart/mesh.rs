//! The connections of a restarted computation: the survivors connect to each other at once
//! (timely's own cluster start tries once a second), and timely runs over them.

use std::io::{Read, Write};
use std::net::{TcpListener, TcpStream};
use std::time::{Duration, Instant};

use crate::abort::Abort;
use crate::harness::RunError;

/// How often a survivor tries again to connect to another for a restarted computation.
const CONNECT_RETRY: Duration = Duration::from_millis(5);
/// How long a new connection has to say who it is.
const HANDSHAKE_WAIT: Duration = Duration::from_secs(1);

/// Starts generation `generation` of a run among the processes at `addresses`, this one
/// at `rank`, with `workers` workers each: the survivors connect to each other at once
/// (each listens for those after it and connects to those before it, trying again every
/// few milliseconds, for up to `wait`), then timely runs `work` over those connections.
pub(in crate::harness) fn execute<F>(
    (addresses, generation): (&[String], u32),
    rank: usize,
    workers: usize,
    worker_config: timely::WorkerConfig,
    (wait, abort): (Duration, &Abort),
    work: F,
) -> Result<timely::communication::WorkerGuards<()>, RunError>
where
    F: Fn(&mut timely::worker::Worker) + Send + Sync + 'static,
{
    use timely::communication::allocator::zero_copy::initialize::initialize_networking_from_sockets;
    use timely::communication::allocator::{AllocatorBuilder, ProcessBuilder};
    crate::failpoint::hit(crate::failpoint::Point::Connect);
    let gone = || abort.is_stopped();
    let sockets = mesh((addresses, generation), rank, wait, &gone)
        .map_err(|e| RunError::Timely(format!("restarting the cluster: {e}")))?;
    let hooks = timely::communication::Hooks::default();
    let local = ProcessBuilder::new_typed_vector(workers, hooks.refill.clone(), hooks.spill.clone());
    let (builders, guard) = initialize_networking_from_sockets(local, sockets, rank, workers, hooks)
        .map_err(|e| RunError::Timely(format!("restarting the cluster: {e}")))?;
    let builders = builders.into_iter().map(AllocatorBuilder::Tcp).collect();
    timely::execute::execute_from(builders, Box::new(guard), worker_config, work).map_err(RunError::Timely)
}

/// One connection to every other process at `addresses` (`None` for this one, at `rank`)
/// for generation `generation`. Each connection starts with the generation and the
/// sender's rank: a connection left over from an attempt at another generation (a
/// process that had not yet given it up) is dropped, not taken for a peer. Gives up as
/// soon as `gone` says a process went away meanwhile.
fn mesh(
    (addresses, generation): (&[String], u32),
    rank: usize,
    wait: Duration,
    gone: &dyn Fn() -> bool,
) -> std::io::Result<Vec<Option<TcpStream>>> {
    let first = |a: &String| a.split_whitespace().next().unwrap_or_default().to_string();
    let listener = TcpListener::bind(first(&addresses[rank]))?;
    listener.set_nonblocking(true)?;
    let since = Instant::now();
    let late = || {
        std::io::Error::new(
            std::io::ErrorKind::TimedOut,
            "the other survivors did not connect in time",
        )
    };
    let lost = || std::io::Error::other("another process went away while the survivors reconnected");
    let mut sockets: Vec<Option<TcpStream>> = (0..addresses.len()).map(|_| None).collect();
    for (index, address) in addresses.iter().enumerate().take(rank) {
        let stream = loop {
            if gone() {
                return Err(lost());
            }
            match TcpStream::connect(first(address)) {
                Ok(stream) => break stream,
                Err(_) if since.elapsed() < wait => std::thread::sleep(CONNECT_RETRY),
                Err(_) => return Err(late()),
            }
        };
        stream.set_nodelay(true)?;
        (&stream).write_all(&handshake(generation, rank))?;
        sockets[index] = Some(stream);
    }
    while sockets.iter().skip(rank + 1).any(Option::is_none) {
        match listener.accept() {
            Ok((stream, _)) => {
                stream.set_nonblocking(false)?;
                stream.set_read_timeout(Some(HANDSHAKE_WAIT))?;
                let mut said = [0u8; 12];
                // One that does not say who it is in time, or is not of this generation, is
                // not a peer of this computation.
                if (&stream).read_exact(&mut said).is_err() || said[..4] != generation.to_le_bytes() {
                    continue;
                }
                stream.set_read_timeout(None)?;
                stream.set_nodelay(true)?;
                let mut index = [0u8; 8];
                index.copy_from_slice(&said[4..]);
                let index = u64::from_le_bytes(index) as usize;
                match sockets.get_mut(index) {
                    Some(slot) if index > rank && slot.is_none() => *slot = Some(stream),
                    _ => {
                        return Err(std::io::Error::other(format!(
                            "a connection of this restart claimed to be process {index}"
                        )));
                    }
                }
            }
            Err(e) if e.kind() == std::io::ErrorKind::WouldBlock && gone() => return Err(lost()),
            Err(e) if e.kind() == std::io::ErrorKind::WouldBlock && since.elapsed() < wait => {
                std::thread::sleep(CONNECT_RETRY)
            }
            Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => return Err(late()),
            Err(e) => return Err(e),
        }
    }
    Ok(sockets)
}

/// What a connection of generation `generation` from the process at `rank` starts with.
fn handshake(generation: u32, rank: usize) -> [u8; 12] {
    let mut said = [0u8; 12];
    said[..4].copy_from_slice(&generation.to_le_bytes());
    said[4..].copy_from_slice(&(rank as u64).to_le_bytes());
    said
}
