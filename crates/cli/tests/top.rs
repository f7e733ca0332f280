//! `hwqos top` (and the progress bars of the long commands) in a real
//! terminal: tmux runs it in a detached session of a given size, `send-keys`
//! types, `capture-pane` reads the screen. Every wait is a bounded poll of
//! the screen, never a fixed sleep.
//!
//! tmux is required (`apt-get install tmux`; `scripts/test.sh` installs it);
//! without it these tests fail, unless `HWQOS_SKIP_TMUX=1` is set.

use std::path::PathBuf;
use std::process::{Child, Command, Output, Stdio};
use std::time::{Duration, Instant};

const HWQOS: &str = env!("CARGO_BIN_EXE_hwqos");
const TESTLOAD: &str = env!("CARGO_BIN_EXE_hwqos-testload");
/// Bound of every wait on the screen (2 shared cores, a debug build).
const PATIENCE: Duration = Duration::from_secs(30);

/// Whether tmux can be used; fails the test with the way out when it cannot.
fn tmux_or_skip() -> bool {
    let ok = Command::new("tmux")
        .arg("-V")
        .output()
        .is_ok_and(|o| o.status.success());
    if ok {
        return true;
    }
    if std::env::var("HWQOS_SKIP_TMUX").as_deref() == Ok("1") {
        eprintln!("skipped: tmux is not installed and HWQOS_SKIP_TMUX=1");
        return false;
    }
    panic!(
        "tmux is not installed: the terminal tests of `hwqos top` need it \
         (apt-get install tmux, as scripts/test.sh does); set HWQOS_SKIP_TMUX=1 to skip them"
    );
}

/// A tmux server of its own (private socket, no configuration file) with one
/// session running `command` in `sh`; when the command ends the pane prints
/// whether the terminal is back in canonical mode (`icanon`, not raw mode's
/// `-icanon`) and `[hwqos exited with N]`, and stays open.
struct Tmux {
    _dir: tempfile::TempDir,
    socket: PathBuf,
}

impl Tmux {
    fn start(width: u16, height: u16, command: &str) -> Tmux {
        let dir = tempfile::tempdir().unwrap();
        let socket = dir.path().join("tmux.sock");
        let script = format!(
            "{command}; s=$?; stty -a | tr ' ;' '\\n\\n' | grep -x -e icanon -e -icanon; \
             echo \"[hwqos exited with $s]\"; exec cat"
        );
        let t = Tmux { _dir: dir, socket };
        let o = t.tmux(&[
            "new-session",
            "-d",
            "-s",
            "top",
            "-x",
            &width.to_string(),
            "-y",
            &height.to_string(),
            "sh",
            "-c",
            &script,
        ]);
        assert!(o.status.success(), "tmux new-session: {o:?}");
        t
    }

    fn tmux(&self, args: &[&str]) -> Output {
        Command::new("tmux")
            .arg("-S")
            .arg(&self.socket)
            .args(["-f", "/dev/null"])
            .args(args)
            .stdin(Stdio::null())
            .output()
            .expect("run tmux")
    }

    fn screen(&self) -> String {
        let o = self.tmux(&["capture-pane", "-p", "-t", "top"]);
        String::from_utf8_lossy(&o.stdout).into_owned()
    }

    /// Whether the pane is on the alternate screen.
    fn alternate_screen(&self) -> bool {
        let o = self.tmux(&["display-message", "-p", "-t", "top", "#{alternate_on}"]);
        String::from_utf8_lossy(&o.stdout).trim() == "1"
    }

    fn keys(&self, keys: &[&str]) {
        let mut args = vec!["send-keys", "-t", "top"];
        args.extend_from_slice(keys);
        let o = self.tmux(&args);
        assert!(o.status.success(), "tmux send-keys {keys:?}: {o:?}");
    }

