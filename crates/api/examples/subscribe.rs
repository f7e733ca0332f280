//! Subscribes to a running hwqos-monitor's live API and prints a few frames.
//!
//! `cargo run -p hwqos-api --example subscribe -- [SOCKET] [FRAMES]`
//! (default `/run/hwqos/monitor.sock`, 5 frames). Starts nothing: without a
//! monitor it says so and exits with status 2. Run against a real monitor by
//! `agents/monitor/tests/api_example.rs`.

use hwqos_api::{ApiClient, ApiError, FrameFilter};
use std::time::Duration;

fn main() -> Result<(), ApiError> {
    let mut args = std::env::args().skip(1);
    let socket = args
        .next()
        .unwrap_or_else(|| "/run/hwqos/monitor.sock".into());
    let wanted: usize = args.next().map_or(5, |n| n.parse().expect("FRAMES"));

    // Waits briefly for a monitor that is still starting.
    let mut client = match ApiClient::connect_waiting(&socket, Duration::from_secs(2)) {
        Ok(c) => c,
        Err(e @ ApiError::Connect { .. }) => {
            eprintln!("no monitor to subscribe to: {e}");
            std::process::exit(2);
        }
        Err(e) => return Err(e),
    };
    let hello = client.hello().clone();
    println!(
        "monitor {} on {} at {} Hz",
        hello.version, hello.node, hello.rate_hz
    );
    let status = client.status()?;
    println!("event sets: {:?}", status.event_sets);

    // Software metrics of every scope; the connection now carries only frames.
    let frames = client.subscribe(FrameFilter::metrics(&["sw.*"]).expect("pattern"))?;
    frames.set_read_timeout(Some(Duration::from_secs(30)))?;
    let mut last_seq = None;
    for frame in frames.take(wanted) {
        let frame = frame?;
        assert!(last_seq < Some(frame.seq), "frames arrive in order");
        last_seq = Some(frame.seq);
        let page_faults: f64 = frame
            .samples
            .iter()
            .filter(|s| s.metric.as_str() == "sw.page_faults")
            .fold(0.0, |sum, s| sum + s.value);
        println!(
            "frame seq={} samples={} sw.page_faults={page_faults}",
            frame.seq,
            frame.samples.len()
        );
    }
    Ok(())
}
