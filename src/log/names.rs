//! Ranks from file and folder names, for logs whose lines carry none (NCCL_DEBUG=WARN writes no
//! init lines). A pure function of every input's name: which rank each one's name implies.
//!
//! What a name can say, in the order tried (the first that answers wins, innermost part first):
//! - a rank word and a number: `rank3.log`, `rank-3.txt`, `rank_3.out`, `x-rank-3.y`, `x.rank3.y`,
//!   `worker3`, `proc3`, `task-3` (a global rank), `local_rank3`, `local-rank-3` (a local one);
//!   in the file name or a folder above it (`rank3/stdout.log`);
//! - a torchrun `--log-dir` tree, `.../attempt_N/<local_rank>/stdout.log`: a local rank (torchrun
//!   numbers the workers of each node from 0, so with several nodes rank 0 is on every node);
//! - a Slurm `--output=...%t...` name: among sibling files (same folder) whose names are identical
//!   but for one number, that number, when the values are distinct small integers (`job-77-0.out`
//!   ... `job-77-3.out`); never the job or array id of Slurm's default `slurm-%j.out` and
//!   `slurm-%A_%a.out`, never a number glued to a word (`r1`, `node3`, `gpu0`: the rank words are
//!   the first case) or after a word that counts something else (`node-3`, `run_2`, `step-5`, ...),
//!   never a date, a time or a version (`nccl-2.21.5.log`);
//! - an NCCL_DEBUG_FILE `%h.%p` name (`nccl.gpu-node-3.98765.log`): the host and pid, which the
//!   engine turns into a rank through the `(host, pid) -> rank` map of the init lines (a name
//!   that only looks like `host.pid` then simply joins nothing).
//!
//! Decided: `gpu0`, `cuda0`, `dev0`, `device0` name a device, not a rank (CUDA_VISIBLE_DEVICES
//! reorders them and one process may drive several); `node3` names a machine. Neither yields
//! anything. Archive members are named `archive.tgz!inner/path.log`; `!` separates parts like `/`.
//!
//! The answer depends only on the set of names, not on their order.

use std::collections::BTreeMap;
use std::sync::LazyLock;

use regex::Regex;

/// Whether a rank read from a name is the job-wide rank or the rank within one node.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum RankKind {
    Global,
    Local,
}

/// What one input's name says about the process that wrote it.
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum NameHint {
    Rank {
        rank: u32,
        kind: RankKind,
    },
    /// An NCCL_DEBUG_FILE `%h.%p` name: join through the init lines' (host, pid) -> rank map.
    HostPid {
        host: String,
        pid: u32,
    },
}

/// Ranks above this are not read from names (a long number is an id, not a rank).
const MAX_RANK: u32 = 1 << 20;
/// Linux's largest pid_max.
const MAX_PID: u32 = 1 << 22;

/// `rank3`, `rank-3`, `local_rank_3`, `worker3`, ...: a word that starts a name part (after a
/// separator or at the start) and its number, which ends the part or meets a separator.
static KEYWORD: LazyLock<Regex> = LazyLock::new(|| {
    Regex::new(r"(?i)(?:^|[^a-z0-9])(local[-_]?rank|rank|worker|proc|task)[-_]?(\d{1,7})(?:$|[^a-z0-9])").unwrap()
});
static ATTEMPT: LazyLock<Regex> = LazyLock::new(|| Regex::new(r"^attempt_\d+$").unwrap());
static HOST_PID: LazyLock<Regex> = LazyLock::new(|| {
    Regex::new(r"^(?:.*[._])?([A-Za-z0-9][A-Za-z0-9-]*)\.(\d{1,7})(?:\.(?:log|txt|out|err))?$").unwrap()
});
/// Spans that hold numbers which are never ranks: dates, times, dotted versions, `v2`.
static MASK: LazyLock<Regex> = LazyLock::new(|| {
    Regex::new(concat!(
        r"(?:19|20)\d\d[-_.]?(?:0[1-9]|1[0-2])[-_.]?(?:0[1-9]|[12]\d|3[01])",
        r"|(?:[01]\d|2[0-3])[-_:](?:[0-5]\d)[-_:](?:[0-5]\d)",
        r"|\d+\.\d+\.\d+",
        r"|(?i:\bv\d+(?:\.\d+)*)",
    ))
    .unwrap()
});
/// A number right after one of these words counts something other than ranks.
const NOT_RANK_WORDS: &[&str] = &[
    "node",
    "host",
    "gpu",
    "cuda",
    "dev",
    "device",
    "run",
    "attempt",
    "try",
    "retry",
    "epoch",
    "step",
    "iter",
    "part",
    "job",
    "array",
    "seed",
    "test",
    "shard",
    "chunk",
    "ckpt",
    "checkpoint",
    "nccl",
    "torch",
    "py",
    "python",
    "cu",
];

