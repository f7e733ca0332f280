//! Builds with different codec features talk to each other: a codec id a
//! peer offers that this build lacks (a feature left off, or a codec from a
//! newer version) is valid in a hello and simply not negotiated.

use hwqos_compress::codec::NoneCodec;
use hwqos_compress::wire::{parse_all, write_control, FrameKind, Hello};
use hwqos_compress::{
    Codec, CodecError, CodecId, Endpoint, PolicyKind, Registry, Sampling, StreamConfig,
};
use std::sync::Arc;

/// A codec with an id no build of this version knows.
struct FutureCodec;

impl Codec for FutureCodec {
    fn id(&self) -> CodecId {
        CodecId(200)
    }
    fn name(&self) -> &'static str {
        "future"
    }
    fn compress(&self, input: &[u8], out: &mut Vec<u8>) -> Result<(), CodecError> {
        NoneCodec.compress(input, out)
    }
    fn decompress(
        &self,
        input: &[u8],
        expected_len: usize,
        out: &mut Vec<u8>,
    ) -> Result<(), CodecError> {
        NoneCodec.decompress(input, expected_len, out)
    }
}

fn config() -> StreamConfig {
    StreamConfig {
        policy: PolicyKind::RoundRobin,
        sampling: Sampling::Off,
        ..Default::default()
    }
}

#[test]
fn a_codec_only_the_peer_has_is_not_negotiated() {
    let ours = Arc::new(Registry::standard());
    let mut theirs = Registry::standard();
    theirs.register(Arc::new(FutureCodec)).unwrap();
    let mut a = Endpoint::new(config(), ours.clone());
    let mut b = Endpoint::new(config(), Arc::new(theirs));
    a.handshake_in_memory(&mut b).unwrap();
    assert_eq!(a.send_codecs(), ours.ids().as_slice());
    assert_eq!(b.send_codecs(), ours.ids().as_slice());
    // Round robin over the common codecs: the peer never sends with 200.
    let msg = b"REGISTER sip:example.com SIP/2.0\r\n".repeat(20);
    for _ in 0..3 * ours.len() {
        let mut out = Vec::new();
        let codec = b.encode(&msg, &mut out).unwrap();
        assert_ne!(codec, CodecId(200));
        let mut replies = Vec::new();
        for frame in parse_all(&out, a.limits()).unwrap() {
            if let Some(got) = a.decode(frame, &mut replies).unwrap() {
                assert_eq!(got, msg);
            }
        }
    }
}

#[test]
fn a_hello_with_every_codec_id_is_accepted() {
    let reg = Arc::new(Registry::standard());
    let mut ep = Endpoint::new(config(), reg.clone());
    let hello = Hello {
        max_message: 1 << 20,
        decoders: (0..=254).map(CodecId).collect(),
        want_checksum: false,
    };
    let mut bytes = Vec::new();
    write_control(FrameKind::Hello, &hello.encode(), &mut bytes);
    let frame = parse_all(&bytes, ep.limits())
        .unwrap()
        .into_iter()
        .next()
        .unwrap();
    ep.accept_hello(frame).unwrap();
    assert_eq!(ep.send_codecs(), reg.ids().as_slice());
}
