//! The Markdown pieces every writer uses, written once: inline escaping, code span, code block,
//! table, heading, and [`Md`], which puts text a log, a command or a machine gave us through the
//! document's one redactor before escaping it. Everything meant for a GitHub issue goes through
//! here, so a log cannot inject HTML, links, images or @mentions, and a host keeps one pseudonym
//! in the whole document.

use super::redact::Redactor;

/// Escape text for a Markdown table cell or a line of prose: no HTML, no mentions, no pipes, no
/// links or issue references (GitHub also links bare `http://...`, `www....`, `#123` and `GH-123`;
/// a zero-width space breaks each of them).
pub(crate) fn inline(s: &str) -> String {
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
            // `>` opens nothing mid-line (only `<` starts HTML); at the start it would quote.
            '>' if !out.is_empty() => out.push('>'),
            '>' => out.push_str("&gt;"),
            '&' => out.push_str("&amp;"),
            '@' => out.push_str("@\u{200b}"),
            // Intraword `_` is never emphasis in GitHub's Markdown: NCCL_DEBUG stays readable.
            '_' if out.chars().last().is_some_and(char::is_alphanumeric)
                && chars.peek().is_some_and(|c| c.is_alphanumeric()) =>
            {
                out.push('_')
            }
            // `#` starts a heading only at the start of a line.
            '#' if !out.is_empty() => out.push('#'),
            '[' | ']' | '`' | '*' | '_' | '#' | '!' | '\\' => {
                out.push('\\');
                out.push(c);
            }
            '\n' | '\r' => out.push(' '),
            _ => out.push(c),
        }
    }
    out
}

/// The project's own Markdown (rule prose: root cause, fix) on one line: code spans and emphasis
/// render as written; only `<` is escaped outside code spans, so "NCCL <2.23.4" is not HTML.
pub(crate) fn prose(s: &str) -> String {
    let mut out = String::with_capacity(s.len());
    let mut fence: Option<usize> = None;
    let b: Vec<char> = s.chars().collect();
    let mut i = 0;
    while i < b.len() {
        let c = b[i];
        if c == '`' {
            let n = b[i..].iter().take_while(|&&c| c == '`').count();
            match fence {
                Some(f) if f == n => fence = None,
                None => fence = Some(n),
                _ => {}
            }
            out.extend(&b[i..i + n]);
            i += n;
            continue;
        }
        match c {
            '\n' | '\r' => out.push(' '),
            '<' if fence.is_none() => out.push_str("&lt;"),
            _ => out.push(c),
        }
        i += 1;
    }
    out
}

/// The longest run of backticks in `s`.
fn longest_backtick_run(s: &str) -> usize {
    let (mut best, mut run) = (0, 0);
    for c in s.chars() {
        run = if c == '`' { run + 1 } else { 0 };
        best = best.max(run);
    }
    best
}

/// A code span (rendered literally: no HTML, links or mentions) whose fence the content cannot
/// close; one line. In a table cell a `|` still ends the cell, so it is escaped there too.
pub(crate) fn code_span(s: &str) -> String {
    let s = s.replace(['\n', '\r'], " ").replace('|', "\\|");
    let fence = "`".repeat(longest_backtick_run(&s) + 1);
    // A space on each side keeps a leading or trailing backtick off the fence.
    let pad = if s.starts_with('`') || s.ends_with('`') { " " } else { "" };
    format!("{fence}{pad}{s}{pad}{fence}")
}

