//! The interactive `hwqos top` on a terminal (ratatui on crossterm): the
//! alternate screen in raw mode, one redraw per update and per key, and the
//! terminal restored however the view ends — `q`, Ctrl-C, SIGTERM, an error
//! or a panic (a panic hook restores it before the message is printed).

use super::view::{self, Sort, Values, View};
use anyhow::{Context, Result};
use crossterm::event::{self, Event, KeyCode, KeyEvent, KeyEventKind, KeyModifiers};
use crossterm::terminal::{self, EnterAlternateScreen, LeaveAlternateScreen};
use crossterm::{cursor, execute};
use hwqos_core::{Frame, Scope, Timestamp};
use hwqos_pmu::sampler::Sampler;
use ratatui::backend::CrosstermBackend;
use ratatui::layout::{Constraint, Layout};
use ratatui::style::{Color, Modifier, Style};
use ratatui::text::Line;
use ratatui::widgets::Paragraph;
use ratatui::Terminal;
use std::io::Write;
use std::sync::Once;
use std::time::{Duration, Instant};

/// What the header says about this session; fixed for its whole run.
#[derive(Clone, Debug)]
pub struct Header {
    /// The node's host name.
    pub node: String,
    pub cpus: usize,
    pub period: Duration,
    pub counters: view::CounterKind,
    /// Why IPC/CPI are `n/a`, when they are.
    pub ipc_note: Option<String>,
    /// The `-p` pids, if the processes are filtered.
    pub pids: Vec<u32>,
}

impl Header {
    pub fn ipc_available(&self) -> bool {
        self.ipc_note.is_none()
    }

    fn title(&self) -> String {
        let secs = self.period.as_secs_f64();
        let mut t = format!(
            "hwqos top — {}  {} CPUs  every {secs:.2} s ({:.2} Hz)  counters: {}",
            self.node,
            self.cpus,
            1.0 / secs,
            self.counters.describe()
        );
        if !self.pids.is_empty() {
            let pids: Vec<String> = self.pids.iter().map(u32::to_string).collect();
            t.push_str(&format!("  -p {}", pids.join(",")));
        }
        t
    }
}

/// What the user has chosen and the latest update.
pub struct State {
    pub view: View,
    sorts: [Sort; 2],
    /// First row shown in the table.
    pub scroll: usize,
    /// Rows the table showed at the last draw (page size for PgUp/PgDn).
    page: usize,
    pub frame: Option<Frame>,
    pub updates: u64,
}

/// What a key asks for.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Action {
    Quit,
    Redraw,
    Nothing,
}

impl Default for State {
    fn default() -> State {
        State {
            view: View::Processes,
            sorts: [Sort::initial(View::Processes), Sort::initial(View::Cpus)],
            scroll: 0,
            page: 10,
            frame: None,
            updates: 0,
        }
    }
}

impl State {
    pub fn sort(&self) -> Sort {
        self.sorts[self.view as usize]
    }

    fn set_sort(&mut self, sort: Sort) {
        self.sorts[self.view as usize] = sort;
        self.scroll = 0;
    }

    /// Applies one key.
    pub fn key(&mut self, key: KeyEvent) -> Action {
        if key.kind == KeyEventKind::Release {
            return Action::Nothing;
        }
        let ctrl = key.modifiers.contains(KeyModifiers::CONTROL);
        let ncols = self.view.columns().len();
        let sort = self.sort();
        match key.code {
            KeyCode::Char('c') if ctrl => return Action::Quit,
            KeyCode::Char('q') | KeyCode::Esc => return Action::Quit,
            KeyCode::Tab | KeyCode::BackTab | KeyCode::Char('c') => {
                self.view = self.view.toggled();
                self.scroll = 0;
            }
            KeyCode::Char('r') => self.set_sort(Sort {
                descending: !sort.descending,
                ..sort
            }),
            KeyCode::Char('<') | KeyCode::Left => {
                self.set_sort(Sort::by(self.view, (sort.column + ncols - 1) % ncols))
            }
            KeyCode::Char('>') | KeyCode::Right => {
                self.set_sort(Sort::by(self.view, (sort.column + 1) % ncols))
            }
            KeyCode::Char(k) if !ctrl => match view::column_for_key(self.view, k) {
                Some(col) => self.set_sort(Sort::by(self.view, col)),
                None => return Action::Nothing,
            },
            KeyCode::Up => self.scroll = self.scroll.saturating_sub(1),
            KeyCode::Down => self.scroll += 1,
            KeyCode::PageUp => self.scroll = self.scroll.saturating_sub(self.page),
            KeyCode::PageDown => self.scroll += self.page,
            KeyCode::Home => self.scroll = 0,
            KeyCode::End => self.scroll = usize::MAX,
            _ => return Action::Nothing,
        }
        Action::Redraw
    }
}

