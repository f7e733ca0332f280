//! The scripted experiments' ping-pong driver (docs/experiments/compression.md).
//!
//! ```text
//! rtt_experiment server --listen ADDR
//! rtt_experiment linkemu --listen ADDR --connect ADDR --rate-mbit R --delay-us D [--control FILE]
//! rtt_experiment client --connect ADDR --policy P --dataset d0|d1|dp
//!     [--messages N] [--size BYTES] [--round R] [--cpu-target T] [--cpu-aggregate mean|max|affinity]
//!     [--change-at K --change-to d0|d1|dp] [--at K:SHELL-COMMAND]...
//!     [--csv FILE] [--label TEXT] [--pace-us US] [--batch BYTES]
//! rtt_experiment interleave --connect ADDR --policies P1,P2,... --dataset d0|d1|dp
//!     [--messages N] [--size BYTES] [--round R] [--label TEXT] [--blocks B] [--seed S]
//! ```
//!
//! `linkemu` is a user-space link emulator for kernels without `netem`: a TCP
//! forwarder that delivers every chunk it reads after the chunk's
//! serialization time at the link rate (in packets of at most 1,448 bytes, queued behind earlier ones) plus a
//! one-way delay, in both directions. `--control FILE` is re-read every
//! 100 ms for a new `RATE_MBIT DELAY_US` (a bandwidth change mid-run).
//!
//! The client sends each message and waits for the echo; the RTT of message i
//! is the wall time from `send_msg` to the echo's `recv_msg`. The server
//! echoes with the client's policy (told in the first message). One JSON
//! summary line goes to stdout; `--csv` keeps every message (index, RTT, codec
//! sent, codec preferred, CPU utilization and throttle share). `--batch B`
//! concatenates messages of the data set until a message has at least B
//! bytes (a batch of control-plane messages). With `--change-at K` the
//! summary also has the mean RTT before and after message K and, for the
//! learning policies, how many messages after K the preferred codec changed;
//! the same per phase, phases being delimited by K and every `--at` hook
//! (`phase_starts`, `phase_means_us`, `phase_reselected_after`).
//!
//! `interleave` is the A/B design for differences of a percent or two: one
//! process opens a stream per policy (a policy may repeat: an A/A check) and
//! sends N messages on each, taking the streams in a new random order in
//! every cycle, so every stream's messages are spread over the same stretch
//! of time and the VM's drift (which moves a whole run's mean by a few
//! percent) hits every policy alike. Every stream sends the same content
//! sequence. One JSON line per stream: its mean, median and CI, and its mean
//! over each of `--blocks` consecutive stretches of cycles (the same
//! stretches for every stream, so blocks pair across streams).

use hwqos_compress::datasets::{DataSet, MessageSource};
use hwqos_compress::{
    CpuAggregate, MessageStream, PolicyKind, Registry, Sampling, StreamConfig, ThrottleConfig,
};
use std::collections::BTreeMap;
use std::io::Write;
use std::net::{TcpListener, TcpStream};
use std::sync::Arc;
use std::time::Instant;

fn arg(args: &[String], key: &str) -> Option<String> {
    args.iter()
        .position(|a| a == key)
        .and_then(|i| args.get(i + 1).cloned())
}

fn config(policy: PolicyKind, round: u32, cpu_target: f64, aggregate: &str) -> StreamConfig {
    let cpu_aggregate = match aggregate {
        "max" => CpuAggregate::Max,
        "affinity" => CpuAggregate::Affinity,
        "cgroup" => CpuAggregate::Cgroup,
        _ => CpuAggregate::Mean,
    };
    StreamConfig {
        policy,
        round_messages: round,
        throttle: (cpu_target > 0.0).then(|| ThrottleConfig {
            target: cpu_target,
            cpu_aggregate,
            ..Default::default()
        }),
        // HWQOS_SAMPLING=background|inline|off (diagnostics); default: after send.
        sampling: match std::env::var("HWQOS_SAMPLING").as_deref() {
            Ok("background") => Sampling::Background,
            Ok("inline") => Sampling::Inline,
            Ok("off") => Sampling::Off,
            _ => Sampling::AfterSend,
        },
        probe_every: std::env::var("HWQOS_PROBE_EVERY")
            .ok()
            .and_then(|v| v.parse().ok())
            .unwrap_or(16),
        ..Default::default()
    }
}

