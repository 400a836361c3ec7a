//! One writer per format for [`EnvReport`]: text (tables, colour), Markdown (paste-ready: the
//! checklist, then the details; redacted unless asked not to), JSON (serde, unredacted).
use std::fmt::Write as _;

use comfy_table::{presets, ContentArrangement, Table};
use owo_colors::Style;

use super::color::paint;
use super::markdown::{self, Md};
use super::redact::Redactor;
use crate::model::env::{human_bytes, Check, EnvReport, GpuStatus, Holder, LibFile, PythonStatus, Status};

/// Mask this machine's name too, wherever it appears.
pub fn redactor_for(r: &EnvReport) -> Redactor {
    let mut red = Redactor::new();
    if let Some(h) = &r.host.hostname {
        red.learn_host(h);
    }
    red
}

fn status_style(s: Status) -> Style {
    match s {
        Status::Ok => Style::new().green(),
        Status::Info => Style::new().cyan(),
        Status::Warn => Style::new().yellow().bold(),
        Status::Fail => Style::new().red().bold(),
    }
}

fn opt<T: ToString>(v: &Option<T>) -> String {
    v.as_ref().map_or("-".to_string(), |v| v.to_string())
}

fn table(header: &[&str]) -> Table {
    let mut t = Table::new();
    t.load_style(presets::UTF8_FULL_CONDENSED);
    t.set_content_arrangement(ContentArrangement::Dynamic);
    t.set_header(header.to_vec());
    t
}

fn lib_version(l: &LibFile) -> String {
    match (&l.version, &l.cuda) {
        (Some(v), Some(c)) => format!("{v}+cuda{c}"),
        (Some(v), None) => v.clone(),
        _ => l.error.clone().unwrap_or_else(|| "?".into()),
    }
}

fn holders(h: &[Holder]) -> String {
    if h.is_empty() {
        "-".into()
    } else {
        h.iter().map(|h| format!("{} ({})", h.pid, h.comm)).collect::<Vec<_>>().join(", ")
    }
}

/// Short facts shared by the text and Markdown writers: (label, value).
fn summary(r: &EnvReport) -> Vec<(&'static str, String)> {
    let h = &r.host;
    let container = if h.container.detected {
        format!("yes ({})", h.container.evidence.join("; "))
    } else {
        "no sign of one".into()
    };
    let mem = match (h.memory_total_bytes, h.memory_available_bytes) {
        (Some(t), Some(a)) => format!("{} total, {} available", human_bytes(t), human_bytes(a)),
        (Some(t), None) => human_bytes(t),
        _ => "-".into(),
    };
    let mut v = vec![
        ("host", opt(&h.hostname)),
        ("os", opt(&h.os)),
        ("kernel", opt(&h.kernel)),
        ("arch", h.arch.clone()),
        ("container", container),
        ("cpus", format!("{} online, {} usable", opt(&h.cpus_online), opt(&h.cpus_available))),
        ("memory", mem),
    ];
    if let Some(l) = h.cgroup_memory_limit_bytes {
        v.push(("cgroup memory limit", human_bytes(l)));
    }
    let g = &r.gpu;
    let gpu_line = match g.status {
        GpuStatus::Ok => format!(
            "driver {} (CUDA {}), {} GPU(s)",
            opt(&g.driver_version),
            opt(&g.cuda_driver_version),
            g.devices.len()
        ),
        other => format!("{other}{}", g.detail.as_ref().map(|d| format!(": {d}")).unwrap_or_default()),
    };
    v.push(("gpu", gpu_line));
    let p = &r.python;
    let py = match p.status {
        PythonStatus::Ok => format!(
            "python {} ({}); torch {}{}",
            opt(&p.python),
            opt(&p.executable),
            p.torch.clone().unwrap_or_else(|| "not installed".into()),
            match (&p.torch_cuda, &p.torch_nccl) {
                (Some(c), Some(n)) => format!(", CUDA {c}, NCCL {n}"),
                (None, Some(n)) => format!(", NCCL {n}"),
                _ => String::new(),
            }
        ),
        other => format!("{other}{}", p.detail.as_ref().map(|d| format!(": {d}")).unwrap_or_default()),
    };
    v.push(("python", py));
    if let Some(e) = &p.torch_error {
        v.push(("torch error", e.clone()));
    }
    let s = &r.shm;
    v.push((
        "/dev/shm",
        if s.exists {
            format!(
                "{} size, {} free ({})",
                s.size_bytes.map_or("?".into(), human_bytes),
                s.free_bytes.map_or("?".into(), human_bytes),
                s.fstype.clone().unwrap_or_else(|| "?".into())
            )
        } else {
            "missing".into()
        },
    ));
    v.push((
        "memlock",
        format!(
            "soft {}, hard {}",
            r.limits.memlock_soft_bytes.map_or("unlimited".into(), human_bytes),
            r.limits.memlock_hard_bytes.map_or("unlimited".into(), human_bytes)
        ),
    ));
    v.push((
        "processes scanned",
        format!(
            "{}{}",
            r.process_scan.processes,
            if r.process_scan.unreadable > 0 {
                format!(" ({} could not be read)", r.process_scan.unreadable)
            } else {
                String::new()
            }
        ),
    ));
    v
}

