//! Stream codecs: codecs whose context (the compressor's window, the
//! decompressor's history) lives as long as the message stream, so that a
//! message is compressed against the messages sent before it with the same
//! codec (issue 25, item 2; wire version 3, see `docs/compression.md`).
//!
//! Each message is still a frame of its own that the receiver decodes as
//! soon as it arrives: the sender ends every message with a zstd *flush*
//! (`ZSTD_e_flush`), which writes every byte of the message as complete
//! blocks without ending the zstd frame, and the receiver's persistent
//! decompression context (`DCtx`) turns exactly those blocks back into the
//! message. The first message of a context, and the first after anything
//! went wrong on the sending side, carries the *reset* flag: the sender
//! started a new zstd frame and the receiver drops its history before
//! decoding.
//!
//! Bounds on the receiving side: the output is the caller's buffer of the
//! declared length plus one byte, never grown (a frame that decodes to more
//! fails with [`CodecError::LengthMismatch`]); the window is at most
//! 2^[`MAX_STREAM_WINDOW_LOG`] bytes (`ZSTD_d_windowLogMax`: a frame whose
//! header asks for more is refused before its window is allocated), so one
//! decompression context holds at most about 8.1 MiB whatever the peer sends.

use crate::codec::CodecError;
#[cfg(feature = "zstd")]
use crate::codec::{Codec, CodecId, ZstdCodec};
#[cfg(feature = "zstd")]
use zstd::zstd_safe::{self, zstd_sys, CCtx, CParameter, DCtx, DParameter, InBuffer, OutBuffer};

/// The window of `zstd-1-stream`'s sending context: 512 KiB of history
/// (what `zstd -1` uses for a stream of unknown size). On the generated text
/// of the relay comparison a 2 MiB window compressed no better (29.9 % at
/// level 3 either way) and cost 7 % (level 1) and 40 % (level 3) more CPU
/// time in one measurement on a busy machine, as well as four times the
/// memory per stream.
pub const STREAM_WINDOW_LOG: u32 = 19;

/// The window of `zstd-3-stream`'s sending context: 8 MiB, the most a
/// receiver accepts ([`MAX_STREAM_WINDOW_LOG`]). Real streams repeat
/// themselves from far back (a tar of `/usr/share/doc` holds the same
/// licence text hundreds of times): on 32 MB of it zstd level 3 put 23.4 MB
/// out with a 512 KiB window and 20.2 MB with 8 MiB, less than `zstd
/// --adapt` (21.2 MB at 10 Mbit/s); level 1 gained nothing from the larger
/// window (docs/compression.md). It costs 8 MiB of memory per stream at
/// each end, where the codec is used.
pub const WIDE_STREAM_WINDOW_LOG: u32 = MAX_STREAM_WINDOW_LOG;

/// The largest window a receiving context accepts: 8 MiB. A zstd frame
/// whose header declares a larger window is refused.
pub const MAX_STREAM_WINDOW_LOG: u32 = 23;

/// The sending half of a stream codec's context (one per stream and codec).
pub trait StreamEncoder: Send {
    /// Appends the compressed form of `input` to `out`, flushed so that the
    /// receiver can decode it completely from the bytes written so far.
    /// With `reset`, the context first forgets everything (a new zstd
    /// frame starts; the frame carrying this output must have the reset
    /// flag). After an error the context is unusable until a `reset` call.
    fn compress(&mut self, input: &[u8], reset: bool, out: &mut Vec<u8>) -> Result<(), CodecError>;
}

/// The receiving half of a stream codec's context (one per stream and codec).
pub trait StreamDecoder: Send {
    /// Decodes the payload of one stream frame, which must expand to exactly
    /// `expected_len` bytes, into `out` (cleared first; its capacity is
    /// reserved to `expected_len + 1` and never grown). With `reset`, the
    /// history is dropped first. Without it, the context continues the
    /// previous frame's; a context that never saw a reset, or whose last
    /// frame failed, refuses the frame.
    fn decompress(
        &mut self,
        input: &[u8],
        reset: bool,
        expected_len: usize,
        out: &mut Vec<u8>,
    ) -> Result<(), CodecError>;
}