/// Draws the whole screen.
pub fn draw(ui: &mut ratatui::Frame<'_>, header: &Header, state: &mut State) {
    let area = ui.area();
    let footer_lines = 2 + u16::from(header.ipc_note.is_some());
    let [top, table_head, body, footer] = Layout::vertical([
        Constraint::Length(3),
        Constraint::Length(1),
        Constraint::Min(0),
        Constraint::Length(footer_lines),
    ])
    .areas(area);
    let view = state.view;
    let sort = state.sort();
    let columns = view.columns();
    let fitted = view::fit_columns(columns, area.width);
    let bold = Style::default().add_modifier(Modifier::BOLD);

    let values = state.frame.as_ref().map(Values::new);
    let processes = state.frame.as_ref().map_or(0, |f| {
        f.scopes()
            .into_iter()
            .filter(|s| matches!(s, Scope::Process { .. }))
            .count()
    });
    let system = match &values {
        Some(v) => view::system_line(v, processes),
        None => format!(
            "sampling: first update in {:.2} s",
            header.period.as_secs_f64()
        ),
    };
    let tabs = match view {
        View::Processes => "[processes]  CPUs ",
        View::Cpus => " processes  [CPUs]",
    };
    let c = &columns[sort.column];
    let sorted = format!(
        "{tabs}   sorted by {} {}",
        c.title,
        if sort.descending {
            "(largest first)"
        } else {
            "(smallest first)"
        }
    );
    ui.render_widget(
        Paragraph::new(vec![
            Line::styled(header.title(), bold),
            Line::raw(system),
            Line::raw(sorted),
        ]),
        top,
    );
    ui.render_widget(
        Paragraph::new(view::header_line(view, &fitted, sort))
            .style(Style::default().add_modifier(Modifier::REVERSED)),
        table_head,
    );

    let rows = values
        .as_ref()
        .map(|v| view::rows(view, v, header.ipc_available(), sort))
        .unwrap_or_default();
    let height = usize::from(body.height);
    state.page = height.max(1);
    state.scroll = state.scroll.min(rows.len().saturating_sub(height));
    let lines: Vec<Line> = rows
        .iter()
        .skip(state.scroll)
        .take(height)
        .map(|r| Line::raw(view::row_line(view, &fitted, r)))
        .collect();
    ui.render_widget(Paragraph::new(lines), body);

    let mut foot = Vec::new();
    if let Some(note) = &header.ipc_note {
        foot.push(Line::styled(
            note.clone(),
            Style::default().fg(Color::Yellow),
        ));
    }
    let mut keys_line =
        "q quit  Tab/c processes|CPUs  </> sort column  r reverse  ↑↓ PgUp PgDn scroll".to_string();
    if stderr_hold::held_bytes() > 0 {
        keys_line.push_str("  (messages held until exit)");
    }
    foot.push(Line::raw(keys_line));
    let keys: Vec<String> = columns
        .iter()
        .map(|c| format!("{}={}", c.key, c.title))
        .collect();
    foot.push(Line::styled(
        format!("sort keys: {}", keys.join(" ")),
        Style::default().add_modifier(Modifier::DIM),
    ));
    ui.render_widget(Paragraph::new(foot), footer);
}

