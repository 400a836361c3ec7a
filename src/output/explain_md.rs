//! `--format md`: ready to paste into a GitHub issue. Redacted by default; every piece of log text
//! sits in a fenced code block (fence longer than any backtick run inside), so a log cannot inject
//! HTML, links or @mentions into the issue.

use std::fmt::Write as _;

use super::explain_text::ranks;
use super::redact::Redactor;
use super::RenderOpts;
use crate::model::{Analysis, Finding, Verdict};

/// Escape text for a Markdown table cell or a line of prose: no HTML, no mentions, no pipes, no
/// links or issue references (GitHub also links bare `http://...`, `www....`, `#123` and `GH-123`;
/// a zero-width space breaks each of them).
pub fn inline(s: &str) -> String {
    let mut out = String::with_capacity(s.len());
    let mut chars = s.chars().peekable();
    while let Some(c) = chars.next() {
        match c {
            ':' if chars.peek() == Some(&'/') => out.push_str(":\u{200b}"),
            '.' if out.len() >= 3 && out.as_bytes()[out.len() - 3..].eq_ignore_ascii_case(b"www") => {
                out.push_str("\u{200b}.")
            }
            // Issue references: `#123`, `GH-123`.
            '#' if chars.peek().is_some_and(char::is_ascii_digit) => out.push_str("\\#\u{200b}"),
            '-' if chars.peek().is_some_and(char::is_ascii_digit)
                && out.len() >= 2
                && out.as_bytes()[out.len() - 2..].eq_ignore_ascii_case(b"gh") =>
            {
                out.push_str("\u{200b}-")
            }
            '|' => out.push_str("\\|"),
            '<' => out.push_str("&lt;"),
            '>' => out.push_str("&gt;"),
            '&' => out.push_str("&amp;"),
            '@' => out.push_str("@\u{200b}"),
            '[' | ']' | '`' | '*' | '_' | '#' | '!' => {
                out.push('\\');
                out.push(c);
            }
            '\n' | '\r' => out.push(' '),
            _ => out.push(c),
        }
    }
    out
}

/// A fenced code block whose fence cannot be closed by the content.
pub fn code_block(lines: &[String]) -> String {
    let longest = lines
        .iter()
        .map(|l| {
            let mut best = 0;
            let mut run = 0;
            for c in l.chars() {
                run = if c == '`' { run + 1 } else { 0 };
                best = best.max(run);
            }
            best
        })
        .max()
        .unwrap_or(0);
    let fence = "`".repeat(longest.max(2) + 1);
    let mut s = format!("{fence}text\n");
    for l in lines {
        s.push_str(l);
        s.push('\n');
    }
    s.push_str(&fence);
    s.push('\n');
    s
}