/// A name's index and the numbers its file name holds.
type Member = (usize, Vec<u64>);

/// For each of `names` (in their order), the rank or host/pid its name implies, if any.
pub fn ranks_from_names(names: &[&str]) -> Vec<Option<NameHint>> {
    let mut out: Vec<Option<NameHint>> = names.iter().map(|n| direct(n)).collect();
    // Slurm `%t` siblings, among the names nothing else answered for.
    let mut groups: BTreeMap<(&str, String), Vec<Member>> = BTreeMap::new();
    for (i, n) in names.iter().enumerate() {
        if out[i].is_some() {
            continue;
        }
        let (dir, file) = split_last(n);
        if let Some((skeleton, nums)) = template(file) {
            groups.entry((dir, skeleton)).or_default().push((i, nums));
        }
    }
    for ((_, skeleton), members) in &groups {
        if let Some(ranks) = sibling_ranks(skeleton, members) {
            for ((i, _), r) in members.iter().zip(ranks) {
                out[*i] = Some(NameHint::Rank { rank: r, kind: RankKind::Global });
            }
        }
    }
    // `%h.%p` last: a Slurm sibling number reads better than a guess at a host.
    for (i, n) in names.iter().enumerate() {
        if out[i].is_none() {
            out[i] = host_pid(split_last(n).1);
        }
    }
    out
}

/// The parts of a name, innermost last: folders, archive, members.
fn parts(name: &str) -> Vec<&str> {
    name.split(['/', '!']).filter(|p| !p.is_empty()).collect()
}

/// (everything before the last part, the last part).
fn split_last(name: &str) -> (&str, &str) {
    match name.rfind(['/', '!']) {
        Some(i) => (&name[..i], &name[i + 1..]),
        None => ("", name),
    }
}

/// What one name says on its own: a rank word in its innermost part that has one, or a torchrun
/// `attempt_N/<local_rank>/` tree.
fn direct(name: &str) -> Option<NameHint> {
    let parts = parts(name);
    for (k, part) in parts.iter().enumerate().rev() {
        if let Some(c) = KEYWORD.captures(part) {
            let rank: u32 = c[2].parse().ok().filter(|&r| r < MAX_RANK)?;
            let kind = if c[1].to_ascii_lowercase().starts_with("local") { RankKind::Local } else { RankKind::Global };
            return Some(NameHint::Rank { rank, kind });
        }
        // torchrun: attempt_N/<local_rank>/<file>, the number folder right above a file.
        if k + 2 == parts.len() && k > 0 && ATTEMPT.is_match(parts[k - 1]) && part.bytes().all(|b| b.is_ascii_digit()) {
            let rank: u32 = part.parse().ok().filter(|&r| r < MAX_RANK)?;
            return Some(NameHint::Rank { rank, kind: RankKind::Local });
        }
    }
    None
}

