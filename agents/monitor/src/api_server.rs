//! The live API server: newline-delimited JSON on a Unix socket (protocol in
//! [`hwqos_pmu::api`]).
//!
//! The server protects the sampler and itself: request lines are bounded
//! ([`MAX_REQUEST_BYTES`]); subscribers read from a bounded broadcast queue, and
//! one that falls behind is told so and disconnected instead of slowing the
//! sampler (a write that stalls for [`WRITE_TIMEOUT`] counts as falling behind);
//! the socket is created with mode 0660; a stale socket from a previous run is
//! removed at start, but a live one (another monitor answering) is an error.

use crate::error::MonitorError;
use crate::monitor::MonitorHandle;
use hwqos_core::Frame;
use hwqos_pmu::api::{FrameFilter, Request, Response, MAX_REQUEST_BYTES, SCHEMA};
use std::os::unix::fs::{FileTypeExt, PermissionsExt};
use std::path::Path;
use std::sync::Arc;
use std::time::Duration;
use tokio::io::{AsyncBufRead, AsyncBufReadExt, AsyncReadExt, AsyncWriteExt, BufReader};
use tokio::net::unix::OwnedWriteHalf;
use tokio::net::{UnixListener, UnixStream};
use tokio::sync::{broadcast, watch};
use tracing::{debug, warn};

/// A write to a client that takes longer than this drops the client.
pub const WRITE_TIMEOUT: Duration = Duration::from_secs(5);

/// Binds the API socket: creates the parent directory, removes a stale socket,
/// and sets mode 0660. Needs no async runtime; [`serve`] takes the listener.
pub fn bind(path: &Path) -> Result<std::os::unix::net::UnixListener, MonitorError> {
    let io = |context: String| move |source| MonitorError::Io { context, source };
    if let Some(parent) = path.parent().filter(|p| !p.as_os_str().is_empty()) {
        std::fs::create_dir_all(parent).map_err(io(format!(
            "cannot create the socket directory {}",
            parent.display()
        )))?;
    }
    if let Ok(meta) = std::fs::symlink_metadata(path) {
        if !meta.file_type().is_socket() {
            return Err(MonitorError::Io {
                context: format!("api.socket {}", path.display()),
                source: std::io::Error::other("exists and is not a socket; refusing to replace it"),
            });
        }
        if std::os::unix::net::UnixStream::connect(path).is_ok() {
            return Err(MonitorError::Io {
                context: format!("api.socket {}", path.display()),
                source: std::io::Error::other(
                    "another process is serving this socket (is a monitor already running?)",
                ),
            });
        }
        std::fs::remove_file(path).map_err(io(format!(
            "cannot remove the stale socket {}",
            path.display()
        )))?;
    }
    let listener = std::os::unix::net::UnixListener::bind(path)
        .map_err(io(format!("cannot bind {}", path.display())))?;
    listener
        .set_nonblocking(true)
        .map_err(io(format!("cannot configure {}", path.display())))?;
    std::fs::set_permissions(path, std::fs::Permissions::from_mode(0o660))
        .map_err(io(format!("cannot set permissions of {}", path.display())))?;
    Ok(listener)
}

/// Removes the socket file at shutdown (if it is still a socket).
pub fn remove_socket(path: &Path) {
    if std::fs::symlink_metadata(path).is_ok_and(|m| m.file_type().is_socket()) {
        if let Err(e) = std::fs::remove_file(path) {
            warn!("cannot remove {}: {e}", path.display());
        }
    }
}

/// Accepts connections until `shutdown` turns true.
pub async fn serve(
    listener: std::os::unix::net::UnixListener,
    handle: MonitorHandle,
    mut shutdown: watch::Receiver<bool>,
) {
    let listener = match UnixListener::from_std(listener) {
        Ok(l) => l,
        Err(e) => {
            tracing::error!("live API unavailable: {e}");
            return;
        }
    };
    loop {
        tokio::select! {
            accepted = listener.accept() => match accepted {
                Ok((stream, _)) => {
                    tokio::spawn(connection(stream, handle.clone(), shutdown.clone()));
                }
                Err(e) => {
                    warn!("API accept failed: {e}");
                    tokio::time::sleep(Duration::from_millis(100)).await;
                }
            },
            _ = shutdown.changed() => return,
        }
    }
}

/// Outcome of reading one request line.
enum Line {
    Ok,
    Eof,
    TooLong,
}

async fn read_line(
    reader: &mut (impl AsyncBufRead + Unpin),
    buf: &mut Vec<u8>,
) -> std::io::Result<Line> {
    buf.clear();
    let n = (&mut *reader)
        .take(MAX_REQUEST_BYTES as u64 + 1)
        .read_until(b'\n', buf)
        .await?;
    if n == 0 {
        return Ok(Line::Eof);
    }
    if buf.last() == Some(&b'\n') {
        buf.pop();
        return Ok(Line::Ok);
    }
    Ok(if n > MAX_REQUEST_BYTES {
        Line::TooLong
    } else {
        Line::Ok
    })
}

