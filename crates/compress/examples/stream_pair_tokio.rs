//! The adaptive message stream pair on tokio (feature `tokio`): each end
//! split into a sender and a receiver; one end sends 200 messages from one
//! task while another task receives the echoes.
//!
//! `cargo run -p hwqos-compress --features tokio --example stream_pair_tokio`.
//! Asserted: every echo equals its message, and fewer bytes went on the
//! wire than were sent.

use hwqos_compress::{AsyncMessageStream, Registry, StreamConfig, WireError};
use std::sync::Arc;
use tokio::net::UnixStream;

/// Message `i`: 2–4 KiB of log-like text.
fn message(i: u64) -> Vec<u8> {
    let mut m = Vec::new();
    while m.len() < 2048 + (i as usize % 3) * 1024 {
        let n = m.len() as u64 + i;
        m.extend(
            format!(
                "2026-11-28T10:00:{:02} INFO request {n} served in {} us\n",
                n % 60,
                n % 997
            )
            .bytes(),
        );
    }
    m
}

#[tokio::main]
async fn main() -> Result<(), WireError> {
    let config = StreamConfig {
        link_ns_per_byte: Some(800.0), // a slow link: compressing pays
        throttle: None,                // no CPU throttle (see stream_pair.rs)
        ..StreamConfig::default()
    };
    let registry = Arc::new(Registry::standard());
    let (a, b) = UnixStream::pair()?;

    let (peer_config, peer_registry) = (config.clone(), registry.clone());
    let echo = tokio::spawn(async move {
        let (r, w) = b.into_split();
        let mut s = AsyncMessageStream::handshake(r, w, peer_config, peer_registry).await?;
        while let Some(msg) = s.recv_msg().await? {
            s.send_msg(&msg).await?;
        }
        Ok::<(), WireError>(())
    });

    let (r, w) = a.into_split();
    let stream = AsyncMessageStream::handshake(r, w, config, registry).await?;
    let handle = stream.handle();
    let (mut tx, mut rx) = stream.into_split();
    let sender = tokio::spawn(async move {
        for i in 0..200 {
            tx.send_msg(&message(i)).await?;
        }
        tx.shutdown().await // the echo end sees a clean end of stream
    });
    for i in 0..200 {
        let echoed = rx.recv_msg().await?;
        assert_eq!(echoed, Some(message(i)), "echo of {i}");
    }
    sender.await.expect("sender task")?;
    // Read to the echo end's clean end (nothing is left to discard), so
    // that closing does not reset the connection.
    assert_eq!(rx.finish(std::time::Duration::from_secs(10)).await?, 0);
    echo.await.expect("echo task")?;

    let st = handle.stats();
    println!("messages_sent = {}", st.messages_sent);
    println!("app_bytes_sent = {}", st.app_bytes_sent);
    println!("wire_bytes_sent = {}", st.wire_bytes_sent);
    println!("sent_per_codec = {:?}", st.sent_per_codec);
    assert!(st.wire_bytes_sent < st.app_bytes_sent, "nothing saved");
    Ok(())
}
