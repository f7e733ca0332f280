//! Codecs behind one trait, and the registry that names them on the wire.
//!
//! Every codec compresses a whole message and decompresses into a buffer of
//! exactly the length the frame header declares: the output buffer is
//! allocated once with that length (already checked against the configured
//! limit by the wire layer) and a codec that would produce more or fewer bytes
//! fails with [`CodecError`]. Decoder working memory is bounded per codec:
//! LZ4, Snappy and zstd (single-shot) use none beyond the output; deflate a
//! 32 KiB window; bzip2 at most its 900 kB block buffers; LZMA is the raw
//! LZMA2 format with a dictionary the *receiver* fixes at 1 MiB, so a peer
//! cannot make it allocate more.
//!
//! Per-call setup is kept off the per-message cost where the library allows
//! it: zstd compression and decompression contexts and deflate's
//! compressor/decompressor state are created once per thread and reset
//! between messages (a fresh zstd context costs about 10 µs, more than
//! compressing a 256-byte message). libbzip2 has no reset for a finished
//! stream and the `liblzma` crate cannot re-initialise a finished raw stream,
//! so those two still set up per message; their setup is part of every
//! measured cost.
//!
//! Stream codecs (`zstd-1-stream`, `zstd-3-stream`; [`crate::history`];
//! in [`Registry::standard_with_streams`], not in [`Registry::standard`])
//! keep their context across a stream's messages: the endpoint holds one
//! sending and one receiving context per stream and codec.
//!
//! Adding a codec is one [`Registry::register`] call with a new [`CodecId`].

#[cfg(any(feature = "zstd", feature = "deflate"))]
use std::cell::RefCell;
use std::collections::BTreeMap;
use std::fmt;
#[cfg(any(feature = "lzma", feature = "bzip2"))]
use std::io::Write;
use std::sync::Arc;

/// The wire identifier of a codec (one byte in the frame header).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct CodecId(pub u8);

impl CodecId {
    /// `none`: the message as is; every registry and every peer has it.
    pub const NONE: CodecId = CodecId(0);
    /// `lz4`: LZ4 block format.
    pub const LZ4: CodecId = CodecId(1);
    /// `snappy`: Snappy raw format.
    pub const SNAPPY: CodecId = CodecId(2);
    /// `zstd-1`: zstd at level 1.
    pub const ZSTD1: CodecId = CodecId(3);
    /// `zstd-3`: zstd at level 3.
    pub const ZSTD3: CodecId = CodecId(4);
    /// `zstd-9`: zstd at level 9.
    pub const ZSTD9: CodecId = CodecId(5);
    /// `lzma-0`: raw LZMA2, preset 0.
    pub const LZMA0: CodecId = CodecId(6);
    /// `lzma-6`: raw LZMA2, preset 6.
    pub const LZMA6: CodecId = CodecId(7);
    /// `bzip2-1`: bzip2 with 100 kB blocks.
    pub const BZIP2_1: CodecId = CodecId(8);
    /// `bzip2-9`: bzip2 with 900 kB blocks.
    pub const BZIP2_9: CodecId = CodecId(9);
    /// `deflate`: raw deflate.
    pub const DEFLATE: CodecId = CodecId(10);
    /// `zstd-1-stream`: zstd at level 1 with a stream-long context (wire version 3).
    pub const ZSTD1_STREAM: CodecId = CodecId(11);
    /// `zstd-3-stream`: zstd at level 3 with a stream-long context and an
    /// 8 MiB window (wire version 3).
    pub const ZSTD3_STREAM: CodecId = CodecId(12);
}

impl fmt::Display for CodecId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "codec {}", self.0)
    }
}

/// Why a codec could not compress or decompress a message.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum CodecError {
    /// The input is not valid compressed data for this codec.
    #[error("{codec}: corrupted compressed data: {detail}")]
    Corrupted {
        /// The codec's name.
        codec: &'static str,
        /// The library's error.
        detail: String,
    },
    /// The data decompressed to another length than the frame header declared.
    #[error("{codec}: decompressed to {actual} bytes, the header declared {declared}")]
    LengthMismatch {
        /// The codec's name.
        codec: &'static str,
        /// The length the header declared, in bytes.
        declared: usize,
        /// Bytes produced; `declared + 1` means "more than declared".
        actual: usize,
    },
    /// The library failed to compress (not expected for valid input).
    #[error("{codec}: compression failed: {detail}")]
    Compress {
        /// The codec's name.
        codec: &'static str,
        /// The library's error.
        detail: String,
    },
}

