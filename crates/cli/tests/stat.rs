//! `hwqos stat` end to end: JSON line shape, errors and exit codes, unavailable
//! events, and known-answer comparisons against the kernel's expected counts and
//! against `perf stat` (Debian's linux-perf) on the same deterministic workload
//! (`hwqos-testload`).
//!
//! The perf comparisons need `perf` on PATH (the README's test command installs
//! it); set `HWQOS_SKIP_PERF_ORACLE=1` to skip only those on a machine without it.

use serde_json::Value;
use std::process::{Command, Output};

const HWQOS: &str = env!("CARGO_BIN_EXE_hwqos");
const TESTLOAD: &str = env!("CARGO_BIN_EXE_hwqos-testload");

fn hwqos(args: &[&str]) -> Output {
    Command::new(HWQOS).args(args).output().expect("run hwqos")
}

fn stdout(o: &Output) -> String {
    String::from_utf8_lossy(&o.stdout).into_owned()
}

fn stderr(o: &Output) -> String {
    String::from_utf8_lossy(&o.stderr).into_owned()
}

fn json_lines(o: &Output) -> Vec<Value> {
    parse_json_lines(&stdout(o))
}

fn parse_json_lines(text: &str) -> Vec<Value> {
    text.lines()
        .map(|l| serde_json::from_str(l).unwrap_or_else(|e| panic!("not JSON: {l}: {e}")))
        .collect()
}

/// A file name for one `-o` output of this test process.
fn counts_file() -> std::path::PathBuf {
    use std::sync::atomic::{AtomicUsize, Ordering};
    static NEXT: AtomicUsize = AtomicUsize::new(0);
    std::env::temp_dir().join(format!(
        "hwqos-stat-test-{}-{}.out",
        std::process::id(),
        NEXT.fetch_add(1, Ordering::Relaxed)
    ))
}

/// `hwqos stat -o FILE ARGS…`: the process output and the counts it wrote.
fn stat_to_file(args: &[&str]) -> (Output, String) {
    let file = counts_file();
    let o = Command::new(HWQOS)
        .arg("stat")
        .arg("-o")
        .arg(&file)
        .args(args)
        .output()
        .expect("run hwqos");
    let counts = std::fs::read_to_string(&file).unwrap_or_default();
    let _ = std::fs::remove_file(&file);
    (o, counts)
}

/// `hwqos stat --json-full -e EVENTS -- testload ARGS`; returns event → value.
fn hwqos_counts(events: &str, load: &[&str]) -> std::collections::BTreeMap<String, f64> {
    let mut args = vec!["--json-full", "-e", events, "--", TESTLOAD];
    args.extend_from_slice(load);
    let (o, counts) = stat_to_file(&args);
    assert!(o.status.success(), "hwqos stat failed: {}", stderr(&o));
    parse_json_lines(&counts)
        .into_iter()
        .map(|v| {
            let value = v["value"]
                .as_f64()
                .unwrap_or_else(|| panic!("no value in {v}"));
            (v["event"].as_str().unwrap().to_string(), value)
        })
        .collect()
}

/// Parses `perf stat -x,` output: event → value (task-clock in ns).
fn parse_perf_csv(text: &str) -> std::collections::BTreeMap<String, f64> {
    text.lines()
        .filter_map(|l| {
            let f: Vec<&str> = l.split(',').collect();
            let value: f64 = f.first()?.parse().ok()?;
            // perf prints task-clock in msec.
            let value = if f.get(1) == Some(&"msec") {
                value * 1e6
            } else {
                value
            };
            Some((f.get(2)?.to_string(), value))
        })
        .collect()
}

fn perf_available() -> bool {
    let ok = Command::new("perf")
        .args(["stat", "-x,", "-e", "task-clock", "--", "true"])
        .output()
        .is_ok_and(|o| o.status.success());
    if !ok && std::env::var_os("HWQOS_SKIP_PERF_ORACLE").is_none() {
        panic!("perf is not usable here: install Debian's linux-perf (apt-get install -y linux-perf) or set HWQOS_SKIP_PERF_ORACLE=1");
    }
    ok
}

