//! The wire format: a fixed 14-byte header per frame, an optional CRC-32 of
//! the uncompressed message, and the payload (see `docs/compression.md` for
//! the byte-by-byte layout).
//!
//! ```text
//! 0  1   2       3     4      5      6..10             10..14          [14..18]   payload
//! 'H''Q' version kind  codec  flags  uncompressed u32  payload u32     [crc32]    ...
//! ```
//!
//! Version 3 adds *stream frames*: data frames of a stream codec
//! ([`crate::history`]), whose payload continues the codec's context from
//! the previous stream frame of that codec. They carry version 3 and
//! [`FLAG_STREAM`] (plus [`FLAG_RESET`] where a new context starts); every
//! other frame is written exactly as in version 2, so a version-2 peer,
//! which never lists a stream codec in its hello and so never receives a
//! stream frame, reads everything a version-3 end sends it.
//!
//! [`FrameDecoder`] is the incremental stream parser: it validates a header as
//! soon as its 14 bytes are in, *before* it reserves memory for the payload,
//! and never buffers more than one frame. Lengths are checked against
//! [`Limits`], so a frame that declares 4 GiB is rejected after 14 bytes.

use crate::codec::CodecId;

/// The two bytes every frame starts with.
pub const MAGIC: [u8; 2] = *b"HQ";
/// The newest wire version this crate speaks: the version of stream frames.
pub const VERSION: u8 = 3;
/// The version of every frame that is not a stream frame (hello, probes,
/// per-message data frames): unchanged from version 2, which a version-2
/// peer reads.
pub const BASE_VERSION: u8 = 2;
/// Header bytes without the checksum.
pub const HEADER_LEN: usize = 14;
/// Header flag: a CRC-32 (IEEE) of the uncompressed message follows the header.
pub const FLAG_CHECKSUM: u8 = 0x01;
/// Header flag (version 3, data frames only, always set there): a stream
/// frame, whose payload continues its codec's stream context.
pub const FLAG_STREAM: u8 = 0x02;
/// Header flag (version 3, with [`FLAG_STREAM`]): the sender started a new
/// context; the receiver drops the codec's history before decoding.
pub const FLAG_RESET: u8 = 0x04;
/// Largest payload of a control frame (hello, probe, probe reply).
pub const MAX_CONTROL_PAYLOAD: u32 = 64 * 1024;
/// The default largest message (uncompressed and compressed).
pub const DEFAULT_MAX_MESSAGE: u32 = 16 << 20;

/// What a frame carries.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[repr(u8)]
pub enum FrameKind {
    /// An application message, compressed with the header's codec.
    Data = 0,
    /// The handshake: versions, limits and the codecs the sender can decode.
    Hello = 1,
    /// A round-trip-time probe from the compressing side.
    Probe = 2,
    /// The answer to a probe, with the receiver's decompression statistics.
    ProbeReply = 3,
}

impl FrameKind {
    /// The kind with this header byte; `None` for a byte no kind uses.
    pub fn from_u8(v: u8) -> Option<FrameKind> {
        match v {
            0 => Some(FrameKind::Data),
            1 => Some(FrameKind::Hello),
            2 => Some(FrameKind::Probe),
            3 => Some(FrameKind::ProbeReply),
            _ => None,
        }
    }
}

/// Size limits enforced while parsing, before anything is allocated.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Limits {
    /// Largest message, uncompressed; also the largest data payload.
    pub max_message: u32,
}

impl Default for Limits {
    fn default() -> Self {
        Limits {
            max_message: DEFAULT_MAX_MESSAGE,
        }
    }
}