/// A message compressor/decompressor.
pub trait Codec: Send + Sync {
    /// The codec's wire identifier.
    fn id(&self) -> CodecId;
    /// A short stable name (`lz4`, `zstd-3`, …) used in configs and metrics.
    fn name(&self) -> &'static str;
    /// Appends the compressed form of `input` to `out`.
    fn compress(&self, input: &[u8], out: &mut Vec<u8>) -> Result<(), CodecError>;
    /// Decompresses `input`, which must expand to exactly `expected_len` bytes,
    /// into `out` (cleared first; its capacity is reserved to `expected_len` and
    /// never grown beyond it).
    fn decompress(
        &self,
        input: &[u8],
        expected_len: usize,
        out: &mut Vec<u8>,
    ) -> Result<(), CodecError>;
    /// A rough *lower* bound of compression plus decompression time per
    /// input byte (ns) on messages of a few hundred bytes, used only for a
    /// codec the stream has not measured yet: the adaptive policy does not
    /// spend a sample on a codec that could not win even at this cost and a
    /// ratio of 0. 0 (the default) means "unknown": always worth a sample.
    fn cost_hint_ns_per_byte(&self) -> f64 {
        0.0
    }
    /// Whether the codec keeps a context across a stream's messages
    /// ([`crate::history`]): its data frames are then stream frames, and
    /// [`Codec::stream_encoder`] and [`Codec::stream_decoder`] give the
    /// per-stream contexts. [`Codec::compress`] and [`Codec::decompress`]
    /// stay self-contained (one message, no history).
    fn is_stream(&self) -> bool {
        false
    }
    /// A new sending context for one stream (`None` unless [`Codec::is_stream`]).
    fn stream_encoder(&self) -> Option<Box<dyn crate::history::StreamEncoder>> {
        None
    }
    /// A new receiving context for one stream (`None` unless [`Codec::is_stream`]).
    fn stream_decoder(&self) -> Option<Box<dyn crate::history::StreamDecoder>> {
        None
    }
}

#[cfg(any(
    feature = "lz4",
    feature = "snappy",
    feature = "zstd",
    feature = "lzma",
    feature = "bzip2",
    feature = "deflate"
))]
fn corrupted(codec: &'static str, detail: impl fmt::Display) -> CodecError {
    CodecError::Corrupted {
        codec,
        detail: detail.to_string(),
    }
}

#[cfg(any(
    feature = "lz4",
    feature = "snappy",
    feature = "zstd",
    feature = "lzma",
    feature = "bzip2",
    feature = "deflate"
))]
fn compress_failed(codec: &'static str, detail: impl fmt::Display) -> CodecError {
    CodecError::Compress {
        codec,
        detail: detail.to_string(),
    }
}

/// Prepares `out` to receive exactly `expected_len` bytes (plus one to detect overruns
/// in streaming decoders).
fn prepare(out: &mut Vec<u8>, capacity: usize) {
    out.clear();
    if out.capacity() < capacity {
        out.reserve_exact(capacity);
    }
}

fn check_len(codec: &'static str, expected: usize, actual: usize) -> Result<(), CodecError> {
    if expected == actual {
        Ok(())
    } else {
        Err(CodecError::LengthMismatch {
            codec,
            declared: expected,
            actual,
        })
    }
}