fn within(a: f64, b: f64, tol: f64) -> bool {
    (a - b).abs() <= tol * b.abs().max(1.0)
}

#[test]
fn json_lines_have_the_documented_shape() {
    let (o, counts) = stat_to_file(&[
        "--json-full",
        "-e",
        "task-clock,sw.page_faults,context-switches",
        "--",
        TESTLOAD,
        "--pages",
        "2000",
    ]);
    assert!(o.status.success(), "{}", stderr(&o));
    let lines = parse_json_lines(&counts);
    assert_eq!(lines.len(), 3, "{counts}");
    let events: Vec<&str> = lines.iter().map(|v| v["event"].as_str().unwrap()).collect();
    assert_eq!(events, ["task-clock", "sw.page_faults", "context-switches"]);
    for v in &lines {
        assert_eq!(v["schema"], "hwqos.stat/1");
        assert!(v["scope"].as_str().unwrap().starts_with("pid:"), "{v}");
        assert!(v["value"].as_f64().unwrap() >= 0.0);
        assert!(v["counter_value"].as_u64().is_some());
        assert!(v["time_enabled"].as_u64().unwrap() > 0);
        assert_eq!(
            v["multiplexed"], false,
            "software counters never multiplex: {v}"
        );
        assert!(v.get("unavailable").is_none());
        assert!(v.get("interval").is_none());
    }
    assert_eq!(lines[0]["unit"], "nanoseconds");
    assert_eq!(lines[0]["metric"], "sw.task_clock");
    assert_eq!(lines[1]["unit"], "events");
    // 2000 touched pages, plus the loader's own faults.
    let faults = lines[1]["value"].as_f64().unwrap();
    assert!(faults >= 2000.0, "{faults}");
}

#[test]
fn unknown_event_exits_2_and_names_it() {
    let o = hwqos(&["stat", "-e", "task-clock,no-such-event-xyz", "--", "true"]);
    assert_eq!(o.status.code(), Some(2), "{}", stderr(&o));
    assert!(stderr(&o).contains("no-such-event-xyz"), "{}", stderr(&o));
    assert!(stdout(&o).is_empty());
}

#[test]
fn bad_usage_exits_2() {
    // No target at all.
    let o = hwqos(&["stat", "-e", "task-clock"]);
    assert_eq!(o.status.code(), Some(2), "{}", stderr(&o));
    assert!(stderr(&o).contains("-p PID"), "{}", stderr(&o));
    // Both -p and -a.
    let o = hwqos(&["stat", "-p", "1", "-a"]);
    assert_eq!(o.status.code(), Some(2));
    // A zero interval.
    let o = hwqos(&["stat", "-I", "0", "--", "true"]);
    assert_eq!(o.status.code(), Some(2));
    assert!(stderr(&o).contains("-I"), "{}", stderr(&o));
    // A pid that does not exist.
    let o = hwqos(&["stat", "-p", "999999999"]);
    assert_eq!(o.status.code(), Some(2));
    assert!(stderr(&o).contains("999999999"), "{}", stderr(&o));
}

#[test]
fn exit_status_of_the_command_is_propagated() {
    let o = hwqos(&["stat", "-e", "task-clock", "--", TESTLOAD, "--exit", "3"]);
    assert_eq!(o.status.code(), Some(3), "{}", stderr(&o));
    let o = hwqos(&[
        "stat",
        "-e",
        "task-clock",
        "--",
        "sh",
        "-c",
        "kill -TERM $$",
    ]);
    assert_eq!(o.status.code(), Some(128 + 15), "{}", stderr(&o));
    // The counts are still printed for a failing command.
    assert!(stderr(&o).contains("task-clock"), "{}", stderr(&o));
    let o = hwqos(&["stat", "-e", "task-clock", "--", "/nonexistent/command"]);
    assert_eq!(o.status.code(), Some(1));
    assert!(
        stderr(&o).contains("cannot run `/nonexistent/command`"),
        "{}",
        stderr(&o)
    );
}

