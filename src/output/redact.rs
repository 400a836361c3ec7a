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
    peer_host: Regex,
    slurm_host: Regex,
    slurmstepd: Regex,
    host_port: Regex,
    url_host: Regex,
    ipv4: Regex,
    ipv6: Regex,
    email: Regex,
    home: Regex,
    root_home: Regex,
    token: Regex,
    secret_kv: Regex,
    secret_quoted: Regex,
}

fn res() -> &'static Res {
    static R: OnceLock<Res> = OnceLock::new();
    R.get_or_init(|| Res {
        // `host:pid:tid [dev]` at the start of an NCCL line (after an optional timestamp/rank prefix).
        nccl_host: Regex::new(r"(?:^|[\s\]'\x22`(=])([A-Za-z0-9][A-Za-z0-9_.-]*):\d+:\d+ \[\d+\]").unwrap(),
        // NCCL's socket address forms `name<port>` and `name<ip:port>` (e.g. "Connection closed by
        // remote peer node7<41234>", "... peer node7.cluster<10.1.2.3:45678>").
        addr_host: Regex::new(r"\b([A-Za-z][A-Za-z0-9_-]*(?:\.[A-Za-z0-9_-]+)*)<[0-9A-Za-z_.:%\[\]-]*\d>").unwrap(),
        // hostname=..., host: ..., MASTER_ADDR=..., rdzv_endpoint=... style values.
        kv_host: Regex::new(r"(?i)\b(?:hostname|host|host_name|master_addr|node|nodename|rdzv_endpoint|endpoint)\s*[=:]\s*([A-Za-z][A-Za-z0-9_.-]*)").unwrap(),
        // c10d's peer forms: `[node-1]:29500` and `(node-1, 29500)`.
        peer_host: Regex::new(r"(?:\[([A-Za-z][A-Za-z0-9_.-]*)\]:\d+|\(([A-Za-z][A-Za-z0-9_.-]*), \d+\))").unwrap(),
        // Slurm's own lines: `srun: error: node7: task 2: Exited ...`, `*** STEP 77.0 ON node7 CANCELLED AT ...`.
        slurm_host: Regex::new(r"(?:\bsrun: error: ([A-Za-z][A-Za-z0-9_.-]*): task\b|\*\*\* (?:STEP|JOB) \S+ ON ([A-Za-z][A-Za-z0-9_.-]*) CANCELLED\b)").unwrap(),
        // `slurmstepd-node7: error: ...`: the name is glued to the word, so it is replaced on its own.
        slurmstepd: Regex::new(r"\bslurmstepd-([A-Za-z][A-Za-z0-9_.-]*):").unwrap(),
        // c10d's `failed to connect/validate to host node7.local:29500` (a port makes it a host).
        host_port: Regex::new(r"(?i)\bhost\s+([A-Za-z][A-Za-z0-9_-]*(?:\.[A-Za-z0-9_-]+)*):\d+").unwrap(),
        // `scheme://[user@]host`: a rendezvous (tcp://, c10d://, env://), a dashboard (http://).
        url_host: Regex::new(r"\b[A-Za-z][A-Za-z0-9+.-]*://(?:[^@/\s]+@)?([A-Za-z][A-Za-z0-9_-]*(?:\.[A-Za-z0-9_-]+)*)").unwrap(),
        ipv4: Regex::new(r"\b(?:25[0-5]|2[0-4]\d|1?\d?\d)(?:\.(?:25[0-5]|2[0-4]\d|1?\d?\d)){3}\b").unwrap(),
        // An optional zone (`fe80::1%eth0`) belongs to the address.
        ipv6: Regex::new(r"(?i)(?:\b[0-9a-f]{1,4}(?::[0-9a-f]{0,4}){2,7}\b|::ffff:[0-9a-f.:]+)(?:%[A-Za-z0-9_.-]+)?").unwrap(),
        email: Regex::new(r"\b[A-Za-z0-9._%+-]+@[A-Za-z0-9.-]+\.[A-Za-z]{2,}\b").unwrap(),
        home: Regex::new(r"(/home/|/Users/|/data/home/|/scratch/)([^/\s:'\x22]+)").unwrap(),
        root_home: Regex::new(r"(^|[^A-Za-z0-9_./~-])/root(/|\b)").unwrap(),
        token: Regex::new(r"\b(?:hf_[A-Za-z0-9]{20,}|gh[pousr]_[A-Za-z0-9]{20,}|github_pat_[A-Za-z0-9_]{20,}|sk-[A-Za-z0-9_-]{20,}|xox[abposr]-[A-Za-z0-9-]{10,}|AKIA[0-9A-Z]{16}|eyJ[A-Za-z0-9_-]{8,}\.[A-Za-z0-9_-]{8,}\.[A-Za-z0-9_-]{8,})\b|(?i:\bbearer\s+)[A-Za-z0-9._~+/-]{16,}=*").unwrap(),
        secret_kv: Regex::new(r"(?i)\b([A-Z0-9_]*(?:SECRET|TOKEN|PASSWORD|PASSWD|API_?KEY|ACCESS_?KEY|CREDENTIAL)[A-Z0-9_]*)=(\S+)").unwrap(),
        // JSON / YAML / Python dict forms: "password": "x", 'api_key': 'x', token: x.
        secret_quoted: Regex::new(r#"(?i)(["']?[A-Z0-9_-]*(?:SECRET|TOKEN|PASSWORD|PASSWD|API_?KEY|ACCESS_?KEY|CREDENTIAL)[A-Z0-9_-]*["']?\s*:\s*)(?:"[^"]*"|'[^']*'|[^\s,}'"]+)"#).unwrap(),
    })
}

