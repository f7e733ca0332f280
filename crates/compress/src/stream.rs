//! Blocking message streams over any `Read + Write` (a `TcpStream`, a Unix
//! socket, a pipe pair): [`MessageStream::send_msg`] / [`MessageStream::recv_msg`].
//!
//! Each stream owns its [`Endpoint`] (learning, policy, throttle), so a
//! process can run many independent streams. Set `TCP_NODELAY` on TCP
//! sockets: a probe and its message leave in one write, but Nagle would hold
//! back small messages waiting for an ACK.

use crate::codec::Registry;
use crate::endpoint::{Endpoint, StreamConfig, StreamStats};
use crate::wire::{FrameDecoder, RawFrame, WireError};
use std::io::{ErrorKind, Read, Write};
use std::sync::Arc;

const READ_CHUNK: usize = 16 * 1024;

/// Reads whole frames from a byte source with bounded buffering.
pub(crate) struct FrameReader {
    pub(crate) decoder: FrameDecoder,
    pub(crate) buf: Box<[u8]>,
    pub(crate) pos: usize,
    pub(crate) len: usize,
}

impl FrameReader {
    pub(crate) fn new(decoder: FrameDecoder) -> Self {
        FrameReader {
            decoder,
            buf: vec![0u8; READ_CHUNK].into_boxed_slice(),
            pos: 0,
            len: 0,
        }
    }

    /// Feeds buffered bytes to the decoder; returns a frame once complete.
    pub(crate) fn step(&mut self) -> Result<Option<RawFrame>, WireError> {
        while self.pos < self.len {
            let n = self.decoder.push(&self.buf[self.pos..self.len])?;
            self.pos += n;
            if let Some(f) = self.decoder.take_frame() {
                return Ok(Some(f));
            }
        }
        Ok(None)
    }

    /// End of input: clean at a frame boundary, else truncation.
    pub(crate) fn eof(&self) -> Result<(), WireError> {
        self.decoder.finish()
    }

    fn read_frame<R: Read>(&mut self, r: &mut R) -> Result<Option<RawFrame>, WireError> {
        loop {
            if let Some(f) = self.step()? {
                return Ok(Some(f));
            }
            if !self.fill(r)? {
                return Ok(None);
            }
        }
    }

    /// Reads more bytes (blocking); false at the end of input (clean or an error).
    fn fill<R: Read>(&mut self, r: &mut R) -> Result<bool, WireError> {
        self.pos = 0;
        self.len = match r.read(&mut self.buf) {
            Ok(0) => {
                self.len = 0;
                self.eof()?;
                return Ok(false);
            }
            Ok(n) => n,
            Err(e) if e.kind() == ErrorKind::Interrupted => 0,
            Err(e) => return Err(e.into()),
        };
        Ok(true)
    }
}

/// A blocking message stream over any `Read + Write` (a `TcpStream`, a
/// `UnixStream`): [`MessageStream::handshake`] on both ends (each end sends
/// its hello, then reads the peer's, so the ends run concurrently), then
/// [`MessageStream::send_msg`] and [`MessageStream::recv_msg`]. Over TCP on
/// loopback, with a declared slow link so that compressing pays:
///
/// ```
/// use hwqos_compress::{MessageStream, Registry, StreamConfig, WireError};
/// use std::net::{TcpListener, TcpStream};
/// use std::sync::Arc;
///
/// # fn main() -> Result<(), WireError> {
/// let config = StreamConfig { link_ns_per_byte: Some(800.0), throttle: None, ..Default::default() };
/// let registry = Arc::new(Registry::standard());
/// let listener = TcpListener::bind("127.0.0.1:0")?;
/// let addr = listener.local_addr()?;
/// let (cfg, reg) = (config.clone(), registry.clone());
/// let server = std::thread::spawn(move || -> Result<u64, WireError> {
///     let (tcp, _) = listener.accept()?;
///     tcp.set_nodelay(true)?;
///     let mut s = MessageStream::handshake(tcp, cfg, reg)?;
///     let mut bytes = 0;
///     while let Some(msg) = s.recv_msg()? {
///         bytes += msg.len() as u64;
///     }
///     Ok(bytes)
/// });
/// let tcp = TcpStream::connect(addr)?;
/// tcp.set_nodelay(true)?;
/// let mut s = MessageStream::handshake(tcp, config, registry)?;
/// let record = b"GET /index.html HTTP/1.1\r\nHost: example.com\r\n\r\n".repeat(64);
/// for _ in 0..50 {
///     s.send_msg(&record)?;
/// }
/// // Half-close, then read to the end: the peer's probe replies still in
/// // flight must be read, or closing with them unread resets the connection.
/// s.get_ref().shutdown(std::net::Shutdown::Write)?;
/// assert_eq!(s.recv_msg()?, None);
/// let stats = s.stats();
/// assert_eq!(server.join().unwrap()?, 50 * record.len() as u64);
/// assert_eq!(stats.app_bytes_sent, 50 * record.len() as u64);
/// # #[cfg(any(feature = "zstd", feature = "lz4", feature = "snappy"))]
/// assert!(stats.wire_bytes_sent < stats.app_bytes_sent / 2);
/// # Ok(())
/// # }
/// ```
pub struct MessageStream<S: Read + Write> {
    io: S,
    endpoint: Endpoint,
    reader: FrameReader,
    out: Vec<u8>,
    replies: Vec<u8>,
}