/// The events `hwqos list --json` reports unavailable on this node.
fn unavailable_events() -> Vec<String> {
    let o = hwqos(&["list", "--json"]);
    assert!(o.status.success(), "{}", stderr(&o));
    json_lines(&o)
        .into_iter()
        .filter(|v| v["available"] == false)
        .filter_map(|v| v["name"].as_str().map(str::to_string))
        .collect()
}

#[test]
fn unavailable_event_is_not_supported_and_the_rest_is_counted() {
    let missing = unavailable_events();
    // On a PMU-less node the hardware events are the unavailable ones; on a node
    // with a PMU some model-specific event usually is. If everything is
    // available there is no unavailable event to try.
    let Some(ev) = missing
        .iter()
        .find(|e| e.as_str() == "hw.cycles")
        .or(missing.first())
    else {
        eprintln!("every catalog event is available on this node; nothing to check");
        return;
    };
    let list = format!("task-clock,{ev},page-faults");
    let (o, counts) = stat_to_file(&["--json-full", "-e", &list, "--", TESTLOAD, "--pages", "100"]);
    assert!(o.status.success(), "{}", stderr(&o));
    let lines = parse_json_lines(&counts);
    assert_eq!(lines.len(), 3);
    assert!(lines[1]["value"].is_null(), "{}", lines[1]);
    assert!(lines[1]["unavailable"]
        .as_str()
        .unwrap()
        .contains("not supported"));
    assert!(lines[0]["value"].as_f64().unwrap() > 0.0);
    assert!(lines[2]["value"].as_f64().unwrap() >= 100.0);
    // Text output says <not supported> like perf, and the command still ran.
    let o = hwqos(&["stat", "-e", &list, "--", "true"]);
    assert!(o.status.success(), "{}", stderr(&o));
    assert!(stderr(&o).contains("<not supported>"), "{}", stderr(&o));
    // Only unavailable events: fatal, with the reasons.
    let o = hwqos(&["stat", "-e", ev, "--", "true"]);
    assert_eq!(o.status.code(), Some(1), "{}", stdout(&o));
    assert!(
        stderr(&o).contains("none of the requested events"),
        "{}",
        stderr(&o)
    );
}

#[test]
fn default_events_never_fail_for_missing_hardware() {
    let (o, counts) = stat_to_file(&["--json-full", "--", "true"]);
    assert!(o.status.success(), "{}", stderr(&o));
    let lines = parse_json_lines(&counts);
    let names: Vec<&str> = lines.iter().map(|v| v["event"].as_str().unwrap()).collect();
    assert_eq!(
        names,
        [
            "task-clock",
            "context-switches",
            "cpu-migrations",
            "page-faults",
            "cycles",
            "instructions",
            "branches",
            "branch-misses"
        ]
    );
    assert!(lines[0]["value"].as_f64().unwrap() > 0.0);
}

#[test]
fn kernel_known_answers_for_pages_and_round_trips() {
    // 20,000 pinned round trips are 40,000 context switches; 50,000 fresh pages are
    // 50,000 minor faults. Loader and runtime overheads are small against these.
    let c = hwqos_counts(
        "context-switches,page-faults",
        &["--pages", "50000", "--round-trips", "20000"],
    );
    let cs = c["context-switches"];
    assert!(
        within(cs, 40_000.0, 0.005),
        "context switches {cs}, expected 40000 ± 0.5%"
    );
    let pf = c["page-faults"];
    assert!(
        within(pf, 50_000.0, 0.02),
        "page faults {pf}, expected 50000 ± 2%"
    );
}