    /// Polls the screen until `ok` holds; fails with the last screen after
    /// [`PATIENCE`].
    fn wait_for(&self, what: &str, ok: impl Fn(&str) -> bool) -> String {
        let deadline = Instant::now() + PATIENCE;
        loop {
            let screen = self.screen();
            if ok(&screen) {
                return screen;
            }
            assert!(
                Instant::now() < deadline,
                "no {what} on the screen within {PATIENCE:?}:\n{screen}"
            );
            std::thread::sleep(Duration::from_millis(50));
        }
    }

    /// Waits for the command to end; returns the screen then.
    fn wait_for_exit(&self, code: i32) -> String {
        let marker = format!("[hwqos exited with {code}]");
        let screen = self.wait_for(&marker, |s| s.contains("[hwqos exited with"));
        assert!(screen.contains(&marker), "{screen}");
        screen
    }
}

impl Drop for Tmux {
    fn drop(&mut self) {
        let _ = self.tmux(&["kill-server"]);
    }
}

/// A `hwqos-testload` that sleeps until the test ends.
struct Sleeper(Child);

impl Sleeper {
    fn spawn() -> Sleeper {
        Sleeper(
            Command::new(TESTLOAD)
                .args(["--sleep-ms", "300000"])
                .spawn()
                .expect("spawn hwqos-testload"),
        )
    }

    fn pid(&self) -> u32 {
        self.0.id()
    }
}