/// Drives a streaming decoder that fills a vector's spare capacity. `step`
/// consumes from `input[consumed..]`, appends to `out`, and reports
/// `(bytes consumed, finished)`. The output capacity is `expected + 1` so a
/// stream that runs past the declared length is caught without growing.
#[cfg(any(feature = "lzma", feature = "bzip2", feature = "deflate"))]
fn drive_streaming(
    codec: &'static str,
    input: &[u8],
    expected: usize,
    out: &mut Vec<u8>,
    mut step: impl FnMut(&[u8], &mut Vec<u8>) -> Result<(usize, bool), String>,
) -> Result<(), CodecError> {
    prepare(out, expected + 1);
    let mut consumed = 0usize;
    loop {
        let before_out = out.len();
        let room = out.capacity() - out.len();
        if room == 0 {
            return Err(CodecError::LengthMismatch {
                codec,
                declared: expected,
                actual: expected + 1,
            });
        }
        let (used, finished) = step(&input[consumed..], out).map_err(|e| corrupted(codec, e))?;
        consumed += used;
        if finished {
            if consumed != input.len() {
                return Err(corrupted(
                    codec,
                    format!(
                        "{} trailing bytes after the end of the compressed stream",
                        input.len() - consumed
                    ),
                ));
            }
            return check_len(codec, expected, out.len());
        }
        if used == 0 && out.len() == before_out {
            if out.len() > expected {
                return Err(CodecError::LengthMismatch {
                    codec,
                    declared: expected,
                    actual: expected + 1,
                });
            }
            return Err(corrupted(
                codec,
                "truncated: the compressed stream ends early",
            ));
        }
    }
}

/// No compression: the payload is the message.
pub struct NoneCodec;

impl Codec for NoneCodec {
    fn id(&self) -> CodecId {
        CodecId::NONE
    }
    fn name(&self) -> &'static str {
        "none"
    }
    fn compress(&self, input: &[u8], out: &mut Vec<u8>) -> Result<(), CodecError> {
        out.extend_from_slice(input);
        Ok(())
    }
    fn decompress(
        &self,
        input: &[u8],
        expected: usize,
        out: &mut Vec<u8>,
    ) -> Result<(), CodecError> {
        check_len("none", expected, input.len())?;
        prepare(out, expected);
        out.extend_from_slice(input);
        Ok(())
    }
}

/// LZ4 block format (`lz4_flex`, safe decoder).
#[cfg(feature = "lz4")]
pub struct Lz4Codec;

#[cfg(feature = "lz4")]
impl Codec for Lz4Codec {
    fn id(&self) -> CodecId {
        CodecId::LZ4
    }
    fn name(&self) -> &'static str {
        "lz4"
    }
    fn cost_hint_ns_per_byte(&self) -> f64 {
        0.1
    }
    fn compress(&self, input: &[u8], out: &mut Vec<u8>) -> Result<(), CodecError> {
        let start = out.len();
        out.resize(
            start + lz4_flex::block::get_maximum_output_size(input.len()),
            0,
        );
        let n = lz4_flex::block::compress_into(input, &mut out[start..])
            .map_err(|e| compress_failed("lz4", e))?;
        out.truncate(start + n);
        Ok(())
    }
    fn decompress(
        &self,
        input: &[u8],
        expected: usize,
        out: &mut Vec<u8>,
    ) -> Result<(), CodecError> {
        prepare(out, expected);
        out.resize(expected, 0);
        let n = lz4_flex::block::decompress_into(input, out).map_err(|e| corrupted("lz4", e))?;
        out.truncate(n);
        check_len("lz4", expected, n)
    }
}

/// Snappy raw format (`snap`).
#[cfg(feature = "snappy")]
pub struct SnappyCodec;

#[cfg(feature = "snappy")]
impl Codec for SnappyCodec {
    fn id(&self) -> CodecId {
        CodecId::SNAPPY
    }
    fn name(&self) -> &'static str {
        "snappy"
    }
    fn cost_hint_ns_per_byte(&self) -> f64 {
        0.1
    }
    fn compress(&self, input: &[u8], out: &mut Vec<u8>) -> Result<(), CodecError> {
        let start = out.len();
        out.resize(start + snap::raw::max_compress_len(input.len()), 0);
        let n = snap::raw::Encoder::new()
            .compress(input, &mut out[start..])
            .map_err(|e| compress_failed("snappy", e))?;
        out.truncate(start + n);
        Ok(())
    }
    fn decompress(
        &self,
        input: &[u8],
        expected: usize,
        out: &mut Vec<u8>,
    ) -> Result<(), CodecError> {
        let declared = snap::raw::decompress_len(input).map_err(|e| corrupted("snappy", e))?;
        check_len("snappy", expected, declared)?;
        prepare(out, expected);
        out.resize(expected, 0);
        let n = snap::raw::Decoder::new()
            .decompress(input, out)
            .map_err(|e| corrupted("snappy", e))?;
        check_len("snappy", expected, n)
    }
}

/// zstd at a fixed level, single-shot frames.
#[cfg(feature = "zstd")]
pub struct ZstdCodec {
    id: CodecId,
    name: &'static str,
    level: i32,
}