/// Both tools count ONE execution: `perf stat -- hwqos stat --json -- testload`.
/// perf counts the workload plus hwqos's own start-up and bookkeeping; hwqos
/// counts the workload. Separate runs would not do: the CPU time of two runs of
/// the same workload differs by several percent on a shared machine.
fn nested_counts(
    events: &str,
    load: &[&str],
) -> (
    std::collections::BTreeMap<String, f64>,
    std::collections::BTreeMap<String, f64>,
) {
    let file = counts_file();
    let o = Command::new("perf")
        .args([
            "stat",
            "-x,",
            "-e",
            events,
            "--",
            HWQOS,
            "stat",
            "--json-full",
            "-o",
        ])
        .arg(&file)
        .args(["-e", events, "--"])
        .arg(TESTLOAD)
        .args(load)
        .output()
        .expect("run perf");
    assert!(o.status.success(), "perf stat failed: {}", stderr(&o));
    let counts = std::fs::read_to_string(&file).expect("hwqos wrote its counts");
    let _ = std::fs::remove_file(&file);
    let ours = parse_json_lines(&counts)
        .into_iter()
        .map(|v| {
            let value = v["value"]
                .as_f64()
                .unwrap_or_else(|| panic!("no value in {v}"));
            (v["event"].as_str().unwrap().to_string(), value)
        })
        .collect();
    (ours, parse_perf_csv(&stderr(&o)))
}

#[test]
fn agrees_with_perf_stat_within_2_percent() {
    if !perf_available() {
        return;
    }
    let events = "task-clock,page-faults,context-switches";
    let load = [
        "--pages",
        "50000",
        "--round-trips",
        "20000",
        "--spin-iters",
        "60000000",
    ];
    let (ours, perf) = nested_counts(events, &load);
    for e in ["task-clock", "page-faults", "context-switches"] {
        let (h, p) = (ours[e], perf[e]);
        assert!(
            within(h, p, 0.02),
            "{e}: hwqos {h} vs perf {p} on the same execution"
        );
        // perf also counted hwqos itself, so it can only see more.
        assert!(h <= p * 1.0005, "{e}: hwqos {h} counted more than perf {p}");
    }
    // The workload is large enough that the tools' fixed costs do not matter.
    assert!(ours["task-clock"] > 100e6, "spin too short: {ours:?}");
}

#[test]
fn interval_mode_prints_deltas_and_no_totals_like_perf() {
    let (o, counts) = stat_to_file(&[
        "--json-full",
        "-I",
        "100",
        "-e",
        "page-faults,context-switches",
        "--",
        TESTLOAD,
        "--sleep-ms",
        "1000",
        "--pages",
        "5000",
    ]);
    assert!(o.status.success(), "{}", stderr(&o));
    let lines = parse_json_lines(&counts);
    assert!(
        lines.iter().all(|v| v.get("interval").is_some()),
        "with -I every line is an interval, as in perf: {counts}"
    );
    assert!(
        lines.len() >= 20,
        "about ten intervals of two events in one second: {counts}"
    );
    // The intervals add up to the whole run: its 5000 fresh pages included.
    let interval_faults: f64 = lines
        .iter()
        .filter(|v| v["event"] == "page-faults")
        .map(|v| v["value"].as_f64().unwrap())
        .sum();
    assert!(
        (5000.0..6000.0).contains(&interval_faults),
        "{interval_faults} faults over the intervals"
    );
    let times: Vec<f64> = lines
        .iter()
        .map(|v| v["interval"].as_f64().unwrap())
        .collect();
    assert!(times.windows(2).all(|w| w[0] <= w[1]), "{times:?}");
}

#[test]
fn attach_to_a_running_process_counts_its_new_threads() {
    let mut child = Command::new(TESTLOAD)
        .args(["--delay-ms", "700", "--round-trips", "3000"])
        .spawn()
        .expect("start testload");
    let pid = child.id().to_string();
    let (o, counts) = stat_to_file(&[
        "--json-full",
        "-e",
        "context-switches,task-clock",
        "-p",
        &pid,
    ]);
    let _ = child.wait();
    assert!(o.status.success(), "{}", stderr(&o));
    let lines = parse_json_lines(&counts);
    assert_eq!(lines[0]["scope"], format!("pid:{pid}"));
    // The echo thread is created after attaching: inherit counts it too.
    let cs = lines[0]["value"].as_f64().unwrap();
    assert!(
        within(cs, 6000.0, 0.02),
        "context switches {cs}, expected about 6000"
    );
}

