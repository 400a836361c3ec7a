//! The pieces of the CI formats every writer uses: GitHub Actions workflow commands
//! (`::error file=F,line=N,title=T::message`, escaped as the runner reads them back) and XML text.

/// One workflow command: `level` is `error`, `warning` or `notice`; `at` the file and line it
/// annotates, if any. The runner shows it in the job's log and, for a file of the repository, on
/// that line of the pull request.
pub fn command(level: &str, at: Option<(&str, u64)>, title: &str, message: &str) -> String {
    let mut props = Vec::new();
    if let Some((file, line)) = at {
        props.push(format!("file={}", property(file)));
        props.push(format!("line={line}"));
    }
    props.push(format!("title={}", property(title)));
    format!("::{level} {}::{}\n", props.join(","), data(message))
}

/// A command's message: `%`, CR and LF encoded (GitHub's runner decodes them).
fn data(s: &str) -> String {
    s.replace('%', "%25").replace('\r', "%0D").replace('\n', "%0A")
}

/// A property's value: the message's escapes plus `:` and `,`, which end a value.
fn property(s: &str) -> String {
    data(s).replace(':', "%3A").replace(',', "%2C")
}

/// Text for XML content and attribute values; characters XML 1.0 cannot hold are dropped.
pub fn xml(s: &str) -> String {
    let mut out = String::with_capacity(s.len());
    for c in s.chars() {
        match c {
            '&' => out.push_str("&amp;"),
            '<' => out.push_str("&lt;"),
            '>' => out.push_str("&gt;"),
            '"' => out.push_str("&quot;"),
            '\'' => out.push_str("&apos;"),
            '\t' | '\n' | '\r' => out.push(c),
            c if (c as u32) < 0x20 || c == '\u{FFFE}' || c == '\u{FFFF}' => {}
            c => out.push(c),
        }
    }
    out
}

#[cfg(test)]
mod tests {
    #[test]
    fn commands_escape_what_would_end_them() {
        let c = super::command("error", Some(("logs/a,b:1.log", 7)), "rule: x", "50% done\nnext");
        assert_eq!(c, "::error file=logs/a%2Cb%3A1.log,line=7,title=rule%3A x::50%25 done%0Anext\n");
        assert_eq!(super::command("notice", None, "t", "m"), "::notice title=t::m\n");
        assert_eq!(super::xml("a<b & \"c\"\u{1}"), "a&lt;b &amp; &quot;c&quot;");
    }
}
