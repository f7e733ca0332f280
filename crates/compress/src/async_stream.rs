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
use std::sync::{Arc, Mutex, MutexGuard};
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

fn take_pending(p: &Mutex<Vec<u8>>, out: &mut Vec<u8>) {
    let mut p = p.lock().unwrap_or_else(|e| e.into_inner());
    out.append(&mut p);
}

/// The sending half.
pub struct AsyncSender<W> {
    endpoint: Arc<Mutex<Endpoint>>,
    writer: Arc<tokio::sync::Mutex<W>>,
    pending: PendingReplies,
    out: Vec<u8>,
}

/// The receiving half.
pub struct AsyncReceiver<R, W> {
    endpoint: Arc<Mutex<Endpoint>>,
    writer: Arc<tokio::sync::Mutex<W>>,
    pending: PendingReplies,
    reader: R,
    frames: FrameReader,
    replies: Vec<u8>,
}

/// An async message stream over a reader and a writer (e.g. the halves of a
/// `TcpStream::into_split`).
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
        Ok(AsyncMessageStream {
            sender: AsyncSender {
                endpoint: endpoint.clone(),
                writer: writer.clone(),
                pending: pending.clone(),
                out: Vec::new(),
            },
            receiver: AsyncReceiver {
                endpoint,
                writer,
                pending,
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
            w.write_all(&self.out).await?;
            w.flush().await?;
        }
        lock(&self.endpoint).run_deferred_sample();
        Ok(())
    }

    /// Flushes and shuts the write side down (the peer sees a clean end).
    pub async fn shutdown(&mut self) -> Result<(), WireError> {
        let mut w = self.writer.lock().await;
        w.flush().await?;
        w.shutdown().await?;
        Ok(())
    }

    /// A shared handle on the stream's state (stats, reconfiguration).
    pub fn handle(&self) -> StreamHandle {
        StreamHandle(self.endpoint.clone())
    }
}

impl<R: AsyncRead + Unpin, W: AsyncWrite + Unpin> AsyncReceiver<R, W> {
    /// The next message; `Ok(None)` at a clean end of stream.
    pub async fn recv_msg(&mut self) -> Result<Option<Vec<u8>>, WireError> {
        loop {
            let frame = match self.frames.step()? {
                Some(f) => f,
                None => {
                    self.flush_replies().await;
                    fill(&mut self.frames, &mut self.reader).await?;
                    if self.frames.len == 0 {
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

    /// Writes the probe replies the sender has not taken yet. Best effort:
    /// after our side shut its writing down (a half-close) the peer just
    /// misses an RTT sample.
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
        if w.write_all(&self.replies).await.is_ok() {
            let _ = w.flush().await;
        }
    }

    /// A shared handle on the stream's state (stats, reconfiguration).
    pub fn handle(&self) -> StreamHandle {
        StreamHandle(self.endpoint.clone())
    }
}
