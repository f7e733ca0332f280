//! Loopback TCP: round trip of one byte (`TCP_NODELAY`) between this thread
//! and an echo thread on the same CPU, and the cost of a connection (connect,
//! accept and close of both ends, in this thread). 127.0.0.1 only.

use super::{pin, ProbeError, ProbeOptions};
use hwqos_core::stats::Summary;
use serde::{Deserialize, Serialize};
use std::io::{Read, Write};
use std::net::{Ipv4Addr, SocketAddr, TcpListener, TcpStream};

/// What the [`net`](self) probe measured.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct NetResult {
    /// ns per one-byte request and one-byte reply.
    pub rtt_ns: Summary,
    /// ns per connection: `connect`, `accept` and closing both ends.
    pub connect_ns: Summary,
}

fn io(what: &str) -> impl FnOnce(std::io::Error) -> ProbeError + '_ {
    move |e| ProbeError::io(what, e)
}

/// Runs the loopback TCP probe (an echo thread on the same CPU as this
/// one). Errors when pinning fails, 127.0.0.1 cannot be bound, or the echo
/// thread fails.
pub fn run(options: &ProbeOptions) -> Result<NetResult, ProbeError> {
    let (_pin, cpu) = pin(options)?;
    let repeats = options.repeats();
    let overhead = super::timing_overhead_ns();
    let listener = TcpListener::bind((Ipv4Addr::LOCALHOST, 0)).map_err(io("bind 127.0.0.1"))?;
    let addr: SocketAddr = listener.local_addr().map_err(io("local_addr"))?;
    let rtt_rounds = options.scaled(2_000);
    let connects = options.scaled(200);
    let server = std::thread::spawn(move || -> std::io::Result<()> {
        let _pin = super::Pinned::to(cpu);
        let (mut s, _) = listener.accept()?;
        s.set_nodelay(true)?;
        let mut b = [0u8; 1];
        loop {
            if s.read(&mut b)? == 0 {
                break;
            }
            s.write_all(&b)?;
        }
        Ok(())
    });
    let result = (|| {
        let mut c = TcpStream::connect(addr).map_err(io("connect 127.0.0.1"))?;
        c.set_nodelay(true).map_err(io("TCP_NODELAY"))?;
        let mut b = [7u8; 1];
        let mut failed = None;
        let rtt_ns = super::per_op_ns(repeats, rtt_rounds, overhead, super::Solo::No, || {
            if failed.is_none() {
                if let Err(e) = c.write_all(&b).and_then(|_| c.read_exact(&mut b)) {
                    failed = Some(e);
                }
            }
        });
        if let Some(e) = failed {
            return Err(ProbeError::io("loopback round trip", e));
        }
        drop(c);
        // Connections are accepted by this thread right after each connect
        // (the kernel completes the handshake without the application), so
        // the listen backlog never overflows into a 1 s SYN retransmit.
        let acceptor = TcpListener::bind((Ipv4Addr::LOCALHOST, 0)).map_err(io("bind 127.0.0.1"))?;
        let to = acceptor.local_addr().map_err(io("local_addr"))?;
        let mut failed = None;
        let connect_ns = super::per_op_ns(repeats, connects, overhead, super::Solo::No, || {
            if failed.is_none() {
                match TcpStream::connect(to).and_then(|s| acceptor.accept().map(|a| (s, a))) {
                    Ok(pair) => drop(pair),
                    Err(e) => failed = Some(e),
                }
            }
        });
        if let Some(e) = failed {
            return Err(ProbeError::io("loopback connect", e));
        }
        let none = || ProbeError::Other("no samples".into());
        Ok(NetResult {
            rtt_ns: rtt_ns.ok_or_else(none)?,
            connect_ns: connect_ns.ok_or_else(none)?,
        })
    })();
    let served = server.join();
    let r = result?;
    match served {
        Ok(Ok(())) => Ok(r),
        Ok(Err(e)) => Err(ProbeError::io("loopback echo server", e)),
        Err(_) => Err(ProbeError::Other("loopback echo server panicked".into())),
    }
}

/// Merges interleaved repetitions (see [`super::merge_summaries`]).
pub fn merge(parts: Vec<NetResult>) -> Option<NetResult> {
    Some(NetResult {
        rtt_ns: super::merge_cost(&parts, |p| &p.rtt_ns)?,
        connect_ns: super::merge_cost(&parts, |p| &p.connect_ns)?,
    })
}