#[cfg(feature = "zstd")]
impl ZstdCodec {
    /// zstd at compression `level`, registered as `id` and `name`.
    pub fn new(id: CodecId, name: &'static str, level: i32) -> Self {
        ZstdCodec { id, name, level }
    }
}

#[cfg(feature = "zstd")]
thread_local! {
    /// This thread's zstd compression contexts, one per level in use.
    static ZSTD_CCTX: RefCell<Vec<(i32, zstd::bulk::Compressor<'static>)>> =
        const { RefCell::new(Vec::new()) };
    /// This thread's zstd decompression context.
    static ZSTD_DCTX: RefCell<Option<zstd::bulk::Decompressor<'static>>> =
        const { RefCell::new(None) };
}

#[cfg(feature = "zstd")]
impl Codec for ZstdCodec {
    fn id(&self) -> CodecId {
        self.id
    }
    fn name(&self) -> &'static str {
        self.name
    }
    fn cost_hint_ns_per_byte(&self) -> f64 {
        if self.level >= 6 {
            2.0
        } else {
            1.0
        }
    }
    fn compress(&self, input: &[u8], out: &mut Vec<u8>) -> Result<(), CodecError> {
        let start = out.len();
        out.resize(start + zstd::zstd_safe::compress_bound(input.len()), 0);
        let result = ZSTD_CCTX.with(|cell| {
            let mut contexts = cell.borrow_mut();
            let i = match contexts.iter().position(|(l, _)| *l == self.level) {
                Some(i) => i,
                None => {
                    contexts.push((self.level, zstd::bulk::Compressor::new(self.level)?));
                    contexts.len() - 1
                }
            };
            contexts[i].1.compress_to_buffer(input, &mut out[start..])
        });
        match result {
            Ok(n) => {
                out.truncate(start + n);
                Ok(())
            }
            Err(e) => {
                out.truncate(start);
                Err(compress_failed(self.name, e))
            }
        }
    }
    fn decompress(
        &self,
        input: &[u8],
        expected: usize,
        out: &mut Vec<u8>,
    ) -> Result<(), CodecError> {
        prepare(out, expected);
        // Writes at most `capacity` bytes; a frame that needs more is an error.
        let n = ZSTD_DCTX
            .with(|cell| {
                let mut slot = cell.borrow_mut();
                if slot.is_none() {
                    *slot = Some(zstd::bulk::Decompressor::new()?);
                }
                let d = slot.as_mut().expect("just created");
                d.decompress_to_buffer(input, out)
            })
            .map_err(|e| corrupted(self.name, e))?;
        check_len(self.name, expected, n)
    }
}

/// The dictionary both LZMA codecs use; fixed so the receiver's memory does not
/// depend on what the sender claims.
#[cfg(feature = "lzma")]
pub const LZMA_DICT_BYTES: u32 = 1 << 20;

/// LZMA2 raw stream (`liblzma`) at a preset, dictionary [`LZMA_DICT_BYTES`].
#[cfg(feature = "lzma")]
pub struct LzmaCodec {
    id: CodecId,
    name: &'static str,
    preset: u32,
}

#[cfg(feature = "lzma")]
impl LzmaCodec {
    /// Raw LZMA2 at `preset` (0–9), registered as `id` and `name`; the
    /// dictionary stays the receiver's fixed 1 MiB whatever the preset.
    pub fn new(id: CodecId, name: &'static str, preset: u32) -> Self {
        LzmaCodec { id, name, preset }
    }

    fn filters(&self) -> Result<liblzma::stream::Filters, liblzma::stream::Error> {
        let mut opts = liblzma::stream::LzmaOptions::new_preset(self.preset)?;
        opts.dict_size(LZMA_DICT_BYTES);
        let mut f = liblzma::stream::Filters::new();
        f.lzma2(&opts);
        Ok(f)
    }
}

