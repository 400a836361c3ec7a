//! Every flag of every command is defined here, once. Help, the `EPDOCTOR_*` environment twins,
//! shell completions and the man page are all generated from these types.

use std::path::PathBuf;

use clap::{Args, Parser, Subcommand, ValueEnum};

use crate::model::run::LauncherKind;

#[derive(Debug, Parser)]
#[command(
    name = "epdoctor",
    version = crate::meta::VERSION_LINE,
    about = "Reproduce and triage NCCL, PyTorch distributed, NVSHMEM and DeepEP warnings",
    long_about = "Reproduce and triage the warnings NCCL, PyTorch distributed, NVSHMEM and DeepEP print, \
above all at process teardown: is it harmless noise or the real failure, what caused it, and what fixes it.",
    max_term_width = 100,
    propagate_version = true
)]
pub struct Cli {
    /// When to colour the output.
    #[arg(long, global = true, value_enum, default_value_t = ColorChoice::Auto, env = "EPDOCTOR_COLOR")]
    pub color: ColorChoice,

    #[command(subcommand)]
    pub command: Command,
}

#[derive(Debug, Subcommand)]
pub enum Command {
    /// Read logs and explain their warnings: verdict, root cause, fix, evidence.
    Explain(ExplainArgs),
    /// Run the built-in workload (or your command) under a matrix of settings and compare.
    Repro(ReproArgs),
    /// The environment a bug report needs, with a checklist of findings.
    Env(EnvArgs),
    /// One redacted Markdown document for an issue: env + explain (+ a repro run).
    Report(ReportArgs),
    /// List (and with --yes delete) NCCL shared-memory files whose creator is gone.
    Clean(CleanArgs),
    /// The rule base: list, show one rule, run every rule's fixtures.
    #[command(subcommand)]
    Rules(RulesCommand),
    /// Find teardown and init mistakes in distributed Python scripts before they run.
    Lint(LintArgs),
    /// Compile the workload's CUDA kernels to PTX with NVRTC and list their entry points.
    Kernels(KernelsArgs),
    /// NCCL releases by version: fetch into the user cache, list, print a library's path, clean.
    #[command(subcommand)]
    Nccl(NcclCommand),
    /// Print a shell completion script.
    Completions {
        /// The shell to write the script for.
        #[arg(value_enum)]
        shell: clap_complete::Shell,
    },
    /// Print the man page (roff), or write every page (one per subcommand) into a folder.
    Man {
        /// Write epdoctor.1 and a page per subcommand here instead of printing the main page.
        #[arg(long, value_name = "DIR")]
        dir: Option<PathBuf>,
        /// With --dir: replace pages of these names already there (without it, an existing file
        /// is never overwritten).
        #[arg(long, requires = "dir")]
        force: bool,
    },
    /// Run one rank of the built-in workload (started by `repro`).
    #[command(hide = true)]
    Worker(WorkerArgs),
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum ColorChoice {
    Auto,
    Always,
    Never,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum Format {
    Text,
    Md,
    Json,
}

impl ColorChoice {
    /// `Some(on)` when forced, `None` for auto.
    pub fn forced(self) -> Option<bool> {
        match self {
            ColorChoice::Auto => None,
            ColorChoice::Always => Some(true),
            ColorChoice::Never => Some(false),
        }
    }
}

impl Format {
    pub fn output(self) -> crate::output::Format {
        match self {
            Format::Text => crate::output::Format::Text,
            Format::Md => crate::output::Format::Md,
            Format::Json => crate::output::Format::Json,
        }
    }
}

/// explain's formats: the shared ones and the CI ones.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum ExplainFormat {
    Text,
    Md,
    Json,
    /// GitHub Actions workflow commands: annotations on the log lines, a notice with the verdict.
    Github,
    /// JUnit XML: one test case per finding.
    Junit,
}

impl ExplainFormat {
    pub fn output(self) -> crate::output::Format {
        match self {
            ExplainFormat::Text => crate::output::Format::Text,
            ExplainFormat::Md => crate::output::Format::Md,
            ExplainFormat::Json => crate::output::Format::Json,
            ExplainFormat::Github => crate::output::Format::Github,
            ExplainFormat::Junit => crate::output::Format::Junit,
        }
    }
}

impl LintFormat {
    pub fn output(self) -> crate::output::Format {
        match self {
            LintFormat::Text => crate::output::Format::Text,
            LintFormat::Md => crate::output::Format::Md,
            LintFormat::Json => crate::output::Format::Json,
            LintFormat::Sarif => crate::output::Format::Sarif,
            LintFormat::Github => crate::output::Format::Github,
        }
    }
}

/// Options shared by every command that runs the rule engine.
#[derive(Debug, Clone, Args)]
pub struct RuleOpts {
    /// Extra rule files (TOML) or folders of them; a rule with a built-in id replaces it.
    #[arg(long = "rules", value_name = "PATH", env = "EPDOCTOR_RULES", value_delimiter = ':')]
    pub rules: Vec<PathBuf>,