/// Leaves raw mode and the alternate screen, shows the cursor again and
/// replays what was written to standard error meanwhile; harmless when the
/// terminal was not set up.
pub fn restore_terminal() {
    let _ = terminal::disable_raw_mode();
    let _ = execute!(std::io::stdout(), LeaveAlternateScreen, cursor::Show);
    stderr_hold::release();
}

/// Standard error held in an anonymous file while the view owns the
/// terminal: a log line (a counter that failed, a process that vanished)
/// written to the same terminal would tear the screen. The messages are
/// replayed on the normal screen when the view ends.
mod stderr_hold {
    use std::fs::File;
    use std::io::{Read, Seek, SeekFrom, Write};
    use std::os::fd::FromRawFd;
    use std::sync::atomic::{AtomicI32, Ordering};

    /// The terminal's standard error while it is held (-1: not held).
    static SAVED: AtomicI32 = AtomicI32::new(-1);
    /// The file standard error points to while held.
    static HELD: AtomicI32 = AtomicI32::new(-1);
    /// At most this much is replayed (the first part: the cause comes first).
    const REPLAY_MAX: u64 = 64 * 1024;

    /// Points standard error at an anonymous file; does nothing when
    /// standard error is not a terminal (a log file, a pipe) or on failure.
    pub fn hold() {
        use std::io::IsTerminal;
        if !std::io::stderr().is_terminal() || SAVED.load(Ordering::SeqCst) >= 0 {
            return;
        }
        // SAFETY: plain system calls on descriptors this function owns; fd 2
        // is replaced atomically by dup2.
        unsafe {
            let held = libc::memfd_create(c"hwqos-top-stderr".as_ptr(), libc::MFD_CLOEXEC);
            if held < 0 {
                return;
            }
            let saved = libc::fcntl(2, libc::F_DUPFD_CLOEXEC, 3);
            if saved < 0 || libc::dup2(held, 2) < 0 {
                if saved >= 0 {
                    libc::close(saved);
                }
                libc::close(held);
                return;
            }
            HELD.store(held, Ordering::SeqCst);
            SAVED.store(saved, Ordering::SeqCst);
        }
    }

    /// Bytes written to standard error since [`hold`].
    pub fn held_bytes() -> u64 {
        let held = HELD.load(Ordering::SeqCst);
        if held < 0 {
            return 0;
        }
        // SAFETY: fstat on a descriptor this module owns, into a zeroed struct.
        unsafe {
            let mut st: libc::stat = std::mem::zeroed();
            if libc::fstat(held, &mut st) == 0 {
                st.st_size as u64
            } else {
                0
            }
        }
    }

    /// Points standard error back at the terminal and replays what was held.
    pub fn release() {
        let saved = SAVED.swap(-1, Ordering::SeqCst);
        if saved < 0 {
            return;
        }
        let held = HELD.swap(-1, Ordering::SeqCst);
        // SAFETY: both descriptors were created by `hold` and are owned here;
        // the swaps above make sure only one caller gets them.
        let mut file = unsafe {
            libc::dup2(saved, 2);
            libc::close(saved);
            File::from_raw_fd(held)
        };
        let size = file.metadata().map_or(0, |m| m.len());
        if size == 0 || file.seek(SeekFrom::Start(0)).is_err() {
            return;
        }
        let mut text = Vec::new();
        let _ = Read::by_ref(&mut file)
            .take(REPLAY_MAX)
            .read_to_end(&mut text);
        let mut err = std::io::stderr().lock();
        let _ = err.write_all(&text);
        if size > REPLAY_MAX {
            let _ = writeln!(
                err,
                "hwqos top: {} more bytes of messages not shown",
                size - REPLAY_MAX
            );
        }
    }
}

/// Restores the terminal before the default hook prints a panic's message
/// (on the normal screen, where the user can read it). Installed once.
fn install_panic_hook() {
    static ONCE: Once = Once::new();
    ONCE.call_once(|| {
        let previous = std::panic::take_hook();
        std::panic::set_hook(Box::new(move |info| {
            restore_terminal();
            previous(info);
        }));
    });
}

/// Raw mode and the alternate screen for as long as it lives.
struct TerminalMode;