pub fn text(r: &EnvReport) -> String {
    let mut s = String::new();
    let bold = Style::new().bold();
    let _ = writeln!(s, "{}", paint(&format!("epdoctor env {}", r.tool_version), bold));
    for (k, v) in summary(r) {
        let _ = writeln!(s, "  {:<18} {v}", format!("{k}:"));
    }

    if !r.gpu.devices.is_empty() {
        let mut t = table(&["#", "name", "sm", "memory", "pci"]);
        for g in &r.gpu.devices {
            t.add_row([
                g.index.to_string(),
                g.name.clone(),
                g.compute_capability.clone(),
                human_bytes(g.memory_bytes),
                opt(&g.pci_bus_id),
            ]);
        }
        let _ = writeln!(s, "\n{}\n{t}", paint("GPUs", bold));
        if r.gpu.devices.len() > 1 {
            let _ = writeln!(s, "\n{}\n{}", paint("P2P access (row can access column)", bold), p2p_table(r));
        }
    }

    let _ = writeln!(s, "\n{}", paint("libnccl", bold));
    if r.libraries.nccl.is_empty() {
        let _ = writeln!(s, "  none found");
    } else {
        let mut t = table(&["version", "path", "found via", "loader's choice"]);
        for l in &r.libraries.nccl {
            t.add_row([
                lib_version(l),
                lib_path(l),
                l.found_via.join(", "),
                if l.loader_default { "yes".into() } else { String::new() },
            ]);
        }
        let _ = writeln!(s, "{t}");
    }
    let _ = writeln!(s, "\n{}", paint("NVSHMEM host library", bold));
    if r.libraries.nvshmem.is_empty() {
        let _ = writeln!(s, "  none found");
    } else {
        let mut t = table(&["version", "path", "built with NCCL", "how we know"]);
        for l in &r.libraries.nvshmem {
            let sup = l.nccl_support.as_ref();
            t.add_row([
                lib_version(l),
                lib_path(l),
                match sup.and_then(|s| s.built_with_nccl) {
                    Some(true) => "yes".into(),
                    Some(false) => "no".into(),
                    None => "?".into(),
                },
                sup.map(|s| s.evidence.clone()).unwrap_or_default(),
            ]);
        }
        let _ = writeln!(s, "{t}");
    }

    let _ = writeln!(s, "\n{}", paint("variables", bold));
    if r.variables.is_empty() {
        let _ = writeln!(s, "  no NCCL_*, TORCH_NCCL_*, TORCH_DISTRIBUTED_*, NVSHMEM_*, CUDA_* variables set");
    }
    for v in &r.variables {
        let _ = writeln!(s, "  {}={}", v.name, v.value);
    }
    for f in &r.config_files {
        if f.present {
            let _ = writeln!(
                s,
                "  {} ({}):{}",
                f.path,
                f.role,
                f.error.as_ref().map(|e| format!(" {e}")).unwrap_or_default()
            );
            for e in &f.entries {
                let _ = writeln!(s, "    {}={}", e.name, e.value);
            }
        } else {
            let _ = writeln!(s, "  {} ({}): absent", f.path, f.role);
        }
    }

    text_leftovers(&mut s, r, bold);
    let _ = writeln!(s, "\n{}", paint("checklist", bold));
    for c in &r.checks {
        let tag = format!("[{:<4}]", c.status.as_str());
        let _ = writeln!(s, "{} {}", paint(&tag, status_style(c.status)), c.title);
        if !c.detail.is_empty() {
            let _ = writeln!(s, "       {}", c.detail);
        }
    }
    s
}

