//! The comparison: a comfy-table of the cells, the effect of each axis, where each rule fired.
//! Text for the terminal, Markdown for report.md (redacted by the caller).

use std::fmt::Write as _;
use std::path::Path;

use comfy_table::{presets, ContentArrangement, Table};

use super::markdown::{heading, inline, table, Md};
use crate::model::run::{
    bisect_lines, effect_line, newer_nccl_hint, site_line, AxisKind, Cell, CellStatus, LauncherOut, Run, RunStatus,
    STACKS_DIR,
};

fn f1(x: f64) -> String {
    format!("{x:.1}")
}

fn f2(x: f64) -> String {
    format!("{x:.2}")
}

fn rules_cell(c: &Cell) -> String {
    if let Some(e) = &c.explain_error {
        return format!("explain failed: {}", e.lines().next().unwrap_or(""));
    }
    if c.rules.is_empty() {
        return "-".into();
    }
    c.rules
        .iter()
        .map(|r| if r.count > 1 { format!("{} x{}", r.id, r.count) } else { r.id.clone() })
        .collect::<Vec<_>>()
        .join(", ")
}

/// The header and rows of the cell table, as plain text (each writer escapes them its way).
fn table_rows(run: &Run) -> (Vec<String>, Vec<Vec<String>>) {
    let multi: Vec<usize> = (0..run.axes.len()).filter(|&i| run.axes[i].values.len() > 1).collect();
    let mut header: Vec<String> = vec!["#".into()];
    header.extend(multi.iter().map(|&i| run.axes[i].name.clone()));
    if run.repeat > 1 {
        header.push("rep".into());
    }
    for h in ["nccl ran", "exit", "status", "wall s", "teardown s", "WARN", "rules fired", "verdict", "leftovers"] {
        header.push(h.into());
    }
    let mut rows = Vec::new();
    for c in &run.cells {
        let mut row: Vec<String> = vec![c.index.to_string()];
        row.extend(multi.iter().map(|&i| run.axes[i].values[c.values[i]].label.clone()));
        if run.repeat > 1 {
            row.push(c.repeat.to_string());
        }
        let teardown = match (c.teardown_s, c.hung.iter().any(|h| h.phase.as_deref() == Some("teardown-start"))) {
            (_, true) => "hang".to_string(),
            (Some(s), _) => f2(s),
            (None, _) => "-".into(),
        };
        row.push(c.nccl_version.clone().unwrap_or_else(|| "?".into()));
        row.push(c.processes.iter().map(|p| p.outcome.short()).collect::<Vec<_>>().join(" "));
        row.push(c.status.as_str().into());
        row.push(f1(c.wall_s));
        row.push(teardown);
        row.push(c.warn_lines.to_string());
        row.push(rules_cell(c));
        row.push(c.verdict.map(|v| v.as_str().to_string()).unwrap_or_else(|| "-".into()));
        row.push(c.leftovers.short());
        rows.push(row);
    }
    (header, rows)
}

fn text_table(run: &Run) -> Table {
    let (header, rows) = table_rows(run);
    let mut t = Table::new();
    t.load_style(presets::UTF8_FULL_CONDENSED).set_content_arrangement(ContentArrangement::Dynamic);
    t.set_header(header);
    for r in rows {
        t.add_row(r);
    }
    t
}

fn md_table(run: &Run, md: &mut Md) -> String {
    let (header, rows) = table_rows(run);
    let header: Vec<String> = header.iter().map(|h| inline(h)).collect();
    let header: Vec<&str> = header.iter().map(String::as_str).collect();
    let rows: Vec<Vec<String>> = rows.iter().map(|r| r.iter().map(|c| md.text(c)).collect()).collect();
    table(&header, &rows)
}

/// `PARTIAL: ...` when the run did not finish, else None.
pub fn partial_note(run: &Run) -> Option<String> {
    match run.status {
        RunStatus::Complete => None,
        RunStatus::Interrupted => Some(format!(
            "PARTIAL: interrupted by {} after {} of {} cells",
            run.interrupted_by.as_deref().unwrap_or("a signal"),
            run.cells.len(),
            run.cells_planned
        )),
        RunStatus::Running => Some(format!(
            "PARTIAL: {} of {} cells written; the run was still going (or epdoctor was killed)",
            run.cells.len(),
            run.cells_planned
        )),
    }
}

