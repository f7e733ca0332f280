//! The interactive view's model, free of any terminal: the two tables
//! (processes, CPUs), their columns, sorting, which columns fit a width, the
//! header and the IPC/CPI availability note. The private `tui` module only
//! draws what this module computes, so everything here is tested without a
//! terminal.

use hwqos_core::metric::names;
use hwqos_core::{Frame, Scope};
use std::cmp::Ordering;
use std::collections::HashMap;

/// Which table is shown.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum View {
    /// One row per process.
    Processes,
    /// One row per CPU.
    Cpus,
}

impl View {
    /// The other table (the key that switches views).
    pub fn toggled(self) -> View {
        match self {
            View::Processes => View::Cpus,
            View::Cpus => View::Processes,
        }
    }

    /// The view's columns, left to right.
    pub fn columns(self) -> &'static [Column] {
        match self {
            View::Processes => PROCESS_COLUMNS,
            View::Cpus => CPU_COLUMNS,
        }
    }

    /// The view's name as the header shows it.
    pub fn name(self) -> &'static str {
        match self {
            View::Processes => "processes",
            View::Cpus => "CPUs",
        }
    }
}

/// How a column's text is aligned in its cells.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Align {
    /// Text columns (names).
    Left,
    /// Number columns.
    Right,
}

/// One column of a table.
#[derive(Clone, Copy, Debug)]
pub struct Column {
    /// The header text.
    pub title: &'static str,
    /// The key that sorts by this column.
    pub key: char,
    /// Width in terminal cells (the sort marker included).
    pub width: u16,
    /// 0: always shown; otherwise the highest number is dropped first when
    /// the terminal is too narrow.
    pub drop_order: u8,
    /// Where the text sits in the cell.
    pub align: Align,
    /// Sorted ascending when first chosen (identifiers and names); numbers
    /// are sorted largest first.
    pub ascending_first: bool,
    /// Takes the width left over (the command name).
    pub flexible: bool,
}

const fn num(title: &'static str, key: char, width: u16, drop_order: u8) -> Column {
    Column {
        title,
        key,
        width,
        drop_order,
        align: Align::Right,
        ascending_first: false,
        flexible: false,
    }
}

/// The columns of [`View::Processes`], left to right.
pub const PROCESS_COLUMNS: &[Column] = &[
    Column {
        ascending_first: true,
        ..num("PID", 'p', 8, 0)
    },
    Column {
        align: Align::Left,
        ascending_first: true,
        flexible: true,
        ..num("COMMAND", 'n', 16, 0)
    },
    num("CPU%", 'u', 7, 0),
    num("THR", 't', 5, 5),
    num("RSS MiB", 'm', 9, 4),
    num("FLT/s", 'f', 9, 6),
    num("CSW/s", 's', 9, 3),
    num("IPC", 'i', 6, 1),
    num("CPI", 'k', 6, 2),
];

/// The columns of [`View::Cpus`], left to right.
pub const CPU_COLUMNS: &[Column] = &[
    Column {
        align: Align::Left,
        ascending_first: true,
        ..num("CPU", 'n', 7, 0)
    },
    num("UTIL%", 'u', 7, 0),
    num("USR%", 'e', 7, 4),
    num("SYS%", 'y', 7, 4),
    num("IRQ%", 'x', 7, 7),
    num("IRQ/s", 'h', 9, 6),
    num("SIRQ/s", 'o', 9, 8),
    num("CSW/s", 's', 9, 3),
    num("FLT/s", 'f', 9, 5),
    num("IPC", 'i', 6, 1),
    num("CPI", 'k', 6, 2),
];

/// One table cell: what is shown and what it sorts by.
#[derive(Clone, Debug, PartialEq)]
pub enum Cell {
    /// A number, sorted by `value` and shown as `text`.
    Number {
        /// The value sorted by.
        value: f64,
        /// The value as formatted for the column.
        text: String,
    },
    /// Text (a command name), sorted as text.
    Text(String),
    /// No value this interval (`-`).
    Missing,
    /// The node cannot count what this needs (`n/a`).
    NotAvailable,
}

impl Cell {
    /// What the cell shows: the formatted number, the text, `-` or `n/a`.
    pub fn text(&self) -> &str {
        match self {
            Cell::Number { text, .. } => text,
            Cell::Text(t) => t,
            Cell::Missing => "-",
            Cell::NotAvailable => "n/a",
        }
    }