/// The text report's leftovers section: /dev/shm files, NCCL sockets, SysV segments, GPU holders.
fn text_leftovers(s: &mut String, r: &EnvReport, bold: Style) {
    let _ = writeln!(s, "\n{}", paint("leftovers", bold));
    if r.shm.files.is_empty() {
        let _ = writeln!(s, "  {}: no nccl-* or torch_* files", r.shm.dir);
    } else {
        let mut t = table(&["file", "size", "state", "held by"]);
        for f in &r.shm.files {
            t.add_row([f.path.clone(), human_bytes(f.size), f.state.to_string(), holders(&f.holders)]);
        }
        let _ = writeln!(s, "{t}");
    }
    if r.nccl_sockets.is_empty() {
        let _ = writeln!(s, "  /proc/net/unix: no @/tmp/nccl-socket-* sockets");
    } else {
        for k in &r.nccl_sockets {
            let _ = writeln!(s, "  socket {} held by {}", k.path, holders(&k.holders));
        }
    }
    let _ = writeln!(s, "  SysV shm segments: {}", r.sysv_segments.len());
    for g in &r.sysv_segments {
        let _ = writeln!(
            s,
            "    shmid {} key {} size {} nattch {} creator {} ({})",
            g.shmid,
            g.key,
            human_bytes(g.size),
            g.nattch,
            g.cpid,
            if g.creator_alive == Some(true) { "alive" } else { "gone" }
        );
    }
    if r.gpu_processes.is_empty() {
        let _ = writeln!(s, "  no other process holds /dev/nvidia*");
    } else {
        for p in &r.gpu_processes {
            let _ = writeln!(s, "  pid {} ({}) holds {}", p.pid, p.comm, p.devices.join(", "));
        }
    }
}

fn lib_path(l: &LibFile) -> String {
    let mut s = if l.path == l.real_path { l.path.clone() } else { format!("{} -> {}", l.path, l.real_path) };
    if !l.also_at.is_empty() {
        s += &format!(" (also as {})", l.also_at.join(", "));
    }
    s
}

fn p2p_table(r: &EnvReport) -> String {
    let n = r.gpu.devices.len();
    let mut header = vec![String::new()];
    header.extend((0..n).map(|i| i.to_string()));
    let mut t = Table::new();
    t.load_style(presets::UTF8_FULL_CONDENSED);
    t.set_header(header);
    for i in 0..n {
        let mut row = vec![i.to_string()];
        for j in 0..n {
            row.push(match r.gpu.p2p.get(i).and_then(|v| v.get(j)).copied().flatten() {
                None => "-".into(),
                Some(true) => "yes".into(),
                Some(false) => "no".into(),
            });
        }
        t.add_row(row);
    }
    t.to_string()
}

fn checklist_md(s: &mut String, checks: &[Check], md: &mut Md) {
    let rows: Vec<Vec<String>> = checks
        .iter()
        .map(|c| {
            // The checks' prose is ours (code spans render); values in it are redacted first.
            let refs: Vec<String> = c.refs.iter().map(|r| format!("<{}>", r.replace(['<', '>', ' '], ""))).collect();
            let refs = if refs.is_empty() { String::new() } else { format!(" ({})", refs.join(", ")) };
            let detail = markdown::prose(&md.raw(&c.detail)).replace('|', "\\|");
            vec![c.status.as_str().to_string(), md.text(&c.title), format!("{detail}{refs}")]
        })
        .collect();
    s.push_str(&markdown::table(&["", "check", "detail"], &rows));
}