fn server(args: &[String]) {
    let listen = arg(args, "--listen").expect("--listen ADDR");
    let l = TcpListener::bind(&listen).expect("bind");
    eprintln!("server listening on {}", l.local_addr().unwrap());
    for conn in l.incoming() {
        let Ok(sock) = conn else { continue };
        std::thread::spawn(move || {
            sock.set_nodelay(true).unwrap();
            let reg = Arc::new(Registry::standard());
            let Ok(mut s) =
                MessageStream::handshake(sock, config(PolicyKind::Adaptive, 50, 0.0, "mean"), reg)
            else {
                return;
            };
            // First message: "POLICY <p> ROUND <r> CPU <t> AGG <a>".
            let Ok(Some(first)) = s.recv_msg() else {
                return;
            };
            let text = String::from_utf8_lossy(&first).to_string();
            let f: Vec<&str> = text.split_whitespace().collect();
            if let (Some(p), Some(r), Some(t)) = (f.get(1), f.get(3), f.get(5)) {
                let agg = f.get(7).copied().unwrap_or("mean");
                let cfg = config(
                    p.parse().unwrap(),
                    r.parse().unwrap(),
                    t.parse().unwrap(),
                    agg,
                );
                let ep = s.endpoint_mut();
                ep.set_round_messages(cfg.round_messages);
                ep.set_throttle(cfg.throttle);
                ep.set_policy(cfg.policy);
            }
            let _ = s.send_msg(b"OK");
            while let Ok(Some(m)) = s.recv_msg() {
                if s.send_msg(&m).is_err() {
                    break;
                }
            }
            // The echoing end's own figures (its policy probes and samples too).
            let st = s.stats();
            eprintln!(
                "{}",
                serde_json::json!({
                    "server_policy": s.endpoint().selector().kind().to_string(),
                    "sent_per_codec": st.sent_per_codec,
                    "samples": st.samples,
                    "sample_ns": st.sample_ns,
                    "probes": st.probes,
                    "padded_probes": st.padded_probes,
                    "rounds": st.round,
                })
            );
        });
    }
}

/// Link parameters shared by both directions of every forwarded connection.
struct LinkParams {
    ns_per_byte: std::sync::atomic::AtomicU64,
    delay_ns: std::sync::atomic::AtomicU64,
}

fn link_params(rate_mbit: f64, delay_us: f64) -> (u64, u64) {
    ((8000.0 / rate_mbit) as u64, (delay_us * 1000.0) as u64)
}

/// Bytes per emulated packet (a TCP segment on a 1500-byte MTU).
const MTU_PAYLOAD: usize = 1448;

/// One direction: read chunks, stamp their delivery time, deliver in order.
fn emulate(mut from: TcpStream, mut to: TcpStream, p: Arc<LinkParams>) {
    use std::io::Read;
    use std::sync::atomic::Ordering::Relaxed;
    use std::time::Duration;
    let (tx, rx) = std::sync::mpsc::channel::<(Instant, Vec<u8>)>();
    let writer = std::thread::spawn(move || {
        let wait_until = |at: Instant| loop {
            let now = Instant::now();
            if now >= at {
                break;
            }
            let left = at - now;
            if left > Duration::from_micros(200) {
                std::thread::sleep(left - Duration::from_micros(100));
            } else {
                std::hint::spin_loop();
            }
        };
        // A packet taken from the queue before it was due.
        let mut carry: Option<(Instant, Vec<u8>)> = None;
        while let Some((at, mut out)) = carry.take().or_else(|| rx.recv().ok()) {
            wait_until(at);
            // Packets already due go out in the same write (fewer syscalls
            // when the emulator falls behind on a busy machine).
            while let Ok((next_at, next)) = rx.try_recv() {
                if next_at <= Instant::now() {
                    out.extend_from_slice(&next);
                } else {
                    carry = Some((next_at, next));
                    break;
                }
            }
            if to.write_all(&out).is_err() {
                break;
            }
        }
        let _ = to.shutdown(std::net::Shutdown::Write);
    });
    let mut buf = vec![0u8; 64 * 1024];
    let mut line_free = Instant::now();
    loop {
        let n = match from.read(&mut buf) {
            Ok(0) | Err(_) => break,
            Ok(n) => n,
        };
        // Packets of at most one Ethernet payload, each delivered after its
        // own serialization: the first bytes of a large write arrive before
        // the last ones, as on a real link (a probe reply written in front
        // of a large frame is not held back by it).
        let now = Instant::now();
        line_free = line_free.max(now);
        let delay = Duration::from_nanos(p.delay_ns.load(Relaxed));
        let per_byte = p.ns_per_byte.load(Relaxed);
        let mut ok = true;
        for packet in buf[..n].chunks(MTU_PAYLOAD) {
            line_free += Duration::from_nanos(per_byte * packet.len() as u64);
            if tx.send((line_free + delay, packet.to_vec())).is_err() {
                ok = false;
                break;
            }
        }
        if !ok {
            break;
        }
    }
    drop(tx);
    let _ = writer.join();
}

