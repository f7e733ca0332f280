//! Async (tokio) message streams. [`AsyncMessageStream`] offers
//! `send_msg`/`recv_msg` like the blocking stream; [`AsyncMessageStream::into_split`]
//! gives a sender and a receiver that can live in different tasks.
//!
//! Probe replies ride in front of the next message the sender writes, like
//! in the blocking stream; the receiver writes those still pending itself
//! (through the shared writer) before it waits for more input, so a peer's
//! probe is never held longer than this end takes to run out of received
//! frames.

use crate::codec::Registry;
use crate::endpoint::{Endpoint, StreamConfig, StreamStats};
use crate::stream::FrameReader;
use crate::wire::{FrameDecoder, WireError};
use std::io::ErrorKind;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Duration;
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt};

fn lock(m: &Mutex<Endpoint>) -> MutexGuard<'_, Endpoint> {
    m.lock().unwrap_or_else(|e| e.into_inner())
}

/// A shared handle on a stream's state, e.g. for metrics or reconfiguration.
#[derive(Clone)]
pub struct StreamHandle(Arc<Mutex<Endpoint>>);

impl StreamHandle {
    /// The stream's counters and estimates now.
    pub fn stats(&self) -> StreamStats {
        lock(&self.0).stats()
    }

    /// Runs `f` on the endpoint (set the policy, the CPU target, …).
    pub fn with<T>(&self, f: impl FnOnce(&mut Endpoint) -> T) -> T {
        f(&mut lock(&self.0))
    }
}

/// Probe replies waiting for the next write of either half.
type PendingReplies = Arc<Mutex<Vec<u8>>>;

/// The peer reset the connection, seen by either half (sticky: the half
/// that reads the reset may not be the one that reports it).
#[derive(Clone, Default)]
struct ResetFlag(Arc<AtomicBool>);

impl ResetFlag {
    fn is_set(&self) -> bool {
        self.0.load(Ordering::Relaxed)
    }

    /// [`WireError::Reset`] (and remembers the reset).
    fn error(&self, endpoint: &Mutex<Endpoint>) -> WireError {
        self.0.store(true, Ordering::Relaxed);
        WireError::Reset {
            messages: lock(endpoint).stats().messages_received,
        }
    }

    /// `e`, or [`WireError::Reset`] when the connection was reset (now or
    /// before: a reset explains a truncated frame or a broken pipe).
    fn classify(&self, e: WireError, endpoint: &Mutex<Endpoint>) -> WireError {
        let reset = matches!(&e, WireError::Io(e) if e.kind() == ErrorKind::ConnectionReset);
        if reset || self.is_set() {
            self.error(endpoint)
        } else {
            e
        }
    }
}

fn take_pending(p: &Mutex<Vec<u8>>, out: &mut Vec<u8>) {
    let mut p = p.lock().unwrap_or_else(|e| e.into_inner());
    out.append(&mut p);
}

/// The sending half.
pub struct AsyncSender<W> {
    endpoint: Arc<Mutex<Endpoint>>,
    writer: Arc<tokio::sync::Mutex<W>>,
    pending: PendingReplies,
    reset: ResetFlag,
    out: Vec<u8>,
}

/// The receiving half.
pub struct AsyncReceiver<R, W> {
    endpoint: Arc<Mutex<Endpoint>>,
    writer: Arc<tokio::sync::Mutex<W>>,
    pending: PendingReplies,
    reset: ResetFlag,
    reader: R,
    frames: FrameReader,
    replies: Vec<u8>,
}

/// An async message stream over a reader and a writer (e.g. the halves of a
/// `TcpStream::into_split`).
///
/// **Ending a stream.** Closing a socket that still holds unread bytes (the
/// peer's probe replies arrive at any time) makes the kernel reset the
/// connection, which can discard what this end wrote and the peer has not
/// read yet. [`finish`](Self::finish) avoids that (shut the writing half
/// down, read to the peer's end, close); split halves do the same with
/// [`AsyncSender::shutdown`] and [`AsyncReceiver::finish`] (or by reading
/// `recv_msg` to `Ok(None)`). **Dropping** cannot wait (there is no async
/// drop): tokio's owned write halves shut down when dropped, but bytes
/// still unread then reset the connection, so end a stream with `finish`.
/// A reset is never a clean end on the receiving side: `recv_msg` returns
/// [`WireError::Reset`], also when the reset was first seen while writing
/// probe replies or sending.
pub struct AsyncMessageStream<R, W> {
    sender: AsyncSender<W>,
    receiver: AsyncReceiver<R, W>,
}

impl<R: AsyncRead + Unpin, W: AsyncWrite + Unpin> AsyncMessageStream<R, W> {
    /// Runs the handshake.
    pub async fn handshake(
        reader: R,
        writer: W,
        config: StreamConfig,
        registry: Arc<Registry>,
    ) -> Result<Self, WireError> {
        Self::with_endpoint(reader, writer, Endpoint::new(config, registry)).await
    }

