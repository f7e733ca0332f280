//! Blocking message streams over a [`Transport`] (a `TcpStream`, a Unix
//! socket; any `Read + Write` with `impl Transport for T {}`): [`MessageStream::send_msg`] / [`MessageStream::recv_msg`].
//!
//! Each stream owns its [`Endpoint`] (learning, policy, throttle), so a
//! process can run many independent streams. Set `TCP_NODELAY` on TCP
//! sockets: a probe and its message leave in one write, but Nagle would hold
//! back small messages waiting for an ACK.

use crate::codec::Registry;
use crate::endpoint::{Endpoint, StreamConfig, StreamStats};
use crate::wire::{FrameDecoder, RawFrame, WireError};
use std::io::{self, ErrorKind, Read, Write};
use std::net::{Shutdown, TcpStream};
use std::os::unix::net::UnixStream;
use std::sync::Arc;
use std::time::{Duration, Instant};

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

/// How long dropping a [`MessageStream`] waits for the peer to end its
/// side (see [`MessageStream::finish`]).
pub const DROP_DRAIN_TIMEOUT: Duration = Duration::from_secs(1);

/// A byte transport a [`MessageStream`] runs over: `Read + Write` plus the
/// two things a graceful close needs, shutting the writing half down (the
/// peer then reads a clean end of stream after everything written) and a
/// read timeout (to bound the wait for the peer's end).
///
/// Implemented for `TcpStream` and `UnixStream`. Any other `Read + Write`
/// can use the defaults (`impl Transport for MyPipe {}`): both report
/// `Unsupported`, and such a stream is then closed by just dropping it.
pub trait Transport: Read + Write {
    /// Shuts the writing half down (`shutdown(SHUT_WR)`), leaving the
    /// reading half open.
    fn shutdown_write(&mut self) -> io::Result<()> {
        Err(io::Error::new(ErrorKind::Unsupported, "no half-close"))
    }

    /// Sets how long a read may block (`None`: forever).
    fn set_read_timeout(&mut self, timeout: Option<Duration>) -> io::Result<()> {
        let _ = timeout;
        Err(io::Error::new(ErrorKind::Unsupported, "no read timeout"))
    }
}

impl Transport for TcpStream {
    fn shutdown_write(&mut self) -> io::Result<()> {
        self.shutdown(Shutdown::Write)
    }

    fn set_read_timeout(&mut self, timeout: Option<Duration>) -> io::Result<()> {
        TcpStream::set_read_timeout(self, timeout)
    }
}

impl Transport for UnixStream {
    fn shutdown_write(&mut self) -> io::Result<()> {
        self.shutdown(Shutdown::Write)
    }

    fn set_read_timeout(&mut self, timeout: Option<Duration>) -> io::Result<()> {
        UnixStream::set_read_timeout(self, timeout)
    }
}

/// A blocking message stream over a [`Transport`] (a `TcpStream`, a
/// `UnixStream`): [`MessageStream::handshake`] on both ends (each end sends
/// its hello, then reads the peer's, so the ends run concurrently), then
/// [`MessageStream::send_msg`] and [`MessageStream::recv_msg`], and at the
/// end [`MessageStream::finish`]. Over TCP on loopback, with a declared slow
/// link so that compressing pays:
///
/// ```
/// use hwqos_compress::{MessageStream, Registry, StreamConfig, WireError};
/// use std::net::{TcpListener, TcpStream};
/// use std::sync::Arc;
/// use std::time::Duration;
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
/// let stats = s.stats();
/// // Half-close, read the peer's probe replies up to its end, close.
/// assert_eq!(s.finish(Duration::from_secs(10))?, 0);
/// assert_eq!(server.join().unwrap()?, 50 * record.len() as u64);
/// assert_eq!(stats.app_bytes_sent, 50 * record.len() as u64);
/// # #[cfg(any(feature = "zstd", feature = "lz4", feature = "snappy"))]
/// assert!(stats.wire_bytes_sent < stats.app_bytes_sent / 2);
/// # Ok(())
/// # }
/// ```
///
/// **Ending a stream.** Closing a socket that still holds unread bytes (the
/// peer's probe replies arrive at any time) makes the kernel reset the
/// connection, which can discard what this end wrote and the peer has not
/// read yet. [`finish`](Self::finish) avoids that: it shuts the writing
/// half down (the peer reads everything, then a clean end), reads and
/// discards what the peer still sends up to its end, then closes.
/// **Dropping** the stream does the same, best effort, waiting at most
/// [`DROP_DRAIN_TIMEOUT`] for the peer's end (then it closes anyway, with
/// nothing left unread, so no reset); [`into_inner`](Self::into_inner)
/// does none of this. On the receiving side a reset is never a clean end:
/// `recv_msg` returns [`WireError::Reset`], also when the reset was first
/// seen while writing probe replies.
pub struct MessageStream<S: Transport> {
    /// `None` only after `into_inner`.
    io: Option<S>,
    endpoint: Endpoint,
    reader: FrameReader,
    out: Vec<u8>,
    replies: Vec<u8>,
    /// The peer reset the connection (sticky: reported by every later call).
    reset: bool,
    /// `finish` ran (or `into_inner`): nothing left for `Drop`.
    closed: bool,
}