/// A file name as a skeleton (its text, with `#` for each number that could be a rank and `~`
/// for each masked span or number that cannot) and the values of the `#` numbers.
fn template(file: &str) -> Option<(String, Vec<u64>)> {
    let masked: Vec<(usize, usize)> = MASK.find_iter(file).map(|m| (m.start(), m.end())).collect();
    let mut skeleton = String::new();
    let mut nums = Vec::new();
    let b = file.as_bytes();
    let mut i = 0;
    while i < b.len() {
        if let Some(&(_, end)) = masked.iter().find(|&&(s, _)| s == i) {
            skeleton.push('~');
            i = end;
            continue;
        }
        if b[i].is_ascii_digit() {
            let start = i;
            while i < b.len() && b[i].is_ascii_digit() {
                i += 1;
            }
            // A number glued to a word (`r1`, `node3`, `x2`) is part of that word; one after a
            // separator is a candidate unless the word before the separator counts something else
            // (`node-3`, `run_2`).
            let before = &file[..start];
            let glued = before.ends_with(|c: char| c.is_ascii_alphabetic());
            let word: String = before
                .strip_suffix(['-', '_', '.'])
                .unwrap_or("")
                .chars()
                .rev()
                .take_while(char::is_ascii_alphabetic)
                .collect::<String>()
                .chars()
                .rev()
                .collect::<String>()
                .to_ascii_lowercase();
            let value = file[start..i].parse::<u64>().ok();
            match value {
                Some(v) if !glued && !NOT_RANK_WORDS.contains(&word.as_str()) => {
                    skeleton.push('#');
                    nums.push(v);
                }
                _ => {
                    // Kept verbatim: two files that differ there are not siblings.
                    skeleton.push_str(&file[start..i]);
                }
            }
            continue;
        }
        let c = file[i..].chars().next()?;
        skeleton.push(c);
        i += c.len_utf8();
    }
    (!nums.is_empty()).then_some((skeleton, nums))
}

/// The ranks of a group of sibling names with one skeleton: the one number that varies, when its
/// values are distinct small integers and the skeleton is not Slurm's default job-id name.
fn sibling_ranks(skeleton: &str, members: &[(usize, Vec<u64>)]) -> Option<Vec<u32>> {
    let n = members.len();
    if n < 2 || matches!(skeleton, "slurm-#.out" | "slurm-#_#.out") {
        return None;
    }
    let width = members[0].1.len();
    let varying: Vec<usize> = (0..width).filter(|&p| members.iter().any(|(_, v)| v[p] != members[0].1[p])).collect();
    let [p] = varying[..] else { return None };
    let mut values: Vec<u64> = members.iter().map(|(_, v)| v[p]).collect();
    let (min, max) = (*values.iter().min()?, *values.iter().max()?);
    values.sort_unstable();
    values.dedup();
    // Small: starting near 0 and not far above the number of files (some ranks' files may be
    // missing); job ids, pids and ports are neither.
    let small = min < n.max(8) as u64 && max < (8 * n).max(64) as u64;
    (values.len() == n && small).then(|| members.iter().map(|(_, v)| v[p] as u32).collect())
}