/// Why bytes from the peer are not a valid frame (or stream of frames).
#[derive(Debug, thiserror::Error)]
pub enum WireError {
    /// The first two bytes of a header are not `HQ` (the two bytes found).
    #[error("garbage before the frame header: expected magic 'HQ' (48 51), found {0:02x} {1:02x}")]
    BadMagic(u8, u8),
    /// The peer speaks another wire version than [`BASE_VERSION`] and [`VERSION`].
    #[error("wrong wire version {found} (this end speaks versions {BASE_VERSION} and {VERSION})")]
    WrongVersion {
        /// The version byte the peer sent.
        found: u8,
    },
    /// The header's kind byte is none of [`FrameKind`].
    #[error("unknown frame kind {0}")]
    UnknownKind(u8),
    /// The header sets flag bits its version does not define ([`FLAG_CHECKSUM`]
    /// in version 2; also [`FLAG_STREAM`] and [`FLAG_RESET`] in version 3).
    #[error("unknown header flags {0:#04x}")]
    UnknownFlags(u8),
    /// A control frame with a codec, flags, or differing lengths; a version-3
    /// frame that is not a data frame, or lacks [`FLAG_STREAM`]; a stream
    /// frame of a codec without stream context, or a stream codec's frame
    /// without [`FLAG_STREAM`].
    #[error("nonzero header field `{field}` in a {kind:?} frame")]
    BadHeader {
        /// The frame's kind.
        kind: FrameKind,
        /// The offending header field.
        field: &'static str,
    },
    /// A header declares more bytes than [`Limits`] (or [`MAX_CONTROL_PAYLOAD`]) allow;
    /// detected before anything is allocated.
    #[error("oversized {what}: {declared} bytes declared, the limit is {limit}")]
    Oversized {
        /// Which length was too large.
        what: &'static str,
        /// The length the header declares, in bytes.
        declared: u64,
        /// The largest length allowed, in bytes.
        limit: u64,
    },
    /// A data frame names a codec id this end's [`Registry`](crate::Registry) lacks.
    #[error("unknown codec id {0} (not in this end's registry)")]
    UnknownCodec(u8),
    /// The stream ended in the middle of a frame.
    #[error("truncated {what}: {have} of {needed} bytes")]
    Truncated {
        /// The part of the frame that was cut short (header or payload).
        what: &'static str,
        /// Bytes that part needs.
        needed: usize,
        /// Bytes that arrived.
        have: usize,
    },
    /// The codec could not decompress the payload.
    #[error("corrupted message: {0}")]
    Corrupted(#[from] crate::codec::CodecError),
    /// The decompressed message does not match the frame's CRC-32.
    #[error("checksum mismatch: header says {expected:#010x}, message has {actual:#010x}")]
    ChecksumMismatch {
        /// The CRC-32 carried in the frame.
        expected: u32,
        /// The CRC-32 of the decompressed message.
        actual: u32,
    },
    /// A control frame's payload does not parse.
    #[error("malformed {kind:?} payload: {detail}")]
    BadPayload {
        /// The control frame's kind.
        kind: FrameKind,
        /// What is wrong with it.
        detail: String,
    },
    /// The handshake failed (unexpected frame, incompatible peer).
    #[error("handshake: {0}")]
    Handshake(String),
    /// A message to send is larger than the limit (this end's or the peer's).
    #[error("message of {len} bytes exceeds the limit of {limit} bytes")]
    MessageTooLarge {
        /// The message's length, in bytes.
        len: usize,
        /// The largest message allowed, in bytes.
        limit: u32,
    },
    /// The peer closed the connection where a frame was required; the text says
    /// when (` during the handshake`).
    #[error("connection closed by the peer{0}")]
    Closed(&'static str),
    /// The peer reset the connection (TCP RST, `ECONNRESET`) after this end
    /// had received `messages` messages: whatever it sent after those may
    /// be lost, so this is never reported as a clean end of stream.
    #[error("the peer reset the connection after {messages} messages; data it sent after those may be lost")]
    Reset {
        /// Messages received on the stream before the reset.
        messages: u64,
    },
    /// Reading or writing the transport failed.
    #[error("i/o error: {0}")]
    Io(#[from] std::io::Error),
}

impl WireError {
    /// A short stable label for metrics and tests (`truncated`, `oversized`, …).
    pub fn kind_label(&self) -> &'static str {
        match self {
            WireError::BadMagic(..) => "bad_magic",
            WireError::WrongVersion { .. } => "wrong_version",
            WireError::UnknownKind(_) => "unknown_kind",
            WireError::UnknownFlags(_) => "unknown_flags",
            WireError::BadHeader { .. } => "bad_header",
            WireError::Oversized { .. } => "oversized",
            WireError::UnknownCodec(_) => "unknown_codec",
            WireError::Truncated { .. } => "truncated",
            WireError::Corrupted(_) => "corrupted",
            WireError::ChecksumMismatch { .. } => "checksum",
            WireError::BadPayload { .. } => "bad_payload",
            WireError::Handshake(_) => "handshake",
            WireError::MessageTooLarge { .. } => "too_large",
            WireError::Closed(_) => "closed",
            WireError::Reset { .. } => "reset",
            WireError::Io(_) => "io",
        }
    }
}

/// A parsed frame header.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Header {
    /// What the frame carries.
    pub kind: FrameKind,
    /// The codec the payload is compressed with ([`CodecId::NONE`] for control frames).
    pub codec: CodecId,
    /// Flag bits: [`FLAG_CHECKSUM`], and in stream frames [`FLAG_STREAM`]
    /// and [`FLAG_RESET`]. The version written follows from them:
    /// [`VERSION`] with [`FLAG_STREAM`], [`BASE_VERSION`] without.
    pub flags: u8,
    /// The message's length once decompressed, in bytes.
    pub uncompressed_len: u32,
    /// The payload's length on the wire, in bytes (after the optional CRC).
    pub payload_len: u32,
}

impl Header {
    /// Bytes between the header and the payload.
    pub fn extra_len(&self) -> usize {
        if self.flags & FLAG_CHECKSUM != 0 {
            4
        } else {
            0
        }
    }