/// Result of writing a line to a client.
#[derive(PartialEq)]
enum Sent {
    Ok,
    /// The client is gone (or the write failed).
    Gone,
    /// The write did not finish within [`WRITE_TIMEOUT`]: the client stopped reading.
    Stalled,
}

async fn write_line(writer: &mut OwnedWriteHalf, line: &str) -> Sent {
    match tokio::time::timeout(WRITE_TIMEOUT, writer.write_all(line.as_bytes())).await {
        Ok(Ok(())) => Sent::Ok,
        Ok(Err(_)) => Sent::Gone,
        Err(_) => Sent::Stalled,
    }
}

async fn send(writer: &mut OwnedWriteHalf, line: &str) -> bool {
    write_line(writer, line).await == Sent::Ok
}

/// One frame as a response line, filtered (without copying when unfiltered).
fn frame_line(frame: &Frame, filter: &FrameFilter) -> String {
    let json = if filter.is_all() {
        serde_json::to_string(frame)
    } else {
        serde_json::to_string(&filter.apply(frame))
    };
    match json {
        Ok(j) => format!("{{\"type\":\"frame\",\"frame\":{j}}}\n"),
        Err(e) => Response::error(format!("cannot encode frame: {e}")).to_line(),
    }
}

async fn connection(
    stream: UnixStream,
    handle: MonitorHandle,
    mut shutdown: watch::Receiver<bool>,
) {
    let (rd, mut wr) = stream.into_split();
    let mut rd = BufReader::new(rd);
    let hello = Response::Hello {
        schema: SCHEMA.to_string(),
        node: handle.status().node,
        version: crate::VERSION.to_string(),
        rate_hz: handle.config().rate_hz,
    };
    if !send(&mut wr, &hello.to_line()).await {
        return;
    }
    let mut buf = Vec::new();
    loop {
        let line = tokio::select! {
            r = read_line(&mut rd, &mut buf) => r,
            _ = shutdown.changed() => return,
        };
        match line {
            Ok(Line::Ok) => {}
            Ok(Line::Eof) | Err(_) => return,
            Ok(Line::TooLong) => {
                let msg = format!("request line longer than {MAX_REQUEST_BYTES} bytes; closing");
                send(&mut wr, &Response::error(msg).to_line()).await;
                return;
            }
        }
        let Ok(text) = std::str::from_utf8(&buf) else {
            send(
                &mut wr,
                &Response::error("request is not UTF-8; closing").to_line(),
            )
            .await;
            return;
        };
        let text = text.trim();
        if text.is_empty() {
            continue;
        }
        let request: Request = match serde_json::from_str(text) {
            Ok(r) => r,
            Err(e) => {
                if !send(
                    &mut wr,
                    &Response::error(format!("bad request: {e}")).to_line(),
                )
                .await
                {
                    return;
                }
                continue;
            }
        };
        debug!(?request, "API request");
        let ok = match request {
            Request::Subscribe { scopes, metrics } => {
                subscribe(rd, wr, &handle, FrameFilter { scopes, metrics }, shutdown).await;
                return;
            }
            Request::Window {
                seconds,
                frames,
                scopes,
                metrics,
            } => {
                window(
                    &mut wr,
                    &handle,
                    seconds,
                    frames,
                    FrameFilter { scopes, metrics },
                )
                .await
            }
            Request::SetEventSets { sets } => {
                let h = handle.clone();
                let reply = match tokio::task::spawn_blocking(move || h.set_event_sets(sets)).await
                {
                    Ok(Ok(sets)) => Response::EventSets(sets),
                    Ok(Err(e)) => Response::error(format!("set_event_sets: {e}")),
                    Err(e) => Response::error(format!("set_event_sets: {e}")),
                };
                send(&mut wr, &reply.to_line()).await
            }
            Request::GetEventSets => {
                send(&mut wr, &Response::EventSets(handle.event_sets()).to_line()).await
            }
            Request::Flush => {
                let h = handle.clone();
                let reply = match tokio::task::spawn_blocking(move || h.flush()).await {
                    Ok(Ok(paths)) => Response::Flushed { paths },
                    Ok(Err(e)) => Response::error(e.to_string()),
                    Err(e) => Response::error(format!("flush: {e}")),
                };
                send(&mut wr, &reply.to_line()).await
            }
            Request::Status => {
                send(
                    &mut wr,
                    &Response::Status(Box::new(handle.status())).to_line(),
                )
                .await
            }
        };
        if !ok {
            return;
        }
    }
}

