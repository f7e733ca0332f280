//! The live API's `window` request in bounded memory: a client that asks for a
//! large window and reads it slowly does not hold the database, does not make
//! the server buffer the window (asserted on the server's count of bytes held
//! for windows, not on RSS or timing), cannot take more than `[api]
//! max_windows` responses at once, and is cut off after `[api]
//! window_timeout_s`.

use hwqos_core::{Frame, MetricName, Sample, Scope, Timestamp};
use hwqos_monitor::monitor::WINDOW_BATCH_BYTES;
use hwqos_monitor::{api_server, Config};
use hwqos_monitor::{FrameSource, Monitor, MonitorHandle, NodeSources};
use hwqos_pmu::api::{ApiClient, UnavailableEvent};
use hwqos_pmu::backend::BackendKind;
use hwqos_pmu::PmuError;
use hwqos_testsupport::wait_for;
use std::io::{BufRead, BufReader, Read, Write};
use std::os::unix::net::UnixStream;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

/// Samples per frame: about 60 KB decoded and 70 KB of JSON a frame.
const SAMPLES: u32 = 500;

struct Wide;

impl FrameSource for Wide {
    fn sample(&mut self, time: Timestamp) -> Frame {
        Frame {
            seq: 0,
            time,
            interval_ns: 5_000_000,
            samples: (0..SAMPLES)
                .map(|pid| {
                    Sample::gauge(
                        time,
                        Scope::Process { pid: pid + 1 },
                        MetricName::from_static("os.proc.cpu"),
                        f64::from(pid) / 7.0,
                    )
                })
                .collect(),
            labels: vec![],
        }
    }
    fn event_sets(&self) -> Vec<Vec<String>> {
        vec![vec!["sw.page_faults".into()]]
    }
    fn set_event_sets(&mut self, _: Vec<Vec<String>>) -> Result<(), PmuError> {
        Ok(())
    }
    fn unavailable(&self) -> Vec<UnavailableEvent> {
        vec![]
    }
    fn backend(&self) -> BackendKind {
        BackendKind::Simulated
    }
}

struct Served {
    monitor: Option<Monitor>,
    handle: MonitorHandle,
    socket: PathBuf,
    runtime: Option<tokio::runtime::Runtime>,
    stop: tokio::sync::watch::Sender<bool>,
    _dir: tempfile::TempDir,
}

impl Drop for Served {
    fn drop(&mut self) {
        let _ = self.stop.send(true);
        if let Some(m) = self.monitor.take() {
            m.stop();
        }
        if let Some(rt) = self.runtime.take() {
            rt.shutdown_timeout(Duration::from_secs(5));
        }
    }
}

/// An embedded monitor at 200 Hz with a large database and its API socket.
fn serve(max_windows: usize, window_timeout_s: f64) -> Served {
    let dir = tempfile::tempdir().unwrap();
    let mut config = Config {
        rate_hz: 200.0,
        event_sets: vec![vec!["sw.page_faults".into()]],
        ..Config::default()
    };
    config.database.frames = 100_000;
    config.database.max_mib = 1024;
    config.output.dir = dir.path().join("out");
    config.metrics.enabled = false;
    config.api.socket = dir.path().join("monitor.sock");
    config.api.max_windows = max_windows;
    config.api.window_timeout_s = window_timeout_s;
    let engine = NodeSources {
        make_source: Arc::new(|_: &Config| Ok(Box::new(Wide) as Box<dyn FrameSource>)),
        check_event: Arc::new(|_: &str| Ok(())),
    };
    let socket = config.api.socket.clone();
    let monitor = Monitor::start(config, None, None, engine).unwrap();
    let handle = monitor.handle();
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap();
    let listener = api_server::bind(&socket).unwrap();
    let (stop, stop_rx) = tokio::sync::watch::channel(false);
    runtime.spawn(api_server::serve(listener, handle.clone(), stop_rx));
    Served {
        monitor: Some(monitor),
        handle,
        socket,
        runtime: Some(runtime),
        stop,
        _dir: dir,
    }
}

/// How long a wait may take before the test fails: a bound for slow
/// machines, not a speed assertion.
const DEADLINE: Duration = Duration::from_secs(60);

/// A raw connection that has read the hello line.
fn raw(socket: &Path) -> (BufReader<UnixStream>, UnixStream) {
    let s = UnixStream::connect(socket).unwrap();
    s.set_read_timeout(Some(Duration::from_secs(30))).unwrap();
    let mut r = BufReader::new(s.try_clone().unwrap());
    let mut hello = String::new();
    r.read_line(&mut hello).unwrap();
    assert!(hello.contains("hwqos.api/1"), "{hello}");
    (r, s)
}

fn client(socket: &Path) -> ApiClient {
    let c = ApiClient::connect(socket).unwrap();
    c.set_read_timeout(Some(Duration::from_secs(30))).unwrap();
    c
}