/// `ECONNRESET`, as an I/O error or wrapped in a [`WireError`].
fn is_reset(e: &WireError) -> bool {
    matches!(e, WireError::Io(e) if e.kind() == ErrorKind::ConnectionReset)
}

impl<S: Transport> MessageStream<S> {
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
            io: Some(io),
            endpoint,
            reader,
            out: Vec::new(),
            replies: Vec::new(),
            reset: false,
            closed: false,
        })
    }

    fn io(&mut self) -> &mut S {
        self.io
            .as_mut()
            .expect("the transport is there until into_inner")
    }

    /// The error for a reset connection (and remembers it).
    fn reset_error(&mut self) -> WireError {
        self.reset = true;
        WireError::Reset {
            messages: self.endpoint.stats().messages_received,
        }
    }

    /// `e`, or [`WireError::Reset`] when the connection was reset (now or
    /// before: a reset explains a truncated frame or a broken pipe).
    fn classify(&mut self, e: WireError) -> WireError {
        if self.reset || is_reset(&e) {
            self.reset_error()
        } else {
            e
        }
    }

    /// Sends one message (with any probe replies still pending in front of it).
    pub fn send_msg(&mut self, msg: &[u8]) -> Result<(), WireError> {
        if self.reset {
            return Err(self.reset_error());
        }
        self.out.clear();
        let pending = self.replies.len();
        self.out.append(&mut self.replies);
        if let Err(e) = self.endpoint.encode(msg, &mut self.out) {
            self.replies.extend_from_slice(&self.out[..pending]);
            return Err(e);
        }
        self.endpoint.stamp_replies(&mut self.out[..pending]);
        let io = self
            .io
            .as_mut()
            .expect("the transport is there until into_inner");
        if let Err(e) = io.write_all(&self.out).and_then(|()| io.flush()) {
            return Err(self.classify(e.into()));
        }
        self.endpoint.run_deferred_sample();
        Ok(())
    }

    /// Receives the next message; `Ok(None)` when the peer closed the stream
    /// at a message boundary. A connection the peer reset is
    /// [`WireError::Reset`] (after the messages that arrived before it),
    /// never `Ok(None)`.
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
                    let io = self
                        .io
                        .as_mut()
                        .expect("the transport is there until into_inner");
                    match self.reader.fill(io) {
                        Ok(true) => continue,
                        Ok(false) if self.reset => return Err(self.reset_error()),
                        Ok(false) => return Ok(None),
                        Err(e) => return Err(self.classify(e)),
                    }
                }
            };
            let msg = self.endpoint.decode(frame, &mut self.replies)?;
            if let Some(m) = msg {
                return Ok(Some(m));
            }
        }
    }

    /// Writes pending probe replies now. Best effort (after a half-close the
    /// peer only misses an RTT sample), except that a reset is remembered:
    /// the write may be what reads the reset, and the next read would then
    /// see a plain end of stream.
    fn flush_replies(&mut self) {
        if !self.replies.is_empty() {
            self.endpoint.stamp_replies(&mut self.replies);
            let io = self
                .io
                .as_mut()
                .expect("the transport is there until into_inner");
            let written = io.write_all(&self.replies).and_then(|()| io.flush());
            if let Err(e) = written {
                if e.kind() == ErrorKind::ConnectionReset {
                    self.reset = true;
                }
            }
            self.replies.clear();
        }
    }

    /// Ends the stream gracefully: writes the probe replies still owed,
    /// shuts the writing half down (the peer reads every message sent, then
    /// a clean end of stream), then reads what the peer still sends until
    /// its end of stream, at most `timeout`, and closes. Reading to the
    /// peer's end matters: closing with bytes unread makes the kernel reset
    /// the connection, which can discard data the peer has not read yet.
    ///
    /// `Ok(n)`: the peer ended its side; `n` messages it sent that this end
    /// had not received were discarded (0 when the application read them
    /// all). Errors: the peer did not end its side within `timeout` (an I/O
    /// error of kind `TimedOut`; the stream is closed anyway, with nothing
    /// unread), [`WireError::Reset`], or a malformed frame. A transport that
    /// cannot half-close (see [`Transport`]) is just closed (`Ok(0)`); one
    /// without a read timeout waits for the peer's end without bound.
    pub fn finish(mut self, timeout: Duration) -> Result<u64, WireError> {
        self.close(timeout, false)
    }

    fn close(&mut self, timeout: Duration, dropping: bool) -> Result<u64, WireError> {
        self.closed = true;
        if self.io.is_none() {
            return Ok(0);
        }
        if self.reset {
            return Err(self.reset_error());
        }
        self.flush_replies();
        match self.io().shutdown_write() {
            Ok(()) => {}
            Err(e) if e.kind() == ErrorKind::Unsupported => return Ok(0),
            // Already shut down (by hand through `get_ref`) and the peer
            // closed too: what is left to read is the end of stream.
            Err(e) if e.kind() == ErrorKind::NotConnected => {}
            Err(e) => return Err(self.classify(e.into())),
        }
        let deadline = Instant::now() + timeout;
        let mut discarded = 0;
        loop {
            while let Some(frame) = self.reader.step()? {
                // Replies to the peer's probes can no longer be sent.
                let msg = self.endpoint.decode(frame, &mut self.replies)?;
                self.replies.clear();
                discarded += u64::from(msg.is_some());
            }
            let left = deadline.saturating_duration_since(Instant::now());
            if left.is_zero() {
                return Err(timed_out(timeout));
            }
            match self.io().set_read_timeout(Some(left)) {
                Ok(()) => {}
                // Dropping never blocks without bound.
                Err(e) if e.kind() == ErrorKind::Unsupported && dropping => return Ok(discarded),
                Err(e) if e.kind() == ErrorKind::Unsupported => {}
                Err(e) => return Err(e.into()),
            }
            let io = self.io.as_mut().expect("checked above");
            match self.reader.fill(io) {
                Ok(true) => {}
                Ok(false) => return Ok(discarded),
                Err(WireError::Io(e))
                    if matches!(e.kind(), ErrorKind::WouldBlock | ErrorKind::TimedOut) =>
                {
                    return Err(timed_out(timeout));
                }
                Err(e) => return Err(self.classify(e)),
            }
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
        self.io
            .as_ref()
            .expect("the transport is there until into_inner")
    }

    /// The underlying transport, as it is: no graceful close (see
    /// [`finish`](Self::finish)); bytes already read past the last message
    /// are lost.
    pub fn into_inner(mut self) -> S {
        self.closed = true;
        self.io
            .take()
            .expect("the transport is there until into_inner")
    }
}

fn timed_out(timeout: Duration) -> WireError {
    WireError::Io(io::Error::new(
        ErrorKind::TimedOut,
        format!(
            "the peer did not end its side of the stream within {timeout:?} of this end finishing"
        ),
    ))
}

/// Dropping a stream ends it like [`MessageStream::finish`], best effort,
/// waiting at most [`DROP_DRAIN_TIMEOUT`] for the peer's end.
impl<S: Transport> Drop for MessageStream<S> {
    fn drop(&mut self) {
        if !self.closed && !self.reset {
            let _ = self.close(DROP_DRAIN_TIMEOUT, true);
        }
    }
}