    fn number(v: Option<f64>, fmt: impl Fn(f64) -> String) -> Cell {
        match v.filter(|x| x.is_finite()) {
            Some(value) => Cell::Number {
                value,
                text: fmt(value),
            },
            None => Cell::Missing,
        }
    }
}

/// One table row: its identity (pid or CPU number, the tie-break of every
/// sort) and one cell per column of its view.
#[derive(Clone, Debug, PartialEq)]
pub struct Row {
    /// The pid or CPU number.
    pub id: u32,
    /// One cell per column of the view, in column order.
    pub cells: Vec<Cell>,
}

/// Which column a view is sorted by, and in which direction.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Sort {
    /// Index into the view's [`View::columns`].
    pub column: usize,
    /// Largest first.
    pub descending: bool,
}

impl Sort {
    /// The first sort of a view: processes by CPU use, CPUs by number.
    pub fn initial(view: View) -> Sort {
        match view {
            View::Processes => Sort::by(view, 2),
            View::Cpus => Sort::by(view, 0),
        }
    }

    /// Sort by `column` in its natural first direction.
    pub fn by(view: View, column: usize) -> Sort {
        Sort {
            column,
            descending: !view.columns()[column].ascending_first,
        }
    }
}

/// The view's column sorted by `key`, if any.
pub fn column_for_key(view: View, key: char) -> Option<usize> {
    view.columns().iter().position(|c| c.key == key)
}

/// Sorts rows; rows without a value (`-`, `n/a`) come last in both
/// directions, ties are broken by the row id, ascending.
pub fn sort_rows(rows: &mut [Row], sort: Sort) {
    let key = |r: &Row| r.cells.get(sort.column).cloned().unwrap_or(Cell::Missing);
    rows.sort_by(|a, b| {
        let (ka, kb) = (key(a), key(b));
        let primary = match (&ka, &kb) {
            (Cell::Number { value: x, .. }, Cell::Number { value: y, .. }) => {
                directed(x.total_cmp(y), sort.descending)
            }
            (Cell::Text(x), Cell::Text(y)) => directed(
                x.to_lowercase().cmp(&y.to_lowercase()).then(x.cmp(y)),
                sort.descending,
            ),
            (Cell::Number { .. } | Cell::Text(_), _) => Ordering::Less,
            (_, Cell::Number { .. } | Cell::Text(_)) => Ordering::Greater,
            _ => Ordering::Equal,
        };
        primary.then(a.id.cmp(&b.id))
    });
}

fn directed(o: Ordering, descending: bool) -> Ordering {
    if descending {
        o.reverse()
    } else {
        o
    }
}

/// The columns shown at `width` cells: their indices into the view's columns
/// and their widths (one space between columns). Columns are dropped in
/// their `drop_order`, highest first, until the rest fits; the flexible
/// column then takes what is left (up to 40 cells).
pub fn fit_columns(columns: &[Column], width: u16) -> Vec<(usize, u16)> {
    let total = |shown: &[usize]| -> u32 {
        shown
            .iter()
            .map(|&i| u32::from(columns[i].width))
            .sum::<u32>()
            + shown.len().saturating_sub(1) as u32
    };
    let mut shown: Vec<usize> = (0..columns.len()).collect();
    while total(&shown) > u32::from(width) {
        let Some(drop) = shown
            .iter()
            .copied()
            .filter(|&i| columns[i].drop_order > 0)
            .max_by_key(|&i| (columns[i].drop_order, i))
        else {
            break;
        };
        shown.retain(|&i| i != drop);
    }
    let spare = u32::from(width).saturating_sub(total(&shown));
    shown
        .into_iter()
        .map(|i| {
            let c = &columns[i];
            let w = if c.flexible {
                let grown = u32::from(c.width) + spare;
                grown.min(40).max(u32::from(c.width)) as u16
            } else {
                c.width
            };
            (i, w)
        })
        .collect()
}

/// Pads or cuts `text` to `width` cells.
pub fn pad(text: &str, width: u16, align: Align) -> String {
    let w = usize::from(width);
    let cut: String = text.chars().take(w).collect();
    match align {
        Align::Left => format!("{cut:<w$}"),
        Align::Right => format!("{cut:>w$}"),
    }
}