fn header_lines(run: &Run) -> Vec<String> {
    let mut v = Vec::new();
    let what = if run.workload == "command" {
        format!("your command `{}`", shell_line(&run.command))
    } else {
        let n = run.ranks.unwrap_or(0);
        format!("the built-in workload, {n} rank{}", if n == 1 { "" } else { "s" })
    };
    v.push(format!(
        "{} cells: {what}; deadline {} s, grace {} s; started {}; epdoctor {}",
        run.cells_planned, run.timeout_s, run.grace_s, run.started, run.tool_version
    ));
    if let Some(l) = &run.launcher {
        v.push(launcher_line(l));
    }
    if !run.fixed_env.is_empty() {
        let e: Vec<String> = run.fixed_env.iter().map(|(k, v)| format!("{k}={v}")).collect();
        v.push(format!("Every cell: {} (epdoctor's default; set it with --env to change)", e.join(" ")));
    }
    for a in &run.axes {
        if a.kind == AxisKind::NcclLib {
            let libs: Vec<String> = a
                .values
                .iter()
                .map(|x| {
                    if x.value.is_empty() {
                        format!("{} = the loader's choice", x.label)
                    } else {
                        format!("{} = {}", x.label, x.value)
                    }
                })
                .collect();
            v.push(format!("NCCL libraries: {}", libs.join("; ")));
        } else if a.values.len() == 1 {
            v.push(format!("{}: {}", a.name, a.values[0].label));
        }
    }
    for f in &run.lint {
        let e = &f.evidence[0];
        v.push(format!("lint predicts: {}:{}: {} [{}] {}", e.source, e.line, f.severity.as_str(), f.rule, f.title));
    }
    v
}

/// A command line as a POSIX shell would take it back: words with nothing special stay bare, the
/// others go in single quotes (`python3 -c 'print("hi")'`), so it can be pasted and rerun.
fn shell_line(words: &[String]) -> String {
    let plain = |c: char| c.is_ascii_alphanumeric() || "_@%+=:,./-".contains(c);
    let quote = |w: &String| {
        if !w.is_empty() && w.chars().all(plain) {
            w.clone()
        } else {
            format!("'{}'", w.replace('\'', "'\\''"))
        }
    };
    words.iter().map(quote).collect::<Vec<_>>().join(" ")
}

/// The report's line about the launcher.
fn launcher_line(l: &LauncherOut) -> String {
    match l {
        LauncherOut::Slurm { slurm: a } => format!(
            "Launcher: Slurm, a job step per cell in job {} ({}), nodes: {}",
            a.job_id,
            if a.owned { "allocated by epdoctor, cancelled at the end" } else { "the allocation epdoctor ran in" },
            a.nodes.join(", ")
        ),
        LauncherOut::Torchrun { command } => format!("Launcher: `{}` per cell", shell_line(command)),
    }
}

/// Last non-empty line of a file, shortened. Read backwards from the end, a block at a time, so a
/// cell whose job printed gigabytes costs a few blocks, not the file (issue 26, point 8).
pub fn last_line(path: &Path) -> Option<String> {
    let l = last_nonblank_line(path)?;
    let l = String::from_utf8_lossy(&l);
    let l = l.trim();
    Some(if l.chars().count() > 200 {
        format!("{}...", l.chars().take(200).collect::<String>())
    } else {
        l.to_string()
    })
}

