//! An adaptive message stream pair (blocking): one end sends 200 mixed
//! messages (text records and some random bytes) and the other echoes them,
//! over a Unix socket pair made a slow link (800 ns/byte, about 10 Mbit/s:
//! the stream is told so, and the echo end holds each message for as long
//! as its wire bytes take), so compressing pays and the adaptive policy
//! does so.
//!
//! `cargo run -p hwqos-compress --example stream_pair`. Asserted: every echo
//! equals its message, and fewer bytes went on the wire than were sent.

use hwqos_compress::{MessageStream, Registry, StreamConfig, WireError};
use std::os::unix::net::UnixStream;
use std::sync::Arc;
use std::time::Duration;

/// The link's cost per byte: about 10 Mbit/s.
const LINK_NS_PER_BYTE: Duration = Duration::from_nanos(800);

/// Message `i`: about 4 KiB of SIP-like text, or every tenth 1 KiB of noise.
fn message(i: u64) -> Vec<u8> {
    if i % 10 == 9 {
        let mut x = i.wrapping_mul(0x9e37_79b9_7f4a_7c15) | 1;
        return (0..1024)
            .map(|_| {
                x ^= x << 13;
                x ^= x >> 7;
                x ^= x << 17;
                x as u8
            })
            .collect();
    }
    let mut m = Vec::new();
    while m.len() < 4096 {
        let n = m.len() as u64 + i;
        m.extend(format!("INVITE sip:user{n}@example.com SIP/2.0\r\nCSeq: {i} INVITE\r\n").bytes());
    }
    m
}

fn main() -> Result<(), WireError> {
    let config = StreamConfig {
        link_ns_per_byte: Some(LINK_NS_PER_BYTE.as_nanos() as f64),
        // No CPU throttle: on a busy machine the default one (this node's
        // /proc/stat) would rightly hold compression back.
        throttle: None,
        ..StreamConfig::default()
    };
    let registry = Arc::new(Registry::standard());
    let (a, b) = UnixStream::pair()?;
    let (peer_config, peer_registry) = (config.clone(), registry.clone());
    let echo = std::thread::spawn(move || -> Result<(), WireError> {
        let mut s = MessageStream::handshake(b, peer_config, peer_registry)?;
        let mut arrived = 0;
        while let Some(msg) = s.recv_msg()? {
            // The socket pair is fast; the echo end makes it the declared
            // link by holding each message for the time its wire bytes
            // take at 800 ns/byte.
            let wire = s.stats().wire_bytes_received;
            std::thread::sleep(LINK_NS_PER_BYTE * (wire - arrived) as u32);
            arrived = wire;
            s.send_msg(&msg)?;
        }
        Ok(())
    });

    let mut s = MessageStream::handshake(a, config, registry)?;
    for i in 0..200 {
        let msg = message(i);
        s.send_msg(&msg)?;
        assert_eq!(s.recv_msg()?.as_deref(), Some(&msg[..]), "echo of {i}");
    }
    let st = s.stats();
    // A clean end of stream for the echo end (dropping `s` would do the
    // same, waiting at most DROP_DRAIN_TIMEOUT): every echo was read, so
    // nothing is discarded.
    assert_eq!(s.finish(Duration::from_secs(10))?, 0);
    echo.join().expect("echo thread")?;

    println!("messages_sent = {}", st.messages_sent);
    println!("app_bytes_sent = {}", st.app_bytes_sent);
    println!("wire_bytes_sent = {}", st.wire_bytes_sent);
    println!("sent_per_codec = {:?}", st.sent_per_codec);
    println!("chosen = {}", st.chosen);
    assert!(st.wire_bytes_sent < st.app_bytes_sent, "nothing saved");
    Ok(())
}
