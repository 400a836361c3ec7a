//! Which inputs are one job. Two logs given together are read as one run only when something ties
//! them; otherwise each is a job of its own, with its own outcome and verdict (a success marker of
//! one run must not make another run's warnings benign).
//!
//! Ties, by name (no reading):
//! - siblings named alike but for numbers (`rank0.log` / `rank1.log`, `pod-0.txt` / `pod-1.txt`,
//!   `job-77-0.out` / `job-77-3.out`), with the two streams of one process alike too
//!   (`stdout.log` / `stderr.log`, `slurm-77.out` / `slurm-77.err`): a launcher's log-dir tree
//!   (`run/attempt_0/3/stderr.log`) is the same shape one folder level down;
//! - members of one archive (what someone packed together);
//! - the files of an `epdoctor repro` cell folder (its `harness.log` or `stacks.log` beside the
//!   ranks' logs, however the launcher named those).
//!
//! Ties, by the first MiB of each input: one Slurm job id, one NCCL communicator id, one
//! (host, pid) in NCCL's line prefix, one torchrun run id (not its default `none`).
//!
//! Standard input cannot be read twice: with it, everything is one job.

use std::collections::HashMap;
use std::sync::LazyLock;

use regex::Regex;

use super::input::{self, Input};

/// How much of each input is read for content ties.
const HEAD_BYTES: u64 = 1 << 20;

/// The jobs among `inputs`: index lists in input order, each job's first input first.
pub fn group(inputs: &[Input]) -> Vec<Vec<usize>> {
    let n = inputs.len();
    if n < 2 || inputs.iter().any(|i| matches!(i, Input::Stdin)) {
        return vec![(0..n).collect()];
    }
    let mut sets = Sets::new(n);
    let names: Vec<String> = inputs.iter().map(Input::name).collect();
    let mut by_key: HashMap<String, usize> = HashMap::new();
    for (i, name) in names.iter().enumerate() {
        sets.tie(&mut by_key, name_key(name), i);
    }
    // A repro cell's folder: everything in it is the cell's one run.
    for (i, name) in names.iter().enumerate() {
        let Some(dir) = cell_dir(name) else { continue };
        for (j, other) in names.iter().enumerate() {
            if other.starts_with(dir) && other[dir.len()..].starts_with(['/', '\\']) {
                sets.join(i, j);
            }
        }
    }
    if sets.count() > 1 {
        let mut owner: HashMap<String, usize> = HashMap::new();
        for (i, input) in inputs.iter().enumerate() {
            for t in head_ties(input) {
                sets.tie(&mut owner, t, i);
            }
        }
    }
    let mut jobs: Vec<Vec<usize>> = Vec::new();
    let mut at: HashMap<usize, usize> = HashMap::new();
    for i in 0..n {
        let root = sets.root(i);
        let k = *at.entry(root).or_insert_with(|| {
            jobs.push(Vec::new());
            jobs.len() - 1
        });
        jobs[k].push(i);
    }
    jobs
}

/// The folder of a repro cell file (`.../cells/001-x/harness.log` -> `.../cells/001-x`).
fn cell_dir(name: &str) -> Option<&str> {
    let (dir, file) = name.rsplit_once(['/', '\\'])?;
    [crate::model::run::HARNESS_FILE, crate::model::run::STACKS_LOG].contains(&file).then_some(dir)
}

/// What an input's name says about the job: the archive it came from, else its path with every
/// number masked and the stream words dropped (`logs/rank#`, `run/attempt_#/#/`).
fn name_key(name: &str) -> String {
    if let Some((archive, _)) = name.split_once('!') {
        return format!("archive:{archive}");
    }
    static DIGITS: LazyLock<Regex> = LazyLock::new(|| Regex::new(r"[0-9]+").unwrap());
    // The file name without its extensions (`.log`, `.txt.gz`) and stream words.
    let (dir, file) = name.rsplit_once(['/', '\\']).unwrap_or(("", name));
    let stem = file.split('.').next().unwrap_or(file);
    // (`slurm-77.out` / `slurm-77.err`: the extension, cut here, is the stream.)
    let stem = stem.strip_suffix("stdout").or_else(|| stem.strip_suffix("stderr")).unwrap_or(stem);
    format!("{}/{}", DIGITS.replace_all(dir, "#"), DIGITS.replace_all(stem, "#"))
}