pub fn render(a: &Analysis, opts: &RenderOpts, red: &mut Redactor) -> String {
    if opts.redact {
        // Learn every hostname first, so a name is masked even where it appears before the line
        // that reveals it as a hostname.
        for f in &a.findings {
            f.evidence.iter().for_each(|e| red.learn(&e.text));
        }
        a.unexplained.iter().for_each(|u| red.learn(&u.text));
    }
    let mut rd = |s: &str| if opts.redact { red.redact(s) } else { s.to_string() };
    let mut s = String::new();
    let verdict = match a.verdict {
        Verdict::Clean => "clean: no warnings or errors",
        Verdict::Benign => "benign: known noise on a run that worked",
        Verdict::Actionable => "actionable: a real problem",
        Verdict::Unknown => "unknown: warnings no rule explains",
    };
    let _ = writeln!(s, "### epdoctor explain: **{verdict}**\n");
    let mut facts = vec![format!("epdoctor {}", a.tool_version)];
    facts.push(format!("NCCL {}", a.nccl_version.as_deref().unwrap_or("unknown")));
    facts.push(format!("torch {}", a.torch_version.as_deref().unwrap_or("unknown")));
    for v in a.versions.iter().filter(|v| v.how == "inferred") {
        facts.push(format!("{} {} inferred {}", v.component, v.value, v.detail));
    }
    let _ = writeln!(s, "{}\n", inline(&facts.join(" · ")));
    if let Some(p) = &a.primary {
        let head = if a.verdict == Verdict::Actionable { "Primary finding" } else { "What it is" };
        let _ = writeln!(s, "**{head}: `{}`**: {}\n", p.rule, inline(&p.title));
        finding_md(&mut s, p, opts.evidence, &mut rd);
    }
    let others: Vec<&Finding> =
        a.findings.iter().filter(|f| a.primary.as_ref().is_none_or(|p| p.rule != f.rule)).collect();
    if !a.findings.is_empty() {
        let _ = writeln!(s, "| rule | severity | benign | lines | ranks |\n| --- | --- | --- | --- | --- |");
        for f in &a.findings {
            let _ = writeln!(
                s,
                "| `{}` | {} | {} | {} | {} |",
                f.rule,
                f.severity.as_str(),
                if f.benign { "yes" } else { "no" },
                f.count,
                ranks(&f.ranks)
            );
        }
        s.push('\n');
    }
    if !others.is_empty() {
        let _ = writeln!(s, "<details><summary>Other findings ({})</summary>\n", others.len());
        for f in others {
            let _ = writeln!(s, "**`{}`**: {}\n", f.rule, inline(&f.title));
            finding_md(&mut s, f, opts.evidence.min(3), &mut rd);
        }
        let _ = writeln!(s, "</details>\n");
    }
    if !a.unexplained.is_empty() {
        let _ = writeln!(s, "<details><summary>Unexplained warning/error lines ({})</summary>\n", a.unexplained.len());
        let lines: Vec<String> =
            a.unexplained.iter().take(50).map(|u| rd(&format!("{}:{}: {}", u.source, u.line, u.text))).collect();
        s.push_str(&code_block(&lines));
        let _ = writeln!(s, "\n</details>\n");
    }
    if !a.notes.is_empty() {
        for n in &a.notes {
            let _ = writeln!(s, "> note: {}", inline(&rd(n)));
        }
        s.push('\n');
    }
    s
}

fn finding_md(s: &mut String, f: &Finding, evidence: usize, rd: &mut dyn FnMut(&str) -> String) {
    if let Some(c) = &f.context {
        let _ = writeln!(s, "> {}\n", inline(c));
    }
    let _ = writeln!(s, "- **Root cause:** {}", inline(&f.root_cause));
    let _ = writeln!(s, "- **Fix:** {}", inline(&f.fix));
    let _ = writeln!(s, "- **Ranks:** {} · **lines:** {}", ranks(&f.ranks), f.count);
    if !f.refs.is_empty() {
        let refs: Vec<String> = f.refs.iter().map(|r| format!("<{}>", r.replace(['<', '>', ' '], ""))).collect();
        let _ = writeln!(s, "- **Refs:** {}", refs.join(" "));
    }
    let lines: Vec<String> = f
        .evidence
        .iter()
        .take(evidence.max(1))
        .map(|e| {
            let rank = e.rank.map(|r| format!(" [rank {r}]")).unwrap_or_default();
            rd(&format!("{}:{}{}: {}", e.source, e.line, rank, e.text))
        })
        .collect();
    s.push('\n');
    s.push_str(&code_block(&lines));
    s.push('\n');
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn fence_outgrows_backticks() {
        let b = code_block(&["a ``` b".to_string()]);
        assert!(b.starts_with("````text\n"), "{b}");
        assert!(b.ends_with("````\n"));
    }

    #[test]
    fn inline_neutralises_html_and_mentions() {
        let s = inline("<img src=x> @octocat [x](http://e) | y https://bare.example www.evil.example");
        assert!(!s.contains("<img") && !s.contains("@octocat") && s.contains("\\[x\\](") && s.contains("\\|"), "{s}");
        assert!(!s.contains("http://") && !s.contains("https://") && !s.contains("www."), "{s}");
        let s = inline("fixes #12 and GH-7, x-1 stays, WWW.X");
        assert!(!s.contains("#12") && !s.contains("GH-7") && s.contains("x-1") && !s.contains("WWW."), "{s}");
    }
}