fn linkemu(args: &[String]) {
    use std::sync::atomic::Ordering::Relaxed;
    let listen = arg(args, "--listen").expect("--listen");
    let connect = arg(args, "--connect").expect("--connect");
    let rate: f64 = arg(args, "--rate-mbit")
        .expect("--rate-mbit")
        .parse()
        .unwrap();
    let delay: f64 = arg(args, "--delay-us").map_or(0.0, |v| v.parse().unwrap());
    let (b, d) = link_params(rate, delay);
    let p = Arc::new(LinkParams {
        ns_per_byte: b.into(),
        delay_ns: d.into(),
    });
    if let Some(control) = arg(args, "--control") {
        let p = p.clone();
        std::thread::spawn(move || loop {
            if let Ok(text) = std::fs::read_to_string(&control) {
                let f: Vec<f64> = text
                    .split_whitespace()
                    .filter_map(|v| v.parse().ok())
                    .collect();
                if let [r, d] = f[..] {
                    let (b, d) = link_params(r, d);
                    p.ns_per_byte.store(b, Relaxed);
                    p.delay_ns.store(d, Relaxed);
                }
            }
            std::thread::sleep(std::time::Duration::from_millis(100));
        });
    }
    let l = TcpListener::bind(&listen).expect("bind");
    for c in l.incoming() {
        let Ok(a) = c else { continue };
        let Ok(b) = TcpStream::connect(&connect) else {
            continue;
        };
        a.set_nodelay(true).unwrap();
        b.set_nodelay(true).unwrap();
        let (a2, b2) = (a.try_clone().unwrap(), b.try_clone().unwrap());
        let (p1, p2) = (p.clone(), p.clone());
        std::thread::spawn(move || emulate(a, b, p1));
        std::thread::spawn(move || emulate(b2, a2, p2));
    }
}

/// The arguments `client` and `interleave` share.
struct RunArgs {
    addr: String,
    set: DataSet,
    n: usize,
    size: usize,
    round: u32,
}

impl RunArgs {
    fn parse(args: &[String]) -> Self {
        RunArgs {
            addr: arg(args, "--connect").expect("--connect ADDR"),
            set: arg(args, "--dataset")
                .unwrap_or("dp".into())
                .parse()
                .unwrap(),
            n: arg(args, "--messages").map_or(2000, |v| v.parse().unwrap()),
            size: arg(args, "--size").map_or(512, |v| v.parse().unwrap()),
            round: arg(args, "--round").map_or(50, |v| v.parse().unwrap()),
        }
    }
}

/// `--csv FILE`: the per-message file, with its header written.
fn csv_file(args: &[String], header: &str) -> Option<std::io::BufWriter<std::fs::File>> {
    arg(args, "--csv").map(|p| {
        let mut f = std::io::BufWriter::new(std::fs::File::create(p).expect("csv"));
        writeln!(f, "{header}").unwrap();
        f
    })
}