#[cfg(feature = "lzma")]
impl Codec for LzmaCodec {
    fn id(&self) -> CodecId {
        self.id
    }
    fn name(&self) -> &'static str {
        self.name
    }
    fn cost_hint_ns_per_byte(&self) -> f64 {
        if self.preset == 0 {
            20.0
        } else {
            30.0
        }
    }
    fn compress(&self, input: &[u8], out: &mut Vec<u8>) -> Result<(), CodecError> {
        let filters = self.filters().map_err(|e| compress_failed(self.name, e))?;
        let stream = liblzma::stream::Stream::new_raw_encoder(&filters)
            .map_err(|e| compress_failed(self.name, e))?;
        let mut enc = liblzma::write::XzEncoder::new_stream(std::mem::take(out), stream);
        enc.write_all(input)
            .map_err(|e| compress_failed(self.name, e))?;
        *out = enc.finish().map_err(|e| compress_failed(self.name, e))?;
        Ok(())
    }
    fn decompress(
        &self,
        input: &[u8],
        expected: usize,
        out: &mut Vec<u8>,
    ) -> Result<(), CodecError> {
        let filters = self.filters().map_err(|e| corrupted(self.name, e))?;
        let mut stream = liblzma::stream::Stream::new_raw_decoder(&filters)
            .map_err(|e| corrupted(self.name, e))?;
        drive_streaming(self.name, input, expected, out, |inp, o| {
            let before = stream.total_in();
            let status = stream
                .process_vec(inp, o, liblzma::stream::Action::Finish)
                .map_err(|e| e.to_string())?;
            Ok((
                (stream.total_in() - before) as usize,
                status == liblzma::stream::Status::StreamEnd,
            ))
        })
    }
}

/// bzip2 at a block-size level.
#[cfg(feature = "bzip2")]
pub struct Bzip2Codec {
    id: CodecId,
    name: &'static str,
    level: u32,
}

#[cfg(feature = "bzip2")]
impl Bzip2Codec {
    /// bzip2 with `level` × 100 kB blocks (1–9), registered as `id` and `name`.
    pub fn new(id: CodecId, name: &'static str, level: u32) -> Self {
        Bzip2Codec { id, name, level }
    }
}

#[cfg(feature = "bzip2")]
impl Codec for Bzip2Codec {
    fn id(&self) -> CodecId {
        self.id
    }
    fn name(&self) -> &'static str {
        self.name
    }
    fn cost_hint_ns_per_byte(&self) -> f64 {
        if self.level <= 4 {
            20.0
        } else {
            60.0
        }
    }
    fn compress(&self, input: &[u8], out: &mut Vec<u8>) -> Result<(), CodecError> {
        let mut enc =
            bzip2::write::BzEncoder::new(std::mem::take(out), bzip2::Compression::new(self.level));
        enc.write_all(input)
            .map_err(|e| compress_failed(self.name, e))?;
        *out = enc.finish().map_err(|e| compress_failed(self.name, e))?;
        Ok(())
    }
    fn decompress(
        &self,
        input: &[u8],
        expected: usize,
        out: &mut Vec<u8>,
    ) -> Result<(), CodecError> {
        let mut d = bzip2::Decompress::new(false);
        drive_streaming(self.name, input, expected, out, |inp, o| {
            let before = d.total_in();
            let status = d.decompress_vec(inp, o).map_err(|e| e.to_string())?;
            Ok((
                (d.total_in() - before) as usize,
                status == bzip2::Status::StreamEnd,
            ))
        })
    }
}

/// Raw deflate (`flate2`) at level 6 (`DEFLATE_LEVEL`).
#[cfg(feature = "deflate")]
pub struct DeflateCodec;

/// The deflate level of [`DeflateCodec`].
#[cfg(feature = "deflate")]
const DEFLATE_LEVEL: u32 = 6;

#[cfg(feature = "deflate")]
thread_local! {
    /// This thread's raw-deflate compressor and decompressor, reset per message.
    static DEFLATE_STATE: RefCell<Option<(flate2::Compress, flate2::Decompress)>> =
        const { RefCell::new(None) };
}

#[cfg(feature = "deflate")]
fn with_deflate<R>(f: impl FnOnce(&mut flate2::Compress, &mut flate2::Decompress) -> R) -> R {
    DEFLATE_STATE.with(|cell| {
        let mut slot = cell.borrow_mut();
        let (c, d) = slot.get_or_insert_with(|| {
            (
                flate2::Compress::new(flate2::Compression::new(DEFLATE_LEVEL), false),
                flate2::Decompress::new(false),
            )
        });
        f(c, d)
    })
}

