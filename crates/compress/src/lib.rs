//! Adaptive message compression (thesis chapter 7): codecs behind one trait,
//! a versioned wire format, per-stream learning of codec and network rates,
//! selection policies and a PID throttle on CPU load.
//!
//! - [`codec`]: the [`Codec`] trait and the [`Registry`] of built-in codecs;
//! - [`wire`]: frame header, handshake, probes, and the bounded [`FrameDecoder`];
//! - [`learn`]: moving averages and the transmission-time prediction (eq. 7.6);
//! - [`policy`]: `one`, `round-robin`, `majority` and `adaptive`;
//! - [`throttle`]: CPU utilization from `/proc/stat` and the PID budget;
//! - [`endpoint`]: the per-stream send and receive procedures, without I/O;
//! - [`stream`], [`async_stream`]: blocking and tokio message streams;
//! - `fuzz_checks`: the properties the fuzz targets and the corpus replay test check.
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

pub mod async_stream;
pub mod codec;
pub mod datasets;
pub mod endpoint;
#[doc(hidden)]
pub mod fuzz_checks;
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