    /// Whether this is a stream frame (version 3, [`FLAG_STREAM`]).
    pub fn is_stream(&self) -> bool {
        self.flags & FLAG_STREAM != 0
    }

    /// Whether this stream frame starts a new context ([`FLAG_RESET`]).
    pub fn is_reset(&self) -> bool {
        self.flags & FLAG_RESET != 0
    }

    /// The version byte this header is written with.
    pub fn version(&self) -> u8 {
        if self.is_stream() {
            VERSION
        } else {
            BASE_VERSION
        }
    }

    /// Appends the 14 header bytes.
    pub fn write(&self, out: &mut Vec<u8>) {
        out.extend_from_slice(&MAGIC);
        out.push(self.version());
        out.push(self.kind as u8);
        out.push(self.codec.0);
        out.push(self.flags);
        out.extend_from_slice(&self.uncompressed_len.to_le_bytes());
        out.extend_from_slice(&self.payload_len.to_le_bytes());
    }

    /// Parses and validates 14 header bytes against `limits`.
    pub fn parse(b: &[u8; HEADER_LEN], limits: &Limits) -> Result<Header, WireError> {
        if b[0..2] != MAGIC {
            return Err(WireError::BadMagic(b[0], b[1]));
        }
        let version = b[2];
        if version != BASE_VERSION && version != VERSION {
            return Err(WireError::WrongVersion { found: version });
        }
        let kind = FrameKind::from_u8(b[3]).ok_or(WireError::UnknownKind(b[3]))?;
        let codec = CodecId(b[4]);
        let flags = b[5];
        let known = if version == VERSION {
            FLAG_CHECKSUM | FLAG_STREAM | FLAG_RESET
        } else {
            FLAG_CHECKSUM
        };
        if flags & !known != 0 {
            return Err(WireError::UnknownFlags(flags));
        }
        if version == VERSION {
            // Version 3 adds stream frames and nothing else.
            let field = if kind != FrameKind::Data {
                Some("version")
            } else if flags & FLAG_STREAM == 0 || codec == CodecId::NONE {
                Some("flags")
            } else {
                None
            };
            if let Some(field) = field {
                return Err(WireError::BadHeader { kind, field });
            }
        }
        let uncompressed_len = u32::from_le_bytes([b[6], b[7], b[8], b[9]]);
        let payload_len = u32::from_le_bytes([b[10], b[11], b[12], b[13]]);
        let h = Header {
            kind,
            codec,
            flags,
            uncompressed_len,
            payload_len,
        };
        match kind {
            FrameKind::Data => {
                let limit = u64::from(limits.max_message);
                if u64::from(uncompressed_len) > limit {
                    return Err(WireError::Oversized {
                        what: "message (uncompressed length)",
                        declared: uncompressed_len.into(),
                        limit,
                    });
                }
                if u64::from(payload_len) > limit {
                    return Err(WireError::Oversized {
                        what: "message (compressed length)",
                        declared: payload_len.into(),
                        limit,
                    });
                }
            }
            _ => {
                if codec != CodecId::NONE {
                    return Err(WireError::BadHeader {
                        kind,
                        field: "codec",
                    });
                }
                if flags != 0 {
                    return Err(WireError::BadHeader {
                        kind,
                        field: "flags",
                    });
                }
                if uncompressed_len != payload_len {
                    return Err(WireError::BadHeader {
                        kind,
                        field: "uncompressed length",
                    });
                }
                if payload_len > MAX_CONTROL_PAYLOAD {
                    return Err(WireError::Oversized {
                        what: "control frame",
                        declared: payload_len.into(),
                        limit: MAX_CONTROL_PAYLOAD.into(),
                    });
                }
            }
        }
        Ok(h)
    }
}

/// One complete frame off the wire (payload still compressed).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct RawFrame {
    /// The validated header.
    pub header: Header,
    /// The CRC-32 of the uncompressed message, when the header's flag says one follows.
    pub checksum: Option<u32>,
    /// The payload as received (`header.payload_len` bytes, still compressed).
    pub payload: Vec<u8>,
}

