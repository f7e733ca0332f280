//! Blocking and async streams: round trips for every policy, many interleaved
//! streams in one process, and the handshake with mismatched codec sets.

#[cfg(feature = "tokio")]
use hwqos_compress::AsyncMessageStream;
use hwqos_compress::{MessageStream, PolicyKind, Registry, Sampling, StreamConfig};
use proptest::prelude::*;
use std::os::unix::net::UnixStream;
use std::sync::Arc;
use std::thread;

fn policies() -> Vec<PolicyKind> {
    let mut p: Vec<PolicyKind> = Registry::standard()
        .names()
        .into_iter()
        .map(|n| PolicyKind::One(n.to_string()))
        .collect();
    p.extend([
        PolicyKind::RoundRobin,
        PolicyKind::Majority,
        PolicyKind::Adaptive,
    ]);
    p
}

fn config(policy: PolicyKind) -> StreamConfig {
    StreamConfig {
        policy,
        throttle: None,
        round_messages: 10,
        probe_every: 3,
        checksum: true,
        sampling: Sampling::Inline,
        // The sampler's wall-time share is not limited on the simulated link.
        adaptive: hwqos_compress::policy::AdaptiveTuning {
            explore_share: f64::INFINITY,
            burst_share: f64::INFINITY,
            ..Default::default()
        },
        // A slow link makes compression worthwhile for adaptive/majority.
        link_ns_per_byte: Some(100.0),
        ..Default::default()
    }
}

/// Client sends every message, an echo server sends it back; returns the echoes
/// and the client's per-codec counts.
fn echo_run(
    client_cfg: StreamConfig,
    client_reg: Registry,
    server_cfg: StreamConfig,
    server_reg: Registry,
    msgs: Vec<Vec<u8>>,
) -> (Vec<Vec<u8>>, std::collections::BTreeMap<String, u64>) {
    let (a, b) = UnixStream::pair().unwrap();
    let server = thread::spawn(move || {
        let mut s = MessageStream::handshake(b, server_cfg, Arc::new(server_reg)).unwrap();
        while let Some(m) = s.recv_msg().unwrap() {
            s.send_msg(&m).unwrap();
        }
    });
    let mut c = MessageStream::handshake(a, client_cfg, Arc::new(client_reg)).unwrap();
    let mut echoes = Vec::new();
    for m in &msgs {
        c.send_msg(m).unwrap();
        echoes.push(c.recv_msg().unwrap().expect("echo"));
    }
    let counts = c.stats().sent_per_codec;
    drop(c);
    server.join().unwrap();
    (echoes, counts)
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(6))]

    #[test]
    fn every_policy_round_trips(msgs in proptest::collection::vec(
        prop_oneof![
            proptest::collection::vec(any::<u8>(), 0..700),
            (1usize..3000).prop_map(|n| b"key=value; ".iter().copied().cycle().take(n).collect()),
        ], 1..40)) {
        for p in policies() {
            let (echoes, _) = echo_run(config(p.clone()), Registry::standard(), config(p.clone()), Registry::standard(), msgs.clone());
            prop_assert_eq!(&echoes, &msgs, "policy {}", p);
        }
    }
}

#[test]
fn round_robin_uses_every_compressing_codec() {
    let msgs: Vec<Vec<u8>> = (0..100)
        .map(|i| format!("message {i} ").repeat(40).into_bytes())
        .collect();
    let (echoes, counts) = echo_run(
        config(PolicyKind::RoundRobin),
        Registry::standard(),
        config(PolicyKind::RoundRobin),
        Registry::standard(),
        msgs.clone(),
    );
    assert_eq!(echoes, msgs);
    for name in Registry::standard().names().into_iter().skip(1) {
        assert!(
            counts.get(name).copied().unwrap_or(0) >= 5,
            "{name}: {counts:?}"
        );
    }
}