fn client(args: &[String]) {
    let RunArgs {
        addr,
        set,
        n,
        size,
        round,
    } = RunArgs::parse(args);
    let policy: PolicyKind = arg(args, "--policy")
        .unwrap_or("adaptive".into())
        .parse()
        .unwrap();
    let cpu_target: f64 = arg(args, "--cpu-target").map_or(0.0, |v| v.parse().unwrap());
    let aggregate = arg(args, "--cpu-aggregate").unwrap_or("mean".into());
    let change_at: Option<usize> = arg(args, "--change-at").map(|v| v.parse().unwrap());
    let change_to: Option<DataSet> = arg(args, "--change-to").map(|v| v.parse().unwrap());
    let label = arg(args, "--label").unwrap_or_default();
    let pace = arg(args, "--pace-us").map(|v| std::time::Duration::from_micros(v.parse().unwrap()));
    let batch: usize = arg(args, "--batch").map_or(0, |v| v.parse().unwrap());
    let started = Instant::now();
    let mut hooks: BTreeMap<usize, Vec<String>> = BTreeMap::new();
    for (i, a) in args.iter().enumerate() {
        if a == "--at" {
            let spec = &args[i + 1];
            let (k, cmd) = spec.split_once(':').expect("--at K:COMMAND");
            hooks
                .entry(k.parse().unwrap())
                .or_default()
                .push(cmd.to_string());
        }
    }
    let reg = Arc::new(Registry::standard());
    let mut s = open_stream(&addr, &policy, round, cpu_target, &aggregate, &reg);
    let mut src = MessageSource::new(set, size, 7);
    let mut later = change_to.map(|d| MessageSource::new(d, size, 11));
    let mut csv = csv_file(args, "i,t_ms,rtt_ns,codec,chosen,cpu_util,cpu_share,bytes");
    let mut rtts = Vec::with_capacity(n);
    let trace = std::env::var_os("HWQOS_TRACE").is_some();
    // Phases: delimited by the content change and every hook (a link
    // change); per phase, the mean RTT and when the preferred codec changed.
    let phase_starts: Vec<usize> = std::iter::once(0)
        .chain(change_at)
        .chain(hooks.keys().copied())
        .filter(|&k| k < n)
        .collect::<std::collections::BTreeSet<_>>()
        .into_iter()
        .collect();
    let mut chosen_at_phase = vec![None; phase_starts.len()];
    let mut reselected_in_phase: Vec<Option<usize>> = vec![None; phase_starts.len()];
    for i in 0..n {
        if let Some(cmds) = hooks.get(&i) {
            for c in cmds {
                let st = std::process::Command::new("sh").arg("-c").arg(c).status();
                eprintln!("at message {i}: `{c}` -> {st:?}");
            }
        }
        if let Some(p) = pace {
            let due = started + p * i as u32;
            if let Some(wait) = due.checked_duration_since(Instant::now()) {
                std::thread::sleep(wait);
            }
        }
        let source = match (&mut later, change_at) {
            (Some(l), Some(k)) if i >= k => l,
            _ => &mut src,
        };
        let mut msg = source.next_message();
        while msg.len() < batch {
            msg.extend_from_slice(&source.next_message());
        }
        let phase = phase_starts.partition_point(|&k| k <= i) - 1;
        let chosen = s.endpoint().selector().chosen();
        match chosen_at_phase[phase] {
            None => chosen_at_phase[phase] = Some(chosen),
            Some(c) if c != chosen && reselected_in_phase[phase].is_none() => {
                reselected_in_phase[phase] = Some(i - phase_starts[phase]);
            }
            _ => {}
        }
        let t0 = Instant::now();
        s.send_msg(&msg).unwrap();
        let echo = s.recv_msg().unwrap().expect("echo");
        let rtt = t0.elapsed().as_nanos() as u64;
        assert_eq!(echo.len(), msg.len());
        rtts.push(rtt as f64);
        if trace && i % 20 == 0 {
            let ep = s.endpoint();
            let st = ep.stats();
            eprintln!(
                "{i} chosen {} burst {} backoff {} samples {} sample_ns {} credit {:.0} link {:?} pad {} rtt {:?} sent {:?}",
                st.chosen,
                ep.selector().in_burst(),
                ep.selector().backoff(),
                st.samples,
                st.sample_ns,
                st.sample_credit_ns,
                st.link_ns_per_byte,
                st.probe_pad,
                st.rtt_ns,
                st.sent_per_codec
            );
            let l = ep.learner();
            let size = l.message_size.get().unwrap_or(0.0);
            let preds: Vec<String> = ep
                .send_codecs()
                .iter()
                .map(|&c| {
                    let e = l.codecs.get(&c);
                    format!(
                        "{}={:?}/r{:?}/c{:?}/d{:?}",
                        reg.name_of(c),
                        l.predict(c, size).map(|t| t as u64),
                        e.and_then(|e| e.ratio.get()),
                        e.and_then(|e| e.compress_ns_per_byte.get()),
                        e.and_then(|e| e.decompress_ns_per_byte())
                    )
                })
                .collect();
            eprintln!(
                "   small q25/q50/n {:?}/{:?}/{} padded {:?}/{:?}/{} pad {}",
                l.net.small_rtts.quantile(0.25),
                l.net.small_rtts.median(),
                l.net.small_rtts.len(),
                l.net.padded_rtts.quantile(0.25),
                l.net.padded_rtts.median(),
                l.net.padded_rtts.len(),
                l.net.pad
            );
            if std::env::var_os("HWQOS_TRACE_CODECS").is_some() {
                eprintln!("   size {size:.0} {}", preds.join(" "));
            }
        }
        if let Some(f) = &mut csv {
            let ep = s.endpoint();
            let st = ep.stats();
            writeln!(
                f,
                "{i},{:.1},{rtt},{},{},{},{},{}",
                started.elapsed().as_secs_f64() * 1e3,
                reg.name_of(ep.last_codec()),
                st.chosen,
                st.cpu_utilization
                    .map_or(String::new(), |v| format!("{v:.4}")),
                st.cpu_share.map_or(String::new(), |v| format!("{v:.4}")),
                msg.len()
            )
            .unwrap();
        }
    }
    let st = s.stats();
    let ci = hwqos_core::stats::confidence_interval(&rtts, 0.95).expect("messages");
    let k = change_at.unwrap_or(n).min(n);
    let mean = |v: &[f64]| (!v.is_empty()).then(|| v.iter().sum::<f64>() / v.len() as f64 / 1e3);
    let p50 = hwqos_core::stats::percentile(&rtts, 50.0).unwrap();
    let p99 = hwqos_core::stats::percentile(&rtts, 99.0).unwrap();
    let summary = serde_json::json!({
        "label": label,
        "policy": policy.to_string(),
        "dataset": format!("{set:?}"),
        "messages": n,
        "mean_rtt_us": ci.mean / 1e3,
        "ci95_us": ci.half_width / 1e3,
        "p50_us": p50 / 1e3,
        "p99_us": p99 / 1e3,
        "sent_per_codec": st.sent_per_codec,
        "chosen": st.chosen,
        "samples": st.samples,
        "wire_bytes_sent": st.wire_bytes_sent,
        "app_bytes_sent": st.app_bytes_sent,
        "wire_bytes_received": st.wire_bytes_received,
        "app_bytes_received": st.app_bytes_received,
        "rtt_estimate_us": st.rtt_ns.map(|v| v / 1e3),
        "link_ns_per_byte": st.link_ns_per_byte,
        "throttled_messages": st.throttled_messages,
        "sample_ns": st.sample_ns,
        "sample_credit_ns": st.sample_credit_ns,
        "link_changes": st.link_changes,
        "padded_probes": st.padded_probes,
        "mean_before_change_us": change_at.and_then(|_| mean(&rtts[..k])),
        "mean_after_change_us": change_at.and_then(|_| mean(&rtts[k..])),
        "reselected_after": change_at
            .and_then(|k| phase_starts.iter().position(|&p| p == k))
            .and_then(|j| reselected_in_phase[j]),
        "phase_starts": phase_starts,
        "phase_means_us": phase_starts
            .iter()
            .enumerate()
            .map(|(j, &from)| mean(&rtts[from..phase_starts.get(j + 1).copied().unwrap_or(n)]))
            .collect::<Vec<_>>(),
        "phase_reselected_after": reselected_in_phase,
        "batch": batch,
    });
    println!("{summary}");
}