/// Public sites a log's URL may name (documentation, issues, package indexes): not hosts to hide.
const PUBLIC_DOMAINS: &[&str] = &[
    "github.com",
    "githubusercontent.com",
    "pytorch.org",
    "nvidia.com",
    "python.org",
    "pypi.org",
    "huggingface.co",
    "ray.io",
    "readthedocs.io",
    "schedmd.com",
    "docs.rs",
];

fn is_public(host: &str) -> bool {
    let h = host.to_ascii_lowercase();
    PUBLIC_DOMAINS.iter().any(|d| h == *d || h.strip_suffix(d).is_some_and(|r| r.ends_with('.')))
}

#[derive(Debug, Default, Clone)]
pub struct Redactor {
    /// Every known spelling of a host (short name, FQDN) -> its alias.
    hosts: HashMap<String, String>,
    /// First label of every host learned -> its alias, so that `node7` and `node7.cluster` are one host.
    short_names: HashMap<String, String>,
    host_aliases: usize,
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

    /// Treat `host` as a hostname wherever it appears (e.g. this machine's own name). A short name
    /// and its FQDN get one alias: an intranode peer must not look like a second node.
    pub fn learn_host(&mut self, host: &str) {
        let h = host.trim().trim_end_matches('.');
        if h.len() < 2 || self.hosts.contains_key(h) || h == "localhost" {
            return;
        }
        let short = h.split('.').next().unwrap_or(h);
        // An address's first number is no short name.
        let named = short.len() >= 2 && short.bytes().any(|b| b.is_ascii_alphabetic());
        let alias = match self.short_names.get(short).filter(|_| named) {
            Some(a) => a.clone(),
            None => {
                self.host_aliases += 1;
                format!("host-{}", self.host_aliases)
            }
        };
        if named {
            self.short_names.entry(short.to_string()).or_insert_with(|| alias.clone());
            // The bare short name is replaced wherever it stands only when it looks like a host
            // name (a digit, `-`, `_`): `login.cluster.org` must not hide the word "login".
            if short != h && short.bytes().any(|b| b.is_ascii_digit() || b == b'-' || b == b'_') {
                self.hosts.entry(short.to_string()).or_insert_with(|| alias.clone());
            }
        }
        self.hosts.insert(h.to_string(), alias);
    }