#[cfg(all(feature = "bzip2", feature = "deflate"))]
#[test]
fn mismatched_codec_sets_only_use_common_codecs() {
    let client_reg = Registry::standard()
        .subset(&["lz4", "zstd-3", "bzip2-9"])
        .unwrap();
    let server_reg = Registry::standard()
        .subset(&["snappy", "zstd-3", "deflate"])
        .unwrap();
    let msgs: Vec<Vec<u8>> = (0..60)
        .map(|i| format!("payload {i} ").repeat(30).into_bytes())
        .collect();
    let (echoes, counts) = echo_run(
        config(PolicyKind::RoundRobin),
        client_reg,
        config(PolicyKind::RoundRobin),
        server_reg,
        msgs.clone(),
    );
    assert_eq!(echoes, msgs);
    let used: Vec<&String> = counts.keys().collect();
    assert_eq!(used, vec!["zstd-3"], "{counts:?}");
}

#[cfg(feature = "lzma")]
#[test]
fn a_fixed_codec_the_peer_lacks_falls_back_to_none() {
    let server_reg = Registry::standard().subset(&["snappy"]).unwrap();
    let msgs: Vec<Vec<u8>> = (0..20).map(|_| vec![b'z'; 500]).collect();
    let (echoes, counts) = echo_run(
        config("one:lzma-6".parse().unwrap()),
        Registry::standard(),
        config("one:snappy".parse().unwrap()),
        server_reg,
        msgs.clone(),
    );
    assert_eq!(echoes, msgs);
    assert_eq!(
        counts.keys().collect::<Vec<_>>(),
        vec!["none"],
        "{counts:?}"
    );
}

#[test]
fn interleaved_streams_keep_their_own_state() {
    // Eight streams in one process, messages sent in alternation, each with a
    // different policy and content; every stream gets exactly its own messages.
    let mut clients = Vec::new();
    let mut servers = Vec::new();
    let ps = policies();
    for i in 0..8 {
        let (a, b) = UnixStream::pair().unwrap();
        let p = ps[i % ps.len()].clone();
        let sp = p.clone();
        // One-way streams: nobody reads probe replies, so no probes.
        let one_way = |p| StreamConfig {
            probe_every: 0,
            ..config(p)
        };
        servers.push(thread::spawn(move || {
            let mut s =
                MessageStream::handshake(b, one_way(sp), Arc::new(Registry::standard())).unwrap();
            let mut got = Vec::new();
            while let Some(m) = s.recv_msg().unwrap() {
                got.push(m);
            }
            got
        }));
        clients.push(thread::spawn(move || {
            MessageStream::handshake(a, one_way(p), Arc::new(Registry::standard())).unwrap()
        }));
    }
    let mut clients: Vec<_> = clients.into_iter().map(|h| h.join().unwrap()).collect();
    let msg = |s: usize, k: usize| {
        format!("stream {s} message {k} ")
            .repeat(s + 1)
            .into_bytes()
    };
    for k in 0..50 {
        for (s, c) in clients.iter_mut().enumerate() {
            c.send_msg(&msg(s, k)).unwrap();
        }
    }
    let stats: Vec<_> = clients.iter().map(|c| c.stats()).collect();
    drop(clients);
    for (s, h) in servers.into_iter().enumerate() {
        let got = h.join().unwrap();
        assert_eq!(got.len(), 50);
        for (k, m) in got.iter().enumerate() {
            assert_eq!(m, &msg(s, k));
        }
        assert_eq!(stats[s].messages_sent, 50);
    }
}

