//! Reading a Python file as CPython does: UTF-8 unless a PEP 263 declaration (`# -*- coding: latin-1 -*-`
//! in the first two lines) names another encoding. The single-byte encodings scripts use are
//! decoded here; any other declared encoding is an error of that file, named.

/// A file's text, or what is wrong with its bytes.
pub fn decode(bytes: &[u8]) -> Result<String, Decode> {
    let bytes = bytes.strip_prefix(b"\xef\xbb\xbf").unwrap_or(bytes);
    match declared(bytes) {
        None => utf8(bytes),
        Some((enc, line)) => {
            let norm = enc.to_ascii_lowercase().replace('_', "-");
            let norm = norm.as_str();
            if norm == "utf-8" || norm == "utf8" || norm.starts_with("utf-8-") || norm == "ascii" || norm == "us-ascii"
            {
                utf8(bytes)
            } else if matches!(
                norm,
                "latin-1" | "latin1" | "l1" | "iso-8859-1" | "iso8859-1" | "iso-latin-1" | "8859" | "cp819" | "latin"
            ) {
                Ok(bytes.iter().map(|&b| b as char).collect())
            } else if matches!(norm, "cp1252" | "windows-1252") {
                Ok(bytes.iter().map(|&b| cp1252(b)).collect())
            } else if matches!(norm, "iso-8859-15" | "iso8859-15" | "latin-9" | "latin9" | "l9") {
                Ok(bytes.iter().map(|&b| latin9(b)).collect())
            } else {
                Err(Decode { line, column: 1, text: format!("declares the encoding `{enc}`, which lint cannot decode (it reads UTF-8, latin-1, cp1252 and iso-8859-15)") })
            }
        }
    }
}

#[derive(Debug)]
pub struct Decode {
    pub line: u64,
    pub column: u64,
    pub text: String,
}

fn utf8(bytes: &[u8]) -> Result<String, Decode> {
    match std::str::from_utf8(bytes) {
        Ok(s) => Ok(s.to_string()),
        Err(e) => {
            let valid = &bytes[..e.valid_up_to()];
            let line = valid.iter().filter(|&&b| b == b'\n').count() as u64 + 1;
            let column = valid.iter().rev().take_while(|&&b| b != b'\n').count() as u64 + 1;
            Err(Decode { line, column, text: format!("not UTF-8 text (byte {} is invalid)", valid.len()) })
        }
    }
}

/// PEP 263: `coding[:=]\s*([-\w.]+)` in a comment on line 1 or 2 (line 2 only if line 1 is a comment
/// or blank).
fn declared(bytes: &[u8]) -> Option<(String, u64)> {
    let mut lines = bytes.split(|&b| b == b'\n');
    for n in 1..=2u64 {
        let line = lines.next()?;
        let l = String::from_utf8_lossy(line);
        let t = l.trim_start();
        if !t.starts_with('#') {
            if n == 1 && t.trim().is_empty() {
                continue;
            }
            return None;
        }
        if let Some(i) = t.find("coding") {
            let rest = &t[i + 6..];
            if let Some(r) = rest.strip_prefix(':').or_else(|| rest.strip_prefix('=')) {
                let enc: String =
                    r.trim_start().chars().take_while(|c| c.is_alphanumeric() || "-_.".contains(*c)).collect();
                if !enc.is_empty() {
                    return Some((enc, n));
                }
            }
        }
    }
    None
}

const CP1252_HIGH: [char; 32] = [
    '\u{20AC}', '\u{81}', '\u{201A}', '\u{0192}', '\u{201E}', '\u{2026}', '\u{2020}', '\u{2021}', '\u{02C6}',
    '\u{2030}', '\u{0160}', '\u{2039}', '\u{0152}', '\u{8D}', '\u{017D}', '\u{8F}', '\u{90}', '\u{2018}', '\u{2019}',
    '\u{201C}', '\u{201D}', '\u{2022}', '\u{2013}', '\u{2014}', '\u{02DC}', '\u{2122}', '\u{0161}', '\u{203A}',
    '\u{0153}', '\u{9D}', '\u{017E}', '\u{0178}',
];

fn cp1252(b: u8) -> char {
    if (0x80..0xA0).contains(&b) {
        CP1252_HIGH[(b - 0x80) as usize]
    } else {
        b as char
    }
}

fn latin9(b: u8) -> char {
    match b {
        0xA4 => '\u{20AC}',
        0xA6 => '\u{0160}',
        0xA8 => '\u{0161}',
        0xB4 => '\u{017D}',
        0xB8 => '\u{017E}',
        0xBC => '\u{0152}',
        0xBD => '\u{0153}',
        0xBE => '\u{0178}',
        _ => b as char,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_coding_declaration_decides_the_encoding() {
        let latin = b"# -*- coding: latin-1 -*-\nname = '\xe9t\xe9'\n";
        assert_eq!(decode(latin).unwrap(), "# -*- coding: latin-1 -*-\nname = '\u{e9}t\u{e9}'\n");
        let second = b"#!/usr/bin/env python\n# vim: set fileencoding=cp1252 :\nq = '\x93'\n";
        assert!(decode(second).unwrap().contains('\u{201C}'));
        // Without a declaration the same bytes are not UTF-8: an error at the byte.
        let e = decode(b"x = 1\nname = '\xe9'\n").unwrap_err();
        assert_eq!((e.line, e.column), (2, 9));
        // A declaration on line 3 does not count; one naming an encoding we lack is named.
        assert!(decode(b"a = 1\nb = 2\n# coding: latin-1\nc = '\xe9'\n").is_err());
        let e = decode(b"# coding: shift_jis\nx = 1\n").unwrap_err();
        assert!(e.text.contains("shift_jis"), "{}", e.text);
        assert_eq!(decode(b"\xef\xbb\xbfx = 1\n").unwrap(), "x = 1\n");
    }
}