#[cfg(feature = "deflate")]
impl Codec for DeflateCodec {
    fn id(&self) -> CodecId {
        CodecId::DEFLATE
    }
    fn name(&self) -> &'static str {
        "deflate"
    }
    fn cost_hint_ns_per_byte(&self) -> f64 {
        5.0
    }
    fn compress(&self, input: &[u8], out: &mut Vec<u8>) -> Result<(), CodecError> {
        with_deflate(|c, _| {
            c.reset();
            let start = out.len();
            // Stored blocks bound the output: 5 bytes per 16 KiB block plus slack.
            out.reserve(input.len() + input.len() / 16_000 * 5 + 64);
            loop {
                let before_in = c.total_in() as usize;
                let status = c
                    .compress_vec(
                        &input[before_in.min(input.len())..],
                        out,
                        flate2::FlushCompress::Finish,
                    )
                    .map_err(|e| compress_failed("deflate", e))?;
                match status {
                    flate2::Status::StreamEnd => return Ok(()),
                    _ if out.len() == out.capacity() => out.reserve(out.len() - start + 64),
                    flate2::Status::BufError => {
                        return Err(compress_failed(
                            "deflate",
                            "the compressor made no progress",
                        ))
                    }
                    _ => {}
                }
            }
        })
    }
    fn decompress(
        &self,
        input: &[u8],
        expected: usize,
        out: &mut Vec<u8>,
    ) -> Result<(), CodecError> {
        with_deflate(|_, d| {
            d.reset(false);
            drive_streaming("deflate", input, expected, out, |inp, o| {
                let before = d.total_in();
                let status = d
                    .decompress_vec(inp, o, flate2::FlushDecompress::Finish)
                    .map_err(|e| e.to_string())?;
                Ok((
                    (d.total_in() - before) as usize,
                    status == flate2::Status::StreamEnd,
                ))
            })
        })
    }
}

/// Why a codec could not be registered or found.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum RegistryError {
    /// Another codec already has this wire id.
    #[error("codec id {0} is already registered")]
    DuplicateId(u8),
    /// Another codec already has this name.
    #[error("codec name `{0}` is already registered")]
    DuplicateName(String),
    /// No codec of the registry has this name.
    #[error("unknown codec name `{name}` (known: {known})")]
    UnknownName {
        /// The name asked for.
        name: String,
        /// The registry's names, comma-separated.
        known: String,
    },
}

/// The codecs a process can use, by wire id and by name.
#[derive(Clone, Default)]
pub struct Registry {
    by_id: BTreeMap<u8, Arc<dyn Codec>>,
}

impl fmt::Debug for Registry {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_list()
            .entries(self.by_id.values().map(|c| c.name()))
            .finish()
    }
}

impl Registry {
    /// An empty registry (add at least [`NoneCodec`]).
    pub fn empty() -> Self {
        Registry::default()
    }

    /// Every built-in per-message codec this build has, in wire-id order:
    /// `none` always; `lz4` (feature `lz4`), `snappy` (`snappy`),
    /// `zstd-1/3/9` (`zstd`), `lzma-0/6` (`lzma`), `bzip2-1/9` (`bzip2`),
    /// `deflate` (`deflate`). A codec whose feature is off is not
    /// registered; its wire id stays reserved, and a peer offering it simply
    /// does not get it negotiated. The stream codecs are opt-in, see
    /// [`Registry::standard_with_streams`].
    pub fn standard() -> Self {
        let mut r = Registry::empty();
        #[allow(unused_mut)]
        let mut all: Vec<Arc<dyn Codec>> = vec![Arc::new(NoneCodec)];
        #[cfg(feature = "lz4")]
        all.push(Arc::new(Lz4Codec));
        #[cfg(feature = "snappy")]
        all.push(Arc::new(SnappyCodec));
        #[cfg(feature = "zstd")]
        all.extend([
            Arc::new(ZstdCodec::new(CodecId::ZSTD1, "zstd-1", 1)) as Arc<dyn Codec>,
            Arc::new(ZstdCodec::new(CodecId::ZSTD3, "zstd-3", 3)),
            Arc::new(ZstdCodec::new(CodecId::ZSTD9, "zstd-9", 9)),
        ]);
        #[cfg(feature = "lzma")]
        all.extend([
            Arc::new(LzmaCodec::new(CodecId::LZMA0, "lzma-0", 0)) as Arc<dyn Codec>,
            Arc::new(LzmaCodec::new(CodecId::LZMA6, "lzma-6", 6)),
        ]);
        #[cfg(feature = "bzip2")]
        all.extend([
            Arc::new(Bzip2Codec::new(CodecId::BZIP2_1, "bzip2-1", 1)) as Arc<dyn Codec>,
            Arc::new(Bzip2Codec::new(CodecId::BZIP2_9, "bzip2-9", 9)),
        ]);
        #[cfg(feature = "deflate")]
        all.push(Arc::new(DeflateCodec));
        for c in all {
            r.register(c)
                .expect("built-in codecs have distinct ids and names");
        }
        r
    }

