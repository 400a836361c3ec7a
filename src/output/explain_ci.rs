//! explain's CI formats: GitHub Actions annotations (one per finding at its first evidence line,
//! one notice with the verdict) and JUnit XML (one test case per finding).
use std::fmt::Write as _;

use super::workflow::{command, xml};
use crate::model::{Analysis, Finding, Severity};

/// A finding that fails a CI job: a real problem, not noise.
fn fails(f: &Finding) -> bool {
    !f.benign && f.severity >= Severity::Warning
}

fn level(f: &Finding) -> &'static str {
    match f.severity {
        _ if f.benign => "notice",
        Severity::Error | Severity::Fatal => "error",
        Severity::Warning => "warning",
        _ => "notice",
    }
}

fn verdict_line(a: &Analysis) -> String {
    match &a.primary {
        Some(p) => format!("verdict {}: {} ({})", a.verdict.as_str(), p.title, p.rule),
        None => format!("verdict {}", a.verdict.as_str()),
    }
}

/// Rule prose is wrapped for the terminal; an annotation wraps by itself.
pub(crate) fn one_line(s: &str) -> String {
    s.split_whitespace().collect::<Vec<_>>().join(" ")
}

pub fn github(a: &Analysis) -> String {
    let mut s = String::new();
    for f in &a.findings {
        let at = f.evidence.first().map(|e| (e.source.as_str(), e.line));
        let msg = format!("{}\nFix: {}", f.title, one_line(&f.fix));
        s.push_str(&command(level(f), at, &format!("epdoctor {}", f.rule), &msg));
    }
    // GitHub shows ten annotations of a kind per step: the first lines, then how many more.
    const SHOWN: usize = 10;
    for u in a.unexplained.iter().take(SHOWN) {
        s.push_str(&command("warning", Some((&u.source, u.line)), "epdoctor: no rule explains this line", &u.text));
    }
    if a.unexplained.len() > SHOWN {
        let more =
            format!("{} more lines no rule explains (`epdoctor explain --unexplained`)", a.unexplained.len() - SHOWN);
        s.push_str(&command("warning", None, "epdoctor: unexplained", &more));
    }
    for u in &a.unread {
        s.push_str(&command("warning", None, "epdoctor: not read", u));
    }
    s.push_str(&command("notice", None, "epdoctor explain", &verdict_line(a)));
    s
}

pub fn junit(a: &Analysis) -> String {
    let unexplained = !a.unexplained.is_empty();
    let tests = a.findings.len() + usize::from(unexplained);
    let failures = a.findings.iter().filter(|f| fails(f)).count() + usize::from(unexplained);
    let mut s = String::from("<?xml version=\"1.0\" encoding=\"UTF-8\"?>\n");
    let _ = writeln!(s, "<testsuites name=\"epdoctor explain\" tests=\"{tests}\" failures=\"{failures}\">");
    let _ = writeln!(
        s,
        "  <testsuite name=\"epdoctor explain\" tests=\"{tests}\" failures=\"{failures}\" errors=\"0\" skipped=\"0\">"
    );
    let _ =
        writeln!(s, "    <properties><property name=\"verdict\" value=\"{}\"/></properties>", xml(&verdict_line(a)));
    for f in &a.findings {
        let at =
            f.evidence.first().map(|e| format!(" file=\"{}\" line=\"{}\"", xml(&e.source), e.line)).unwrap_or_default();
        let _ = write!(s, "    <testcase classname=\"epdoctor.{}\" name=\"{}\"{at}>", xml(&f.category), xml(&f.rule));
        let lines: Vec<String> = f.evidence.iter().map(|e| format!("{}:{}: {}", e.source, e.line, e.text)).collect();
        let body = format!("{}\n\nRoot cause: {}\nFix: {}\n\n{}", f.title, f.root_cause, f.fix, lines.join("\n"));
        if fails(f) {
            let _ = write!(
                s,
                "<failure type=\"{}\" message=\"{}\">{}</failure>",
                f.severity.as_str(),
                xml(&f.title),
                xml(&body)
            );
        } else {
            let _ = write!(s, "<system-out>{}</system-out>", xml(&body));
        }
        s.push_str("</testcase>\n");
    }
    if unexplained {
        let lines: Vec<String> = a.unexplained.iter().map(|u| format!("{}:{}: {}", u.source, u.line, u.text)).collect();
        let _ = writeln!(
            s,
            "    <testcase classname=\"epdoctor.unexplained\" name=\"unexplained lines\"><failure type=\"unknown\" \
             message=\"{} warning/error lines no rule explains\">{}</failure></testcase>",
            a.unexplained.len(),
            xml(&lines.join("\n"))
        );
    }
    s.push_str("  </testsuite>\n</testsuites>\n");
    s
}