/// The last line holding more than whitespace, at most `LINE_CAP` bytes of its head, looked for
/// in the file's last `SCAN_CAP` bytes only.
fn last_nonblank_line(path: &Path) -> Option<Vec<u8>> {
    use std::io::{Read, Seek, SeekFrom};
    const BLOCK: u64 = 64 * 1024;
    const SCAN_CAP: u64 = 8 * 1024 * 1024;
    const LINE_CAP: usize = 4096;
    let mut f = std::fs::File::open(path).ok()?;
    let len = f.metadata().ok()?.len();
    let stop = len.saturating_sub(SCAN_CAP);
    // `tail`: the bytes from `pos` to where the search ended, newest last.
    let mut pos = len;
    let mut tail: Vec<u8> = Vec::new();
    // Where the line ends within `tail` once its last non-blank byte is seen.
    let mut end: Option<usize> = None;
    while pos > stop {
        let n = BLOCK.min(pos - stop);
        pos -= n;
        let mut block = vec![0u8; n as usize];
        f.seek(SeekFrom::Start(pos)).ok()?;
        f.read_exact(&mut block).ok()?;
        let off = block.len();
        block.extend_from_slice(&tail);
        tail = block;
        end = end.map(|e| e + off);
        if end.is_none() {
            match tail[..off].iter().rposition(|b| !b.is_ascii_whitespace()) {
                Some(i) => end = Some(i + 1),
                None => {
                    // All blank so far: only the newest partial line matters, keep nothing.
                    tail.clear();
                    continue;
                }
            }
        }
        let e = end?;
        if let Some(nl) = tail[..e].iter().rposition(|&b| b == b'\n') {
            return Some(tail[nl + 1..e].iter().copied().take(LINE_CAP).collect());
        }
        // The line started before this block: only its head is shown, and the head lies before
        // what is kept, so the first LINE_CAP bytes kept are all that can still be shown.
        if e > LINE_CAP {
            tail.truncate(LINE_CAP);
            end = Some(LINE_CAP);
        }
    }
    let e = end?;
    if pos == 0 {
        return Some(tail[..e].iter().copied().take(LINE_CAP).collect());
    }
    // The line is longer than the part looked at: its start is out of reach.
    None
}

/// What the table cannot show: hangs, failures, leftovers, engine errors.
/// `ranks 0-6, 8-15 (Flight Recorder: last enqueued #42): all_reduce <- train.py:88`.
fn group_line(g: &crate::model::run::StackGroup) -> String {
    let fr = g.fr_seq.map(|s| format!(" (Flight Recorder: last enqueued #{s})")).unwrap_or_default();
    format!("{}{fr}: {}", g.label, g.waits)
}

fn notes(run: &Run, dir: &Path) -> Vec<String> {
    let mut v = Vec::new();
    // The same failure in every rank and cell is shown once.
    let mut shown = std::collections::HashSet::new();
    for c in &run.cells {
        if c.status != CellStatus::Ok {
            v.push(format!("cell {} ({}): {}", c.index, c.id, c.detail));
            if c.status == CellStatus::Failed {
                for p in c.processes.iter().filter(|p| p.outcome.exit_code != Some(0)) {
                    match last_line(&dir.join("cells").join(&c.id).join(&p.log)) {
                        Some(l) if shown.insert(l.clone()) => v.push(format!("  {} last line: {l}", p.log)),
                        Some(_) => v.push(format!("  {} last line: as above", p.log)),
                        None => {}
                    }
                }
            }
        }
        for g in &c.stack_groups {
            v.push(format!("  {}", group_line(g)));
        }
        for n in &c.stack_notes {
            v.push(format!("cell {}: {n}", c.index));
        }
        for l in c.leftovers.facts() {
            v.push(format!("cell {}: {l}", c.index));
        }
        if let Some(e) = &c.explain_error {
            v.push(format!("cell {}: explain failed: {e}", c.index));
        }
    }
    v.extend(newer_nccl_hint(run));
    v
}

pub fn text(run: &Run, dir: &Path) -> String {
    let mut s = String::new();
    if let Some(p) = partial_note(run) {
        let _ = writeln!(s, "{p}");
    }
    for l in header_lines(run) {
        let _ = writeln!(s, "{l}");
    }
    let _ = writeln!(s, "{}", text_table(run));
    if !run.effects.is_empty() {
        let _ = writeln!(s, "\nEffect of each axis (one value against the first, everything else equal):");
        for e in &run.effects {
            let _ = writeln!(s, "  {}", effect_line(e));
        }
    }
    if !run.where_fired.is_empty() {
        let _ = writeln!(s, "\nWhere each rule and outcome was seen:");
        for w in &run.where_fired {
            let _ = writeln!(s, "  {}", site_line(w));
        }
    }
    if let Some(b) = &run.bisect {
        let _ = writeln!(s);
        for l in bisect_lines(b) {
            let _ = writeln!(s, "{l}");
        }
    }
    let n = notes(run, dir);
    if !n.is_empty() {
        let _ = writeln!(s, "\nNotes:");
        for l in n {
            let _ = writeln!(s, "  {l}");
        }
    }
    let _ = writeln!(s, "\nRun folder: {} (report.md, cells.json, cells/*/ with every log)", dir.display());
    s
}