/// Appends a control frame (uncompressed, no checksum).
pub fn write_control(kind: FrameKind, payload: &[u8], out: &mut Vec<u8>) {
    Header {
        kind,
        codec: CodecId::NONE,
        flags: 0,
        uncompressed_len: payload.len() as u32,
        payload_len: payload.len() as u32,
    }
    .write(out);
    out.extend_from_slice(payload);
}

/// Incremental frame parser with bounded memory.
///
/// Feed bytes with [`FrameDecoder::push`]; it takes at most what the current
/// frame still needs (never a byte of the next frame) and returns how much
/// it took. When a frame is complete, [`FrameDecoder::take_frame`] yields it.
/// After an error the decoder stays failed: a byte stream that lost framing
/// cannot be resynchronised safely.
#[derive(Debug)]
pub struct FrameDecoder {
    limits: Limits,
    header_buf: [u8; HEADER_LEN + 4],
    header_have: usize,
    header: Option<Header>,
    payload: Vec<u8>,
    failed: bool,
}

impl FrameDecoder {
    /// An empty decoder that rejects frames beyond `limits`.
    pub fn new(limits: Limits) -> Self {
        FrameDecoder {
            limits,
            header_buf: [0; HEADER_LEN + 4],
            header_have: 0,
            header: None,
            payload: Vec::new(),
            failed: false,
        }
    }

    /// The limits frames are checked against.
    pub fn limits(&self) -> Limits {
        self.limits
    }

    /// Bytes still needed to complete the current frame as far as known: until
    /// the header is complete only the header's remaining bytes (at least 1).
    pub fn wanted(&self) -> usize {
        match &self.header {
            None => HEADER_LEN - self.header_have.min(HEADER_LEN),
            Some(h) => {
                let extra = HEADER_LEN + h.extra_len();
                if self.header_have < extra {
                    extra - self.header_have
                } else {
                    (h.payload_len as usize - self.payload.len()).max(1)
                }
            }
        }
    }

    /// True when no byte of a frame has been taken (a clean frame boundary).
    pub fn at_boundary(&self) -> bool {
        self.header_have == 0 && self.header.is_none()
    }