    /// Use only the rules given with --rules (to test your own rule files in isolation).
    #[arg(long, requires = "rules")]
    pub no_builtin_rules: bool,
}

#[derive(Debug, Clone, Args)]
pub struct ExplainArgs {
    /// Log files, folders of per-rank logs, .tar, .tar.gz, .tgz or .zip archives, or `-` for stdin
    /// (the default). gzip and zstd are read as such. A path that cannot be read is named and the
    /// rest explained; the exit status is then 2.
    #[arg(value_name = "PATH")]
    pub paths: Vec<PathBuf>,

    /// Output format (github: GitHub Actions annotations; junit: JUnit XML for CI systems).
    #[arg(long, short = 'f', value_enum, default_value_t = ExplainFormat::Text, env = "EPDOCTOR_FORMAT")]
    pub format: ExplainFormat,

    /// Keep hostnames, addresses and home paths in Markdown output (redacted by default).
    #[arg(long, env = "EPDOCTOR_NO_REDACT", value_parser = env_bool)]
    pub no_redact: bool,

    /// Group the lines no rule explains by template (numbers and times masked, each line's own
    /// severity letter kept), to help write new rules; nothing is printed when there is none.
    #[arg(long)]
    pub unexplained: bool,

    /// Text: every finding's root cause, fix and evidence in full, and lines unclipped (by
    /// default: the verdict, the outcome, the primary finding and a table, within 100 columns).
    #[arg(long, short = 'v')]
    pub verbose: bool,

    /// Evidence lines shown per finding [default: 5 for the primary finding, 2 (text) or 3 (md) for the others].
    #[arg(long, value_name = "N", env = "EPDOCTOR_EVIDENCE")]
    pub evidence: Option<usize>,

    /// Stop reading after this many bytes in all (e.g. a stdin that never ends); K, M, G suffixes
    /// are 1024-multiples (`10k`, `64M`).
    #[arg(long, value_name = "BYTES", env = "EPDOCTOR_MAX_BYTES", value_parser = byte_size)]
    pub max_bytes: Option<u64>,

    #[command(flatten)]
    pub rule_opts: RuleOpts,
}

#[derive(Debug, Clone, Args)]
pub struct ReproArgs {
    /// Ranks (processes) per cell. Default: the number of GPUs (at most 8), or 2 on one GPU.
    #[arg(long, value_name = "N", env = "EPDOCTOR_RANKS")]
    pub ranks: Option<usize>,

    // The help names the worker's modes, from its one list.
    #[arg(long, value_delimiter = ',', value_name = "MODE,...", help = teardown_help())]
    pub teardown: Vec<String>,

    /// An environment axis: NAME=v1,v2,... (repeatable). An empty value means "unset".
    #[arg(long = "env", value_name = "NAME=V1,V2")]
    pub env: Vec<String>,

    /// A libnccl.so to load, as an axis (repeatable). Default: the one the loader finds.
    #[arg(long = "nccl-lib", value_name = "PATH")]
    pub nccl_lib: Vec<PathBuf>,