impl Drop for Sleeper {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// Whether this node counts cycles and instructions (`hwqos list`).
fn node_has_cycles() -> bool {
    let o = Command::new(HWQOS)
        .args(["list", "--json"])
        .output()
        .unwrap();
    String::from_utf8_lossy(&o.stdout)
        .lines()
        .any(|l| l.contains("\"name\":\"hw.cycles\"") && l.contains("\"available\":true"))
}

/// The screen line of each table row whose first field is one of `ids`, in
/// screen order.
fn row_order(screen: &str, ids: &[String]) -> Vec<String> {
    screen
        .lines()
        .filter_map(|l| l.split_whitespace().next())
        .filter(|first| ids.iter().any(|id| id == first))
        .map(String::from)
        .collect()
}

/// The table's column titles: the fourth line, under the title, the system
/// line and the view/sort line.
fn table_header(screen: &str) -> String {
    screen.lines().nth(3).unwrap_or("").to_string()
}

#[test]
fn interactive_top_filters_sorts_switches_views_fits_the_width_and_quits() {
    if !tmux_or_skip() {
        return;
    }
    let (a, b) = (Sleeper::spawn(), Sleeper::spawn());
    let mut pids = [a.pid(), b.pid()];
    pids.sort_unstable();
    let pid_text: Vec<String> = pids.iter().map(u32::to_string).collect();
    let t = Tmux::start(
        120,
        32,
        &format!("{HWQOS} top -d 0.3 -p {},{}", pids[0], pids[1]),
    );

    // The header, and both filtered processes (and nothing else) once sampled.
    let screen = t.wait_for("both hwqos-testload rows", |s| {
        row_order(s, &pid_text).len() == 2 && s.contains("hwqos-testload")
    });
    let node = std::fs::read_to_string("/proc/sys/kernel/hostname").unwrap();
    let title = screen.lines().next().unwrap();
    assert!(
        title.starts_with(&format!("hwqos top — {}", node.trim())),
        "{screen}"
    );
    assert!(title.contains("every 0.30 s (3.33 Hz)"), "{title}");
    assert!(
        title.contains(&format!("-p {},{}", pids[0], pids[1])),
        "{title}"
    );
    assert!(screen.contains("2 processes"), "{screen}");
    let rows: Vec<&str> = screen
        .lines()
        .skip_while(|l| !l.contains("COMMAND"))
        .skip(1)
        .take_while(|l| !l.trim().is_empty())
        .collect();
    assert_eq!(rows.len(), 2, "only the -p processes: {screen}");
    assert!(t.alternate_screen(), "not on the alternate screen");
    if node_has_cycles() {
        assert!(title.contains("counters: hardware"), "{title}");
        assert!(!screen.contains("IPC/CPI n/a"), "{screen}");
    } else {
        // This node has no PMU: software counters, IPC/CPI n/a and why.
        assert!(title.contains("counters: software"), "{title}");
        assert!(
            screen.contains("IPC/CPI n/a: no hardware PMU (cycles, instructions not supported)"),
            "{screen}"
        );
        for row in &rows {
            assert!(row.trim_end().ends_with("n/a    n/a"), "{row}");
        }
    }

    // Sort by PID (`p`: ascending first), then reverse (`r`).
    t.keys(&["p"]);
    t.wait_for("rows sorted by PID, ascending", |s| {
        table_header(s).contains("PID▲") && row_order(s, &pid_text) == pid_text
    });
    t.keys(&["r"]);
    let reversed: Vec<String> = pid_text.iter().rev().cloned().collect();
    t.wait_for("rows sorted by PID, descending", |s| {
        table_header(s).contains("PID▼") && row_order(s, &pid_text) == reversed
    });
    // `<` moves the sort to the column before PID (the last one, CPI).
    t.keys(&["<"]);
    t.wait_for("the sort moved to CPI", |s| {
        table_header(s).contains("CPI▼")
    });

    // The per-CPU view: one row per online CPU, cpu0 first, reversible.
    let cpus = std::thread::available_parallelism().unwrap().get();
    let cpu_ids: Vec<String> = (0..cpus).map(|c| format!("cpu{c}")).collect();
    t.keys(&["Tab"]);
    let screen = t.wait_for("the CPU view", |s| {
        table_header(s).contains("UTIL%") && row_order(s, &cpu_ids) == cpu_ids
    });
    assert!(screen.contains("[CPUs]"), "{screen}");
    t.keys(&["r"]);
    let cpus_reversed: Vec<String> = cpu_ids.iter().rev().cloned().collect();
    t.wait_for("CPUs in reverse order", |s| {
        table_header(s).contains("CPU▼") && row_order(s, &cpus_reversed) == cpus_reversed
    });
    t.keys(&["u"]);
    t.wait_for("CPUs sorted by utilization", |s| {
        table_header(s).contains("UTIL%▼")
    });

    // 50 columns: low-priority columns are dropped, the rest stay.
    let o = t.tmux(&["resize-window", "-t", "top", "-x", "50", "-y", "32"]);
    assert!(o.status.success(), "tmux resize-window: {o:?}");
    let screen = t.wait_for("the narrow table", |s| {
        let h = table_header(s);
        h.contains("UTIL%") && !h.contains("SIRQ/s")
    });
    let header = table_header(&screen);
    assert!(header.contains("CPU") && header.contains("IPC"), "{header}");
    assert!(header.chars().count() <= 50, "{header}");
    // Back to the processes (`c`): they keep their own sort.
    t.keys(&["c"]);
    t.wait_for("the narrow process table", |s| {
        let h = table_header(s);
        h.contains("COMMAND") && h.contains("CPI▼") && !h.contains("FLT/s")
    });

    // `q` quits: exit status 0, alternate screen left, canonical mode back.
    t.keys(&["q"]);
    let screen = t.wait_for_exit(0);
    assert!(!t.alternate_screen(), "still on the alternate screen");
    assert!(screen.lines().any(|l| l == "icanon"), "{screen}");
    assert!(
        !screen.contains("COMMAND"),
        "the table was left on the normal screen: {screen}"
    );
}

#[test]
fn ctrl_c_quits_and_restores_the_terminal() {
    if !tmux_or_skip() {
        return;
    }
    let s = Sleeper::spawn();
    let t = Tmux::start(100, 24, &format!("{HWQOS} top -d 0.2 -p {}", s.pid()));
    t.wait_for("the process row", |scr| scr.contains("hwqos-testload"));
    assert!(t.alternate_screen());
    t.keys(&["C-c"]);
    let screen = t.wait_for_exit(0);
    assert!(!t.alternate_screen(), "still on the alternate screen");
    assert!(screen.lines().any(|l| l == "icanon"), "{screen}");
}

#[test]
fn a_panic_restores_the_terminal_before_its_message() {
    if !tmux_or_skip() {
        return;
    }
    let s = Sleeper::spawn();
    let t = Tmux::start(
        100,
        24,
        &format!("HWQOS_TOP_TEST_PANIC=1 {HWQOS} top -d 0.2 -p {}", s.pid()),
    );
    // Rust's exit status for a panic is 101.
    let screen = t.wait_for_exit(101);
    assert!(!t.alternate_screen(), "still on the alternate screen");
    assert!(screen.lines().any(|l| l == "icanon"), "{screen}");
    assert!(
        screen.contains("HWQOS_TOP_TEST_PANIC is set"),
        "the panic message is readable on the normal screen: {screen}"
    );
}

#[test]
fn plain_flag_on_a_terminal_prints_plain_blocks() {
    if !tmux_or_skip() {
        return;
    }
    let s = Sleeper::spawn();
    let t = Tmux::start(
        150,
        40,
        &format!("{HWQOS} top --plain -d 0.2 -n 1 -p {}", s.pid()),
    );
    let screen = t.wait_for_exit(0);
    assert!(!t.alternate_screen());
    assert!(screen.contains("hwqos top —"), "{screen}");
    assert!(screen.contains("  CPU  util%"), "{screen}");
    assert!(screen.contains("hwqos-testload"), "{screen}");
    assert!(screen.contains("(1 processes)"), "{screen}");
}

#[test]
fn log_messages_are_held_off_the_screen_and_shown_at_exit() {
    if !tmux_or_skip() {
        return;
    }
    // A process that exits while it is watched: the sampler logs
    // "target gone" (at debug level) in the middle of the view.
    let mut short = Command::new(TESTLOAD)
        .args(["--sleep-ms", "1500"])
        .spawn()
        .unwrap();
    let t = Tmux::start(
        120,
        24,
        &format!(
            "RUST_LOG=hwqos_pmu::sampler=debug {HWQOS} top -d 0.2 -p {}",
            short.id()
        ),
    );
    t.wait_for("the process row", |s| s.contains("hwqos-testload"));
    let _ = short.wait();
    let screen = t.wait_for("the process gone and messages held", |s| {
        s.contains("0 processes") && s.contains("(messages held until exit)")
    });
    assert!(
        !screen.contains("DEBUG"),
        "a log line tore the view:\n{screen}"
    );
    t.keys(&["q"]);
    let screen = t.wait_for_exit(0);
    assert!(screen.contains("target gone"), "{screen}");
}

#[test]
fn record_shows_its_progress_on_a_terminal_and_nothing_in_a_pipe() {
    if !tmux_or_skip() {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let rec = dir.path().join("r.jsonl");
    let t = Tmux::start(
        100,
        10,
        &format!("{HWQOS} record -a -F 10 --duration 4 -o {}", rec.display()),
    );
    let screen = t.wait_for("the record progress bar", |s| {
        s.contains("hwqos record: [") && s.contains("frames")
    });
    assert!(
        screen.contains("/4s"),
        "the bar knows the duration: {screen}"
    );
    let done = t.wait_for_exit(0);
    assert!(
        !done.contains("hwqos record: ["),
        "the bar is cleared: {done}"
    );
    assert!(done.contains("Hz achieved"), "{done}");
    // Not a terminal: no bar, no carriage returns or escape codes.
    let o = Command::new(HWQOS)
        .args(["record", "-a", "-F", "10", "--duration", "0.5", "-o"])
        .arg(&rec)
        .output()
        .unwrap();
    assert!(o.status.success());
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(!err.contains('\r') && !err.contains('\u{1b}'), "{err:?}");
}
