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
//! - [`stream`], `async_stream` (feature `tokio`): blocking and tokio message streams;
//! - [`transport`]: what the transport says of the link (TCP_INFO backlog and delivery);
//! - [`datasets`]: the experiments' data sets (zeros, ones, realistic, random);
//! - `fuzz_checks`: the properties the fuzz targets and the corpus replay test check.
//!
//! The entry points are [`MessageStream`] (blocking, over any `Read + Write`)
//! and `AsyncMessageStream` (feature `tokio`; over a reader and a writer,
//! splittable into `AsyncSender` and `AsyncReceiver`): both ends exchange a hello that
//! negotiates the codecs both [`Registry`]s hold, the message limit and
//! checksums, then each `send_msg` picks a codec per [`PolicyKind`] under the
//! CPU budget of the throttle ([`ThrottleConfig`]) and `recv_msg` returns the
//! message as sent, or `Ok(None)` at a clean end of stream. The protocol logic
//! itself lives in [`Endpoint`], which does no I/O; [`StreamConfig`] configures
//! a stream and [`StreamStats`] reports on it. Errors from the peer's bytes are
//! [`WireError`]s; a codec's are [`CodecError`]s.
//!
//! # Cargo features
//!
//! An embedder pays only for the codecs and the runtime it uses (issue 23;
//! package counts per feature set in `docs/embedding.md`):
//!
//! | feature | brings | default |
//! |---|---|---|
//! | `zstd` | `zstd-1`, `zstd-3`, `zstd-9` and the stream codecs `zstd-1-stream`, `zstd-3-stream` (libzstd, C, built by `cc`) | yes |
//! | `lz4` | `lz4` (`lz4_flex`, pure Rust) | yes |
//! | `snappy` | `snappy` (`snap`, pure Rust) | yes |
//! | `lzma` | `lzma-0`, `lzma-6` (`liblzma`, C, built by `cc`) | no |
//! | `bzip2` | `bzip2-1`, `bzip2-9` (`bzip2` over `libbz2-rs-sys`, a Rust port of libbzip2) | no |
//! | `deflate` | `deflate` (`flate2`) | no |
//! | `tokio` | `AsyncMessageStream`, `AsyncSender`, `AsyncReceiver`, `StreamHandle` | no |
//! | `full` | all of the above | no |
//!
//! `none` is always built. [`Registry::standard`] registers exactly the
//! codecs whose features are enabled; codec ids never change (the wire
//! format is the same in every build), and a codec a peer offers in its
//! hello that this build lacks is simply not negotiated: both ends send
//! only with codecs both have. With `--no-default-features` the crate still
//! works, with `none` only.
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

#[cfg(feature = "tokio")]
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

#[cfg(feature = "tokio")]
pub use async_stream::{AsyncMessageStream, AsyncReceiver, AsyncSender, StreamHandle};
pub use codec::{Codec, CodecError, CodecId, Registry};
pub use endpoint::{Endpoint, Sampling, StreamConfig, StreamStats};
pub use policy::PolicyKind;
pub use stream::{MessageStream, Transport, DROP_DRAIN_TIMEOUT};
pub use throttle::{
    CgroupLoad, CpuAggregate, CpuLoad, ProcStatLoad, ScriptedLoad, SharedThrottle, ThrottleConfig,
};
pub use transport::{TcpInfo, TransportInfo, TransportSample};
pub use wire::{FrameDecoder, Limits, WireError};
