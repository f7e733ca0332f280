//! The scripted experiments' ping-pong driver (docs/experiments/compression.md).
//!
//! ```text
//! rtt_experiment server --listen ADDR
//! rtt_experiment client --connect ADDR --policy P --dataset d0|d1|dp
//!     [--messages N] [--size BYTES] [--round R] [--cpu-target T]
//!     [--change-at K --change-to d0|d1|dp] [--at K:SHELL-COMMAND]...
//!     [--csv FILE] [--label TEXT]
//! ```
//!
//! The client sends each message and waits for the echo; the RTT of message i
//! is the wall time from `send_msg` to the echo's `recv_msg`. The server
//! echoes with the client's policy (told in the first message). One JSON
//! summary line goes to stdout; `--csv` keeps every message (index, RTT, codec
//! sent, codec preferred, CPU utilization and throttle share).

use hwqos_compress::datasets::{DataSet, MessageSource};
use hwqos_compress::{MessageStream, PolicyKind, Registry, Sampling, StreamConfig, ThrottleConfig};
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

fn config(policy: PolicyKind, round: u32, cpu_target: f64) -> StreamConfig {
    StreamConfig {
        policy,
        round_messages: round,
        throttle: (cpu_target > 0.0).then(|| ThrottleConfig {
            target: cpu_target,
            ..Default::default()
        }),
        sampling: Sampling::Background,
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
            let Ok(mut s) = MessageStream::handshake(sock, config(PolicyKind::Adaptive, 50, 0.0), reg)
            else {
                return;
            };
            // First message: "POLICY <p> ROUND <r> CPU <t>".
            let Ok(Some(first)) = s.recv_msg() else { return };
            let text = String::from_utf8_lossy(&first).to_string();
            let f: Vec<&str> = text.split_whitespace().collect();
            if let (Some(p), Some(r), Some(t)) = (f.get(1), f.get(3), f.get(5)) {
                let cfg = config(p.parse().unwrap(), r.parse().unwrap(), t.parse().unwrap());
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
        });
    }
}

fn client(args: &[String]) {
    let addr = arg(args, "--connect").expect("--connect ADDR");
    let policy: PolicyKind = arg(args, "--policy").unwrap_or("adaptive".into()).parse().unwrap();
    let set: DataSet = arg(args, "--dataset").unwrap_or("dp".into()).parse().unwrap();
    let n: usize = arg(args, "--messages").map_or(2000, |v| v.parse().unwrap());
    let size: usize = arg(args, "--size").map_or(512, |v| v.parse().unwrap());
    let round: u32 = arg(args, "--round").map_or(50, |v| v.parse().unwrap());
    let cpu_target: f64 = arg(args, "--cpu-target").map_or(0.0, |v| v.parse().unwrap());
    let change_at: Option<usize> = arg(args, "--change-at").map(|v| v.parse().unwrap());
    let change_to: Option<DataSet> = arg(args, "--change-to").map(|v| v.parse().unwrap());
    let label = arg(args, "--label").unwrap_or_default();
    let mut hooks: BTreeMap<usize, Vec<String>> = BTreeMap::new();
    for (i, a) in args.iter().enumerate() {
        if a == "--at" {
            let spec = &args[i + 1];
            let (k, cmd) = spec.split_once(':').expect("--at K:COMMAND");
            hooks.entry(k.parse().unwrap()).or_default().push(cmd.to_string());
        }
    }
    let sock = TcpStream::connect(&addr).expect("connect");
    sock.set_nodelay(true).unwrap();
    let reg = Arc::new(Registry::standard());
    let mut s = MessageStream::handshake(sock, config(policy.clone(), round, cpu_target), reg.clone())
        .expect("handshake");
    s.send_msg(format!("POLICY {policy} ROUND {round} CPU {cpu_target}").as_bytes())
        .unwrap();
    assert_eq!(s.recv_msg().unwrap().unwrap(), b"OK");
    let mut src = MessageSource::new(set, size, 7);
    let mut later = change_to.map(|d| MessageSource::new(d, size, 11));
    let mut csv = arg(args, "--csv").map(|p| {
        let mut f = std::io::BufWriter::new(std::fs::File::create(p).expect("csv"));
        writeln!(f, "i,rtt_ns,codec,chosen,cpu_util,cpu_share,bytes").unwrap();
        f
    });
    let mut rtts = Vec::with_capacity(n);
    for i in 0..n {
        if let Some(cmds) = hooks.get(&i) {
            for c in cmds {
                let st = std::process::Command::new("sh").arg("-c").arg(c).status();
                eprintln!("at message {i}: `{c}` -> {st:?}");
            }
        }
        let msg = match (&mut later, change_at) {
            (Some(l), Some(k)) if i >= k => l.next_message(),
            _ => src.next_message(),
        };
        let t0 = Instant::now();
        s.send_msg(&msg).unwrap();
        let echo = s.recv_msg().unwrap().expect("echo");
        let rtt = t0.elapsed().as_nanos() as u64;
        assert_eq!(echo.len(), msg.len());
        rtts.push(rtt as f64);
        if let Some(f) = &mut csv {
            let ep = s.endpoint();
            let st = ep.stats();
            writeln!(
                f,
                "{i},{rtt},{},{},{},{},{}",
                reg.name_of(ep.last_codec()),
                st.chosen,
                st.cpu_utilization.map_or(String::new(), |v| format!("{v:.4}")),
                st.cpu_share.map_or(String::new(), |v| format!("{v:.4}")),
                msg.len()
            )
            .unwrap();
        }
    }
    let st = s.stats();
    let ci = hwqos_core::stats::confidence_interval(&rtts, 0.95).expect("messages");
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
        "rtt_estimate_us": st.rtt_ns.map(|v| v / 1e3),
        "link_ns_per_byte": st.link_ns_per_byte,
        "throttled_messages": st.throttled_messages,
    });
    println!("{summary}");
}

fn main() {
    let args: Vec<String> = std::env::args().skip(1).collect();
    match args.first().map(String::as_str) {
        Some("server") => server(&args),
        Some("client") => client(&args),
        _ => {
            eprintln!("usage: rtt_experiment server --listen ADDR | client --connect ADDR --policy P --dataset D ...");
            std::process::exit(2);
        }
    }
}