/// The column titles at the fitted widths, the sorted column marked with
/// `▼` (descending) or `▲` (ascending).
pub fn header_line(view: View, fitted: &[(usize, u16)], sort: Sort) -> String {
    let cols = view.columns();
    fitted
        .iter()
        .map(|&(i, w)| {
            let c = &cols[i];
            let title = if i == sort.column {
                format!("{}{}", c.title, if sort.descending { '▼' } else { '▲' })
            } else {
                c.title.to_string()
            };
            pad(&title, w, c.align)
        })
        .collect::<Vec<_>>()
        .join(" ")
}

/// One row as text at the fitted widths.
pub fn row_line(view: View, fitted: &[(usize, u16)], row: &Row) -> String {
    let cols = view.columns();
    fitted
        .iter()
        .map(|&(i, w)| {
            let text = row.cells.get(i).map_or("-", Cell::text);
            pad(text, w, cols[i].align)
        })
        .collect::<Vec<_>>()
        .join(" ")
}

/// A frame's values by scope and metric (a frame is a flat list of samples).
pub struct Values<'f> {
    frame: &'f Frame,
    by: HashMap<(&'f Scope, &'f str), f64>,
}

impl<'f> Values<'f> {
    /// Indexes `frame`'s samples by scope and metric.
    pub fn new(frame: &'f Frame) -> Values<'f> {
        let by = frame
            .samples
            .iter()
            .map(|s| ((&s.scope, s.metric.as_str()), s.value))
            .collect();
        Values { frame, by }
    }

    /// The value of `metric` about `scope` this frame; `None` if not sampled.
    pub fn get(&self, scope: &Scope, metric: &str) -> Option<f64> {
        self.by.get(&(scope, metric)).copied()
    }

    /// A counter's increment over the interval, per second.
    pub fn per_sec(&self, scope: &Scope, metric: &str) -> Option<f64> {
        let secs = self.frame.interval_ns as f64 / 1e9;
        (secs > 0.0)
            .then(|| self.get(scope, metric).map(|v| v / secs))
            .flatten()
    }

    fn pct(&self, scope: &Scope, metric: &str) -> Cell {
        Cell::number(self.get(scope, metric), |v| format!("{:.1}", v * 100.0))
    }

    fn rate(&self, scope: &Scope, metric: &str) -> Cell {
        Cell::number(self.per_sec(scope, metric), |v| format!("{v:.0}"))
    }

    /// IPC or CPI, or `n/a` where the node cannot count them.
    fn ratio(&self, scope: &Scope, metric: &str, ipc_available: bool) -> Cell {
        match self.get(scope, metric) {
            None if !ipc_available => Cell::NotAvailable,
            v => Cell::number(v, |v| format!("{v:.2}")),
        }
    }

    /// The frame indexed.
    pub fn frame(&self) -> &'f Frame {
        self.frame
    }
}

/// The rows of the process table, unsorted.
pub fn process_rows(v: &Values<'_>, ipc_available: bool) -> Vec<Row> {
    let frame = v.frame();
    let mut pids: Vec<u32> = frame
        .scopes()
        .into_iter()
        .filter_map(|s| match s {
            Scope::Process { pid } => Some(*pid),
            _ => None,
        })
        .collect();
    pids.sort_unstable();
    pids.into_iter()
        .map(|pid| {
            let s = Scope::Process { pid };
            let faults = v
                .per_sec(&s, names::SW_PAGE_FAULTS)
                .or_else(|| v.per_sec(&s, names::OS_PROC_MINOR_FAULTS));
            Row {
                id: pid,
                cells: vec![
                    Cell::Number {
                        value: f64::from(pid),
                        text: pid.to_string(),
                    },
                    Cell::Text(frame.label(&s).unwrap_or("?").to_string()),
                    v.pct(&s, names::OS_PROC_CPU),
                    Cell::number(v.get(&s, names::OS_PROC_THREADS), |x| format!("{x:.0}")),
                    Cell::number(v.get(&s, names::OS_PROC_RSS), |x| {
                        format!("{:.1}", x / 1048576.0)
                    }),
                    Cell::number(faults, |x| format!("{x:.0}")),
                    v.rate(&s, names::SW_CONTEXT_SWITCHES),
                    v.ratio(&s, names::DERIVED_IPC, ipc_available),
                    v.ratio(&s, names::DERIVED_CPI, ipc_available),
                ],
            }
        })
        .collect()
}