/// The Markdown body; `level` is the heading level of its sections (2 alone, 3 inside `report`).
pub(crate) fn markdown(r: &EnvReport, level: usize, md: &mut Md) -> String {
    let h = "#".repeat(level);
    let mut s = String::new();
    let _ = writeln!(s, "{h} Environment (epdoctor env {})\n", r.tool_version);
    let rows: Vec<Vec<String>> = summary(r).into_iter().map(|(k, v)| vec![k.to_string(), md.text(&v)]).collect();
    s.push_str(&markdown::table(&["", ""], &rows));
    let _ = writeln!(s, "\n{h}# Checklist\n");
    checklist_md(&mut s, &r.checks, md);
    let _ = writeln!(s, "\n<details><summary>Details: GPUs, libraries, variables, leftovers</summary>\n");
    if !r.gpu.devices.is_empty() {
        let _ = writeln!(s, "{h}# GPUs\n\n| # | name | sm | memory | pci |\n| --- | --- | --- | --- | --- |");
        for g in &r.gpu.devices {
            let _ = writeln!(
                s,
                "| {} | {} | {} | {} | {} |",
                g.index,
                md.text(&g.name),
                g.compute_capability,
                human_bytes(g.memory_bytes),
                md.text(&opt(&g.pci_bus_id))
            );
        }
        let n = r.gpu.devices.len();
        if n > 1 {
            let _ = writeln!(s, "\nP2P access (row can access column):\n");
            let _ = writeln!(s, "| | {} |", (0..n).map(|i| i.to_string()).collect::<Vec<_>>().join(" | "));
            let _ = writeln!(s, "| --- |{}", " --- |".repeat(n));
            for i in 0..n {
                let cells: Vec<&str> = (0..n)
                    .map(|j| match r.gpu.p2p.get(i).and_then(|v| v.get(j)).copied().flatten() {
                        None => "-",
                        Some(true) => "yes",
                        Some(false) => "no",
                    })
                    .collect();
                let _ = writeln!(s, "| {i} | {} |", cells.join(" | "));
            }
        }
        s.push('\n');
    }
    let _ = writeln!(
        s,
        "{h}# Libraries\n\n| library | version | path | found via | loader's choice |\n| --- | --- | --- | --- | --- |"
    );
    for l in &r.libraries.nccl {
        let _ = writeln!(
            s,
            "| libnccl | {} | {} | {} | {} |",
            md.text(&lib_version(l)),
            md.code(&lib_path(l)),
            md.text(&l.found_via.join(", ")),
            if l.loader_default { "yes" } else { "" }
        );
    }
    for l in &r.libraries.nvshmem {
        let built = match l.nccl_support.as_ref().and_then(|s| s.built_with_nccl) {
            Some(true) => "built with NCCL",
            Some(false) => "built without NCCL",
            None => "NCCL support unknown",
        };
        let _ = writeln!(
            s,
            "| NVSHMEM host ({built}) | {} | {} | {} | {} |",
            md.text(&lib_version(l)),
            md.code(&lib_path(l)),
            md.text(&l.found_via.join(", ")),
            if l.loader_default { "yes" } else { "" }
        );
    }
    if r.libraries.nccl.is_empty() && r.libraries.nvshmem.is_empty() {
        let _ = writeln!(s, "| (none found) | | | | |");
    }
    let _ = writeln!(s, "\n{h}# Variables and config files\n");
    let mut lines: Vec<String> = r.variables.iter().map(|v| format!("{}={}", v.name, v.value)).collect();
    if r.variables.is_empty() {
        lines.push("# no NCCL_*, TORCH_NCCL_*, TORCH_DISTRIBUTED_*, NVSHMEM_*, CUDA_* variables set".into());
    }
    for f in &r.config_files {
        if f.present {
            lines.push(format!("# {} ({})", f.path, f.role));
            lines.extend(f.entries.iter().map(|e| format!("{}={}", e.name, e.value)));
        } else {
            lines.push(format!("# {} ({}): absent", f.path, f.role));
        }
    }
    s.push_str(&md.block(&lines));
    let _ = writeln!(s, "\n{h}# Leftovers\n");
    if r.shm.files.is_empty() {
        let _ = writeln!(s, "- {}: no nccl-* or torch_* files", md.code(&r.shm.dir));
    }
    for f in &r.shm.files {
        let what = format!("{} {}, held by {}", human_bytes(f.size), f.state, holders(&f.holders));
        let _ = writeln!(s, "- {} {}", md.code(&f.path), md.text(&what));
    }
    let _ = writeln!(
        s,
        "- NCCL UDS sockets: {}",
        if r.nccl_sockets.is_empty() {
            "none".to_string()
        } else {
            r.nccl_sockets
                .iter()
                .map(|k| format!("{} ({})", md.code(&k.path), md.text(&holders(&k.holders))))
                .collect::<Vec<_>>()
                .join(", ")
        }
    );
    let _ = writeln!(s, "- SysV shm segments: {}", r.sysv_segments.len());
    let _ = writeln!(
        s,
        "- processes holding /dev/nvidia*: {}",
        if r.gpu_processes.is_empty() {
            "none".to_string()
        } else {
            md.text(&r.gpu_processes.iter().map(|p| format!("{} ({})", p.pid, p.comm)).collect::<Vec<_>>().join(", "))
        }
    );
    let _ = writeln!(s, "\n</details>");
    s
}
