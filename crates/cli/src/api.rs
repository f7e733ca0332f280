//! `hwqos api`: a running monitor's live API from the command line — the
//! requests that only read (status, window, subscribe, event sets) sent with
//! [`hwqos_pmu::api::ApiClient`], each answer printed as the API's own JSON
//! line (schema `hwqos.api/1`, see the `hwqos_api` crate), so what is printed
//! is what a client of the socket receives: `{"type":"status",…}`,
//! `{"type":"frame","frame":{…}}` per frame, `{"type":"end","count":N}` after
//! a window.

use crate::args::{ApiArgs, ApiFilterArgs, ApiRequest};
use crate::error::usage;
use anyhow::{Context, Result};
use hwqos_pmu::api::{ApiClient, ApiError, FrameFilter, Response, SCHEMA};
use std::io::Write;
use std::time::Duration;

/// The filter of `--scope`/`--metric`; a bad pattern is a usage error.
fn filter(f: &ApiFilterArgs) -> Result<FrameFilter> {
    FrameFilter::new(&f.scopes, &f.metrics).map_err(|e| usage(e.to_string()))
}

/// Writes one response line; `Ok(false)` when the reader went away (a closed
/// pipe, `hwqos api subscribe | head`): not an error, just the end.
fn emit(out: &mut dyn Write, r: &Response) -> Result<bool> {
    match out
        .write_all(r.to_line().as_bytes())
        .and_then(|()| out.flush())
    {
        Ok(()) => Ok(true),
        Err(e) if e.kind() == std::io::ErrorKind::BrokenPipe => Ok(false),
        Err(e) => Err(e).context("writing to standard output"),
    }
}

/// An API failure, with a hint for the usual cause of each.
fn failure(args: &ApiArgs, e: ApiError) -> anyhow::Error {
    let socket = args.socket.display();
    match e {
        ApiError::Connect { .. } => anyhow::anyhow!(
            "{e}; --socket PATH (or HWQOS_MONITOR_SOCKET) names another one: the \
             monitor's [api] socket"
        ),
        ApiError::Server(m) => anyhow::anyhow!("the monitor at {socket} answered: {m}"),
        ApiError::Io(io)
            if matches!(
                io.kind(),
                std::io::ErrorKind::WouldBlock | std::io::ErrorKind::TimedOut
            ) =>
        {
            anyhow::anyhow!(
                "the monitor at {socket} sent nothing for {} s (--timeout)",
                args.timeout
            )
        }
        other => anyhow::anyhow!("monitor API at {socket}: {other}"),
    }
}

/// Runs `hwqos api`, printing to `out`; returns the exit code (0).
pub fn run(args: &ApiArgs, out: &mut dyn Write) -> Result<u8> {
    if !(args.timeout.is_finite() && args.timeout >= 0.0) {
        return Err(usage(format!(
            "--timeout {}: expected seconds ≥ 0",
            args.timeout
        )));
    }
    // Patterns first: a typo is a usage error whether or not a monitor runs.
    let frame_filter = match &args.request {
        ApiRequest::Window { filter: f, .. } | ApiRequest::Subscribe { filter: f, .. } => {
            Some(filter(f)?)
        }
        ApiRequest::Status | ApiRequest::EventSets => None,
    };
    if let ApiRequest::Window {
        seconds: Some(s), ..
    } = &args.request
    {
        if !(s.is_finite() && *s >= 0.0) {
            return Err(usage(format!("--seconds {s}: expected seconds ≥ 0")));
        }
    }
    let mut client = ApiClient::connect(&args.socket).map_err(|e| failure(args, e))?;
    let timeout = (args.timeout > 0.0).then(|| Duration::from_secs_f64(args.timeout));
    client
        .set_read_timeout(timeout)
        .map_err(|e| failure(args, e))?;
    if args.hello {
        let h = client.hello();
        let hello = Response::Hello {
            schema: SCHEMA.to_string(),
            node: h.node.clone(),
            version: h.version.clone(),
            rate_hz: h.rate_hz,
        };
        if !emit(out, &hello)? {
            return Ok(0);
        }
    }
    match &args.request {
        ApiRequest::Status => {
            let s = client.status().map_err(|e| failure(args, e))?;
            emit(out, &Response::Status(Box::new(s)))?;
        }
        ApiRequest::EventSets => {
            let e = client.get_event_sets().map_err(|e| failure(args, e))?;
            emit(out, &Response::EventSets(e))?;
        }
        ApiRequest::Window {
            frames, seconds, ..
        } => {
            let f = frame_filter.unwrap_or_else(FrameFilter::all);
            let list = client
                .window(*seconds, *frames, f)
                .map_err(|e| failure(args, e))?;
            let count = list.len();
            for frame in list {
                if !emit(out, &Response::Frame { frame })? {
                    return Ok(0);
                }
            }
            emit(out, &Response::End { count })?;
        }
        ApiRequest::Subscribe { count, .. } => {
            let f = frame_filter.unwrap_or_else(FrameFilter::all);
            let sub = client.subscribe(f).map_err(|e| failure(args, e))?;
            if *count == Some(0) {
                return Ok(0);
            }
            for (n, item) in sub.enumerate() {
                let frame = item.map_err(|e| failure(args, e))?;
                // Stop right after the last frame asked for, without waiting
                // for the next tick.
                if !emit(out, &Response::Frame { frame })? || count.is_some_and(|c| n + 1 >= c) {
                    break;
                }
            }
        }
    }
    Ok(0)
}