    /// Runs the handshake with a prepared endpoint.
    pub async fn with_endpoint(
        mut reader: R,
        mut writer: W,
        mut endpoint: Endpoint,
    ) -> Result<Self, WireError> {
        let mut out = Vec::new();
        endpoint.write_hello(&mut out);
        writer.write_all(&out).await?;
        writer.flush().await?;
        let mut frames = FrameReader::new(FrameDecoder::new(endpoint.limits()));
        let hello = read_frame(&mut frames, &mut reader)
            .await?
            .ok_or(WireError::Closed(" during the handshake"))?;
        endpoint.accept_hello(hello)?;
        let endpoint = Arc::new(Mutex::new(endpoint));
        let writer = Arc::new(tokio::sync::Mutex::new(writer));
        let pending = PendingReplies::default();
        let reset = ResetFlag::default();
        Ok(AsyncMessageStream {
            sender: AsyncSender {
                endpoint: endpoint.clone(),
                writer: writer.clone(),
                pending: pending.clone(),
                reset: reset.clone(),
                out: Vec::new(),
            },
            receiver: AsyncReceiver {
                endpoint,
                writer,
                pending,
                reset,
                reader,
                frames,
                replies: Vec::new(),
            },
        })
    }

    /// Sends one message, compressed with the policy's codec; see [`AsyncSender::send_msg`].
    pub async fn send_msg(&mut self, msg: &[u8]) -> Result<(), WireError> {
        self.sender.send_msg(msg).await
    }

    /// The next message, decompressed; `Ok(None)` at a clean end of stream.
    pub async fn recv_msg(&mut self) -> Result<Option<Vec<u8>>, WireError> {
        self.receiver.recv_msg().await
    }

    /// Ends the stream gracefully: [`AsyncSender::shutdown`] (the peer reads
    /// every message sent, then a clean end), then [`AsyncReceiver::finish`]
    /// (reads what the peer still sends up to its end, at most `timeout`).
    /// `Ok(n)`: `n` messages the peer sent that were not received were
    /// discarded.
    pub async fn finish(self, timeout: Duration) -> Result<u64, WireError> {
        let (mut tx, rx) = self.into_split();
        tx.shutdown().await?;
        rx.finish(timeout).await
    }

    /// A shared handle on the stream's state that outlives a split.
    pub fn handle(&self) -> StreamHandle {
        self.sender.handle()
    }

    /// The stream's counters and estimates now.
    pub fn stats(&self) -> StreamStats {
        self.handle().stats()
    }

    /// The sending and receiving halves, usable from different tasks; they
    /// share the stream's state (the receiver writes probe replies through
    /// the shared writer).
    pub fn into_split(self) -> (AsyncSender<W>, AsyncReceiver<R, W>) {
        (self.sender, self.receiver)
    }
}

async fn read_frame<R: AsyncRead + Unpin>(
    frames: &mut FrameReader,
    r: &mut R,
) -> Result<Option<crate::wire::RawFrame>, WireError> {
    loop {
        if let Some(f) = frames.step()? {
            return Ok(Some(f));
        }
        fill(frames, r).await?;
        if frames.len == 0 {
            return Ok(None);
        }
    }
}

/// Reads more input into `frames`; `len == 0` afterwards at a clean end.
async fn fill<R: AsyncRead + Unpin>(frames: &mut FrameReader, r: &mut R) -> Result<(), WireError> {
    {
        frames.pos = 0;
        frames.len = 0;
        let n = r.read(&mut frames.buf).await?;
        if n == 0 {
            frames.eof()?;
        }
        frames.len = n;
        Ok(())
    }
}

impl<W: AsyncWrite + Unpin> AsyncSender<W> {
    /// Sends one message, compressed with the policy's codec, with any probe
    /// replies still pending in front of it. Fails with
    /// [`WireError::MessageTooLarge`] beyond the negotiated limit.
    pub async fn send_msg(&mut self, msg: &[u8]) -> Result<(), WireError> {
        if self.reset.is_set() {
            return Err(self.reset.error(&self.endpoint));
        }
        self.out.clear();
        take_pending(&self.pending, &mut self.out);
        let pending = self.out.len();
        let encoded = {
            let mut ep = lock(&self.endpoint);
            let r = ep.encode(msg, &mut self.out);
            if r.is_ok() {
                ep.stamp_replies(&mut self.out[..pending]);
            }
            r
        };
        if let Err(e) = encoded {
            // Keep the replies for the next write.
            let mut p = self.pending.lock().unwrap_or_else(|e| e.into_inner());
            let mut kept = self.out[..pending].to_vec();
            kept.append(&mut p);
            *p = kept;
            return Err(e);
        }
        {
            let mut w = self.writer.lock().await;
            let written = match w.write_all(&self.out).await {
                Ok(()) => w.flush().await,
                Err(e) => Err(e),
            };
            if let Err(e) = written {
                return Err(self.reset.classify(e.into(), &self.endpoint));
            }
        }
        lock(&self.endpoint).run_deferred_sample();
        Ok(())
    }

