//! How a blocking stream ends over real TCP (loopback): a sender dropped
//! with the peer's probe replies unread still delivers every message and
//! then a clean end; a peer that resets the connection is an error at the
//! receiver, never a clean end.

use hwqos_compress::{MessageStream, Registry, StreamConfig, Transport, WireError};
use std::net::{TcpListener, TcpStream};
use std::os::fd::AsRawFd;
use std::sync::Arc;
use std::thread;

/// A slow declared link so that the adaptive policy probes (the first 8
/// messages each carry a probe, which the receiver answers).
fn config() -> StreamConfig {
    StreamConfig {
        link_ns_per_byte: Some(800.0),
        throttle: None,
        ..StreamConfig::default()
    }
}

/// Message `i`: about 3 KiB of text, different for every `i`.
fn message(i: u32) -> Vec<u8> {
    let mut m = Vec::new();
    while m.len() < 3000 {
        m.extend(
            format!(
                "GET /item/{i}/{} HTTP/1.1\r\nHost: example.com\r\n\r\n",
                m.len()
            )
            .bytes(),
        );
    }
    m
}

/// SO_LINGER with a zero timeout: closing the socket then sends RST
/// instead of FIN.
fn linger_zero(fd: std::os::fd::RawFd) {
    let linger = libc::linger {
        l_onoff: 1,
        l_linger: 0,
    };
    // SAFETY: setsockopt reads `size_of::<linger>()` bytes from a value we own.
    let r = unsafe {
        libc::setsockopt(
            fd,
            libc::SOL_SOCKET,
            libc::SO_LINGER,
            (&linger as *const libc::linger).cast(),
            std::mem::size_of::<libc::linger>() as libc::socklen_t,
        )
    };
    assert_eq!(r, 0, "setsockopt(SO_LINGER)");
}

/// A connected loopback pair: (client, server).
fn tcp_pair() -> (TcpStream, TcpStream) {
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    let client = TcpStream::connect(listener.local_addr().unwrap()).unwrap();
    let (server, _) = listener.accept().unwrap();
    for s in [&client, &server] {
        s.set_nodelay(true).unwrap();
        // A safety bound against a hang, not a timing assertion.
        s.set_read_timeout(Some(std::time::Duration::from_secs(60)))
            .unwrap();
    }
    (client, server)
}

/// What the receiving end got: the messages, and how the stream ended.
type Received = (Vec<Vec<u8>>, Result<(), WireError>);

/// Both ends' handshake with [`config`] and the standard codecs.
fn handshake<S: Transport>(io: S, end: &str) -> MessageStream<S> {
    MessageStream::handshake(io, config(), Arc::new(Registry::standard()))
        .unwrap_or_else(|e| panic!("{end} handshake: {e}"))
}

/// Receives until the stream ends.
fn receive_all<S: Transport>(s: &mut MessageStream<S>) -> Received {
    let mut got = Vec::new();
    loop {
        match s.recv_msg() {
            Ok(Some(m)) => got.push(m),
            Ok(None) => return (got, Ok(())),
            Err(e) => return (got, Err(e)),
        }
    }
}

/// A loopback pair whose server end receives everything on a thread, and
/// the client end after sending messages `0..n`.
fn sender_and_receiver(n: u32) -> (MessageStream<TcpStream>, thread::JoinHandle<Received>) {
    let (client, server) = tcp_pair();
    let receiver = thread::spawn(move || receive_all(&mut handshake(server, "server")));
    let mut s = handshake(client, "client");
    for i in 0..n {
        s.send_msg(&message(i)).expect("send");
    }
    (s, receiver)
}

#[test]
fn a_sender_dropped_with_replies_unread_delivers_everything() {
    let (s, receiver) = sender_and_receiver(50);
    // Wait until a probe reply has arrived (peek blocks until bytes are
    // readable), so that the drop below finds replies unread: the case that
    // used to reset the connection.
    let mut byte = [0u8; 1];
    assert_eq!(s.get_ref().peek(&mut byte).expect("peek"), 1);
    assert!(s.stats().probes > 0, "the sender probed");
    drop(s);

    let (got, end) = receiver.join().expect("receiver thread");
    assert_eq!(got.len(), 50, "messages received before the end ({end:?})");
    for (i, m) in got.iter().enumerate() {
        assert!(m == &message(i as u32), "message {i} differs");
    }
    end.expect("a clean end of stream after the 50 messages");
}