/// Ids in the head of `input` that only one job has: `slurm:ID`, `comm:ID`, `proc:HOST:PID`,
/// `run:ID`. An input that cannot be opened has none (the engine reports it).
fn head_ties(input: &Input) -> Vec<String> {
    static TIES: LazyLock<Regex> = LazyLock::new(|| {
        Regex::new(concat!(
            r"SLURM_JOB_ID[=: ]+(?P<slurm>\d+)|\*\*\* (?:JOB|STEP) (?P<slurm2>\d+)|srun: job (?P<slurm3>\d+)",
            r"|commId (?P<comm>0x[0-9a-f]{6,})",
            r"|run_id[=: ]+'?(?P<run>[\w-]{4,})",
        ))
        .unwrap()
    });
    let Ok(mut reader) = input::open(input, Some(HEAD_BYTES)) else {
        return Vec::new();
    };
    let mut out = Vec::new();
    let mut add = |t: String| {
        if !out.contains(&t) {
            out.push(t);
        }
    };
    while let Ok(Some(line)) = reader.next_line() {
        let line = String::from_utf8_lossy(line);
        // NCCL's `host:pid:tid [dev]` head, read as the engine reads it (after any prefixes).
        if line.contains(" NCCL ") {
            let r = super::record::parse(super::prefix::strip_prefixes(&line).rest, None);
            if let (Some(h), Some(p)) = (r.host, r.pid) {
                add(format!("proc:{h}:{p}"));
            }
        }
        for c in TIES.captures_iter(&line) {
            if let Some(id) = c.name("slurm").or(c.name("slurm2")).or(c.name("slurm3")) {
                add(format!("slurm:{}", id.as_str()));
            } else if let Some(id) = c.name("comm") {
                add(format!("comm:{}", id.as_str()));
            } else if let Some(id) = c.name("run").filter(|r| r.as_str() != "none") {
                add(format!("run:{}", id.as_str()));
            }
        }
    }
    out
}

/// Union-find over input indexes.
struct Sets(Vec<usize>);

impl Sets {
    fn new(n: usize) -> Sets {
        Sets((0..n).collect())
    }
    fn root(&mut self, mut i: usize) -> usize {
        while self.0[i] != i {
            self.0[i] = self.0[self.0[i]];
            i = self.0[i];
        }
        i
    }
    /// Join `i` to the input that owns `key` first, or make `i` its owner.
    fn tie(&mut self, owner: &mut HashMap<String, usize>, key: String, i: usize) {
        match owner.get(&key) {
            Some(&j) => self.join(i, j),
            None => {
                owner.insert(key, i);
            }
        }
    }
    fn join(&mut self, a: usize, b: usize) {
        let (a, b) = (self.root(a), self.root(b));
        // The earlier input stays the root, so jobs come in input order.
        self.0[a.max(b)] = a.min(b);
    }
    fn count(&mut self) -> usize {
        (0..self.0.len()).filter(|&i| self.root(i) == i).count()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn mem(name: &str, text: &str) -> Input {
        Input::Memory { name: name.into(), text: text.into() }
    }

    #[test]
    fn names_alike_but_for_numbers_or_streams_are_one_job() {
        let x = [mem("logs/rank0.log", ""), mem("logs/rank1.log", ""), mem("other/run.log", "")];
        assert_eq!(group(&x), vec![vec![0, 1], vec![2]]);
        let t = [mem("r/attempt_0/0/stdout.log", ""), mem("r/attempt_0/1/stderr.log", ""), mem("r/x.log", "")];
        assert_eq!(group(&t), vec![vec![0, 1], vec![2]]);
        let s = [mem("slurm-77.out", ""), mem("slurm-77.err", "")];
        assert_eq!(group(&s), vec![vec![0, 1]]);
        let a = [mem("a.tgz!x/one.log", ""), mem("a.tgz!y/two.log", "")];
        assert_eq!(group(&a), vec![vec![0, 1]]);
        // A repro cell folder, whatever its ranks' logs are called (Slurm's `rank%t.log`).
        let c = [mem("c/002-X=b/harness.log", ""), mem("c/002-X=b/rank1.log", ""), mem("c/002-X=b/out.txt", "")];
        assert_eq!(group(&c), vec![vec![0, 1, 2]]);
    }

    #[test]
    fn unrelated_files_are_jobs_of_their_own_unless_an_id_ties_them() {
        // examples/: a DeepEP test log and an H200 NCCL log.
        let x = [mem("deepep-intranode-teardown.log", "x\n"), mem("h200-nccl-2.22.3-abort-teardown.log", "y\n")];
        assert_eq!(group(&x), vec![vec![0], vec![1]]);
        let nccl = "node1:4242:4300 [0] NCCL INFO comm 0x55 rank 0 nranks 2 cudaDev 0 busId 1000 commId 0xabcdef12 - Init START\n";
        let y = [mem("nccl.log", nccl), mem("traceback.txt", "RuntimeError: x\n"), mem("more.txt", nccl)];
        assert_eq!(group(&y), vec![vec![0, 2], vec![1]]);
        // One process's NCCL head (behind torchrun's prefix in one file), no communicator line.
        let warn = "[default0]:node1:4242:4300 [0] misc/socket.cc:71 NCCL WARN socketProgress: x\n";
        let p = [mem("a.txt", warn), mem("b.txt", "node1:4242:4242 [0] NCCL INFO cudaDriverVersion 12080\n")];
        assert_eq!(group(&p), vec![vec![0, 1]]);
        let slurm = [
            mem("a.txt", "srun: job 912345 queued and waiting for resources\n"),
            mem("b.txt", "slurmstepd: error: *** STEP 912345.0 ON n1 CANCELLED AT 2025-01-01 ***\n"),
        ];
        assert_eq!(group(&slurm), vec![vec![0, 1]]);
        // torchrun's default run id says nothing.
        let none = [mem("a.txt", "run_id: none\n"), mem("b.txt", "run_id=none\n")];
        assert_eq!(group(&none), vec![vec![0], vec![1]]);
    }

    #[test]
    fn stdin_is_read_once_so_it_joins_everything() {
        assert_eq!(group(&[Input::Stdin, mem("b.log", "")]), vec![vec![0, 1]]);
    }
}