/// report.md, or the repro section of `report` (`level`: the heading level of its title).
pub(crate) fn markdown(run: &Run, dir: &Path, md: &mut Md, level: usize) -> String {
    // Learn every host in what the ranks printed first, so each gets its pseudonym everywhere.
    for c in &run.cells {
        for p in &c.processes {
            if let Some(l) = last_line(&dir.join("cells").join(&c.id).join(&p.log)) {
                md.learn(&l);
            }
        }
        if let Some(e) = c.primary.as_ref().and_then(|p| p.evidence.as_ref()) {
            md.learn(e);
        }
    }
    let mut s = heading(level, "epdoctor repro");
    s.push('\n');
    if let Some(p) = partial_note(run) {
        let _ = writeln!(s, "**{}**\n", md.text(&p));
    }
    for l in header_lines(run) {
        let _ = writeln!(s, "- {}", md.text(&l));
    }
    let _ = writeln!(s, "\n{}", md_table(run, md));
    if !run.effects.is_empty() {
        s.push_str(&heading(level + 1, "Effect of each axis"));
        let _ = writeln!(s, "\nOne value against the axis' first value, everything else equal.\n");
        for e in &run.effects {
            let _ = writeln!(s, "- {}", md.text(&effect_line(e)));
        }
        s.push('\n');
    }
    if !run.where_fired.is_empty() {
        s.push_str(&heading(level + 1, "Where each rule and outcome was seen"));
        s.push('\n');
        for w in &run.where_fired {
            let _ = writeln!(s, "- {}", md.text(&site_line(w)));
        }
        s.push('\n');
    }
    if let Some(b) = &run.bisect {
        s.push_str(&heading(level + 1, "Bisection"));
        let _ = writeln!(s, "\n{}", md.block(&bisect_lines(b)));
    }
    if let Some(h) = newer_nccl_hint(run) {
        let _ = writeln!(s, "Note: {}\n", md.text(&h));
    }
    s.push_str(&heading(level + 1, "Cells"));
    s.push('\n');
    for c in &run.cells {
        let axes: Vec<String> =
            run.axes.iter().zip(&c.values).map(|(a, &i)| format!("{}={}", a.name, a.values[i].label)).collect();
        s.push_str(&heading(level + 2, &format!("{} {}", c.index, md.code(&c.id))));
        s.push('\n');
        let _ = writeln!(s, "- settings: {}", md.text(&axes.join(", ")));
        let detail = if c.detail == c.status.as_str() { String::new() } else { format!(" ({})", c.detail) };
        let _ =
            writeln!(s, "- status: {}, wall {} s", md.text(&format!("{}{detail}", c.status.as_str())), f1(c.wall_s));
        if let Some(v) = &c.nccl_version {
            let t = c.transport.as_deref().map(|t| format!(", transport {t}")).unwrap_or_default();
            let _ = writeln!(s, "- NCCL ran: {}", md.text(&format!("{v}{t}")));
        }
        let mut notes: std::collections::BTreeMap<&str, Vec<&str>> = Default::default();
        for (rank, m) in &c.markers {
            for n in &m.notes {
                notes.entry(n.as_str()).or_default().push(rank.as_str());
            }
        }
        for (n, ranks) in notes {
            let _ = writeln!(s, "- note (rank {}): {}", md.text(&ranks.join(", ")), md.text(n));
        }
        if let Some(step) = &c.launch.step {
            let _ = writeln!(s, "- Slurm job step {} on {}", md.text(step), md.text(&c.launch.nodes.join(", ")));
        }
        for p in &c.processes {
            let on = p.node.as_ref().map(|n| format!(" on {}", md.text(n))).unwrap_or_default();
            let _ = writeln!(
                s,
                "- process {}{on}: {} (log {})",
                md.text(&p.outcome.label),
                md.text(&p.outcome.short()),
                md.code(&p.log)
            );
            if p.outcome.exit_code != Some(0) {
                if let Some(l) = last_line(&dir.join("cells").join(&c.id).join(&p.log)) {
                    let _ = writeln!(s, "  - last line: {}", md.code(&l));
                }
            }
        }
        if let Some(p) = &c.primary {
            let _ = writeln!(s, "- primary finding: {} {}", md.code(&p.rule), md.text(&p.title));
            if let Some(e) = &p.evidence {
                let from = p.source.as_deref().map(|x| format!(" ({})", md.text(x))).unwrap_or_default();
                let _ = writeln!(s, "  - {}{from}", md.code(e));
            }
        }
        if let Some(e) = &c.explain_error {
            let _ = writeln!(s, "- explain failed: {}", md.text(e));
        }
        for e in &c.launch.rank_errors {
            let _ = writeln!(s, "- error file of local rank {} (attempt {}): {}", e.local_rank, e.attempt, e.message);
        }
        if !c.stack_groups.is_empty() {
            let _ = writeln!(s, "- stacks grouped across ranks (the odd group first):");
        }
        for g in &c.stack_groups {
            let fr = g.fr_seq.map(|s| format!(" (Flight Recorder: last enqueued #{s})")).unwrap_or_default();
            let _ = writeln!(s, "  - {}{}: {}", md.text(&g.label), md.text(&fr), md.code(&g.waits));
        }
        for n in &c.stack_notes {
            let _ = writeln!(s, "- {}", md.text(n));
        }
        if !c.stacks.is_empty() {
            let _ = writeln!(s, "- stacks at the deadline (raw in {}):", md.code(STACKS_DIR));
        }
        for st in &c.stacks {
            let who = if st.rank.starts_with("pid ") {
                st.rank.clone()
            } else {
                format!("rank {} (pid {})", st.rank, st.pid)
            };
            let _ = writeln!(s, "  - {}, via {}: {}", md.text(&who), md.text(&st.tool), md.code(&st.waits));
            for o in &st.others {
                let _ = writeln!(s, "    - thread {}", md.code(o));
            }
        }
        for l in c.leftovers.facts() {
            let _ = writeln!(s, "- {}", md.text(&l));
        }
        s.push('\n');
    }
    s
}