    /// NCCL releases as the library axis (repeatable, comma-separated): `2.22.3`, `system` (the
    /// loader's), or a libnccl.so path. A release is fetched into the user cache once (`epdoctor nccl`).
    #[arg(long = "nccl", value_delimiter = ',', value_name = "RELEASE,...")]
    pub nccl: Vec<String>,

    /// CUDA major of the NCCL wheels (nvidia-nccl-cu<N>). Default: the driver's, then older ones.
    #[arg(long, value_name = "12|13")]
    pub cuda: Option<u32>,

    /// Use only NCCL releases already in the cache; never reach the package index.
    #[arg(long)]
    pub offline: bool,

    /// Binary search over the NCCL releases in FROM..TO (either end may be `system`) for the first
    /// one where --finding appears or disappears.
    #[arg(long, value_name = "FROM..TO", requires = "finding")]
    pub bisect_nccl: Option<String>,

    /// With --bisect-nccl: what to look for, a rule id or an outcome (hang, failed, leftovers).
    #[arg(long, value_name = "RULE|OUTCOME", requires = "bisect_nccl")]
    pub finding: Option<String>,

    /// Run every cell this many times.
    #[arg(long, default_value_t = 1, value_name = "K")]
    pub repeat: usize,

    /// Deadline of one cell in seconds; then SIGTERM, a grace period, SIGKILL.
    #[arg(long, default_value_t = 60.0, value_name = "SECS", env = "EPDOCTOR_TIMEOUT")]
    pub timeout: f64,

    /// Grace period between SIGTERM and SIGKILL, in seconds.
    #[arg(long, default_value_t = 3.0, value_name = "SECS")]
    pub grace: f64,

    /// Run folder (default: epdoctor-repro-<date>-<time> in the current folder). Never overwritten.
    #[arg(long, value_name = "DIR")]
    pub out: Option<PathBuf>,

    #[command(flatten)]
    pub size: Box<WorkloadSize>,

    #[command(flatten)]
    pub launch: Box<LauncherArgs>,

    /// Output format of the comparison printed at the end.
    #[arg(long, short = 'f', value_enum, default_value_t = Format::Text, env = "EPDOCTOR_FORMAT")]
    pub format: Format,

    /// No progress bar.
    #[arg(long, short = 'q')]
    pub quiet: bool,

    /// Write what the run does (the plan, each cell's start and end, an interrupt, the end) to FILE,
    /// one JSON object a line, instead of the progress shown on stderr.
    #[arg(long, value_name = "FILE")]
    pub events: Option<PathBuf>,

    #[command(flatten)]
    pub rule_opts: RuleOpts,

    /// Your own command, run once per cell under the cell's environment.
    #[arg(last = true, value_name = "CMD")]
    pub command: Vec<String>,
}

/// How each cell's ranks start (docs/repro.md, "Across nodes").
#[derive(Debug, Clone, Args)]
pub struct LauncherArgs {
    /// `local` processes, one Slurm job step per cell (`slurm`), or `torchrun` per cell.
    #[arg(long, value_enum, default_value_t = Launcher(LauncherKind::Local))]
    pub launcher: Launcher,

    /// slurm, torchrun: nodes per cell.
    #[arg(long, visible_alias = "nnodes", value_name = "N")]
    pub nodes: Option<usize>,

    /// slurm, torchrun: ranks per node.
    #[arg(long, visible_alias = "nproc-per-node", value_name = "K")]
    pub ntasks_per_node: Option<usize>,

    /// slurm: partition of the allocation epdoctor asks for (outside an allocation).
    #[arg(long, value_name = "P")]
    pub partition: Option<String>,

    /// slurm: time limit of the allocation epdoctor asks for (salloc --time).
    #[arg(long, value_name = "T")]
    pub time: Option<String>,

    /// slurm: seconds to wait for the allocation epdoctor asks for (outside an allocation) while
    /// it is pending; then the request is cancelled and repro exits 5.
    #[arg(long, default_value_t = 60.0, value_name = "SECS")]
    pub alloc_timeout: f64,

    /// slurm: take the allocation only if it can be granted at once (salloc --immediate).
    #[arg(long)]
    pub immediate: bool,