    /// Learn hostnames from a text (also quoted, as in a command line `echo 'node7:1:2 [0] ...'`) before redacting it, so every mention gets the same pseudonym.
    pub fn learn(&mut self, text: &str) {
        let r = res();
        for line in text.lines() {
            for c in r.nccl_host.captures_iter(line) {
                self.learn_host(&c[1]);
            }
            for c in r.addr_host.captures_iter(line) {
                self.learn_host(&c[1]);
            }
            for c in r.peer_host.captures_iter(line) {
                if let Some(h) = c.get(1).or_else(|| c.get(2)) {
                    if !r.ipv4.is_match(h.as_str()) {
                        self.learn_host(h.as_str());
                    }
                }
            }
            let (slurm, stepd, port) =
                (r.slurm_host.captures_iter(line), r.slurmstepd.captures_iter(line), r.host_port.captures_iter(line));
            for c in slurm.chain(stepd).chain(port) {
                if let Some(h) = c.iter().skip(1).flatten().next() {
                    self.learn_host(h.as_str());
                }
            }
            for c in r.url_host.captures_iter(line) {
                if !is_public(&c[1]) && !c[1].starts_with("host-") {
                    self.learn_host(&c[1]);
                }
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
        s = r.secret_quoted.replace_all(&s, "${1}<redacted>").into_owned();
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
            // A full eight-group address is one even when every group is decimal digits.
            // A zone or a link-local prefix makes even a short form (`fe80::1`) an address.
            let surely = m.contains('%') || m.to_ascii_lowercase().starts_with("fe80:");
            if surely {
                pseudonym(&mut self.ips, m, "ip6")
            } else if m == "::1"
                || (colons < 3 && !m.starts_with("::ffff"))
                || (!has_hex_letter && !m.contains("::") && colons < 7)
            {
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
        s = r.root_home.replace_all(&s, "${1}~$2").into_owned();
        if !self.hosts.is_empty() {
            let hosts = &self.hosts;
            s = r
                .slurmstepd
                .replace_all(&s, |c: &regex::Captures| match hosts.get(&c[1]) {
                    Some(a) => format!("slurmstepd-{a}:"),
                    None => c[0].to_string(),
                })
                .into_owned();
            s = replace_hosts(&s, &self.hosts);
            // Names with characters outside a hostname's (given to learn_host): longest first.
            let mut odd: Vec<(&String, &String)> = self.hosts.iter().filter(|(h, _)| !h.bytes().all(is_word)).collect();
            odd.sort_by(|a, b| b.0.len().cmp(&a.0.len()).then_with(|| a.0.cmp(b.0)));
            for (h, p) in odd {
                s = replace_word(&s, h, p);
            }
        }
        s
    }
}

fn is_word(b: u8) -> bool {
    b.is_ascii_alphanumeric() || b == b'-' || b == b'_' || b == b'.'
}

/// Every known host in one pass, whole words only: in each run of hostname characters, the longest
/// prefix that is a known host and ends at the run's end or before a `.` (so `node7.` and
/// `node7.cluster` both lose `node7` unless `node7.cluster` is itself known). One pass keeps this
/// linear in the text however many hosts a hostile log made us learn.
fn replace_hosts(s: &str, hosts: &HashMap<String, String>) -> String {
    let b = s.as_bytes();
    let mut out = String::with_capacity(s.len());
    let (mut i, mut last) = (0, 0);
    while i < b.len() {
        if !is_word(b[i]) {
            i += 1;
            continue;
        }
        let start = i;
        while i < b.len() && is_word(b[i]) {
            i += 1;
        }
        // Run boundaries are ASCII bytes, so these slices are on char boundaries.
        let run = &s[start..i];
        let mut end = run.len();
        loop {
            if let Some(p) = hosts.get(&run[..end]) {
                out.push_str(&s[last..start]);
                out.push_str(p);
                last = start + end;
                break;
            }
            match run[..end].rfind('.') {
                Some(d) if d > 0 => end = d,
                _ => break,
            }
        }
    }
    out.push_str(&s[last..]);
    out
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
    fn many_hosts_one_pass() {
        let mut r = Redactor::new();
        let line: String = (0..20_000).map(|i| format!("n{i}<1> ")).collect();
        let s = r.redact(&line);
        assert!(!s.contains("n19999<"), "{}", &s[..200]);
        assert!(s.contains("host-20000<1>"));
        // Longest known name wins, a shorter one still applies before a dot.
        let mut r = Redactor::new();
        r.learn_host("node7");
        r.learn_host("node7.cluster");
        assert_eq!(r.redact("node7.cluster node7.other node7 xnode7"), "host-1 host-1.other host-1 xnode7");
    }

    #[test]
    fn socket_addresses_scratch_root_and_zoned_ipv6() {
        let mut r = Redactor::new();
        let s = r.redact(
            "NCCL WARN Net : Connection closed by remote peer gpu7.cluster.example<10.1.2.3:45678>\n\
             later gpu7.cluster.example again; cwd /scratch/bob/run and /root/.cache/x.py; \
             bootstrap on fe80::1%eth0 and fe80::a00:27ff:fe4e:66a1%ib0; c10d::add and std::abs stay",
        );
        for leak in ["gpu7", "10.1.2.3", "bob", "/root/", "fe80::1", "%eth0", "fe4e:66a1"] {
            assert!(!s.contains(leak), "{leak} in {s}");
        }
        assert!(s.contains("host-1<ip-1:45678>"), "{s}");
        assert!(s.contains("/scratch/user-1/run") && s.contains("~/.cache/x.py"), "{s}");
        assert!(s.contains("c10d::add and std::abs stay"), "{s}");
    }

    /// Every form a host takes in a job's log (issue 28): one alias per host, short name and FQDN
    /// alike, and no trace of any name left.
    #[test]
    fn every_host_form_gets_one_alias_per_host() {
        let doc = "dgx-b200-043:1139:1151 [0] misc/socket.cc:50 NCCL WARN socketProgress: Connection closed by remote peer dgx-b200-044.cluster.example.com<10.1.2.4:41234>\n\
                   srun: error: dgx-b200-043: task 2: Exited with exit code 1\n\
                   slurmstepd-dgx-b200-044: error: *** STEP 77.0 ON dgx-b200-044 CANCELLED AT 2026-11-29T12:00:00 ***\n\
                   [W socket.cpp:752] The TCP client failed to connect/validate to host jdoe-laptop.local:29500\n\
                   rendezvous at c10d://dgx-b200-043.cluster.example.com:29400, dashboard http://jdoe-laptop:8265/#/jobs\n\
                   see https://github.com/pytorch/pytorch/issues/1 and https://docs.pytorch.org/docs\n";
        let mut r = Redactor::new();
        let s = r.redact(doc);
        for leak in ["dgx", "b200", "jdoe", "laptop", "cluster.example", "example.com", ".local", "10.1.2.4"] {
            assert!(!s.contains(leak), "{leak} left in:\n{s}");
        }
        let aliases: std::collections::BTreeSet<&str> =
            s.split(|c: char| !c.is_ascii_alphanumeric() && c != '-').filter(|w| w.starts_with("host-")).collect();
        assert_eq!(aliases.len(), 3, "three hosts, three aliases: {aliases:?}\n{s}");
        // dgx-b200-043 in the prefix, srun's line and the URL's FQDN: one alias.
        let line = |i: usize| s.lines().nth(i).unwrap();
        let first = line(0).split(':').next().unwrap();
        assert!(
            line(1).contains(&format!("error: {first}: task")) && line(4).contains(&format!("c10d://{first}:")),
            "{s}"
        );
        assert!(
            line(5).contains("github.com/pytorch") && line(5).contains("docs.pytorch.org"),
            "public sites stay: {s}"
        );
        // A plain word as a short name is not hidden everywhere; its FQDN is.
        let mut r = Redactor::new();
        assert_eq!(r.redact("host login.cluster.org:22 refused; login failed"), "host host-1:22 refused; login failed");
    }

    #[test]
    fn host_not_replaced_inside_words() {
        let mut r = Redactor::new();
        r.learn_host("vm");
        assert_eq!(r.redact("vm:1:2 [0] avm vm."), "host-1:1:2 [0] avm host-1.");
    }
}