impl TerminalMode {
    fn enter() -> Result<TerminalMode> {
        terminal::enable_raw_mode().context("switching the terminal to raw mode")?;
        let mode = TerminalMode;
        stderr_hold::hold();
        execute!(std::io::stdout(), EnterAlternateScreen, cursor::Hide)
            .context("entering the alternate screen")?;
        Ok(mode)
    }
}

impl Drop for TerminalMode {
    fn drop(&mut self) {
        restore_terminal();
    }
}

/// Runs the interactive view until `q`, Ctrl-C, SIGINT/SIGTERM or `iterations`
/// updates.
pub fn run(
    sampler: &mut Sampler,
    header: &Header,
    iterations: Option<u64>,
    out: &mut dyn Write,
) -> Result<()> {
    install_panic_hook();
    let _mode = TerminalMode::enter()?;
    let mut terminal =
        Terminal::new(CrosstermBackend::new(out)).context("setting up the terminal")?;
    terminal.clear().context("clearing the terminal")?;
    // Test hook: proves end to end that a panic leaves the terminal usable.
    let test_panic = std::env::var_os("HWQOS_TOP_TEST_PANIC").is_some();
    let mut state = State::default();
    sampler.sample(Timestamp::now());
    let mut next = Instant::now() + header.period;
    let mut dirty = true;
    loop {
        if dirty {
            terminal
                .draw(|ui| draw(ui, header, &mut state))
                .context("drawing")?;
            dirty = false;
            if test_panic && state.updates > 0 {
                panic!("HWQOS_TOP_TEST_PANIC is set: panicking after the first update");
            }
        }
        if crate::child::interrupted() || iterations.is_some_and(|n| state.updates >= n) {
            break;
        }
        let now = Instant::now();
        if now >= next {
            state.frame = Some(sampler.sample(Timestamp::now()));
            state.updates += 1;
            dirty = true;
            next += header.period;
            if next <= now {
                // Fell behind (a suspended terminal, a slow node): no burst of
                // catch-up updates.
                next = now + header.period;
            }
            continue;
        }
        // Short polls so that SIGTERM is seen promptly.
        let wait = (next - now).min(Duration::from_millis(200));
        if event::poll(wait).context("reading the terminal")? {
            match event::read().context("reading the terminal")? {
                Event::Key(k) => match state.key(k) {
                    Action::Quit => break,
                    Action::Redraw => dirty = true,
                    Action::Nothing => {}
                },
                Event::Resize(..) => dirty = true,
                _ => {}
            }
        }
    }
    drop(terminal);
    Ok(())
}

/// The screen as text at `width` x `height`.
#[cfg(test)]
fn render_to_text(header: &Header, state: &mut State, width: u16, height: u16) -> String {
    let backend = ratatui::backend::TestBackend::new(width, height);
    let mut terminal = Terminal::new(backend).expect("test backend");
    terminal
        .draw(|ui| draw(ui, header, state))
        .expect("draw on the test backend");
    let buf = terminal.backend().buffer();
    let area = buf.area;
    (0..area.height)
        .map(|y| {
            (0..area.width)
                .map(|x| buf[(x, y)].symbol())
                .collect::<String>()
                .trim_end()
                .to_string()
        })
        .collect::<Vec<_>>()
        .join("\n")
}

#[cfg(test)]
mod tests {
    use super::*;
    use hwqos_core::{MetricName, Sample, ScopeLabel};

    fn header(ipc_note: Option<&str>) -> Header {
        Header {
            node: "node7".into(),
            cpus: 2,
            period: Duration::from_millis(500),
            counters: view::CounterKind::Software,
            ipc_note: ipc_note.map(String::from),
            pids: vec![42],
        }
    }