/// The rows of the CPU table, unsorted. Utilization is `/proc/stat`'s
/// (`os.cpu.*`): a CPU-wide task-clock also runs while the CPU idles.
pub fn cpu_rows(v: &Values<'_>, ipc_available: bool) -> Vec<Row> {
    let mut cpus: Vec<u32> = v
        .frame()
        .scopes()
        .into_iter()
        .filter_map(|s| match s {
            Scope::Cpu { cpu } => Some(*cpu),
            _ => None,
        })
        .collect();
    cpus.sort_unstable();
    cpus.into_iter()
        .map(|cpu| {
            let s = Scope::Cpu { cpu };
            Row {
                id: cpu,
                cells: vec![
                    Cell::Text(format!("cpu{cpu}")),
                    v.pct(&s, names::OS_CPU_UTIL),
                    v.pct(&s, names::OS_CPU_USER),
                    v.pct(&s, names::OS_CPU_SYSTEM),
                    v.pct(&s, names::OS_CPU_IRQ),
                    v.rate(&s, names::OS_INTERRUPTS),
                    v.rate(&s, names::OS_SOFTIRQS),
                    v.rate(&s, names::SW_CONTEXT_SWITCHES),
                    v.rate(&s, names::SW_PAGE_FAULTS),
                    v.ratio(&s, names::DERIVED_IPC, ipc_available),
                    v.ratio(&s, names::DERIVED_CPI, ipc_available),
                ],
            }
        })
        .collect()
}

/// The rows of `view`, sorted. CPU rows sort numerically by CPU number
/// when sorted by their name column (`cpu10` after `cpu9`).
pub fn rows(view: View, v: &Values<'_>, ipc_available: bool, sort: Sort) -> Vec<Row> {
    let mut rows = match view {
        View::Processes => process_rows(v, ipc_available),
        View::Cpus => cpu_rows(v, ipc_available),
    };
    if view == View::Cpus && sort.column == 0 {
        rows.sort_by(|a, b| directed(a.id.cmp(&b.id), sort.descending));
    } else {
        sort_rows(&mut rows, sort);
    }
    rows
}

/// The system line under the header.
pub fn system_line(v: &Values<'_>, processes: usize) -> String {
    let sys = Scope::System;
    let c = |x: Cell| x.text().to_string();
    format!(
        "cpu {}%  runnable {}  load {}  ctxsw/s {}  irq/s {}  mem avail {} MiB  {} processes",
        c(v.pct(&sys, names::OS_CPU_UTIL)),
        c(Cell::number(v.get(&sys, names::OS_RUNQUEUE), |x| format!(
            "{x:.0}"
        ))),
        c(Cell::number(v.get(&sys, names::OS_LOAD1), |x| format!(
            "{x:.2}"
        ))),
        c(v.rate(&sys, names::OS_CTXT)),
        c(v.rate(&sys, names::OS_INTERRUPTS)),
        c(Cell::number(
            v.get(&sys, names::OS_MEM_AVAILABLE),
            |x| format!("{:.0}", x / 1048576.0)
        )),
        processes,
    )
}

/// What the node counts with, for the header.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum CounterKind {
    /// Only PMU hardware events.
    Hardware,
    /// Only kernel software events (a VM without a PMU).
    Software,
    /// Both.
    Mixed,
    /// No counters: procfs metrics only.
    None,
}

impl CounterKind {
    /// The header's wording: `hardware`, `software`, `hardware + software` or
    /// `none (procfs only)`.
    pub fn describe(self) -> &'static str {
        match self {
            CounterKind::Hardware => "hardware",
            CounterKind::Software => "software",
            CounterKind::Mixed => "hardware + software",
            CounterKind::None => "none (procfs only)",
        }
    }
}

/// Why IPC and CPI cannot be shown, or `None` when they can: `counted` are
/// the metrics in the event sets being counted, `unavailable` the metrics
/// this node cannot count with the reason given for each, `has_pmu` whether
/// the node has a core PMU at all.
pub fn ipc_note(
    counted: &[String],
    unavailable: &[(String, String)],
    has_pmu: bool,
) -> Option<String> {
    const NEEDED: [&str; 2] = [names::HW_CYCLES, names::HW_INSTRUCTIONS];
    let missing: Vec<&str> = NEEDED
        .iter()
        .copied()
        .filter(|m| !counted.iter().any(|c| c == m))
        .collect();
    if missing.is_empty() {
        return None;
    }
    let short = |m: &str| m.trim_start_matches("hw.").to_string();
    let refused: Vec<(&str, &str)> = missing
        .iter()
        .filter_map(|&m| {
            unavailable
                .iter()
                .find(|(u, _)| u == m)
                .map(|(_, reason)| (m, reason.as_str()))
        })
        .collect();
    if refused.is_empty() {
        let names: Vec<String> = missing.iter().map(|m| short(m)).collect();
        return Some(format!(
            "IPC/CPI n/a: {} not in the event sets (-e)",
            names.join(", ")
        ));
    }
    let names: Vec<String> = refused.iter().map(|(m, _)| short(m)).collect();
    let reason = if !has_pmu || refused.iter().any(|(_, r)| r.contains("no hardware PMU")) {
        "no hardware PMU".to_string()
    } else {
        refused[0].1.to_string()
    };
    Some(format!(
        "IPC/CPI n/a: {reason} ({} not supported)",
        names.join(", ")
    ))
}

