//! Redaction for anything meant to be pasted publicly: hostnames, IPv4/IPv6 addresses, e-mail
//! addresses, home paths and token-like secrets get stable pseudonyms (host-1, ip-1, ...), so the
//! cross-rank structure of a log survives while the identities do not.

use std::collections::HashMap;
use std::sync::OnceLock;

use regex::Regex;

struct Res {
    nccl_host: Regex,
    kv_host: Regex,
    addr_host: Regex,
    ipv4: Regex,
    ipv6: Regex,
    email: Regex,
    home: Regex,
    token: Regex,
    secret_kv: Regex,
}

fn res() -> &'static Res {
    static R: OnceLock<Res> = OnceLock::new();
    R.get_or_init(|| Res {
        // `host:pid:tid [dev]` at the start of an NCCL line (after an optional timestamp/rank prefix).
        nccl_host: Regex::new(r"(?:^|[\s\]])([A-Za-z0-9][A-Za-z0-9_.-]*):\d+:\d+ \[\d+\]").unwrap(),
        // NCCL's socket address format `name<port>` (e.g. "Connection closed by remote peer node7<41234>").
        addr_host: Regex::new(r"\b([A-Za-z][A-Za-z0-9_-]*(?:\.[A-Za-z0-9_-]+)*)<\d+>").unwrap(),
        // hostname=..., host: ..., MASTER_ADDR=..., "on host X" and "Bootstrap : Using eth0:..." style values.
        kv_host: Regex::new(r"(?i)\b(?:hostname|host|master_addr|node|nodename)\s*[=:]\s*([A-Za-z][A-Za-z0-9_.-]*)").unwrap(),
        ipv4: Regex::new(r"\b(?:25[0-5]|2[0-4]\d|1?\d?\d)(?:\.(?:25[0-5]|2[0-4]\d|1?\d?\d)){3}\b").unwrap(),
        ipv6: Regex::new(r"(?i)(?:\b[0-9a-f]{1,4}(?::[0-9a-f]{0,4}){2,7}\b|::ffff:[0-9a-f.:]+)").unwrap(),
        email: Regex::new(r"\b[A-Za-z0-9._%+-]+@[A-Za-z0-9.-]+\.[A-Za-z]{2,}\b").unwrap(),
        home: Regex::new(r"(/home/|/Users/|/data/home/)([^/\s:'\x22]+)").unwrap(),
        token: Regex::new(r"\b(?:hf_[A-Za-z0-9]{20,}|gh[pousr]_[A-Za-z0-9]{20,}|github_pat_[A-Za-z0-9_]{20,}|sk-[A-Za-z0-9_-]{20,}|xox[abposr]-[A-Za-z0-9-]{10,}|AKIA[0-9A-Z]{16})\b").unwrap(),
        secret_kv: Regex::new(r"(?i)\b([A-Z0-9_]*(?:SECRET|TOKEN|PASSWORD|PASSWD|API_?KEY|ACCESS_?KEY|CREDENTIAL)[A-Z0-9_]*)=(\S+)").unwrap(),
    })
}

#[derive(Debug, Default, Clone)]
pub struct Redactor {
    hosts: HashMap<String, String>,
    ips: HashMap<String, String>,
    users: HashMap<String, String>,
    emails: HashMap<String, String>,
}

fn pseudonym(map: &mut HashMap<String, String>, key: &str, prefix: &str) -> String {
    let n = map.len() + 1;
    map.entry(key.to_string()).or_insert_with(|| format!("{prefix}-{n}")).clone()
}

impl Redactor {
    pub fn new() -> Redactor {
        Redactor::default()
    }

    /// Treat `host` as a hostname wherever it appears (e.g. this machine's own name).
    pub fn learn_host(&mut self, host: &str) {
        let h = host.trim();
        if h.len() >= 2 && !self.hosts.contains_key(h) && h != "localhost" {
            pseudonym(&mut self.hosts, h, "host");
        }
    }

    /// Learn hostnames from a text before redacting it, so every mention gets the same pseudonym.
    pub fn learn(&mut self, text: &str) {
        let r = res();
        for line in text.lines() {
            for c in r.nccl_host.captures_iter(line) {
                self.learn_host(&c[1]);
            }
            for c in r.addr_host.captures_iter(line) {
                self.learn_host(&c[1]);
            }
            for c in r.kv_host.captures_iter(line) {
                let v = &c[1];
                if !r.ipv4.is_match(v) && v.len() > 2 && !v.starts_with("host-") {
                    self.learn_host(v);
                }
            }
        }
    }