#[test]
fn separated_output_matches_perfs_field_order() {
    let o = hwqos(&[
        "stat",
        "-x",
        ";",
        "-e",
        "page-faults,task-clock",
        "--",
        "true",
    ]);
    assert!(o.status.success(), "{}", stderr(&o));
    let out = stderr(&o);
    let lines: Vec<Vec<&str>> = out.lines().map(|l| l.split(';').collect()).collect();
    assert_eq!(lines.len(), 2, "{out}");
    assert_eq!((lines[0][1], lines[0][2]), ("", "page-faults"));
    assert_eq!((lines[1][1], lines[1][2]), ("msec", "task-clock"));
    assert_eq!(lines[1][6], "CPUs utilized");
    assert!(lines[0][0].parse::<u64>().is_ok());
}

#[test]
fn standard_output_belongs_to_the_command() {
    let o = hwqos(&["stat", "-e", "task-clock", "--", "sh", "-c", "echo X"]);
    assert!(o.status.success(), "{}", stderr(&o));
    assert_eq!(
        stdout(&o),
        "X\n",
        "counts go to standard error, like perf's"
    );
    assert!(stderr(&o).contains("task-clock"), "{}", stderr(&o));
    // The command without `--`, its own options included.
    let o = hwqos(&["stat", "-e", "task-clock", "sh", "-c", "echo -n Y"]);
    assert!(o.status.success(), "{}", stderr(&o));
    assert_eq!(stdout(&o), "Y");
}

#[test]
fn separated_lines_parse_with_the_code_that_parses_perfs() {
    let o = hwqos(&[
        "stat",
        "-x,",
        "-e",
        "task-clock,page-faults,context-switches",
        "--",
        TESTLOAD,
        "--pages",
        "3000",
        "--round-trips",
        "1000",
    ]);
    assert!(o.status.success(), "{}", stderr(&o));
    let c = parse_perf_csv(&stderr(&o));
    assert!(c["task-clock"] > 0.0, "{c:?}");
    assert!(c["page-faults"] >= 3000.0, "{c:?}");
    assert!(within(c["context-switches"], 2000.0, 0.01), "{c:?}");
}

#[test]
fn a_pid_is_counted_for_as_long_as_the_command_runs() {
    let mut child = Command::new(TESTLOAD)
        .args([
            "--delay-ms",
            "300",
            "--round-trips",
            "2000",
            "--sleep-ms",
            "3000",
        ])
        .spawn()
        .expect("start testload");
    let pid = child.id().to_string();
    let (o, counts) = stat_to_file(&[
        "--json-full",
        "-e",
        "context-switches",
        "-p",
        &pid,
        "--",
        "sleep",
        "1",
    ]);
    let still_running = child.try_wait().unwrap().is_none();
    let _ = child.kill();
    let _ = child.wait();
    assert!(o.status.success(), "{}", stderr(&o));
    assert!(still_running, "the counted process outlives the sleep");
    let lines = parse_json_lines(&counts);
    assert_eq!(lines[0]["scope"], format!("pid:{pid}"));
    // 2000 pinned round trips: 4000 switches, plus the preemptions a busy
    // CPU adds; the sleep after them is counted too (the pid outlives it).
    let cs = lines[0]["value"].as_f64().unwrap();
    assert!((4000.0..4400.0).contains(&cs), "{cs} context switches");
}