    /// Flushes and shuts the write side down (the peer sees a clean end
    /// after every message sent). Probe replies still pending are written
    /// first.
    pub async fn shutdown(&mut self) -> Result<(), WireError> {
        self.out.clear();
        take_pending(&self.pending, &mut self.out);
        let mut w = self.writer.lock().await;
        let done = async {
            if !self.out.is_empty() {
                lock(&self.endpoint).stamp_replies(&mut self.out);
                w.write_all(&self.out).await?;
            }
            w.flush().await?;
            w.shutdown().await
        }
        .await;
        done.map_err(|e| self.reset.classify(e.into(), &self.endpoint))
    }

    /// A shared handle on the stream's state (stats, reconfiguration).
    pub fn handle(&self) -> StreamHandle {
        StreamHandle(self.endpoint.clone())
    }
}

impl<R: AsyncRead + Unpin, W: AsyncWrite + Unpin> AsyncReceiver<R, W> {
    /// The next message; `Ok(None)` at a clean end of stream. A connection
    /// the peer reset is [`WireError::Reset`] (after the messages that
    /// arrived before it), never `Ok(None)`.
    pub async fn recv_msg(&mut self) -> Result<Option<Vec<u8>>, WireError> {
        loop {
            let frame = match self.frames.step()? {
                Some(f) => f,
                None => {
                    self.flush_replies().await;
                    if let Err(e) = fill(&mut self.frames, &mut self.reader).await {
                        return Err(self.reset.classify(e, &self.endpoint));
                    }
                    if self.frames.len == 0 {
                        if self.reset.is_set() {
                            return Err(self.reset.error(&self.endpoint));
                        }
                        return Ok(None);
                    }
                    continue;
                }
            };
            self.replies.clear();
            let msg = lock(&self.endpoint).decode(frame, &mut self.replies)?;
            if !self.replies.is_empty() {
                let mut p = self.pending.lock().unwrap_or_else(|e| e.into_inner());
                p.extend_from_slice(&self.replies);
            }
            if let Some(m) = msg {
                return Ok(Some(m));
            }
        }
    }

    /// Reads and discards what the peer still sends up to its end of stream,
    /// at most `timeout`, after this end's [`AsyncSender::shutdown`]; then
    /// the reading half can be dropped without resetting the connection.
    /// `Ok(n)`: `n` messages the peer sent were discarded unread. Errors:
    /// the peer did not end its side within `timeout` (an I/O error of kind
    /// `TimedOut`), [`WireError::Reset`], or a malformed frame.
    pub async fn finish(mut self, timeout: Duration) -> Result<u64, WireError> {
        let mut discarded = 0;
        let drain = async {
            loop {
                match self.recv_msg().await? {
                    Some(_) => discarded += 1,
                    None => return Ok::<(), WireError>(()),
                }
            }
        };
        match tokio::time::timeout(timeout, drain).await {
            Ok(r) => r.map(|()| discarded),
            Err(_) => Err(WireError::Io(std::io::Error::new(
                ErrorKind::TimedOut,
                format!("the peer did not end its side of the stream within {timeout:?} of this end finishing"),
            ))),
        }
    }

    /// Writes the probe replies the sender has not taken yet. Best effort
    /// (after our side shut its writing down, a half-close, the peer just
    /// misses an RTT sample), except that a reset is remembered: the write
    /// may be what reads the reset, and the next read would then see a
    /// plain end of stream.
    async fn flush_replies(&mut self) {
        self.replies.clear();
        take_pending(&self.pending, &mut self.replies);
        if self.replies.is_empty() {
            return;
        }
        // Never wait for the writer here: while the sender holds it, blocked
        // on a full link whose peer is itself waiting to write its replies,
        // neither end would read again (a deadlock of two relays under load
        // in both directions). A busy sender takes the replies with its next
        // message; the hold time stamped then keeps the peer's RTT honest.
        let Ok(mut w) = self.writer.try_lock() else {
            let mut p = self.pending.lock().unwrap_or_else(|e| e.into_inner());
            let mut kept = std::mem::take(&mut self.replies);
            kept.append(&mut p);
            *p = kept;
            return;
        };
        lock(&self.endpoint).stamp_replies(&mut self.replies);
        let written = match w.write_all(&self.replies).await {
            Ok(()) => w.flush().await,
            Err(e) => Err(e),
        };
        if matches!(&written, Err(e) if e.kind() == ErrorKind::ConnectionReset) {
            self.reset.0.store(true, Ordering::Relaxed);
        }
    }

    /// A shared handle on the stream's state (stats, reconfiguration).
    pub fn handle(&self) -> StreamHandle {
        StreamHandle(self.endpoint.clone())
    }
}