#[cfg(feature = "tokio")]
#[test]
fn async_streams_round_trip_and_split() {
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    rt.block_on(async {
        let (a, b) = tokio::io::duplex(1 << 16);
        let (ar, aw) = tokio::io::split(a);
        let (br, bw) = tokio::io::split(b);
        let reg = Arc::new(Registry::standard());
        let server = tokio::spawn({
            let reg = reg.clone();
            async move {
                let s = AsyncMessageStream::handshake(br, bw, config(PolicyKind::Adaptive), reg)
                    .await
                    .unwrap();
                let (mut tx, mut rx) = s.into_split();
                while let Some(m) = rx.recv_msg().await.unwrap() {
                    tx.send_msg(&m).await.unwrap();
                }
                tx.shutdown().await.unwrap();
            }
        });
        let mut c = AsyncMessageStream::handshake(ar, aw, config(PolicyKind::Majority), reg)
            .await
            .unwrap();
        for i in 0..200u32 {
            let m = format!("async {i} ").repeat((i % 50) as usize).into_bytes();
            c.send_msg(&m).await.unwrap();
            assert_eq!(c.recv_msg().await.unwrap().unwrap(), m);
        }
        let st = c.stats();
        assert_eq!(st.messages_sent, 200);
        assert!(st.rtt_ns.is_some(), "probes answered: {st:?}");
        let (mut tx, mut rx) = c.into_split();
        tx.shutdown().await.unwrap();
        assert!(rx.recv_msg().await.unwrap().is_none());
        server.await.unwrap();
    });
}

#[test]
fn a_truncated_stream_is_an_error_and_a_clean_close_is_not() {
    use std::io::Write;
    let (a, mut b) = UnixStream::pair().unwrap();
    let t = thread::spawn(move || {
        let mut s = MessageStream::handshake(
            a,
            config(PolicyKind::Adaptive),
            Arc::new(Registry::standard()),
        )
        .unwrap();
        s.recv_msg()
    });
    // Handshake by hand, then half a frame.
    let mut ep =
        hwqos_compress::Endpoint::new(config(PolicyKind::Adaptive), Arc::new(Registry::standard()));
    let mut h = Vec::new();
    ep.write_hello(&mut h);
    b.write_all(&h).unwrap();
    b.write_all(b"HQ\x02\x00").unwrap();
    b.shutdown(std::net::Shutdown::Write).unwrap();
    let e = t.join().unwrap().unwrap_err();
    assert!(e.to_string().contains("truncated"), "{e}");
}

/// Probe replies ride in front of the receiver's next message, and a receiver
/// that never sends still answers them before it blocks for more input.
#[test]
fn probe_replies_are_piggybacked_or_flushed_before_blocking() {
    use std::io::Read;
    use std::io::Write;
    // Ping-pong: the echo carries the reply; the client learns the RTT.
    let (a, b) = UnixStream::pair().unwrap();
    let server = thread::spawn(move || {
        let mut s = MessageStream::handshake(
            b,
            config(PolicyKind::Adaptive),
            Arc::new(Registry::standard()),
        )
        .unwrap();
        while let Some(m) = s.recv_msg().unwrap() {
            s.send_msg(&m).unwrap();
        }
    });
    let mut c = MessageStream::handshake(
        a,
        config(PolicyKind::Adaptive),
        Arc::new(Registry::standard()),
    )
    .unwrap();
    for i in 0..20u8 {
        c.send_msg(&[i; 100]).unwrap();
        assert_eq!(c.recv_msg().unwrap().unwrap(), vec![i; 100]);
    }
    assert!(c.stats().rtt_ns.is_some(), "{:?}", c.stats());
    drop(c);
    server.join().unwrap();

    // One way: the receiver only receives, so its replies are flushed when it
    // has consumed everything and would block. The sender reads them raw.
    let (mut a, b) = UnixStream::pair().unwrap();
    let receiver = thread::spawn(move || {
        let mut s = MessageStream::handshake(
            b,
            config(PolicyKind::One("none".into())),
            Arc::new(Registry::standard()),
        )
        .unwrap();
        let mut n = 0;
        while s.recv_msg().unwrap().is_some() {
            n += 1;
        }
        n
    });
    let mut ep = hwqos_compress::Endpoint::new(
        config(PolicyKind::One("none".into())),
        Arc::new(Registry::standard()),
    );
    let mut hello = Vec::new();
    ep.write_hello(&mut hello);
    a.write_all(&hello).unwrap();
    let mut peer_hello = [0u8; 4096];
    let n = a.read(&mut peer_hello).unwrap();
    let frames = hwqos_compress::wire::parse_all(&peer_hello[..n], ep.limits()).unwrap();
    ep.accept_hello(frames.into_iter().next().unwrap()).unwrap();
    let mut out = Vec::new();
    ep.encode(b"first message", &mut out).unwrap(); // carries probe 0
    a.write_all(&out).unwrap();
    let mut reply = [0u8; 4096];
    let n = a.read(&mut reply).unwrap();
    let frames = hwqos_compress::wire::parse_all(&reply[..n], ep.limits()).unwrap();
    assert_eq!(frames.len(), 1);
    assert_eq!(
        frames[0].header.kind,
        hwqos_compress::wire::FrameKind::ProbeReply
    );
    drop(a);
    assert_eq!(receiver.join().unwrap(), 1);
}