#[cfg(feature = "zstd")]
fn corrupted(codec: &'static str, detail: impl std::fmt::Display) -> CodecError {
    CodecError::Corrupted {
        codec,
        detail: detail.to_string(),
    }
}

#[cfg(feature = "zstd")]
fn compress_failed(codec: &'static str, detail: impl std::fmt::Display) -> CodecError {
    CodecError::Compress {
        codec,
        detail: detail.to_string(),
    }
}

/// zstd at a fixed level whose context spans the stream: a message is
/// compressed against the last 2^`window_log` bytes ([`STREAM_WINDOW_LOG`]
/// unless [`ZstdStreamCodec::with_window_log`] says otherwise) of the
/// messages sent before it with this codec.
///
/// Outside a stream ([`Codec::compress`] and [`Codec::decompress`]: the
/// codec tests, the fuzz targets, warm-ups) it is a single-shot zstd frame
/// at the same level, like [`ZstdCodec`].
#[cfg(feature = "zstd")]
pub struct ZstdStreamCodec {
    single: ZstdCodec,
    name: &'static str,
    level: i32,
    window_log: u32,
}

#[cfg(feature = "zstd")]
impl ZstdStreamCodec {
    /// zstd at compression `level` with a stream-long context of
    /// [`STREAM_WINDOW_LOG`], registered as `id` and `name`.
    pub fn new(id: CodecId, name: &'static str, level: i32) -> Self {
        ZstdStreamCodec {
            single: ZstdCodec::new(id, name, level),
            name,
            level,
            window_log: STREAM_WINDOW_LOG,
        }
    }

    /// The same codec with a sending window of 2^`window_log` bytes, at most
    /// [`MAX_STREAM_WINDOW_LOG`] (what every receiver accepts) and at least
    /// zstd's minimum of 2^10.
    pub fn with_window_log(mut self, window_log: u32) -> Self {
        self.window_log = window_log.clamp(10, MAX_STREAM_WINDOW_LOG);
        self
    }

    /// The sending window's log2.
    pub fn window_log(&self) -> u32 {
        self.window_log
    }
}

#[cfg(feature = "zstd")]
impl Codec for ZstdStreamCodec {
    fn id(&self) -> CodecId {
        self.single.id()
    }
    fn name(&self) -> &'static str {
        self.name
    }
    fn cost_hint_ns_per_byte(&self) -> f64 {
        self.single.cost_hint_ns_per_byte()
    }
    fn compress(&self, input: &[u8], out: &mut Vec<u8>) -> Result<(), CodecError> {
        self.single.compress(input, out)
    }
    fn decompress(
        &self,
        input: &[u8],
        expected_len: usize,
        out: &mut Vec<u8>,
    ) -> Result<(), CodecError> {
        self.single.decompress(input, expected_len, out)
    }
    fn is_stream(&self) -> bool {
        true
    }
    fn stream_encoder(&self) -> Option<Box<dyn StreamEncoder>> {
        Some(Box::new(ZstdStreamEncoder {
            cctx: None,
            level: self.level,
            window_log: self.window_log,
            name: self.name,
        }))
    }
    fn stream_decoder(&self) -> Option<Box<dyn StreamDecoder>> {
        Some(Box::new(ZstdStreamDecoder {
            dctx: None,
            name: self.name,
            live: false,
        }))
    }
}

/// The sending context of [`ZstdStreamCodec`]; the zstd context is created
/// at the first message.
#[cfg(feature = "zstd")]
struct ZstdStreamEncoder {
    cctx: Option<CCtx<'static>>,
    level: i32,
    window_log: u32,
    name: &'static str,
}

#[cfg(feature = "zstd")]
impl ZstdStreamEncoder {
    fn context(&mut self) -> Result<&mut CCtx<'static>, CodecError> {
        if self.cctx.is_none() {
            let mut c = CCtx::try_create().ok_or_else(|| {
                compress_failed(self.name, "cannot allocate a compression context")
            })?;
            let e = |code| compress_failed(self.name, zstd_safe::get_error_name(code));
            c.set_parameter(CParameter::CompressionLevel(self.level))
                .map_err(e)?;
            c.set_parameter(CParameter::WindowLog(self.window_log))
                .map_err(e)?;
            c.set_parameter(CParameter::ChecksumFlag(false))
                .map_err(e)?;
            c.set_parameter(CParameter::ContentSizeFlag(false))
                .map_err(e)?;
            self.cctx = Some(c);
        }
        Ok(self.cctx.as_mut().expect("created above"))
    }
}