#[cfg(test)]
mod tests {
    use super::*;
    use hwqos_core::{MetricName, Sample, ScopeLabel, Timestamp};

    fn frame() -> Frame {
        let time = Timestamp {
            mono_ns: 1,
            wall_ns: 0,
        };
        let g = |scope: Scope, m: &'static str, v: f64| {
            Sample::gauge(time, scope, MetricName::from_static(m), v)
        };
        let (p1, p2, p3) = (
            Scope::Process { pid: 100 },
            Scope::Process { pid: 200 },
            Scope::Process { pid: 300 },
        );
        Frame {
            seq: 1,
            time,
            interval_ns: 500_000_000,
            samples: vec![
                g(Scope::System, "os.cpu.util", 0.5),
                g(Scope::Cpu { cpu: 0 }, "os.cpu.util", 0.25),
                g(Scope::Cpu { cpu: 1 }, "os.cpu.util", 0.75),
                g(Scope::Cpu { cpu: 10 }, "os.cpu.util", 0.10),
                g(Scope::Cpu { cpu: 1 }, "sw.context_switches", 50.0),
                g(p1.clone(), "os.proc.cpu", 0.10),
                g(p2.clone(), "os.proc.cpu", 0.90),
                g(p3.clone(), "os.proc.cpu", 0.50),
                g(p2.clone(), "sw.context_switches", 1000.0),
                g(p2.clone(), "os.proc.rss", 3.0 * 1048576.0),
            ],
            labels: vec![
                ScopeLabel {
                    scope: p1,
                    name: "idle".into(),
                },
                ScopeLabel {
                    scope: p2,
                    name: "busy".into(),
                },
                ScopeLabel {
                    scope: p3,
                    name: "Half".into(),
                },
            ],
        }
    }

    fn ids(rows: &[Row]) -> Vec<u32> {
        rows.iter().map(|r| r.id).collect()
    }

    #[test]
    fn processes_sort_by_any_column_both_ways() {
        let f = frame();
        let v = Values::new(&f);
        let view = View::Processes;
        let s = Sort::initial(view);
        assert_eq!(view.columns()[s.column].title, "CPU%");
        assert_eq!(ids(&rows(view, &v, false, s)), [200, 300, 100]);
        let rev = Sort {
            descending: !s.descending,
            ..s
        };
        assert_eq!(ids(&rows(view, &v, false, rev)), [100, 300, 200]);
        // By name, case-insensitively, ascending first.
        let by_name = Sort::by(view, column_for_key(view, 'n').unwrap());
        assert!(!by_name.descending);
        assert_eq!(ids(&rows(view, &v, false, by_name)), [200, 300, 100]);
        // By context switches: only pid 200 has a value; the rest keep pid order.
        let csw = Sort::by(view, column_for_key(view, 's').unwrap());
        assert_eq!(ids(&rows(view, &v, false, csw)), [200, 100, 300]);
        let csw_up = Sort {
            descending: false,
            ..csw
        };
        assert_eq!(ids(&rows(view, &v, false, csw_up)), [200, 100, 300]);
        // 1000 switches in 0.5 s, 3 MiB.
        let busy = &rows(view, &v, false, s)[0];
        assert_eq!(busy.cells[6].text(), "2000");
        assert_eq!(busy.cells[4].text(), "3.0");
        assert_eq!(busy.cells[2].text(), "90.0");
        // No PMU: IPC and CPI are n/a, not `-`.
        assert_eq!(busy.cells[7], Cell::NotAvailable);
        assert_eq!(busy.cells[8].text(), "n/a");
        assert_eq!(rows(view, &v, true, s)[0].cells[7], Cell::Missing);
    }

    #[test]
    fn cpus_sort_numerically_and_use_proc_stat() {
        let f = frame();
        let v = Values::new(&f);
        let view = View::Cpus;
        let s = Sort::initial(view);
        let r = rows(view, &v, false, s);
        assert_eq!(ids(&r), [0, 1, 10]);
        assert_eq!(r[0].cells[0].text(), "cpu0");
        assert_eq!(r[1].cells[1].text(), "75.0");
        assert_eq!(r[1].cells[7].text(), "100");
        let rev = Sort {
            descending: true,
            ..s
        };
        assert_eq!(ids(&rows(view, &v, false, rev)), [10, 1, 0]);
        let util = Sort::by(view, column_for_key(view, 'u').unwrap());
        assert_eq!(ids(&rows(view, &v, false, util)), [1, 0, 10]);
    }

    #[test]
    fn every_column_has_its_own_key() {
        for view in [View::Processes, View::Cpus] {
            let cols = view.columns();
            for (i, c) in cols.iter().enumerate() {
                assert_eq!(column_for_key(view, c.key), Some(i), "{}", c.title);
                // Keys that do something else.
                assert!(!"qrc<>".contains(c.key), "{}", c.title);
                assert!(c.width as usize > c.title.chars().count(), "{}", c.title);
            }
        }
    }

    #[test]
    fn narrow_terminals_drop_low_priority_columns_first() {
        let cols = PROCESS_COLUMNS;
        let all: u16 = cols.iter().map(|c| c.width).sum::<u16>() + cols.len() as u16 - 1;
        let wide = fit_columns(cols, 200);
        assert_eq!(wide.len(), cols.len());
        assert_eq!(wide[1].1, 40, "the command takes the spare width, up to 40");
        let exact = fit_columns(cols, all);
        assert_eq!(exact.len(), cols.len());
        assert_eq!(exact[1].1, 16);
        let narrower = fit_columns(cols, all - 1);
        let titles = |f: &[(usize, u16)]| f.iter().map(|&(i, _)| cols[i].title).collect::<Vec<_>>();
        assert!(
            !titles(&narrower).contains(&"FLT/s"),
            "{:?}",
            titles(&narrower)
        );
        let narrow = fit_columns(cols, 45);
        assert_eq!(titles(&narrow), ["PID", "COMMAND", "CPU%", "IPC"]);
        let used: u16 = narrow.iter().map(|&(_, w)| w).sum::<u16>() + 3;
        assert_eq!(used, 45, "the command takes the spare cells");
        // Never fewer than the columns that cannot be dropped.
        assert_eq!(titles(&fit_columns(cols, 10)), ["PID", "COMMAND", "CPU%"]);
        let f = frame();
        let v = Values::new(&f);
        let line = row_line(
            View::Processes,
            &narrow,
            &rows(View::Processes, &v, false, Sort::initial(View::Processes))[0],
        );
        assert_eq!(line.chars().count(), 45, "{line}");
        assert!(line.contains("busy") && line.ends_with("n/a"), "{line}");
        let header = header_line(View::Processes, &narrow, Sort::initial(View::Processes));
        assert!(header.contains("CPU%▼"), "{header}");
    }

    #[test]
    fn the_ipc_note_says_why() {
        let none: Vec<(String, String)> = Vec::new();
        let both = ["hw.cycles".to_string(), "hw.instructions".to_string()];
        assert_eq!(ipc_note(&both, &none, true), None);
        let refused = vec![
            (
                "hw.instructions".to_string(),
                "ENOENT (no hardware PMU?)".to_string(),
            ),
            (
                "hw.cycles".to_string(),
                "ENOENT (no hardware PMU?)".to_string(),
            ),
        ];
        assert_eq!(
            ipc_note(&["sw.page_faults".into()], &refused, false).unwrap(),
            "IPC/CPI n/a: no hardware PMU (cycles, instructions not supported)"
        );
        let denied = vec![("hw.cycles".to_string(), "permission denied".to_string())];
        assert_eq!(
            ipc_note(&["hw.instructions".into()], &denied, true).unwrap(),
            "IPC/CPI n/a: permission denied (cycles not supported)"
        );
        assert_eq!(
            ipc_note(&["sw.page_faults".into()], &none, true).unwrap(),
            "IPC/CPI n/a: cycles, instructions not in the event sets (-e)"
        );
    }
}