    /// slurm: one more argument for every srun (repeatable), e.g. --srun-arg=--gpus-per-task=1.
    #[arg(long = "srun-arg", value_name = "ARG", allow_hyphen_values = true)]
    pub srun_args: Vec<String>,

    /// torchrun: rendezvous endpoint HOST:PORT (c10d); default: a local one.
    #[arg(long, value_name = "HOST:PORT")]
    pub rdzv_endpoint: Option<String>,
}

/// `--launcher`'s values: the kinds repro has a launcher for, by their names.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Launcher(pub LauncherKind);

impl ValueEnum for Launcher {
    fn value_variants<'a>() -> &'a [Self] {
        static ALL: std::sync::LazyLock<Vec<Launcher>> =
            std::sync::LazyLock::new(|| LauncherKind::ALL.into_iter().map(Launcher).collect());
        &ALL
    }

    fn to_possible_value(&self) -> Option<clap::builder::PossibleValue> {
        Some(clap::builder::PossibleValue::new(self.0.name()))
    }
}

#[derive(Debug, Clone, Args)]
pub struct EnvArgs {
    /// Output format.
    #[arg(long, short = 'f', value_enum, default_value_t = Format::Text, env = "EPDOCTOR_FORMAT")]
    pub format: Format,

    /// Keep hostnames, addresses and home paths (redacted by default in Markdown).
    #[arg(long, env = "EPDOCTOR_NO_REDACT", value_parser = env_bool)]
    pub no_redact: bool,

    /// Seconds allowed for probing python3/torch.
    #[arg(long, default_value_t = 20.0, value_name = "SECS")]
    pub python_timeout: f64,

    /// Only what a repro cell left on this node: its processes, NCCL sockets and /dev/shm files.
    #[arg(long, requires = "cell")]
    pub leftovers: bool,

    /// Only the stacks of a repro cell's processes on this node, each labelled by its SLURM_PROCID
    /// (the Slurm launcher's probe at a hang's deadline; raw stacks go under the cell's stacks/).
    #[arg(long, requires = "cell", conflicts_with = "leftovers")]
    pub stacks: bool,

    /// With --leftovers or --stacks: the cell's tag (the EPDOCTOR_CELL_DIR value its processes
    /// carry, the cell folder).
    #[arg(long, value_name = "TAG")]
    pub cell: Option<String>,

    /// With --leftovers: count /dev/shm/nccl-* files modified since this unix time.
    #[arg(long, value_name = "UNIX_SECS", requires = "leftovers")]
    pub since: Option<f64>,

    /// With --leftovers: SIGKILL the processes found, and say which survived.
    #[arg(long, requires = "leftovers")]
    pub kill: bool,
}

#[derive(Debug, Clone, Args)]
pub struct ReportArgs {
    /// Logs to explain (files, folders, `-`).
    #[arg(value_name = "LOG")]
    pub logs: Vec<PathBuf>,

    /// A repro run folder whose comparison goes into the report (one per flag: `--repro A --repro B`).
    #[arg(long, value_name = "DIR")]
    pub repro: Vec<PathBuf>,

    /// Keep hostnames, addresses and home paths.
    #[arg(long, env = "EPDOCTOR_NO_REDACT", value_parser = env_bool)]
    pub no_redact: bool,

    /// Write the report here instead of stdout (an existing file is never overwritten).
    #[arg(long, short = 'o', value_name = "FILE")]
    pub output: Option<PathBuf>,

    /// Seconds allowed for probing python3/torch.
    #[arg(long, default_value_t = 20.0, value_name = "SECS")]
    pub python_timeout: f64,

    #[command(flatten)]
    pub rule_opts: RuleOpts,
}

#[derive(Debug, Clone, Args)]
pub struct CleanArgs {
    /// Delete the stale files (default: only list them).
    #[arg(long)]
    pub yes: bool,