    pub fn redact(&mut self, text: &str) -> String {
        self.learn(text);
        let r = res();
        let mut s = r.token.replace_all(text, "<token>").into_owned();
        s = r.secret_kv.replace_all(&s, "$1=<redacted>").into_owned();
        s = replace_with(&r.email, &s, |m| pseudonym(&mut self.emails, m, "email"));
        s = replace_with(&r.ipv4, &s, |m| {
            if m.starts_with("127.") || m == "0.0.0.0" {
                m.to_string()
            } else {
                pseudonym(&mut self.ips, m, "ip")
            }
        });
        s = replace_with(&r.ipv6, &s, |m| {
            // Keep things that only look like IPv6 (times such as 13:54:38, ::1 loopback).
            let colons = m.matches(':').count();
            let has_hex_letter = m.chars().any(|c| c.is_ascii_alphabetic());
            if m == "::1" || (colons < 3 && !m.starts_with("::ffff")) || (!has_hex_letter && !m.contains("::")) {
                m.to_string()
            } else {
                pseudonym(&mut self.ips, m, "ip6")
            }
        });
        let users = &mut self.users;
        s = r
            .home
            .replace_all(&s, |c: &regex::Captures| format!("{}{}", &c[1], pseudonym(users, &c[2], "user")))
            .into_owned();
        if !self.hosts.is_empty() {
            // Longest names first, whole words only.
            let mut hosts: Vec<(&String, &String)> = self.hosts.iter().collect();
            hosts.sort_by(|a, b| b.0.len().cmp(&a.0.len()).then_with(|| a.0.cmp(b.0)));
            for (h, p) in hosts {
                s = replace_word(&s, h, p);
            }
        }
        s
    }
}

fn replace_with(re: &Regex, s: &str, mut f: impl FnMut(&str) -> String) -> String {
    re.replace_all(s, |c: &regex::Captures| f(c.get(0).unwrap().as_str())).into_owned()
}

fn replace_word(s: &str, word: &str, with: &str) -> String {
    let mut out = String::with_capacity(s.len());
    let mut rest = s;
    let is_word = |c: char| c.is_ascii_alphanumeric() || c == '-' || c == '_' || c == '.';
    while let Some(i) = rest.find(word) {
        let before = if i > 0 { rest[..i].chars().last() } else { out.chars().last() };
        let after = rest[i + word.len()..].chars().next();
        out.push_str(&rest[..i]);
        let boundary = !before.is_some_and(is_word) && !after.is_some_and(|c| is_word(c) && c != '.');
        out.push_str(if boundary { with } else { word });
        rest = &rest[i + word.len()..];
    }
    out.push_str(rest);
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn hosts_ips_homes_emails_tokens() {
        let mut r = Redactor::new();
        let t = "gpu-node-17:2374:2994 [0] NCCL INFO Bootstrap: Using eth0:10.1.2.3<0>\n\
                 other gpu-node-17 line from /home/alice/run.py by alice@example.com HF_TOKEN=hf_abcdefghijklmnopqrstuvwxyz\n\
                 addr=[::ffff:10.1.2.3]:29500 and fe80::1ff:fe23:4567:890a";
        let s = r.redact(t);
        assert!(!s.contains("gpu-node-17"), "{s}");
        assert!(!s.contains("10.1.2.3"), "{s}");
        assert!(!s.contains("alice"), "{s}");
        assert!(!s.contains("hf_abc"), "{s}");
        assert!(!s.contains("fe80::1ff"), "{s}");
        assert!(s.contains("host-1:2374:2994"), "{s}");
        assert!(s.contains("/home/user-1/run.py"), "{s}");
    }

    #[test]
    fn stable_pseudonyms_and_times_kept() {
        let mut r = Redactor::new();
        let a = r.redact("hostA:1:2 [0] x 192.0.2.7");
        let b = r.redact("[rank1]:[W1129 13:54:38.758 x.cpp:1] hostA 192.0.2.7");
        assert!(a.contains("host-1") && b.contains("host-1"), "{a} {b}");
        assert!(a.contains("ip-1") && b.contains("ip-1"));
        assert!(b.contains("13:54:38.758"), "{b}");
    }

    #[test]
    fn host_not_replaced_inside_words() {
        let mut r = Redactor::new();
        r.learn_host("vm");
        assert_eq!(r.redact("vm:1:2 [0] avm vm."), "host-1:1:2 [0] avm host-1.");
    }
}