#[cfg(feature = "zstd")]
impl StreamEncoder for ZstdStreamEncoder {
    fn compress(&mut self, input: &[u8], reset: bool, out: &mut Vec<u8>) -> Result<(), CodecError> {
        let name = self.name;
        let cctx = self.context()?;
        let e = |code| compress_failed(name, zstd_safe::get_error_name(code));
        if reset {
            cctx.reset(zstd_safe::ResetDirective::SessionOnly)
                .map_err(e)?;
        }
        let start = out.len();
        out.reserve(zstd_safe::compress_bound(input.len()) + 32);
        let mut inb = InBuffer::around(input);
        loop {
            if out.capacity() - out.len() < 32 {
                out.reserve(out.len() - start + 1024);
            }
            let pos = out.len();
            // The output buffer sets `out`'s length when it goes out of scope.
            let left = cctx
                .compress_stream2(
                    &mut OutBuffer::around_pos(out, pos),
                    &mut inb,
                    zstd_sys::ZSTD_EndDirective::ZSTD_e_flush,
                )
                .map_err(e)?;
            if left == 0 && inb.pos() == input.len() {
                return Ok(());
            }
        }
    }
}

/// The receiving context of [`ZstdStreamCodec`]; the zstd context is
/// created at the first frame.
#[cfg(feature = "zstd")]
struct ZstdStreamDecoder {
    dctx: Option<DCtx<'static>>,
    name: &'static str,
    /// A reset frame started the context and no frame failed since.
    live: bool,
}

#[cfg(feature = "zstd")]
impl StreamDecoder for ZstdStreamDecoder {
    fn decompress(
        &mut self,
        input: &[u8],
        reset: bool,
        expected: usize,
        out: &mut Vec<u8>,
    ) -> Result<(), CodecError> {
        let name = self.name;
        if !reset && !self.live {
            return Err(corrupted(
                name,
                "a stream frame without the reset flag, but no stream context \
                 (none started, or the last frame failed)",
            ));
        }
        // Dead until this frame decodes completely.
        self.live = false;
        if self.dctx.is_none() {
            let mut d = DCtx::try_create()
                .ok_or_else(|| corrupted(name, "cannot allocate a decompression context"))?;
            d.set_parameter(DParameter::WindowLogMax(MAX_STREAM_WINDOW_LOG))
                .map_err(|code| corrupted(name, zstd_safe::get_error_name(code)))?;
            self.dctx = Some(d);
        }
        let dctx = self.dctx.as_mut().expect("created above");
        let e = |code| corrupted(name, zstd_safe::get_error_name(code));
        if reset {
            dctx.reset(zstd_safe::ResetDirective::SessionOnly)
                .map_err(e)?;
        }
        out.clear();
        if out.capacity() < expected + 1 {
            out.reserve_exact(expected + 1);
        }
        let mut inb = InBuffer::around(input);
        loop {
            let (in_before, out_before) = (inb.pos(), out.len());
            if out.len() == out.capacity() {
                // Full (the capacity is at least `expected + 1`): more than declared.
                break;
            }
            let pos = out.len();
            dctx.decompress_stream(&mut OutBuffer::around_pos(out, pos), &mut inb)
                .map_err(e)?;
            if out.len() > expected {
                break;
            }
            if inb.pos() == in_before && out.len() == out_before {
                // No progress: the input is used up (or a block is cut short).
                break;
            }
        }
        if out.len() > expected {
            return Err(CodecError::LengthMismatch {
                codec: name,
                declared: expected,
                actual: expected + 1,
            });
        }
        if inb.pos() != input.len() {
            return Err(corrupted(
                name,
                format!(
                    "{} bytes of the payload left undecoded",
                    input.len() - inb.pos()
                ),
            ));
        }
        if out.len() != expected {
            return Err(CodecError::LengthMismatch {
                codec: name,
                declared: expected,
                actual: out.len(),
            });
        }
        self.live = true;
        Ok(())
    }
}