    fn frame() -> Frame {
        let time = Timestamp {
            mono_ns: 1,
            wall_ns: 0,
        };
        let g = |scope: Scope, m: &'static str, v: f64| {
            Sample::gauge(time, scope, MetricName::from_static(m), v)
        };
        let p = Scope::Process { pid: 42 };
        Frame {
            seq: 1,
            time,
            interval_ns: 500_000_000,
            samples: vec![
                g(Scope::Cpu { cpu: 0 }, "os.cpu.util", 0.25),
                g(Scope::Cpu { cpu: 1 }, "os.cpu.util", 0.75),
                g(p.clone(), "os.proc.cpu", 0.5),
            ],
            labels: vec![ScopeLabel {
                scope: p,
                name: "worker".into(),
            }],
        }
    }

    fn key(c: char) -> KeyEvent {
        KeyEvent::new(KeyCode::Char(c), KeyModifiers::NONE)
    }

    #[test]
    fn keys_switch_views_sort_and_quit() {
        let mut s = State::default();
        assert_eq!(s.key(key('c')), Action::Redraw);
        assert_eq!(s.view, View::Cpus);
        assert_eq!(
            s.key(KeyEvent::new(KeyCode::Tab, KeyModifiers::NONE)),
            Action::Redraw
        );
        assert_eq!(s.view, View::Processes);
        assert_eq!(s.sort().column, 2);
        s.key(key('p'));
        assert_eq!(s.sort(), Sort::by(View::Processes, 0));
        assert!(!s.sort().descending);
        s.key(key('r'));
        assert!(s.sort().descending);
        s.key(key('<'));
        assert_eq!(s.sort().column, PROCESS_LAST);
        s.key(key('>'));
        assert_eq!(s.sort().column, 0);
        // Each view keeps its own sort.
        s.key(key('c'));
        assert_eq!(s.sort(), Sort::initial(View::Cpus));
        assert_eq!(s.key(key('z')), Action::Nothing);
        assert_eq!(s.key(key('q')), Action::Quit);
        assert_eq!(
            s.key(KeyEvent::new(KeyCode::Char('c'), KeyModifiers::CONTROL)),
            Action::Quit
        );
    }

    const PROCESS_LAST: usize = view::PROCESS_COLUMNS.len() - 1;

    #[test]
    fn the_screen_shows_header_rows_and_the_ipc_note() {
        let note = "IPC/CPI n/a: no hardware PMU (cycles, instructions not supported)";
        let h = header(Some(note));
        let mut s = State::default();
        let waiting = render_to_text(&h, &mut s, 100, 20);
        assert!(
            waiting.contains("sampling: first update in 0.50 s"),
            "{waiting}"
        );
        s.frame = Some(frame());
        let screen = render_to_text(&h, &mut s, 100, 20);
        assert!(
            screen.starts_with(
                "hwqos top — node7  2 CPUs  every 0.50 s (2.00 Hz)  counters: software  -p 42"
            ),
            "{screen}"
        );
        let row = screen.lines().find(|l| l.contains("worker")).unwrap();
        assert!(
            row.contains("50.0") && row.trim_end().ends_with("n/a"),
            "{row}"
        );
        assert!(screen.contains(note), "{screen}");
        s.key(key('c'));
        let cpus = render_to_text(&h, &mut s, 100, 20);
        let cpu0 = cpus.lines().position(|l| l.starts_with("cpu0")).unwrap();
        let cpu1 = cpus.lines().position(|l| l.starts_with("cpu1")).unwrap();
        assert!(cpu0 < cpu1, "{cpus}");
        s.key(key('r'));
        let rev = render_to_text(&h, &mut s, 100, 20);
        let cpu0 = rev.lines().position(|l| l.starts_with("cpu0")).unwrap();
        let cpu1 = rev.lines().position(|l| l.starts_with("cpu1")).unwrap();
        assert!(cpu1 < cpu0, "{rev}");
        // 25 cells: only the columns that cannot be dropped, and IPC.
        let narrow = render_to_text(&h, &mut s, 25, 20);
        let head = narrow.lines().nth(3).unwrap();
        assert!(head.contains("UTIL%") && head.contains("IPC"), "{head}");
        assert!(!head.contains("CSW/s") && !head.contains("CPI"), "{head}");
        // With a PMU there is no note.
        let mut s = State {
            frame: Some(frame()),
            ..State::default()
        };
        let with_pmu = render_to_text(&header(None), &mut s, 100, 20);
        assert!(!with_pmu.contains("n/a"), "{with_pmu}");
    }
}