/// The pattern that worked around the reset by hand (half-close through
/// `get_ref`, read to the end) still works, and `finish` after it is fine.
#[test]
fn finish_after_a_half_close_by_hand_is_ok() {
    let (mut s, receiver) = sender_and_receiver(50);
    s.get_ref()
        .shutdown(std::net::Shutdown::Write)
        .expect("half-close");
    assert_eq!(s.recv_msg().expect("the peer's end"), None);
    let (got, end) = receiver.join().expect("receiver thread");
    assert_eq!(got.len(), 50, "({end:?})");
    end.expect("a clean end");
    assert_eq!(
        s.finish(std::time::Duration::from_secs(60))
            .expect("finish"),
        0
    );
}

#[test]
fn a_peer_that_resets_the_connection_is_an_error_not_a_clean_end() {
    let (s, receiver) = sender_and_receiver(20);
    // Wait for a reply (the receiver is mid-stream), then reset: SO_LINGER
    // with a zero timeout makes close() send RST instead of FIN.
    let mut byte = [0u8; 1];
    assert_eq!(s.get_ref().peek(&mut byte).expect("peek"), 1);
    let tcp = s.into_inner();
    linger_zero(tcp.as_raw_fd());
    drop(tcp);

    let (got, end) = receiver.join().expect("receiver thread");
    assert!(got.len() <= 20, "{} messages", got.len());
    for (i, m) in got.iter().enumerate() {
        assert!(m == &message(i as u32), "message {i} differs");
    }
    let err = end.expect_err("a reset must not read as a clean end of stream");
    assert_eq!(err.kind_label(), "reset", "{err}");
    assert!(
        err.to_string().contains(&format!(
            "reset the connection after {} messages",
            got.len()
        )),
        "{err}"
    );
}

/// A TCP transport whose first write after the handshake (a probe reply)
/// waits until the peer has reset the connection and the kernel has
/// processed the RST: that write is then what reads the reset.
struct ReplyAfterReset {
    tcp: TcpStream,
    writes: u32,
    peer_reset: std::sync::mpsc::Receiver<()>,
}

/// The TCP state (`tcpi_state`) without touching the socket's pending error.
fn tcp_state(tcp: &TcpStream) -> u8 {
    // SAFETY: tcp_info is plain data; getsockopt writes at most `len` bytes.
    unsafe {
        let mut info: libc::tcp_info = std::mem::zeroed();
        let mut len = std::mem::size_of::<libc::tcp_info>() as libc::socklen_t;
        let r = libc::getsockopt(
            tcp.as_raw_fd(),
            libc::IPPROTO_TCP,
            libc::TCP_INFO,
            (&mut info as *mut libc::tcp_info).cast(),
            &mut len,
        );
        assert_eq!(r, 0, "getsockopt(TCP_INFO)");
        info.tcpi_state
    }
}

impl std::io::Read for ReplyAfterReset {
    fn read(&mut self, buf: &mut [u8]) -> std::io::Result<usize> {
        self.tcp.read(buf)
    }
}

impl std::io::Write for ReplyAfterReset {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        self.writes += 1;
        if self.writes == 2 {
            self.peer_reset.recv().expect("the peer resets");
            // TCP_CLOSE (7): the RST arrived. Polled with a safety bound.
            let mut polls = 0;
            while tcp_state(&self.tcp) != 7 {
                polls += 1;
                assert!(polls < 10_000, "the RST never arrived");
                thread::sleep(std::time::Duration::from_millis(1));
            }
        }
        self.tcp.write(buf)
    }

    fn flush(&mut self) -> std::io::Result<()> {
        self.tcp.flush()
    }
}

impl Transport for ReplyAfterReset {}

#[test]
fn a_reset_first_seen_by_the_reply_write_is_an_error_not_a_clean_end() {
    let (client, server) = tcp_pair();
    let (reset_tx, reset_rx) = std::sync::mpsc::channel();
    let receiver = thread::spawn(move || {
        let io = ReplyAfterReset {
            tcp: server,
            writes: 0,
            peer_reset: reset_rx,
        };
        receive_all(&mut handshake(io, "server"))
    });
    let mut s = handshake(client, "client");
    for i in 0..20 {
        s.send_msg(&message(i)).expect("send");
    }
    let tcp = s.into_inner();
    linger_zero(tcp.as_raw_fd());
    drop(tcp);
    reset_tx.send(()).unwrap();

    let (got, end) = receiver.join().expect("receiver thread");
    assert!(got.len() <= 20, "{} messages", got.len());
    for (i, m) in got.iter().enumerate() {
        assert!(m == &message(i as u32), "message {i} differs");
    }
    let err = end.expect_err("a reset must not read as a clean end of stream");
    assert_eq!(err.kind_label(), "reset", "{err}");
}