    /// Takes bytes from `data` (at most what the current frame needs);
    /// returns how many were taken, or the error in the bytes seen so far.
    pub fn push(&mut self, data: &[u8]) -> Result<usize, WireError> {
        if self.failed {
            return Err(WireError::Handshake(
                "the stream already failed; no more frames can be read".into(),
            ));
        }
        let r = self.push_inner(data);
        if r.is_err() {
            self.failed = true;
        }
        r
    }

    fn push_inner(&mut self, data: &[u8]) -> Result<usize, WireError> {
        let mut used = 0;
        if self.header.is_none() {
            let n = (HEADER_LEN - self.header_have).min(data.len());
            self.header_buf[self.header_have..self.header_have + n].copy_from_slice(&data[..n]);
            self.header_have += n;
            used += n;
            // Reject garbage as soon as the magic is visible.
            if self.header_have >= 2 && self.header_buf[0..2] != MAGIC {
                return Err(WireError::BadMagic(self.header_buf[0], self.header_buf[1]));
            }
            if self.header_have < HEADER_LEN {
                return Ok(used);
            }
            let mut fixed = [0u8; HEADER_LEN];
            fixed.copy_from_slice(&self.header_buf[..HEADER_LEN]);
            let h = Header::parse(&fixed, &self.limits)?;
            // Allocation happens only after the lengths passed the limits.
            self.payload = Vec::with_capacity(h.payload_len as usize);
            self.header = Some(h);
        }
        let h = self.header.expect("set above");
        let full_header = HEADER_LEN + h.extra_len();
        if self.header_have < full_header {
            let n = (full_header - self.header_have).min(data.len() - used);
            self.header_buf[self.header_have..self.header_have + n]
                .copy_from_slice(&data[used..used + n]);
            self.header_have += n;
            used += n;
            if self.header_have < full_header {
                return Ok(used);
            }
        }
        let n = (h.payload_len as usize - self.payload.len()).min(data.len() - used);
        self.payload.extend_from_slice(&data[used..used + n]);
        used += n;
        Ok(used)
    }

    /// The completed frame, if the last push completed one.
    pub fn take_frame(&mut self) -> Option<RawFrame> {
        let h = self.header?;
        let full_header = HEADER_LEN + h.extra_len();
        if self.header_have < full_header || self.payload.len() < h.payload_len as usize {
            return None;
        }
        let checksum = (h.extra_len() == 4).then(|| {
            u32::from_le_bytes([
                self.header_buf[14],
                self.header_buf[15],
                self.header_buf[16],
                self.header_buf[17],
            ])
        });
        self.header = None;
        self.header_have = 0;
        Some(RawFrame {
            header: h,
            checksum,
            payload: std::mem::take(&mut self.payload),
        })
    }

    /// What an end of stream means here: `Ok` at a frame boundary, else the
    /// truncation error.
    pub fn finish(&self) -> Result<(), WireError> {
        if self.at_boundary() {
            return Ok(());
        }
        match &self.header {
            None => Err(WireError::Truncated {
                what: "frame header",
                needed: HEADER_LEN,
                have: self.header_have,
            }),
            Some(h) => Err(WireError::Truncated {
                what: "frame",
                needed: HEADER_LEN + h.extra_len() + h.payload_len as usize,
                have: self.header_have + self.payload.len(),
            }),
        }
    }
}

/// Parses every frame of a complete buffer (for tests and fuzzing); fails on
/// trailing partial frames.
pub fn parse_all(mut data: &[u8], limits: Limits) -> Result<Vec<RawFrame>, WireError> {
    let mut d = FrameDecoder::new(limits);
    let mut frames = Vec::new();
    while !data.is_empty() {
        let n = d.push(data)?;
        data = &data[n..];
        if let Some(f) = d.take_frame() {
            frames.push(f);
        }
    }
    d.finish()?;
    Ok(frames)
}

/// The handshake payload.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Hello {
    /// Largest message this end accepts.
    pub max_message: u32,
    /// Codecs this end can decode (always includes `none`).
    pub decoders: Vec<CodecId>,
    /// This end asks the peer to checksum data frames.
    pub want_checksum: bool,
}

