//! A service embedding hwqos: counts its own page faults (hwqos-pmu), sends
//! messages through an adaptive stream with one codec (hwqos-compress, lz4
//! only), and looks for a monitor to subscribe to (hwqos-api).

use hwqos_api::{ApiClient, FrameFilter};
use hwqos_compress::{MessageStream, Registry, StreamConfig};
use hwqos_pmu::{Sampler, SamplerConfig, Scope, TargetSelector, Timestamp};
use std::os::unix::net::UnixStream;
use std::sync::Arc;
use std::time::Duration;

fn main() -> Result<(), Box<dyn std::error::Error>> {
    // 1. This process's page faults while it touches 512 fresh pages.
    let me = std::process::id();
    let mut sampler = Sampler::for_this_node(SamplerConfig {
        targets: vec![TargetSelector::Pid(me)],
        event_sets: vec![vec!["sw.page_faults".into()]],
        ..SamplerConfig::default()
    })?;
    sampler.sample(Timestamp::now());
    let mut pages = vec![0u8; 512 * 4096];
    pages.chunks_mut(4096).for_each(|p| p[0] = 1);
    std::hint::black_box(&pages);
    let faults = sampler
        .sample(Timestamp::now())
        .value(&Scope::Process { pid: me }, "sw.page_faults")
        .ok_or("no page-fault count")?;
    println!("page faults for 512 fresh pages: {faults}");
    assert!(faults >= 512.0);

    // 2. 100 messages through a compressing stream pair (lz4 only).
    let config = StreamConfig {
        link_ns_per_byte: Some(800.0),
        throttle: None,
        ..StreamConfig::default()
    };
    let registry = Arc::new(Registry::standard());
    assert_eq!(registry.len(), 2, "none and lz4");
    let (a, b) = UnixStream::pair()?;
    let (cfg, reg) = (config.clone(), registry.clone());
    let sink = std::thread::spawn(move || {
        let mut s = MessageStream::handshake(b, cfg, reg).unwrap();
        let mut n = 0;
        while s.recv_msg().unwrap().is_some() {
            n += 1;
        }
        n
    });
    let mut s = MessageStream::handshake(a, config, registry)?;
    let line = b"level=info msg=\"request served\" status=200 bytes=5120\n".repeat(64);
    for _ in 0..100 {
        s.send_msg(&line)?;
    }
    let st = s.stats();
    // Half-closes, reads the peer's probe replies to its end, closes: all
    // 100 messages are delivered.
    assert_eq!(s.finish(std::time::Duration::from_secs(10))?, 0);
    assert_eq!(sink.join().unwrap(), 100);
    println!(
        "stream: {} bytes sent as {} on the wire {:?}",
        st.app_bytes_sent, st.wire_bytes_sent, st.sent_per_codec
    );
    assert!(st.wire_bytes_sent < st.app_bytes_sent);

    // 3. The monitor's live API, if one runs here.
    let socket = std::env::var("HWQOS_MONITOR_SOCKET").unwrap_or("/run/hwqos/monitor.sock".into());
    match ApiClient::connect_waiting(&socket, Duration::from_millis(100)) {
        Ok(client) => {
            let mut frames = client.subscribe(FrameFilter::metrics(&["sw.*"])?)?;
            println!(
                "monitor frame: {:?}",
                frames.next().transpose()?.map(|f| f.seq)
            );
        }
        Err(e) => println!("no monitor: {e}"),
    }
    Ok(())
}