    /// Folder to scan.
    #[arg(long, default_value = crate::sys::SHM_DIR, value_name = "DIR")]
    pub dir: PathBuf,
}

#[derive(Debug, Subcommand)]
pub enum RulesCommand {
    /// One line per rule.
    List {
        /// Output format.
        #[arg(long, short = 'f', value_enum, default_value_t = Format::Text, env = "EPDOCTOR_FORMAT")]
        format: Format,
        #[command(flatten)]
        rule_opts: RuleOpts,
    },
    /// Everything about one rule.
    Show {
        /// The rule's id, as `rules list` prints it (e.g. nccl-abort-pair).
        #[arg(value_name = "ID")]
        id: String,
        #[command(flatten)]
        rule_opts: RuleOpts,
    },
    /// Run every rule's fixtures (EPDOCTOR_BLESS=1 rewrites their expectations).
    Test {
        /// Fixture files or folders (default: the built-in fixtures).
        #[arg(value_name = "PATH")]
        paths: Vec<PathBuf>,
        /// Rewrite each fixture's expectations with what the engine now finds.
        #[arg(long, env = "EPDOCTOR_BLESS", value_parser = env_bool)]
        bless: bool,
        #[command(flatten)]
        rule_opts: RuleOpts,
    },
}

#[derive(Debug, Subcommand)]
pub enum NcclCommand {
    /// The releases in the cache (with --available: the ones the package index offers).
    List {
        /// Also list what the package index offers for this machine.
        #[arg(long)]
        available: bool,
        #[command(flatten)]
        opts: NcclOpts,
    },
    /// Fetch releases into the cache (each wheel's sha256 checked against the index).
    Fetch {
        /// NCCL releases, e.g. 2.22.3 2.23.4.
        #[arg(value_name = "VERSION", required = true)]
        versions: Vec<String>,
        #[command(flatten)]
        opts: NcclOpts,
    },
    /// Print the cached libnccl.so.2 of a release, e.g. for LD_PRELOAD (never downloads: `nccl fetch` first).
    Path {
        /// The NCCL release, e.g. 2.22.3.
        // Not `version`: clap's propagated --version would clash with an argument of that id.
        #[arg(id = "release", value_name = "VERSION")]
        release: String,
        #[command(flatten)]
        opts: NcclOpts,
    },
    /// Remove releases from the cache (default: all of them); without --yes, only say what would go.
    Clean {
        /// The releases to remove (default: every cached one).
        #[arg(value_name = "VERSION")]
        versions: Vec<String>,
        /// Remove them (without it nothing is deleted).
        #[arg(long)]
        yes: bool,
    },
}

#[derive(Debug, Clone, Args)]
pub struct NcclOpts {
    /// CUDA major of the wheel (nvidia-nccl-cu<N>). Default: the driver's, then older ones.
    #[arg(long, value_name = "12|13")]
    pub cuda: Option<u32>,

    /// Use only the cache; never reach the package index.
    #[arg(long)]
    pub offline: bool,

    /// No progress lines.
    #[arg(long, short = 'q')]
    pub quiet: bool,
}

impl NcclOpts {
    pub fn options(&self) -> crate::nccl::Options {
        crate::nccl::Options { cuda: self.cuda, offline: self.offline, quiet: self.quiet }
    }
}

#[derive(Debug, Clone, Args)]
pub struct LintArgs {
    /// Python files or folders of them.
    #[arg(value_name = "PATH", required = true)]
    pub paths: Vec<PathBuf>,

    /// Output format (sarif: SARIF 2.1.0, for GitHub code scanning; github: Actions annotations).
    #[arg(long, short = 'f', value_enum, default_value_t = LintFormat::Text, env = "EPDOCTOR_LINT_FORMAT")]
    pub format: LintFormat,

    /// Run the checks for this torch version (default: the torch installed for --python, else
    /// the project's pins; unknown: torch-specific checks say info).
    #[arg(long, value_name = "VERSION", env = "EPDOCTOR_TORCH")]
    pub torch: Option<String>,

    /// The Python whose installed torch decides the torch-specific checks ('none': only the
    /// project's pins; default: VIRTUAL_ENV, CONDA_PREFIX, then python3 on PATH).
    #[arg(long, value_name = "PATH", env = "EPDOCTOR_PYTHON")]
    pub python: Option<String>,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum LintFormat {
    Text,
    Md,
    Json,
    Sarif,
    Github,
}

#[derive(Debug, Clone, Args)]
pub struct KernelsArgs {
    /// Target architecture.
    #[arg(long, default_value = "sm_90")]
    pub arch: String,