impl Hello {
    /// The frame payload: `max_message` (u32 LE), checksum request (0/1), codec count, codec ids.
    pub fn encode(&self) -> Vec<u8> {
        let mut p = Vec::with_capacity(6 + self.decoders.len());
        p.extend_from_slice(&self.max_message.to_le_bytes());
        p.push(u8::from(self.want_checksum));
        p.push(self.decoders.len() as u8);
        p.extend(self.decoders.iter().map(|c| c.0));
        p
    }

    /// Parses a hello payload; [`WireError::BadPayload`] if malformed or if the
    /// codec list lacks `none`.
    pub fn decode(p: &[u8]) -> Result<Hello, WireError> {
        let bad = |d: &str| WireError::BadPayload {
            kind: FrameKind::Hello,
            detail: d.to_string(),
        };
        if p.len() < 6 {
            return Err(bad("shorter than 6 bytes"));
        }
        let max_message = u32::from_le_bytes([p[0], p[1], p[2], p[3]]);
        let want_checksum = match p[4] {
            0 => false,
            1 => true,
            v => return Err(bad(&format!("checksum request byte is {v}, not 0 or 1"))),
        };
        let n = p[5] as usize;
        if p.len() != 6 + n {
            return Err(bad(&format!(
                "declares {n} codecs but carries {} bytes of codec ids",
                p.len() - 6
            )));
        }
        let decoders: Vec<CodecId> = p[6..].iter().map(|&b| CodecId(b)).collect();
        if !decoders.contains(&CodecId::NONE) {
            return Err(bad("the codec list lacks `none` (id 0)"));
        }
        Ok(Hello {
            max_message,
            decoders,
            want_checksum,
        })
    }
}

/// A probe: sequence number and the sender's monotonic send time.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct LinkProbe {
    /// Sequence number, echoed in the reply.
    pub seq: u32,
    /// The prober's monotonic clock at sending, in ns; echoed in the reply.
    pub sent_ns: u64,
    /// Padding bytes (to measure the per-byte link cost).
    pub pad: u32,
}

impl LinkProbe {
    /// The frame payload: `seq` (u32 LE), `sent_ns` (u64 LE), then `pad` zero bytes.
    pub fn encode(&self) -> Vec<u8> {
        let mut p = Vec::with_capacity(12 + self.pad as usize);
        p.extend_from_slice(&self.seq.to_le_bytes());
        p.extend_from_slice(&self.sent_ns.to_le_bytes());
        p.resize(12 + self.pad as usize, 0);
        p
    }

    /// Parses a probe payload (at least 12 bytes; the rest is padding).
    pub fn decode(p: &[u8]) -> Result<LinkProbe, WireError> {
        if p.len() < 12 {
            return Err(WireError::BadPayload {
                kind: FrameKind::Probe,
                detail: format!("{} bytes, at least 12 expected", p.len()),
            });
        }
        Ok(LinkProbe {
            seq: u32::from_le_bytes(p[0..4].try_into().expect("4 bytes")),
            sent_ns: u64::from_le_bytes(p[4..12].try_into().expect("8 bytes")),
            pad: (p.len() - 12) as u32,
        })
    }
}

/// Decompression work the receiver did with one codec since its last reply.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Default)]
pub struct DecompressReport {
    /// The codec.
    pub codec: CodecId,
    /// Messages decompressed.
    pub messages: u32,
    /// Uncompressed bytes produced.
    pub bytes: u64,
    /// Time spent decompressing them, in ns.
    pub nanos: u64,
}

/// The answer to a probe.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct LinkProbeReply {
    /// The answered probe's sequence number.
    pub seq: u32,
    /// The answered probe's `sent_ns`, unchanged (the prober's clock).
    pub echoed_sent_ns: u64,
    /// Size of the probe payload that was answered (to tell padded probes apart).
    pub probe_len: u32,
    /// How long the answering end held the reply before writing it (ns,
    /// saturating): the prober subtracts it from the round trip, like QUIC's
    /// ACK delay, so an application's think time between a request and its
    /// next write does not count as network time. The answering endpoint
    /// encodes 0 and sets it just before the write ([`LinkProbeReply::stamp_held`]).
    pub held_ns: u32,
    /// Per-codec decompression work since the previous reply (at most 255 entries).
    pub reports: Vec<DecompressReport>,
}