/// Opens a stream and tells the server which policy to echo with.
fn open_stream(
    addr: &str,
    policy: &PolicyKind,
    round: u32,
    cpu_target: f64,
    aggregate: &str,
    reg: &Arc<Registry>,
) -> MessageStream<TcpStream> {
    let sock = TcpStream::connect(addr).expect("connect");
    sock.set_nodelay(true).unwrap();
    let cfg = config(policy.clone(), round, cpu_target, aggregate);
    let mut s = MessageStream::handshake(sock, cfg, reg.clone()).expect("handshake");
    s.send_msg(
        format!("POLICY {policy} ROUND {round} CPU {cpu_target} AGG {aggregate}").as_bytes(),
    )
    .unwrap();
    assert_eq!(s.recv_msg().unwrap().unwrap(), b"OK");
    s
}

fn interleave(args: &[String]) {
    let RunArgs {
        addr,
        set,
        n,
        size,
        round,
    } = RunArgs::parse(args);
    let policies: Vec<PolicyKind> = arg(args, "--policies")
        .expect("--policies P1,P2,...")
        .split(',')
        .map(|p| p.parse().unwrap())
        .collect();
    let blocks: usize = arg(args, "--blocks")
        .map_or(10, |v| v.parse().unwrap())
        .clamp(1, n.max(1));
    let seed: u64 = arg(args, "--seed").map_or(1, |v| v.parse().unwrap());
    let label = arg(args, "--label").unwrap_or_default();
    let reg = Arc::new(Registry::standard());
    let mut streams: Vec<_> = policies
        .iter()
        .map(|p| open_stream(&addr, p, round, 0.0, "mean", &reg))
        .collect();
    let mut sources: Vec<_> = policies
        .iter()
        .map(|_| MessageSource::new(set, size, 7))
        .collect();
    let mut rtts = vec![Vec::with_capacity(n); policies.len()];
    let mut order: Vec<usize> = (0..policies.len()).collect();
    let mut rng = hwqos_compress::policy::Rng::new(seed);
    // --csv FILE: one row per message (which stream, its RTT, the codec it
    // went with, and whether a probe or a sample rode with it).
    let mut csv = csv_file(args, "cycle,stream,policy,rtt_ns,codec,probe,sample");
    for cycle in 0..n {
        // Fisher-Yates: a new order every cycle.
        for i in (1..order.len()).rev() {
            order.swap(i, (rng.next_u64() % (i as u64 + 1)) as usize);
        }
        for &k in &order {
            let msg = sources[k].next_message();
            let before = csv.as_ref().map(|_| streams[k].stats());
            let t0 = Instant::now();
            streams[k].send_msg(&msg).unwrap();
            let echo = streams[k].recv_msg().unwrap().expect("echo");
            let rtt = t0.elapsed().as_nanos();
            rtts[k].push(rtt as f64);
            assert_eq!(echo.len(), msg.len());
            if let (Some(f), Some(b)) = (&mut csv, before) {
                let st = streams[k].stats();
                let codec = reg.name_of(streams[k].endpoint().last_codec());
                let probe = st.probes - b.probes;
                let sample = st.samples - b.samples;
                writeln!(
                    f,
                    "{cycle},{k},{},{rtt},{codec},{probe},{sample}",
                    policies[k]
                )
                .unwrap();
            }
        }
    }
    for (k, policy) in policies.iter().enumerate() {
        let r = &rtts[k];
        let st = streams[k].stats();
        let ci = hwqos_core::stats::confidence_interval(r, 0.95).expect("messages");
        let block_means: Vec<f64> = (0..blocks)
            .map(|b| {
                let part = &r[b * n / blocks..(b + 1) * n / blocks];
                part.iter().sum::<f64>() / part.len() as f64 / 1e3
            })
            .collect();
        let summary = serde_json::json!({
            "label": label,
            "seed": seed,
            "policy": policy.to_string(),
            "stream": k,
            "streams": policies.len(),
            "dataset": format!("{set:?}"),
            "messages": n,
            "mean_rtt_us": ci.mean / 1e3,
            "ci95_us": ci.half_width / 1e3,
            "p50_us": hwqos_core::stats::percentile(r, 50.0).unwrap() / 1e3,
            "p99_us": hwqos_core::stats::percentile(r, 99.0).unwrap() / 1e3,
            "block_means_us": block_means,
            "sent_per_codec": st.sent_per_codec,
            "chosen": st.chosen,
            "samples": st.samples,
            "sample_ns": st.sample_ns,
            "probes": st.probes,
            "padded_probes": st.padded_probes,
            "rounds": st.round,
            "link_ns_per_byte": st.link_ns_per_byte,
            "wire_bytes_sent": st.wire_bytes_sent,
            "app_bytes_sent": st.app_bytes_sent,
        });
        println!("{summary}");
    }
}

fn main() {
    let args: Vec<String> = std::env::args().skip(1).collect();
    match args.first().map(String::as_str) {
        Some("server") => server(&args),
        Some("client") => client(&args),
        Some("linkemu") => linkemu(&args),
        Some("interleave") => interleave(&args),
        _ => {
            eprintln!("usage: rtt_experiment server --listen ADDR | client --connect ADDR --policy P --dataset D ...");
            std::process::exit(2);
        }
    }
}