    /// Write the PTX files here (never over existing files).
    #[arg(long, value_name = "DIR")]
    pub out: Option<PathBuf>,
}

#[derive(Debug, Clone, Args)]
pub struct WorkerArgs {
    /// This rank (default: SLURM_PROCID, under `--launcher slurm`).
    #[arg(long)]
    pub rank: Option<usize>,
    /// Ranks in all (default: SLURM_NTASKS).
    #[arg(long)]
    pub world: Option<usize>,
    /// Folder shared by the ranks of one cell (NCCL id and IPC handle files).
    #[arg(long, value_name = "DIR")]
    pub rendezvous: PathBuf,
    /// Teardown mode.
    #[arg(long, default_value = "clean")]
    pub teardown: String,
    /// libnccl.so to load instead of the loader's choice.
    #[arg(long, value_name = "PATH")]
    pub nccl_lib: Option<PathBuf>,
    #[command(flatten)]
    pub size: WorkloadSize,
}

/// The built-in workload's size (DeepEP's test size by default), for `repro` and its worker.
#[derive(Debug, Clone, Args)]
pub struct WorkloadSize {
    /// Workload size: tokens per rank.
    #[arg(long, default_value_t = 4096)]
    pub tokens: usize,

    /// Workload size: hidden dimension (bf16 elements).
    #[arg(long, default_value_t = 7168)]
    pub hidden: usize,

    /// Workload size: experts in all.
    #[arg(long, default_value_t = 256)]
    pub experts: usize,

    /// Workload size: experts per token.
    #[arg(long, default_value_t = 8)]
    pub topk: usize,