#[cfg(feature = "tokio")]
/// An async writer that counts its `poll_write` calls that wrote bytes.
struct CountingWriter<W> {
    inner: W,
    writes: Arc<std::sync::atomic::AtomicUsize>,
}

#[cfg(feature = "tokio")]
impl<W: tokio::io::AsyncWrite + Unpin> tokio::io::AsyncWrite for CountingWriter<W> {
    fn poll_write(
        mut self: std::pin::Pin<&mut Self>,
        cx: &mut std::task::Context<'_>,
        buf: &[u8],
    ) -> std::task::Poll<std::io::Result<usize>> {
        let r = std::pin::Pin::new(&mut self.inner).poll_write(cx, buf);
        if matches!(r, std::task::Poll::Ready(Ok(n)) if n > 0) {
            self.writes
                .fetch_add(1, std::sync::atomic::Ordering::SeqCst);
        }
        r
    }
    fn poll_flush(
        mut self: std::pin::Pin<&mut Self>,
        cx: &mut std::task::Context<'_>,
    ) -> std::task::Poll<std::io::Result<()>> {
        std::pin::Pin::new(&mut self.inner).poll_flush(cx)
    }
    fn poll_shutdown(
        mut self: std::pin::Pin<&mut Self>,
        cx: &mut std::task::Context<'_>,
    ) -> std::task::Poll<std::io::Result<()>> {
        std::pin::Pin::new(&mut self.inner).poll_shutdown(cx)
    }
}

/// Like the blocking stream, the async receiver does not write a probe reply
/// on its own while the message it came with is being handled: the reply
/// rides in front of this end's next message (one write for both).
#[cfg(feature = "tokio")]
#[test]
fn async_probe_replies_ride_in_front_of_the_next_message() {
    use std::sync::atomic::Ordering::SeqCst;
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    rt.block_on(async {
        let (a, b) = tokio::io::duplex(1 << 16);
        let (ar, aw) = tokio::io::split(a);
        let (br, bw) = tokio::io::split(b);
        let writes = Arc::new(std::sync::atomic::AtomicUsize::new(0));
        let bw = CountingWriter {
            inner: bw,
            writes: writes.clone(),
        };
        let reg = Arc::new(Registry::standard());
        let cfg = config(PolicyKind::One("none".into()));
        let (client, server) = tokio::join!(
            AsyncMessageStream::handshake(ar, aw, cfg.clone(), reg.clone()),
            AsyncMessageStream::handshake(br, bw, cfg, reg),
        );
        let (mut client, mut server) = (client.unwrap(), server.unwrap());
        for i in 0..12u8 {
            // Every one of the first messages carries a probe.
            client.send_msg(&[i; 64]).await.unwrap();
            let before = writes.load(SeqCst);
            assert_eq!(server.recv_msg().await.unwrap().unwrap(), vec![i; 64]);
            assert_eq!(writes.load(SeqCst), before, "reply written on its own");
            server.send_msg(&[i; 64]).await.unwrap();
            assert_eq!(
                writes.load(SeqCst),
                before + 1,
                "reply and echo in one write"
            );
            assert_eq!(client.recv_msg().await.unwrap().unwrap(), vec![i; 64]);
        }
        // The replies arrived (in front of the echoes): the client has an RTT.
        assert!(client.stats().rtt_ns.is_some(), "{:?}", client.stats());
    });
}