/// Sends a window frame by frame: a bounded batch is decoded under the
/// database lock, the lock is released, the batch is written, and so on, so a
/// window holds about [`crate::monitor::WINDOW_BATCH_BYTES`] whatever its size
/// and however slowly the client reads. At most `[api] max_windows` windows are
/// sent at once (more are refused with an error line; the connection stays
/// usable), and the whole response must be read within `[api]
/// window_timeout_s` (else an error line, best effort, and the connection is
/// closed: the response is incomplete).
async fn window(
    wr: &mut OwnedWriteHalf,
    handle: &MonitorHandle,
    seconds: Option<f64>,
    frames: Option<usize>,
    filter: FrameFilter,
) -> bool {
    if let Some(s) = seconds {
        if !s.is_finite() || s < 0.0 {
            return send(
                wr,
                &Response::error(format!(
                    "window: seconds must be a non-negative number, got {s}"
                ))
                .to_line(),
            )
            .await;
        }
    }
    let Some(_permit) = handle.try_start_window() else {
        let msg = format!(
            "window: {} window responses are being sent already (api.max_windows); try again when one has ended",
            handle.max_windows()
        );
        return send(wr, &Response::error(msg).to_line()).await;
    };
    let timeout = handle.config().api.window_timeout();
    let deadline = tokio::time::Instant::now() + timeout;
    let mut count = 0usize;
    if let Some(range) = handle.window_range(seconds, frames) {
        let mut buffer = handle.window_buffer();
        let mut from = range.first;
        loop {
            let batch = handle.window_batch(from, range.last, &mut buffer);
            if batch.is_empty() {
                break;
            }
            for (frame, frame_bytes) in batch {
                let line = frame_line(&frame, &filter);
                from = frame.seq + 1;
                drop(frame);
                buffer.add(line.len());
                let by = deadline.min(tokio::time::Instant::now() + WRITE_TIMEOUT);
                let written = tokio::time::timeout_at(by, wr.write_all(line.as_bytes())).await;
                buffer.release(line.len() + frame_bytes);
                match written {
                    Ok(Ok(())) => count += 1,
                    Ok(Err(_)) => return false,
                    Err(_) => {
                        let msg = if tokio::time::Instant::now() >= deadline {
                            handle.window_cut();
                            format!(
                                "window: not read within {timeout:?} (api.window_timeout_s); {count} of {} frames sent; closing",
                                range.frames
                            )
                        } else {
                            format!(
                                "window: the client stopped reading for {WRITE_TIMEOUT:?}; {count} of {} frames sent; closing",
                                range.frames
                            )
                        };
                        warn!("{msg}");
                        let _ = tokio::time::timeout(
                            Duration::from_millis(200),
                            wr.write_all(Response::error(msg).to_line().as_bytes()),
                        )
                        .await;
                        return false;
                    }
                }
            }
        }
    }
    send(wr, &Response::End { count }.to_line()).await
}

async fn subscribe(
    mut rd: BufReader<tokio::net::unix::OwnedReadHalf>,
    mut wr: OwnedWriteHalf,
    handle: &MonitorHandle,
    filter: FrameFilter,
    mut shutdown: watch::Receiver<bool>,
) {
    // Subscribe before acknowledging so no frame after the ack is missed.
    let mut rx = handle.subscribe();
    let ack = Response::Subscribed {
        scopes: filter.scopes.clone(),
        metrics: filter.metrics.clone(),
    };
    if !send(&mut wr, &ack.to_line()).await {
        return;
    }
    handle.subscriber_added();
    let mut dropped = false;
    let mut scratch = [0u8; 512];
    loop {
        tokio::select! {
            r = rx.recv() => match r {
                Ok(frame) => {
                    let frame: Arc<Frame> = frame;
                    match write_line(&mut wr, &frame_line(&frame, &filter)).await {
                        Sent::Ok => {}
                        Sent::Gone => break,
                        Sent::Stalled => {
                            warn!("subscriber stopped reading for {WRITE_TIMEOUT:?}; disconnecting");
                            dropped = true;
                            break;
                        }
                    }
                }
                Err(broadcast::error::RecvError::Lagged(n)) => {
                    let msg = format!(
                        "subscriber too slow: fell {n} frames behind (queue of {} frames); disconnecting",
                        handle.client_queue()
                    );
                    warn!("{msg}");
                    let _ = tokio::time::timeout(
                        Duration::from_millis(200),
                        wr.write_all(Response::error(msg).to_line().as_bytes()),
                    )
                    .await;
                    dropped = true;
                    break;
                }
                Err(broadcast::error::RecvError::Closed) => break,
            },
            n = rd.read(&mut scratch) => {
                // Input after subscribing is ignored; EOF or an error ends it.
                if !matches!(n, Ok(k) if k > 0) {
                    break;
                }
            }
            _ = shutdown.changed() => break,
        }
    }
    handle.subscriber_removed(dropped);
}