    /// Dispatch + combine iterations.
    #[arg(long, default_value_t = 20)]
    pub iters: usize,
}

fn teardown_help() -> String {
    let modes: Vec<&str> = crate::worker::Teardown::ALL.into_iter().map(|m| m.name()).collect();
    format!("Teardown modes to run, comma-separated (default: all): {}. Ignored with `-- CMD`.", modes.join(", "))
}

/// A byte count: digits with an optional K, M or G (1024-multiples, any case, an optional B).
fn byte_size(s: &str) -> Result<u64, String> {
    let t = s.trim();
    let t = t.strip_suffix(['b', 'B']).unwrap_or(t);
    let (digits, shift) = match t.char_indices().last() {
        Some((i, c)) if c.is_ascii_alphabetic() => match c.to_ascii_lowercase() {
            'k' => (&t[..i], 10),
            'm' => (&t[..i], 20),
            'g' => (&t[..i], 30),
            _ => return Err(format!("{s:?}: the suffix may be K, M or G")),
        },
        _ => (t, 0),
    };
    let n: u64 =
        digits.parse().map_err(|_| format!("{s:?}: expected a number of bytes, e.g. 1048576, 10K, 64M, 2G"))?;
    n.checked_mul(1 << shift).ok_or_else(|| format!("{s:?}: too large"))
}

/// The value of a boolean flag's environment twin: 1/0, true/false, yes/no, on/off (any case); an
/// empty value is false, as for NO_COLOR.
/// The variable every shared `--format` reads.
const FORMAT_VAR: &str = "EPDOCTOR_FORMAT";

/// Parse `args` (program name first). An `EPDOCTOR_FORMAT` set for one command (`github` for
/// explain in CI) must not break the others: where the command lacks that format and `--format`
/// is not given, it writes text, and the returned note says so for stderr.
pub fn parse<I, T>(args: I) -> Result<(Cli, Option<String>), clap::Error>
where
    I: IntoIterator<Item = T>,
    T: Into<std::ffi::OsString> + Clone,
{
    use clap::error::{ContextKind, ContextValue, ErrorKind};
    use clap::{CommandFactory, FromArgMatches};
    let args: Vec<std::ffi::OsString> = args.into_iter().map(Into::into).collect();
    let first = Cli::command().try_get_matches_from(&args).and_then(|mut m| Cli::from_arg_matches_mut(&mut m));
    let err = match first {
        Ok(cli) => return Ok((cli, None)),
        Err(e) => e,
    };
    let ctx = |k| match err.get(k) {
        Some(ContextValue::String(s)) => s.clone(),
        Some(ContextValue::Strings(v)) => v.join(", "),
        _ => String::new(),
    };
    let value = std::env::var(FORMAT_VAR).unwrap_or_default();
    let known = ExplainFormat::value_variants().iter().filter_map(ValueEnum::to_possible_value);
    let mut known = known.chain(LintFormat::value_variants().iter().filter_map(ValueEnum::to_possible_value));
    let given = args.iter().skip(1).any(|a| a.to_str().is_some_and(|s| s == "-f" || s.starts_with("--format")));
    if err.kind() != ErrorKind::InvalidValue
        || given
        || !ctx(ContextKind::InvalidArg).starts_with("--format")
        || ctx(ContextKind::InvalidValue) != value
    {
        return Err(err);
    }
    // A value no command has is a typo, and stays an error: one that names the variable, since
    // the command line has no --format to look at.
    if !known.any(|p| p.matches(&value, false)) {
        return Err(Cli::command().error(
            ErrorKind::InvalidValue,
            format!(
                "invalid value: {FORMAT_VAR}={value:?} (from the environment) is not a format: this command \
                 writes {}; unset {FORMAT_VAR} or set it to one of those",
                ctx(ContextKind::ValidValue)
            ),
        ));
    }
    // Again without the variable: if that parses, the variable's value was the only bad one.
    fn unset(c: clap::Command) -> clap::Command {
        c.mut_args(|a| if a.get_env() == Some(std::ffi::OsStr::new(FORMAT_VAR)) { a.env(None) } else { a })
            .mut_subcommands(unset)
    }
    let Ok(mut m) = unset(Cli::command()).try_get_matches_from(&args) else { return Err(err) };
    let mut path = Vec::new();
    let mut sub = m.subcommand();
    while let Some((name, next)) = sub {
        path.push(name.to_string());
        sub = next.subcommand();
    }
    let Ok(cli) = Cli::from_arg_matches_mut(&mut m) else { return Err(err) };
    let note = format!(
        "epdoctor: {FORMAT_VAR}={value} is not a format of `epdoctor {}` ({}): writing text",
        path.join(" "),
        ctx(ContextKind::ValidValue)
    );
    Ok((cli, Some(note)))
}

fn env_bool(s: &str) -> Result<bool, String> {
    match s.trim().to_ascii_lowercase().as_str() {
        "1" | "true" | "yes" | "on" | "y" => Ok(true),
        "0" | "false" | "no" | "off" | "n" | "" => Ok(false),
        _ => Err("expected 1/0, true/false, yes/no or on/off".into()),
    }
}

impl RuleOpts {
    /// The rule engine's plain config (the domain never sees clap's types).
    pub fn source(&self) -> crate::rules::RuleSource {
        crate::rules::RuleSource { files: self.rules.clone(), builtin: !self.no_builtin_rules }
    }
}

impl WorkloadSize {
    pub fn size(&self) -> crate::worker::Size {
        crate::worker::Size {
            tokens: self.tokens,
            hidden: self.hidden,
            experts: self.experts,
            topk: self.topk,
            iters: self.iters,
        }
    }
}

impl ReproArgs {
    /// Everything but the output format, which the command's writer takes.
    pub fn config(&self) -> crate::repro::Config {
        crate::repro::Config {
            ranks: self.ranks,
            teardown: self.teardown.clone(),
            env: self.env.clone(),
            nccl_lib: self.nccl_lib.clone(),
            nccl: self.nccl.clone(),
            cuda: self.cuda,
            offline: self.offline,
            bisect_nccl: self.bisect_nccl.clone(),
            finding: self.finding.clone(),
            repeat: self.repeat,
            timeout: self.timeout,
            grace: self.grace,
            out: self.out.clone(),
            size: self.size.size(),
            quiet: self.quiet,
            rules: self.rule_opts.source(),
            command: self.command.clone(),
            launch: self.launch.config(),
        }
    }
}

impl LauncherArgs {
    pub fn config(&self) -> crate::repro::LaunchConfig {
        crate::repro::LaunchConfig {
            launcher: self.launcher.0,
            nodes: self.nodes,
            ntasks_per_node: self.ntasks_per_node,
            partition: self.partition.clone(),
            time: self.time.clone(),
            alloc_timeout_s: self.alloc_timeout,
            immediate: self.immediate,
            srun_args: self.srun_args.clone(),
            rdzv_endpoint: self.rdzv_endpoint.clone(),
        }
    }
}

impl WorkerArgs {
    pub fn config(&self) -> crate::worker::Config {
        crate::worker::Config {
            rank: self.rank,
            world: self.world,
            rendezvous: self.rendezvous.clone(),
            teardown: self.teardown.clone(),
            nccl_lib: self.nccl_lib.clone(),
            size: self.size.size(),
        }
    }
}

#[cfg(test)]
mod tests {
    use clap::{CommandFactory, Parser};

