//! The worker's marker lines: `[epdoctor] rank=R phase=P t=SECS` and `[epdoctor] rank=R key=value ...`.
//! The worker writes them, repro reads them into [`RankMarkers`] (a part of the run's model).

use std::collections::BTreeMap;
use std::io::BufRead;

pub use crate::model::markers::RankMarkers;

pub const PREFIX: &str = "[epdoctor] ";
/// The harness's own lines in harness.log (exits, signals, leftovers).
pub const HARNESS_PREFIX: &str = "[epdoctor-harness]";

/// The writer side: one marker line of `rank` (the worker prints these, [`parse`] reads them).
pub fn line(rank: usize, body: impl std::fmt::Display) -> String {
    format!("{PREFIX}rank={rank} {body}")
}

/// `phase=P t=SECS`: the rank entered phase `p` at unix time `t`.
pub fn phase(rank: usize, p: &str, t: f64) -> String {
    line(rank, format_args!("phase={p} t={t:.6}"))
}

/// Free text after `note: `.
pub fn note(rank: usize, text: &str) -> String {
    line(rank, format_args!("note: {text}"))
}
/// Markers of every rank found in `text`, keyed by the `rank=` field (lines without one are skipped).
pub fn parse<R: BufRead>(input: R) -> BTreeMap<String, RankMarkers> {
    let mut out: BTreeMap<String, RankMarkers> = BTreeMap::new();
    for line in input.split(b'\n') {
        let Ok(line) = line else { break };
        feed(&mut out, &line);
    }
    out
}

/// The markers of one line, added to `out`.
pub fn feed(out: &mut BTreeMap<String, RankMarkers>, line: &[u8]) {
    if !line.starts_with(PREFIX.as_bytes()) {
        return;
    }
    let line = String::from_utf8_lossy(line);
    let Some(rest) = line.trim_end_matches('\r').strip_prefix(PREFIX) else { return };
    let mut rank = None;
    let mut phase = None;
    let mut t = None;
    let mut keys = Vec::new();
    // `note: <free text>` ends the key=value part of a line.
    let (rest, note) = match rest.split_once(" note: ") {
        Some((head, n)) => (head, Some(n.trim().to_string())),
        None => (rest, None),
    };
    for tok in rest.split_whitespace() {
        let Some((k, v)) = tok.split_once('=') else { continue };
        match k {
            "rank" => rank = Some(v.to_string()),
            "phase" => phase = Some(v.to_string()),
            "t" => t = v.parse::<f64>().ok(),
            _ => keys.push((k.to_string(), v.to_string())),
        }
    }
    let Some(rank) = rank else { return };
    let m = out.entry(rank).or_default();
    m.last = line.trim_end_matches('\r')[PREFIX.len()..]
        .split_whitespace()
        .filter(|t| !t.starts_with("rank="))
        .collect::<Vec<_>>()
        .join(" ");
    match (phase, t) {
        (Some(p), Some(t)) => {
            m.phases.insert(p, t);
        }
        (Some(p), None) => {
            m.keys.insert("phase".into(), p);
        }
        (None, Some(t)) => {
            m.keys.insert("t".into(), t.to_string());
        }
        (None, None) => {}
    }
    for (k, v) in keys {
        m.keys.insert(k, v);
    }
    m.notes.extend(note);
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn what_the_writer_writes_the_parser_reads() {
        let text = [phase(3, "teardown-start", 100.5), note(3, "transport P2P/IPC"), line(3, "nccl_version=2.28.3")]
            .join("\n");
        let m = &parse(text.as_bytes())["3"];
        assert_eq!(m.phases["teardown-start"], 100.5);
        assert_eq!(m.notes, ["transport P2P/IPC"]);
        assert_eq!(m.keys["nccl_version"], "2.28.3");
    }

    #[test]
    fn phases_and_keys() {
        let text = "\
noise
[epdoctor] rank=0 phase=init t=100.0
[epdoctor] rank=0 nccl_version=2.22.3 transport=P2P/IPC
[epdoctor] rank=0 phase=work t=101.5
[epdoctor] rank=1 phase=teardown-start t=102
[epdoctor] rank=0 phase=teardown-start t=102.0
[epdoctor] rank=0 phase=teardown-end t=102.25
[epdoctor] rank=0 teardown_s=9 check=ok
[epdoctor] rank=0 note: with NCCL_HOSTID=x each rank is a node
 [epdoctor] rank=0 phase=ignored t=1
[epdoctor] phase=no-rank t=1
";
        let m = parse(text.as_bytes());
        assert_eq!(m.len(), 2);
        let r0 = &m["0"];
        assert_eq!(r0.keys["nccl_version"], "2.22.3");
        assert_eq!(r0.keys["check"], "ok");
        assert_eq!(r0.teardown_s(), Some(0.25));
        assert_eq!(r0.last_phase(), Some("teardown-end"));
        let r1 = &m["1"];
        assert_eq!(r1.last_phase(), Some("teardown-start"));
        assert_eq!(r1.teardown_s(), None);
        assert_eq!(r1.last, "phase=teardown-start t=102");
        assert_eq!(r0.last, "note: with NCCL_HOSTID=x each rank is a node");
        assert!(!r0.phases.contains_key("ignored"));
        assert_eq!(r0.notes, vec!["with NCCL_HOSTID=x each rank is a node".to_string()]);
        assert!(!r0.keys.contains_key("NCCL_HOSTID"));
    }

    #[test]
    fn teardown_falls_back_to_worker_value_and_survives_binary() {
        let mut bytes = b"[epdoctor] rank=3 teardown_s=0.5\n".to_vec();
        bytes.extend_from_slice(&[0xff, 0xfe, b'\n']);
        bytes.extend_from_slice(b"[epdoctor] rank=3 phase=init t=5\r\n");
        let m = parse(&bytes[..]);
        assert_eq!(m["3"].teardown_s(), Some(0.5));
        assert_eq!(m["3"].phases["init"], 5.0);
    }
}