#[test]
fn a_slow_window_reader_holds_neither_the_database_nor_the_whole_window() {
    let s = serve(2, 600.0);
    let h = &s.handle;
    wait_for("600 frames in the database", DEADLINE, || {
        h.status().frames_in_db >= 600
    });
    let in_db = h.status().frames_in_db;

    // A asks for the whole database and reads one line, then stops reading.
    let (mut a_rd, mut a_wr) = raw(&s.socket);
    a_wr.write_all(b"{\"op\":\"window\"}\n").unwrap();
    let mut line = String::new();
    a_rd.read_line(&mut line).unwrap();
    assert!(line.starts_with("{\"type\":\"frame\""), "{}", &line[..80]);
    let first_seq = serde_json::from_str::<serde_json::Value>(&line).unwrap()["frame"]["seq"]
        .as_u64()
        .unwrap();

    // Meanwhile the sampler keeps writing the database and others are served:
    // a status, and a small window (the second of two allowed at once).
    let sampled = h.status().frames_sampled;
    wait_for(
        "the sampler to go on while A is not reading",
        DEADLINE,
        || h.status().frames_sampled >= sampled + 100,
    );
    let mut b = client(&s.socket);
    assert!(b.status().unwrap().frames_in_db > in_db);
    let small = b
        .window(None, Some(5), hwqos_pmu::api::FrameFilter::default())
        .unwrap();
    assert_eq!(small.len(), 5);

    // A second slow reader takes the other slot; a third window is refused
    // with a clear error and its connection stays usable.
    let (mut d_rd, mut d_wr) = raw(&s.socket);
    d_wr.write_all(b"{\"op\":\"window\"}\n").unwrap();
    line.clear();
    d_rd.read_line(&mut line).unwrap();
    assert!(line.starts_with("{\"type\":\"frame\""));
    let (mut c_rd, mut c_wr) = raw(&s.socket);
    c_wr.write_all(b"{\"op\":\"window\",\"frames\":3}\n")
        .unwrap();
    line.clear();
    c_rd.read_line(&mut line).unwrap();
    assert!(
        line.starts_with("{\"type\":\"error\"") && line.contains("api.max_windows"),
        "{line}"
    );
    c_wr.write_all(b"{\"op\":\"status\"}\n").unwrap();
    line.clear();
    c_rd.read_line(&mut line).unwrap();
    assert!(line.starts_with("{\"type\":\"status\""), "{line}");
    assert_eq!(h.windows_refused_and_cut().0, 1);
    drop(d_rd);
    drop(d_wr);

    // A reads the rest slowly: every frame of the window, in order, then `end`.
    let mut seqs = vec![first_seq];
    loop {
        line.clear();
        a_rd.read_line(&mut line).unwrap();
        let v: serde_json::Value = serde_json::from_str(&line).unwrap();
        match v["type"].as_str().unwrap() {
            "frame" => seqs.push(v["frame"]["seq"].as_u64().unwrap()),
            "end" => {
                assert_eq!(v["count"].as_u64().unwrap() as usize, seqs.len());
                break;
            }
            other => panic!("unexpected {other}: {line}"),
        }
        if seqs.len() % 50 == 0 {
            std::thread::sleep(Duration::from_millis(20));
        }
    }
    assert!(seqs.len() >= in_db, "{} frames of {in_db}", seqs.len());
    assert!(seqs.windows(2).all(|p| p[1] > p[0]), "not oldest first");

    // The server never held more than a batch for the windows: about
    // WINDOW_BATCH_BYTES of decoded frames plus a frame and its line per
    // response, while the whole window decoded is many times that.
    let one_frame = hwqos_monitor::db::frame_bytes(&h.window(None, Some(1))[0]);
    let whole = one_frame * seqs.len();
    let (now, peak) = h.window_buffered_bytes();
    let bound = 2 * (WINDOW_BATCH_BYTES + 4 * one_frame);
    assert!(peak > 0 && peak <= bound, "peak {peak} B, bound {bound} B");
    assert!(
        whole > 10 * bound,
        "the test window is too small: {whole} B"
    );
    wait_for("windows to release their buffers", DEADLINE, || {
        h.window_buffered_bytes().0 == 0
    });
    let _ = now;
}

#[test]
fn a_window_not_read_in_time_is_cut_off_and_frees_its_slot() {
    let s = serve(1, 1.0);
    let h = &s.handle;
    wait_for("400 frames in the database", DEADLINE, || {
        h.status().frames_in_db >= 400
    });
    let (mut a_rd, mut a_wr) = raw(&s.socket);
    a_wr.write_all(b"{\"op\":\"window\"}\n").unwrap();
    // Not reading: the 1 s deadline passes (a generous wait for it below).
    wait_for("the window to be cut off", DEADLINE, || {
        h.windows_refused_and_cut().1 == 1
    });
    // What A gets: some frames, no `end`, then the connection is closed.
    let mut rest = Vec::new();
    a_rd.read_to_end(&mut rest).unwrap();
    let text = String::from_utf8_lossy(&rest);
    assert!(
        !text.contains("{\"type\":\"end\""),
        "an incomplete window ended normally"
    );
    // The slot is free again: a window succeeds with max_windows = 1.
    let w = client(&s.socket)
        .window(None, Some(10), hwqos_pmu::api::FrameFilter::default())
        .unwrap();
    assert_eq!(w.len(), 10);
    drop(a_wr);
}