/// A fenced code block whose fence cannot be closed by the content.
pub(crate) fn code_block(lines: &[String]) -> String {
    let longest = lines.iter().map(|l| longest_backtick_run(l)).max().unwrap_or(0);
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

/// A table of cells that are Markdown already (escape them with [`inline`] or [`Md::text`]).
pub(crate) fn table(header: &[&str], rows: &[Vec<String>]) -> String {
    let mut s = format!("| {} |\n|{}\n", header.join(" | "), " --- |".repeat(header.len()));
    for r in rows {
        s.push_str("| ");
        s.push_str(&r.join(" | "));
        s.push_str(" |\n");
    }
    s
}

/// `## title` at `level` (1 to 6); a document embedded in another starts one level deeper.
pub(crate) fn heading(level: usize, title: &str) -> String {
    format!("{} {title}\n", "#".repeat(level.clamp(1, 6)))
}

/// A document being written: its one redactor (none with `--no-redact`).
pub(crate) struct Md<'r> {
    red: Option<&'r mut Redactor>,
}

impl<'r> Md<'r> {
    pub(crate) fn new(red: Option<&'r mut Redactor>) -> Md<'r> {
        Md { red }
    }

    /// Learn the hostnames in `text` before anything is written, so a host is masked even where it
    /// appears before the line that reveals it as one.
    pub(crate) fn learn(&mut self, text: &str) {
        if let Some(r) = self.red.as_deref_mut() {
            r.learn(text);
        }
    }

    /// Foreign text, redacted, not yet escaped (for a code block or span).
    pub(crate) fn raw(&mut self, s: &str) -> String {
        match self.red.as_deref_mut() {
            Some(r) => r.redact(s),
            None => s.to_string(),
        }
    }

    /// Foreign text as prose or a table cell: redacted, then escaped.
    pub(crate) fn text(&mut self, s: &str) -> String {
        inline(&self.raw(s))
    }

    /// Foreign text as a code span: redacted, shown literally.
    pub(crate) fn code(&mut self, s: &str) -> String {
        code_span(&self.raw(s))
    }

    /// Foreign lines as a code block: redacted, shown literally.
    pub(crate) fn block(&mut self, lines: &[String]) -> String {
        let lines: Vec<String> = lines.iter().map(|l| self.raw(l)).collect();
        code_block(&lines)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn fence_outgrows_backticks() {
        let b = code_block(&["a ``` b".to_string()]);
        assert!(b.starts_with("````text\n"), "{b}");
        assert!(b.ends_with("````\n"));
        assert_eq!(code_span("a `b` c"), "``a `b` c``");
        assert_eq!(code_span("`x"), "`` `x ``");
        assert_eq!(code_span("a|b"), "`a\\|b`");
    }

    #[test]
    fn inline_neutralises_html_and_mentions() {
        let s = inline("<img src=x> @octocat [x](http://e) | y https://bare.example www.evil.example");
        assert!(!s.contains("<img") && !s.contains("@octocat") && s.contains("\\[x\\](") && s.contains("\\|"), "{s}");
        assert!(!s.contains("http://") && !s.contains("https://") && !s.contains("www."), "{s}");
        let s = inline("fixes #12 and GH-7, x-1 stays, WWW.X");
        assert!(!s.contains("#12") && !s.contains("GH-7") && s.contains("x-1") && !s.contains("WWW."), "{s}");
        // A backslash cannot undo the escape that follows it.
        assert_eq!(inline("\\<b>"), "\\\\&lt;b>");
    }

    #[test]
    fn prose_keeps_markdown_and_stops_html() {
        assert_eq!(prose("Call `a<b>` **now**, NCCL <2.23\nok"), "Call `a<b>` **now**, NCCL &lt;2.23 ok");
    }

    #[test]
    fn md_redacts_before_escaping() {
        let mut red = Redactor::new();
        let mut md = Md::new(Some(&mut red));
        // The host is only recognisable as one in its raw form (after a backtick it would not be).
        assert_eq!(md.code("node7:1:2 [0] x"), "`host-1:1:2 [0] x`");
        assert_eq!(md.text("peer node7<1>"), "peer host-1&lt;1>");
        let mut keep = Md::new(None);
        assert_eq!(keep.text("_a node7_a # #1"), "\\_a node7_a # \\#\u{200b}1");
    }
}