/// An NCCL_DEBUG_FILE `%h.%p` name: `[prefix.]host.pid[.log]`, the host holding a letter.
fn host_pid(file: &str) -> Option<NameHint> {
    let c = HOST_PID.captures(file)?;
    let host = &c[1];
    let pid: u32 = c[2].parse().ok().filter(|&p| p > 0 && p < MAX_PID)?;
    if !host.bytes().any(|b| b.is_ascii_alphabetic()) || KEYWORD.is_match(file) {
        return None;
    }
    Some(NameHint::HostPid { host: host.to_string(), pid })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn global(rank: u32) -> Option<NameHint> {
        Some(NameHint::Rank { rank, kind: RankKind::Global })
    }

    fn local(rank: u32) -> Option<NameHint> {
        Some(NameHint::Rank { rank, kind: RankKind::Local })
    }

    fn one(name: &str) -> Option<NameHint> {
        ranks_from_names(&[name]).pop().unwrap()
    }

    #[test]
    fn rank_words_in_file_and_folder_names() {
        for (name, want) in [
            ("rank3.log", global(3)),
            ("logs/rank-3.txt", global(3)),
            ("rank_3.out", global(3)),
            ("train-rank-3.stderr", global(3)),
            ("train.rank3.log", global(3)),
            ("RANK12.log", global(12)),
            ("rank007.log", global(7)),
            ("worker3.log", global(3)),
            ("proc3.txt", global(3)),
            ("task-3.log", global(3)),
            ("local_rank3.log", local(3)),
            ("out/local-rank-1.log", local(1)),
            ("job/rank5/stdout.log", global(5)),
            // The file's own rank word wins over a folder's.
            ("rank5/rank6.log", global(6)),
            ("logs.tgz!run/rank-2.log", global(2)),
        ] {
            assert_eq!(one(name), want, "{name}");
        }
    }

    #[test]
    fn names_that_yield_no_rank() {
        for name in [
            "slurm-1234.out",
            "nccl-2.21.5.log",
            "gpu0.log",
            "cuda1.log",
            "node3.log",
            "ranks8.log",
            "nranks8.log",
            "myrank3.log",
            "rank3a.log",
            "train-2024-05-01.log",
            "20240501_123045.log",
            "stdout.log",
            "rank99999999.log",
            "3.log",
            "log.txt",
            // Ray's per-worker logs: a worker id and a pid, no rank.
            "ray/session_latest/logs/worker-4d2f0c9e81b7a6f5e4d3c2b1a0f9e8d7c6b5a4f3e2d1c0b9a8f7e6d5-01000000-31337.out",
        ] {
            assert_eq!(one(name), None, "{name}");
        }
    }

    #[test]
    fn torchrun_log_dir_trees_give_local_ranks() {
        let names = [
            "logs/none_abc123/attempt_0/0/stdout.log",
            "logs/none_abc123/attempt_0/0/stderr.log",
            "logs/none_abc123/attempt_0/1/stderr.log",
            "job.tgz!logs/none_x/attempt_2/7/error.json",
            "logs/attempt_0/3",
        ];
        assert_eq!(ranks_from_names(&names), vec![local(0), local(0), local(1), local(7), None]);
    }

    #[test]
    fn slurm_task_numbers_among_siblings() {
        let names = ["out/job-1234-0.out", "out/job-1234-1.out", "out/job-1234-2.out", "out/job-1234-3.out"];
        assert_eq!(ranks_from_names(&names), vec![global(0), global(1), global(2), global(3)]);
        // Some ranks' files only: still small numbers starting near 0.
        assert_eq!(ranks_from_names(&["j-9-0.out", "j-9-5.out", "j-9-13.out"]), vec![global(0), global(5), global(13)]);
        assert_eq!(ranks_from_names(&["out.1234.0.log", "out.1234.1.log"]), vec![global(0), global(1)]);
        assert_eq!(ranks_from_names(&["0.log", "1.log", "2.log"]), vec![global(0), global(1), global(2)]);
        // The same stem in different folders or with different extensions is not a sibling.
        assert_eq!(ranks_from_names(&["a/job-3.out", "b/job-4.out"]), vec![None, None]);
        assert_eq!(ranks_from_names(&["job-7-3.out", "job-7-4.err"]), vec![None, None]);
        // A lone file has no siblings to compare with.
        assert_eq!(one("job-1234-3.out"), None);
    }

    #[test]
    fn sibling_numbers_that_are_not_ranks() {
        // Slurm's default names: job ids and array indices.
        assert_eq!(ranks_from_names(&["slurm-12.out", "slurm-13.out"]), vec![None, None]);
        assert_eq!(ranks_from_names(&["slurm-77_0.out", "slurm-77_1.out"]), vec![None, None]);
        // Job ids, pids: large numbers.
        assert_eq!(ranks_from_names(&["job-1234.log", "job-1240.log"]), vec![None, None]);
        assert_eq!(ranks_from_names(&["train-31337.log", "train-31338.log"]), vec![None, None]);
        // Numbers glued to a word, or after words that count other things.
        assert_eq!(ranks_from_names(&["r1.log", "r2.log"]), vec![None, None]);
        assert_eq!(ranks_from_names(&["node-0.log", "node-1.log"]), vec![None, None]);
        assert_eq!(ranks_from_names(&["run_1.log", "run_2.log"]), vec![None, None]);
        assert_eq!(ranks_from_names(&["node0.log", "node1.log"]), vec![None, None]);
        assert_eq!(ranks_from_names(&["gpu0.log", "gpu1.log"]), vec![None, None]);
        assert_eq!(ranks_from_names(&["run1.log", "run2.log"]), vec![None, None]);
        // Dates, times and versions.
        assert_eq!(ranks_from_names(&["log-2024-05-01.txt", "log-2024-05-02.txt"]), vec![None, None]);
        assert_eq!(ranks_from_names(&["t-10-00-01.log", "t-10-00-02.log"]), vec![None, None]);
        assert_eq!(ranks_from_names(&["nccl-2.21.5.log", "nccl-2.21.6.log"]), vec![None, None]);
        // Two numbers vary: which one is the rank?
        assert_eq!(ranks_from_names(&["n0-p3.log", "n1-p2.log"]), vec![None, None]);
        // The same number twice is not a rank per file.
        assert_eq!(ranks_from_names(&["a-1-x.log", "a-1-x.log"]), vec![None, None]);
    }

    #[test]
    fn nccl_debug_file_host_and_pid() {
        assert_eq!(one("nccl.gpu-node-3.98765.log"), Some(NameHint::HostPid { host: "gpu-node-3".into(), pid: 98765 }));
        assert_eq!(one("/tmp/dbg/h200a.4242"), Some(NameHint::HostPid { host: "h200a".into(), pid: 4242 }));
        assert_eq!(
            one("logs.zip!nccl_debug.worker-a.777.txt"),
            Some(NameHint::HostPid { host: "worker-a".into(), pid: 777 })
        );
        // No letter in the host, pid 0 or past pid_max: not a host/pid name.
        assert_eq!(one("x.10-0-0-1.123"), None);
        assert_eq!(one("host.0"), None);
        assert_eq!(one("host.99999999"), None);
        // Siblings differing in the pid only: large pids are no ranks, each stays a host/pid.
        assert_eq!(
            ranks_from_names(&["nccl.n1.31001.log", "nccl.n1.31002.log"]),
            vec![
                Some(NameHint::HostPid { host: "n1".into(), pid: 31001 }),
                Some(NameHint::HostPid { host: "n1".into(), pid: 31002 })
            ]
        );
    }

    #[test]
    fn archive_members_are_named_like_files() {
        let names = [
            "logs.tgz!job-8-0.out",
            "logs.tgz!job-8-1.out",
            "x.zip!a/attempt_1/2/stdout.log",
            "y.tar!nccl.h9.4321.log",
        ];
        assert_eq!(
            ranks_from_names(&names),
            vec![global(0), global(1), local(2), Some(NameHint::HostPid { host: "h9".into(), pid: 4321 })]
        );
    }

    #[test]
    fn independent_of_the_order_of_the_names() {
        let names = [
            "a/job-5-0.out",
            "a/job-5-1.out",
            "a/job-5-2.out",
            "b/rank4.log",
            "c/attempt_0/1/stderr.log",
            "d/nccl.h1.555.log",
            "e/slurm-99.out",
            "e/slurm-98.out",
        ];
        let want = ranks_from_names(&names);
        let mut idx: Vec<usize> = (0..names.len()).collect();
        // Every rotation and the reverse of each.
        for k in 0..names.len() {
            idx.rotate_left(1);
            for order in [idx.clone(), idx.iter().rev().copied().collect()] {
                let permuted: Vec<&str> = order.iter().map(|&i| names[i]).collect();
                let got = ranks_from_names(&permuted);
                for (j, &i) in order.iter().enumerate() {
                    assert_eq!(got[j], want[i], "rotation {k}, {}", names[i]);
                }
            }
        }
        assert_eq!(want[..5], [global(0), global(1), global(2), global(4), local(1)]);
    }
}
