//! Robustness of every decoder that reads outside input: API request lines,
//! recordings (JSON lines and CSV), agent configuration, application-metric
//! lines, target selectors, scopes and metric names.
//!
//! A deterministic mutation fuzzer (seeded xorshift, no wall clock): each valid
//! input is mutated many times (bit flips, byte insertions and deletions,
//! truncations, splices of other inputs, random bytes). Every decoder must
//! return `Ok` or an error — never panic — and errors must say something.

use hwqos_core::recording::{read_csv_from, read_recording_from};
use hwqos_core::{MetricName, Scope};
use hwqos_monitor::config::Config;
use hwqos_pmu::api::Request;
use hwqos_pmu::appmetric::{parse_push_line, parse_tail_line};
use hwqos_pmu::target::TargetSelector;
use std::io::Cursor;
use std::path::Path;

struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        let mut x = self.0;
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        self.0 = x;
        x
    }
    fn below(&mut self, n: usize) -> usize {
        (self.next() % n.max(1) as u64) as usize
    }
}

const INTERESTING: &[&[u8]] = &[
    b"\0",
    b"\xff",
    b"\n",
    b"\"",
    b"{",
    b"}",
    b"[",
    b"]",
    b":",
    b",",
    b"=",
    b"-1",
    b"1e309",
    b"NaN",
    b"18446744073709551616",
    b"\xe2\x82",
    b"pid:",
    b"cpu:*",
    b"*",
];

fn mutate(rng: &mut Rng, seed: &[u8], corpus: &[&[u8]]) -> Vec<u8> {
    let mut v = seed.to_vec();
    for _ in 0..=rng.below(4) {
        match rng.below(6) {
            0 if !v.is_empty() => {
                let i = rng.below(v.len());
                v[i] ^= 1 << rng.below(8);
            }
            1 => {
                let i = rng.below(v.len() + 1);
                let piece = INTERESTING[rng.below(INTERESTING.len())];
                v.splice(i..i, piece.iter().copied());
            }
            2 if !v.is_empty() => {
                let i = rng.below(v.len());
                let n = rng.below(v.len() - i + 1);
                v.drain(i..i + n);
            }
            3 => v.truncate(rng.below(v.len() + 1)),
            4 => {
                let other = corpus[rng.below(corpus.len())];
                let at = rng.below(v.len() + 1);
                let from = rng.below(other.len() + 1);
                v.splice(at..at, other[from..].iter().copied());
            }
            _ => {
                let n = rng.below(16);
                v.extend((0..n).map(|_| rng.next() as u8));
            }
        }
    }
    v
}

fn fuzz(
    name: &str,
    corpus: &[&[u8]],
    iterations: usize,
    mut decode: impl FnMut(&[u8]) -> Option<String>,
) {
    let mut rng = Rng(0x9E37_79B9_7F4A_7C15 ^ name.len() as u64);
    for seed in corpus {
        // Valid inputs decode (errors here are allowed: some corpus entries are invalid on purpose).
        let _ = decode(seed);
    }
    for _ in 0..iterations {
        let seed = corpus[rng.below(corpus.len())];
        let input = mutate(&mut rng, seed, corpus);
        if let Some(err) = decode(&input) {
            assert!(
                !err.trim().is_empty(),
                "{name}: empty error message for {input:?}"
            );
        }
    }
}

fn text(b: &[u8]) -> String {
    String::from_utf8_lossy(b).into_owned()
}

#[test]
fn api_requests() {
    let corpus: &[&[u8]] = &[
        br#"{"op":"subscribe","scopes":["pid:1","cpu:*"],"metrics":["hw.*"]}"#,
        br#"{"op":"window","seconds":5.5,"scopes":[],"metrics":["sw.page_faults"]}"#,
        br#"{"op":"window","frames":10}"#,
        br#"{"op":"set_event_sets","sets":[["sw.task_clock","sw.page_faults"],["hw.cycles"]]}"#,
        br#"{"op":"get_event_sets"}"#,
        br#"{"op":"flush"}"#,
        br#"{"op":"status"}"#,
    ];
    fuzz("api", corpus, 20_000, |b| {
        serde_json::from_slice::<Request>(b)
            .err()
            .map(|e| e.to_string())
    });
}

#[test]
fn recordings() {
    let header = br#"{"schema":"hwqos.recording/1","node":"n","started":{"mono_ns":1,"wall_ns":2},"rate_hz":10.0,"backend":"perf","counters":"software"}"#;
    let frame = br#"{"seq":0,"time":{"mono_ns":5,"wall_ns":6},"interval_ns":100,"samples":[{"time":{"mono_ns":5,"wall_ns":6},"scope":{"kind":"process","pid":7},"metric":"sw.page_faults","value":20.0,"counter":{"raw":10,"time_enabled":4,"time_running":2}}],"labels":[{"scope":{"kind":"process","pid":7},"name":"x"}]}"#;
    let mut valid = header.to_vec();
    valid.push(b'\n');
    valid.extend_from_slice(frame);
    valid.push(b'\n');
    let corpus: &[&[u8]] = &[&valid, header, frame];
    fuzz("jsonl", corpus, 5_000, |b| {
        read_recording_from(Cursor::new(b), Path::new("fuzz.jsonl"))
            .err()
            .map(|e| e.to_string())
    });
    let csv: &[&[u8]] = &[
        b"seq,mono_ns,wall_time,scope,label,sw.page_faults,multiplexed\n0,5,1970-01-01T00:00:00.000000Z,pid:7,\"a,b\",20,sw.page_faults\n",
    ];
    fuzz("csv", csv, 5_000, |b| {
        read_csv_from(Cursor::new(b), Path::new("fuzz.csv"))
            .err()
            .map(|e| e.to_string())
    });
}

#[test]
fn agent_configs() {
    let corpus: &[&[u8]] = &[
        include_bytes!("../../../deploy/config/monitor.toml"),
        b"rate_hz = 100\nper_cpu = false\n[[target]]\nselect = \"name:x\"\n[database]\nframes = 10\n",
        b"event_sets = [[\"sw.task_clock\"]]\n[api]\nenabled = false\n[metrics]\nenabled = false\n",
    ];
    let dir = tempfile::tempdir().expect("tempdir");
    let file = dir.path().join("fuzz.toml");
    let accept_all = |_: &str| -> Result<(), String> { Ok(()) };
    fuzz("config", corpus, 3_000, |b| {
        Config::parse(&text(b), &file, &accept_all)
            .err()
            .map(|e| e.to_string())
    });
}

#[test]
fn small_text_decoders() {
    let corpus: &[&[u8]] = &[
        b"app.rtt_us 153 pid:1234",
        b"app.x -1.5e3",
        b"1795355137.25 42",
        b"- 7",
        b"pid:1",
        b"tid:5/6",
        b"cgroup:/system.slice/a.service",
        b"unit:sshd.service",
        b"regex:^nginx: worker",
        b"name:x",
        b"stream:peer",
        b"hw.l1d.miss",
    ];
    fuzz("text", corpus, 30_000, |b| {
        let s = text(b);
        let errors = [
            parse_push_line(&s).err(),
            parse_tail_line(&s).err(),
            s.parse::<TargetSelector>().err().map(|e| e.to_string()),
            s.parse::<Scope>().err().map(|e| e.to_string()),
            MetricName::new(s.clone()).err().map(|e| e.to_string()),
        ];
        errors.into_iter().flatten().find(|e| e.trim().is_empty())
    });
}