    /// Every visible argument of every visible command, with the command's path.
    fn visible_args() -> Vec<(String, clap::Arg)> {
        fn walk(c: &clap::Command, path: String, out: &mut Vec<(String, clap::Arg)>) {
            for a in c.get_arguments().filter(|a| !a.is_hide_set()) {
                out.push((path.clone(), a.clone()));
            }
            for s in c.get_subcommands().filter(|s| !s.is_hide_set()) {
                walk(s, format!("{path} {}", s.get_name()), out);
            }
        }
        let mut out = Vec::new();
        walk(&super::Cli::command(), "epdoctor".into(), &mut out);
        out
    }

    #[test]
    fn every_argument_says_what_it_is() {
        let bare: Vec<String> = visible_args()
            .into_iter()
            .filter(|(_, a)| a.get_help().is_none_or(|h| h.to_string().trim().is_empty()))
            .map(|(c, a)| format!("{c} {}", a.get_id()))
            .collect();
        assert!(bare.is_empty(), "arguments without help text: {bare:?}");
    }

    /// `--repro A B` swallowed the log after it; a flag takes one value (a list only through a
    /// delimiter), so positionals may come anywhere.
    #[test]
    fn every_flag_takes_one_value_per_use() {
        let greedy: Vec<String> = visible_args()
            .into_iter()
            .filter(|(_, a)| !a.is_positional() && a.get_num_args().is_some_and(|n| n.max_values() > 1))
            .map(|(c, a)| format!("{c} --{}", a.get_long().unwrap_or_default()))
            .collect();
        assert!(greedy.is_empty(), "flags taking several words: {greedy:?}");
        let cli = super::Cli::try_parse_from(["epdoctor", "report", "--repro", "run-a", "run.log", "--repro", "run-b"]);
        let Ok(super::Cli { command: super::Command::Report(r), .. }) = cli else { panic!("{cli:?}") };
        assert_eq!((r.repro.len(), r.logs.len()), (2, 1), "{r:?}");
    }

    #[test]
    fn byte_counts_take_suffixes() {
        assert_eq!(super::byte_size("4096"), Ok(4096));
        assert_eq!(super::byte_size("10k"), Ok(10 << 10));
        assert_eq!(super::byte_size("64M"), Ok(64 << 20));
        assert_eq!(super::byte_size("2GB"), Ok(2 << 30));
        assert_eq!(super::byte_size("512b"), Ok(512));
        assert_eq!(super::byte_size("1KiB").ok(), None, "KiB is not taken; K already means 1024");
        for bad in ["", "k", "10x", "-1", "1.5M", "99999999999G"] {
            assert!(super::byte_size(bad).is_err(), "{bad:?}");
        }
    }

    #[test]
    fn teardown_help_lists_every_mode() {
        let help = super::teardown_help();
        assert!(crate::worker::Teardown::ALL.iter().all(|m| help.contains(m.name())), "{help}");
    }
}