#[test]
fn groups_modifiers_threads_and_repeats_like_perf() {
    // {a,b} is one kernel group: both members count (their sum is a known answer).
    let c = hwqos_counts(
        "{task-clock,page-faults,context-switches},context-switches:u,context-switches:k",
        &["--pages", "2000", "--round-trips", "500"],
    );
    assert!(c["page-faults"] >= 2000.0, "{c:?}");
    assert!(within(c["context-switches"], 1000.0, 0.01), "{c:?}");
    // A switch happens in the kernel: none in user mode.
    assert_eq!(c["context-switches:u"], 0.0, "{c:?}");
    assert!(within(c["context-switches:k"], 1000.0, 0.01), "{c:?}");

    // -r: the mean of N runs and perf's relative standard error.
    let (o, counts) = stat_to_file(&[
        "--json-full",
        "-r",
        "3",
        "-e",
        "context-switches",
        "--",
        TESTLOAD,
        "--round-trips",
        "700",
    ]);
    assert!(o.status.success(), "{}", stderr(&o));
    let lines = parse_json_lines(&counts);
    assert_eq!(lines.len(), 1, "{counts}");
    assert!(
        within(lines[0]["value"].as_f64().unwrap(), 1400.0, 0.01),
        "{counts}"
    );
    assert!(lines[0]["rel_stddev_pct"].as_f64().is_some(), "{counts}");
    let o = hwqos(&["stat", "-r", "2", "-e", "page-faults", "--", "true"]);
    assert!(stderr(&o).contains("(2 runs)"), "{}", stderr(&o));
    assert!(stderr(&o).contains("( +-"), "{}", stderr(&o));

    // -t: one thread, not its siblings. The calling thread of this test sleeps.
    // SAFETY: gettid has no preconditions.
    let tid = unsafe { libc::gettid() }.to_string();
    let (o, counts) = stat_to_file(&[
        "--json-full",
        "-e",
        "task-clock",
        "-t",
        &tid,
        "--",
        "sleep",
        "0.2",
    ]);
    assert!(o.status.success(), "{}", stderr(&o));
    let lines = parse_json_lines(&counts);
    let me = std::process::id();
    assert_eq!(lines[0]["scope"], format!("tid:{me}/{tid}"), "{counts}");
}

#[test]
fn bad_groups_and_modifiers_exit_2_and_say_why() {
    for (events, needle) in [
        ("{task-clock,page-faults", "without its `}`"),
        ("page-faults:x", "modifier `x`"),
        ("{}", "empty event group"),
    ] {
        let o = hwqos(&["stat", "-e", events, "--", "true"]);
        assert_eq!(o.status.code(), Some(2), "{events}: {}", stderr(&o));
        assert!(stderr(&o).contains(needle), "{events}: {}", stderr(&o));
    }
    let o = hwqos(&["stat", "-A", "--", "true"]);
    assert_eq!(o.status.code(), Some(2));
    assert!(stderr(&o).contains("-A"), "{}", stderr(&o));
    let o = hwqos(&["stat", "-C", "4095", "--", "true"]);
    assert_eq!(o.status.code(), Some(2));
    assert!(stderr(&o).contains("not online"), "{}", stderr(&o));
}

#[test]
fn an_unprivileged_user_gets_one_plain_warning_and_the_counts() {
    // SAFETY: geteuid has no preconditions.
    if unsafe { libc::geteuid() } != 0 {
        eprintln!("needs root to run hwqos as `nobody`; nothing checked");
        return;
    }
    let paranoid = std::fs::read_to_string("/proc/sys/kernel/perf_event_paranoid")
        .ok()
        .and_then(|s| s.trim().parse::<i32>().ok());
    if paranoid.is_none_or(|p| p < 2) {
        eprintln!("perf_event_paranoid < 2: kernel mode is allowed to everyone; nothing checked");
        return;
    }
    let o = Command::new("su")
        .args(["nobody", "-s", "/bin/sh", "-c"])
        .arg(format!(
            "{HWQOS} stat -e task-clock,page-faults,context-switches,cpu-migrations -- true"
        ))
        .output()
        .expect("run su");
    assert!(o.status.success(), "{}", stderr(&o));
    let err = stderr(&o);
    assert_eq!(
        err.matches("WARN").count(),
        1,
        "one cause, one warning: {err}"
    );
    assert!(err.contains("counting user mode only"), "{err}");
    assert!(
        !err.contains('\u{1b}'),
        "no ANSI colours when stderr is not a terminal: {err}"
    );
    assert!(err.contains("page-faults"), "{err}");
}
