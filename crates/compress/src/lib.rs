//! Adaptive message compression (thesis chapter 7): codecs behind one trait,
//! a versioned wire format, per-stream learning of codec and network rates,
//! selection policies and a PID throttle on CPU load.
//!
//! - [`codec`]: the [`Codec`] trait and the [`Registry`] of built-in codecs;
//! - [`history`]: stream codecs, whose context spans the stream's messages;
//! - [`wire`]: frame header, handshake, probes, and the bounded [`FrameDecoder`];
//! - [`learn`]: moving averages and the transmission-time prediction (eq. 7.6);
//! - [`policy`]: `one`, `round-robin`, `majority` and `adaptive`;
//! - [`throttle`]: CPU utilization from `/proc/stat` and the PID budget;
//! - [`endpoint`]: the per-stream send and receive procedures, without I/O;
//! - [`stream`], [`async_stream`]: blocking and tokio message streams;
//! - [`transport`]: what the transport says of the link (TCP_INFO backlog and delivery);
//! - [`datasets`]: the experiments' data sets (zeros, ones, realistic, random);
//! - `fuzz_checks`: the properties the fuzz targets and the corpus replay test check.
//!
//! The entry points are [`MessageStream`] (blocking, over any `Read + Write`)
//! and [`AsyncMessageStream`] (tokio, over a reader and a writer, splittable
//! into [`AsyncSender`] and [`AsyncReceiver`]): both ends exchange a hello that
//! negotiates the codecs both [`Registry`]s hold, the message limit and
//! checksums, then each `send_msg` picks a codec per [`PolicyKind`] under the
//! CPU budget of the throttle ([`ThrottleConfig`]) and `recv_msg` returns the
//! message as sent, or `Ok(None)` at a clean end of stream. The protocol logic
//! itself lives in [`Endpoint`], which does no I/O; [`StreamConfig`] configures
//! a stream and [`StreamStats`] reports on it. Errors from the peer's bytes are
//! [`WireError`]s; a codec's are [`CodecError`]s.
//!
//! A message stream pair over a socket pair, one end echoing:
//!
//! ```
//! use hwqos_compress::{MessageStream, Registry, StreamConfig, WireError};
//! use std::os::unix::net::UnixStream;
//! use std::sync::Arc;
//!
//! # fn main() -> Result<(), WireError> {
//! let (a, b) = UnixStream::pair()?;
//! let registry = Arc::new(Registry::standard());
//! let peer_registry = registry.clone();
//! let echo = std::thread::spawn(move || -> Result<(), WireError> {
//!     let mut s = MessageStream::handshake(b, StreamConfig::default(), peer_registry)?;
//!     while let Some(msg) = s.recv_msg()? {
//!         s.send_msg(&msg)?;
//!     }
//!     Ok(())
//! });
//! let mut s = MessageStream::handshake(a, StreamConfig::default(), registry)?;
//! let msg = b"INVITE sip:bob@example.com SIP/2.0\r\n".repeat(8);
//! s.send_msg(&msg)?;
//! assert_eq!(s.recv_msg()?, Some(msg));
//! assert_eq!(s.stats().messages_sent, 1);
//! drop(s); // the peer sees a clean end of stream
//! echo.join().expect("echo thread")?;
//! # Ok(())
//! # }
//! ```
//!
//! Over TCP, set `TCP_NODELAY` (messages are small and latency-bound):
//!
//! ```no_run
//! use hwqos_compress::{MessageStream, Registry, StreamConfig};
//! use std::sync::Arc;
//! let tcp = std::net::TcpStream::connect("127.0.0.1:7000").unwrap();
//! tcp.set_nodelay(true).unwrap();
//! let mut s = MessageStream::handshake(tcp, StreamConfig::default(), Arc::new(Registry::standard())).unwrap();
//! s.send_msg(b"hello").unwrap();
//! let reply = s.recv_msg().unwrap();
//! ```

#![deny(missing_docs)]

pub mod async_stream;
pub mod codec;
pub mod datasets;
pub mod endpoint;
#[doc(hidden)]
pub mod fuzz_checks;
pub mod history;
pub mod learn;
pub mod policy;
pub mod stream;
pub mod throttle;
pub mod transport;
pub mod wire;

pub use async_stream::{AsyncMessageStream, AsyncReceiver, AsyncSender, StreamHandle};
pub use codec::{Codec, CodecError, CodecId, Registry};
pub use endpoint::{Endpoint, Sampling, StreamConfig, StreamStats};
pub use policy::PolicyKind;
pub use stream::MessageStream;
pub use throttle::{
    CgroupLoad, CpuAggregate, CpuLoad, ProcStatLoad, ScriptedLoad, SharedThrottle, ThrottleConfig,
};
pub use transport::{TcpInfo, TransportInfo, TransportSample};
pub use wire::{FrameDecoder, Limits, WireError};