    /// [`Registry::standard`] plus the stream codecs `zstd-1-stream` and
    /// `zstd-3-stream` ([`crate::history`], wire version 3). Opt-in: on the
    /// shared 2-vCPU VM the adaptive policy with them was slower than
    /// without (docs/compression.md, "Stream codecs in the relay"): its
    /// cost model prices CPU time, not a saturated CPU, and a stream
    /// codec's history costs more CPU per byte at the receiver.
    ///
    /// Without the `zstd` feature there are no stream codecs and this is
    /// [`Registry::standard`].
    pub fn standard_with_streams() -> Self {
        #[allow(unused_mut)]
        let mut r = Registry::standard();
        #[cfg(feature = "zstd")]
        {
            let streams: Vec<Arc<dyn Codec>> = vec![
                Arc::new(crate::history::ZstdStreamCodec::new(
                    CodecId::ZSTD1_STREAM,
                    "zstd-1-stream",
                    1,
                )),
                Arc::new(
                    crate::history::ZstdStreamCodec::new(CodecId::ZSTD3_STREAM, "zstd-3-stream", 3)
                        .with_window_log(crate::history::WIDE_STREAM_WINDOW_LOG),
                ),
            ];
            for c in streams {
                r.register(c)
                    .expect("built-in codecs have distinct ids and names");
            }
        }
        r
    }

    /// Adds a codec.
    pub fn register(&mut self, codec: Arc<dyn Codec>) -> Result<(), RegistryError> {
        if self.by_id.contains_key(&codec.id().0) {
            return Err(RegistryError::DuplicateId(codec.id().0));
        }
        if self.by_name(codec.name()).is_some() {
            return Err(RegistryError::DuplicateName(codec.name().to_string()));
        }
        self.by_id.insert(codec.id().0, codec);
        Ok(())
    }

    /// A registry with only the named codecs of this one (`none` is always kept).
    pub fn subset(&self, names: &[impl AsRef<str>]) -> Result<Registry, RegistryError> {
        let mut r = Registry::empty();
        if let Some(none) = self.get(CodecId::NONE) {
            r.register(none.clone())?;
        }
        for n in names {
            let c = self
                .by_name(n.as_ref())
                .ok_or_else(|| RegistryError::UnknownName {
                    name: n.as_ref().to_string(),
                    known: self.names().join(", "),
                })?;
            if r.get(c.id()).is_none() {
                r.register(c.clone())?;
            }
        }
        Ok(r)
    }

    /// The codec with this wire id; `None` if not registered.
    pub fn get(&self, id: CodecId) -> Option<&Arc<dyn Codec>> {
        self.by_id.get(&id.0)
    }

    /// The codec with this name (`zstd-3`); `None` if not registered.
    pub fn by_name(&self, name: &str) -> Option<&Arc<dyn Codec>> {
        self.by_id.values().find(|c| c.name() == name)
    }

    /// Wire ids in ascending order.
    pub fn ids(&self) -> Vec<CodecId> {
        self.by_id.keys().map(|&k| CodecId(k)).collect()
    }

    /// Codec names, in ascending wire-id order.
    pub fn names(&self) -> Vec<&'static str> {
        self.by_id.values().map(|c| c.name()).collect()
    }

    /// The name of a codec id, or `"unknown"`.
    pub fn name_of(&self, id: CodecId) -> &'static str {
        self.get(id).map(|c| c.name()).unwrap_or("unknown")
    }

    /// How many codecs are registered.
    pub fn len(&self) -> usize {
        self.by_id.len()
    }

    /// Whether no codec is registered (not even `none`).
    pub fn is_empty(&self) -> bool {
        self.by_id.is_empty()
    }
}