impl<S: Read + Write> MessageStream<S> {
    /// Runs the handshake (both ends send their hello, then read the peer's).
    pub fn handshake(
        io: S,
        config: StreamConfig,
        registry: Arc<Registry>,
    ) -> Result<Self, WireError> {
        Self::with_endpoint(io, Endpoint::new(config, registry))
    }

    /// Runs the handshake with a prepared endpoint (custom CPU-load source).
    pub fn with_endpoint(mut io: S, mut endpoint: Endpoint) -> Result<Self, WireError> {
        let mut out = Vec::new();
        endpoint.write_hello(&mut out);
        io.write_all(&out)?;
        io.flush()?;
        let mut reader = FrameReader::new(FrameDecoder::new(endpoint.limits()));
        let hello = reader
            .read_frame(&mut io)?
            .ok_or(WireError::Closed(" during the handshake"))?;
        endpoint.accept_hello(hello)?;
        Ok(MessageStream {
            io,
            endpoint,
            reader,
            out: Vec::new(),
            replies: Vec::new(),
        })
    }

    /// Sends one message (with any probe replies still pending in front of it).
    pub fn send_msg(&mut self, msg: &[u8]) -> Result<(), WireError> {
        self.out.clear();
        let pending = self.replies.len();
        self.out.append(&mut self.replies);
        if let Err(e) = self.endpoint.encode(msg, &mut self.out) {
            self.replies.extend_from_slice(&self.out[..pending]);
            return Err(e);
        }
        self.endpoint.stamp_replies(&mut self.out[..pending]);
        self.io.write_all(&self.out)?;
        self.io.flush()?;
        self.endpoint.run_deferred_sample();
        Ok(())
    }

    /// Receives the next message; `Ok(None)` when the peer closed the stream
    /// at a message boundary.
    ///
    /// Probe replies are not written on their own: they ride in front of the
    /// next [`send_msg`](Self::send_msg) (no extra write and no extra segment
    /// for the peer to read), and are written alone only before this call
    /// would block waiting for input, so a peer's probe is never held longer
    /// than this end takes to run out of work.
    pub fn recv_msg(&mut self) -> Result<Option<Vec<u8>>, WireError> {
        loop {
            let frame = match self.reader.step()? {
                Some(f) => f,
                None => {
                    self.flush_replies();
                    if !self.reader.fill(&mut self.io)? {
                        return Ok(None);
                    }
                    continue;
                }
            };
            let msg = self.endpoint.decode(frame, &mut self.replies)?;
            if let Some(m) = msg {
                return Ok(Some(m));
            }
        }
    }

    /// Writes pending probe replies now. Best effort: after a half-close the
    /// peer only misses an RTT sample.
    fn flush_replies(&mut self) {
        if !self.replies.is_empty() {
            self.endpoint.stamp_replies(&mut self.replies);
            if self.io.write_all(&self.replies).is_ok() {
                let _ = self.io.flush();
            }
            self.replies.clear();
        }
    }

    /// The stream's counters and estimates now.
    pub fn stats(&self) -> StreamStats {
        self.endpoint.stats()
    }

    /// The stream's protocol state (policy, learner, limits).
    pub fn endpoint(&self) -> &Endpoint {
        &self.endpoint
    }

    /// The stream's protocol state, e.g. to change its configuration.
    pub fn endpoint_mut(&mut self) -> &mut Endpoint {
        &mut self.endpoint
    }

    /// The underlying transport.
    pub fn get_ref(&self) -> &S {
        &self.io
    }

    /// The underlying transport; bytes already read past the last message
    /// are lost.
    pub fn into_inner(self) -> S {
        self.io
    }
}