#[cfg(feature = "tokio")]
mod tokio_streams {
    use super::{config, linger_zero, message};
    use hwqos_compress::{AsyncMessageStream, Registry, WireError};
    use std::os::fd::AsRawFd;
    use std::sync::Arc;
    use std::time::Duration;
    use tokio::net::{TcpListener, TcpStream};

    type Stream =
        AsyncMessageStream<tokio::net::tcp::OwnedReadHalf, tokio::net::tcp::OwnedWriteHalf>;

    /// Both ends of a loopback connection, handshaken: (client, server).
    async fn pair() -> (Stream, Stream) {
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        let client = async {
            let tcp = TcpStream::connect(addr).await.unwrap();
            tcp.set_nodelay(true).unwrap();
            let (r, w) = tcp.into_split();
            AsyncMessageStream::handshake(r, w, config(), Arc::new(Registry::standard()))
                .await
                .unwrap()
        };
        let server = async {
            let (tcp, _) = listener.accept().await.unwrap();
            tcp.set_nodelay(true).unwrap();
            let (r, w) = tcp.into_split();
            AsyncMessageStream::handshake(r, w, config(), Arc::new(Registry::standard()))
                .await
                .unwrap()
        };
        tokio::join!(client, server)
    }

    async fn receive_all(mut s: Stream) -> (Vec<Vec<u8>>, Result<(), WireError>) {
        let mut got = Vec::new();
        loop {
            match s.recv_msg().await {
                Ok(Some(m)) => got.push(m),
                Ok(None) => return (got, Ok(())),
                Err(e) => return (got, Err(e)),
            }
        }
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn finish_delivers_everything_then_a_clean_end() {
        let (mut client, server) = pair().await;
        let receiver = tokio::spawn(receive_all(server));
        for i in 0..50 {
            client.send_msg(&message(i)).await.expect("send");
        }
        assert!(client.stats().probes > 0, "the sender probed");
        let discarded = client
            .finish(Duration::from_secs(60))
            .await
            .expect("finish");
        assert_eq!(discarded, 0);
        let (got, end) = receiver.await.unwrap();
        assert_eq!(got.len(), 50, "messages received before the end ({end:?})");
        for (i, m) in got.iter().enumerate() {
            assert!(m == &message(i as u32), "message {i} differs");
        }
        end.expect("a clean end of stream after the 50 messages");
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_reset_is_an_error_not_a_clean_end() {
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        // The resetting peer is a blocking stream in a thread.
        let peer = std::thread::spawn(move || {
            let tcp = std::net::TcpStream::connect(addr).unwrap();
            tcp.set_nodelay(true).unwrap();
            let mut s = hwqos_compress::MessageStream::handshake(
                tcp,
                config(),
                Arc::new(Registry::standard()),
            )
            .unwrap();
            for i in 0..20 {
                s.send_msg(&message(i)).unwrap();
            }
            // Wait for a probe reply (the receiver is mid-stream), then reset.
            let mut byte = [0u8; 1];
            assert_eq!(s.get_ref().peek(&mut byte).unwrap(), 1);
            let tcp = s.into_inner();
            linger_zero(tcp.as_raw_fd());
        });
        let (tcp, _) = listener.accept().await.unwrap();
        tcp.set_nodelay(true).unwrap();
        let (r, w) = tcp.into_split();
        let server = AsyncMessageStream::handshake(r, w, config(), Arc::new(Registry::standard()))
            .await
            .unwrap();
        let (got, end) = tokio::time::timeout(Duration::from_secs(60), receive_all(server))
            .await
            .expect("a safety bound, not a timing assertion");
        peer.join().unwrap();
        assert!(got.len() <= 20, "{} messages", got.len());
        for (i, m) in got.iter().enumerate() {
            assert!(m == &message(i as u32), "message {i} differs");
        }
        let err = end.expect_err("a reset must not read as a clean end of stream");
        assert_eq!(err.kind_label(), "reset", "{err}");
    }
}