#[cfg(test)]
mod tests {
    #[test]
    fn commands_are_quoted_as_a_shell_takes_them() {
        let w = |v: &[&str]| super::shell_line(&v.iter().map(|s| s.to_string()).collect::<Vec<_>>());
        assert_eq!(w(&["python3", "-c", "print(\"hi\")"]), r#"python3 -c 'print("hi")'"#);
        assert_eq!(
            w(&["torchrun", "--nproc-per-node=8", "train.py", "a b", ""]),
            "torchrun --nproc-per-node=8 train.py 'a b' ''"
        );
        assert_eq!(w(&["echo", "it's", "$HOME"]), r#"echo 'it'\''s' '$HOME'"#);
    }

    #[test]
    fn the_last_line_is_read_from_the_end() {
        let d = tempfile::tempdir().unwrap();
        let p = d.path().join("rank0.log");
        let last = |bytes: &[u8]| {
            std::fs::write(&p, bytes).unwrap();
            super::last_line(&p)
        };
        assert_eq!(last(b"a\nb\n\n  \n").as_deref(), Some("b"));
        assert_eq!(last(b"only").as_deref(), Some("only"));
        assert_eq!(last(b"\n \n\t\n"), None);
        assert_eq!(last(b""), None);
        // Blocks: the last line spans several 64 KiB blocks, then trailing blank lines do too.
        let mut big = b"first\n".to_vec();
        big.extend(std::iter::repeat_n(b'x', 300_000));
        big.extend(b" end\r\n");
        big.extend(std::iter::repeat_n(b'\n', 200_000));
        let l = last(&big).unwrap();
        assert_eq!(l, format!("{}...", "x".repeat(200)));
        let mut big = std::iter::repeat_n(b'y', 70_000).collect::<Vec<u8>>();
        big.extend(b"\nTraceback: boom\n");
        assert_eq!(last(&big).as_deref(), Some("Traceback: boom"));
        // A line that begins exactly at a block's edge, and one whose newline is the first byte read.
        for pad in [65_536 - 5, 65_536 - 6, 65_536 - 4] {
            let mut b = std::iter::repeat_n(b'z', pad).collect::<Vec<u8>>();
            b.extend(b"\nlast\n");
            assert_eq!(last(&b).as_deref(), Some("last"), "pad {pad}");
        }
    }
}