impl LinkProbeReply {
    const ENTRY: usize = 1 + 4 + 8 + 8;
    /// Bytes before the reports.
    const FIXED: usize = 21;
    const HELD_AT: usize = 16;

    /// The frame payload: seq, echoed time, probe length, hold time, report count, reports (LE).
    pub fn encode(&self) -> Vec<u8> {
        let mut p = Vec::with_capacity(Self::FIXED + self.reports.len() * Self::ENTRY);
        p.extend_from_slice(&self.seq.to_le_bytes());
        p.extend_from_slice(&self.echoed_sent_ns.to_le_bytes());
        p.extend_from_slice(&self.probe_len.to_le_bytes());
        p.extend_from_slice(&self.held_ns.to_le_bytes());
        p.push(self.reports.len() as u8);
        for r in &self.reports {
            p.push(r.codec.0);
            p.extend_from_slice(&r.messages.to_le_bytes());
            p.extend_from_slice(&r.bytes.to_le_bytes());
            p.extend_from_slice(&r.nanos.to_le_bytes());
        }
        p
    }

    /// Walks the whole frames in `frames` (as written by [`write_control`])
    /// and sets the hold time of every probe reply for which `held` (given
    /// the reply's sequence number) returns one. Stops at anything that is
    /// not a well-formed frame.
    pub fn stamp_held(frames: &mut [u8], mut held: impl FnMut(u32) -> Option<u32>) {
        let mut pos = 0;
        while let Some(h) = frames
            .get(pos..pos + HEADER_LEN)
            .and_then(|b| Header::parse(b.try_into().ok()?, &Limits::default()).ok())
        {
            let start = pos + HEADER_LEN + h.extra_len();
            let Some(payload) = frames.get_mut(start..start + h.payload_len as usize) else {
                return;
            };
            if h.kind == FrameKind::ProbeReply && payload.len() >= Self::FIXED {
                let seq = u32::from_le_bytes(payload[0..4].try_into().expect("4 bytes"));
                if let Some(ns) = held(seq) {
                    payload[Self::HELD_AT..Self::HELD_AT + 4].copy_from_slice(&ns.to_le_bytes());
                }
            }
            pos = start + h.payload_len as usize;
        }
    }

    /// Parses a probe reply payload; [`WireError::BadPayload`] if its length
    /// does not match its report count.
    pub fn decode(p: &[u8]) -> Result<LinkProbeReply, WireError> {
        let bad = |d: String| WireError::BadPayload {
            kind: FrameKind::ProbeReply,
            detail: d,
        };
        if p.len() < Self::FIXED {
            return Err(bad(format!(
                "{} bytes, at least {} expected",
                p.len(),
                Self::FIXED
            )));
        }
        let n = p[20] as usize;
        if p.len() != Self::FIXED + n * Self::ENTRY {
            return Err(bad(format!(
                "declares {n} reports but carries {} bytes",
                p.len() - Self::FIXED
            )));
        }
        let reports = p[Self::FIXED..]
            .chunks_exact(Self::ENTRY)
            .map(|e| DecompressReport {
                codec: CodecId(e[0]),
                messages: u32::from_le_bytes(e[1..5].try_into().expect("4 bytes")),
                bytes: u64::from_le_bytes(e[5..13].try_into().expect("8 bytes")),
                nanos: u64::from_le_bytes(e[13..21].try_into().expect("8 bytes")),
            })
            .collect();
        Ok(LinkProbeReply {
            seq: u32::from_le_bytes(p[0..4].try_into().expect("4 bytes")),
            echoed_sent_ns: u64::from_le_bytes(p[4..12].try_into().expect("8 bytes")),
            probe_len: u32::from_le_bytes(p[12..16].try_into().expect("4 bytes")),
            held_ns: u32::from_le_bytes(p[16..20].try_into().expect("4 bytes")),
            reports,
        })
    }
}
