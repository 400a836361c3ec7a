//! A process to run and assert on: the few calls the tests make (`args`, `env`, `write_stdin`,
//! `timeout`, then `assert().code(2).stderr(contains(..))`), over `std::process`. Written here
//! instead of taking assert_cmd and predicates, whose dependencies turn on features of crates the
//! binary uses too, so that `cargo test` after `cargo install` compiled those crates again.

use std::ffi::OsStr;
use std::io::{Read, Write};
use std::path::Path;
use std::process::{Output, Stdio};
use std::time::{Duration, Instant};

pub struct Command {
    inner: std::process::Command,
    stdin: Option<Vec<u8>>,
    timeout: Option<Duration>,
}

impl From<std::process::Command> for Command {
    fn from(inner: std::process::Command) -> Command {
        Command { inner, stdin: None, timeout: None }
    }
}

impl Command {
    pub fn new(program: impl AsRef<OsStr>) -> Command {
        std::process::Command::new(program).into()
    }

    pub fn arg(&mut self, a: impl AsRef<OsStr>) -> &mut Self {
        self.inner.arg(a);
        self
    }

    pub fn args<I, S>(&mut self, args: I) -> &mut Self
    where
        I: IntoIterator<Item = S>,
        S: AsRef<OsStr>,
    {
        self.inner.args(args);
        self
    }

    pub fn env(&mut self, k: impl AsRef<OsStr>, v: impl AsRef<OsStr>) -> &mut Self {
        self.inner.env(k, v);
        self
    }

    pub fn env_remove(&mut self, k: impl AsRef<OsStr>) -> &mut Self {
        self.inner.env_remove(k);
        self
    }

    pub fn env_clear(&mut self) -> &mut Self {
        self.inner.env_clear();
        self
    }

    pub fn current_dir(&mut self, d: impl AsRef<Path>) -> &mut Self {
        self.inner.current_dir(d);
        self
    }

    /// Bytes for the child's standard input (else it reads nothing: stdin is closed).
    pub fn write_stdin(&mut self, bytes: impl Into<Vec<u8>>) -> &mut Self {
        self.stdin = Some(bytes.into());
        self
    }

    /// Kill the child past this long, and fail (a hang guard, not a measurement).
    pub fn timeout(&mut self, t: Duration) -> &mut Self {
        self.timeout = Some(t);
        self
    }

    /// Run to the end; what it wrote, its status. Stdin, stdout and stderr are pipes, read and
    /// written on threads of their own so that no pipe fills while the child waits on another.
    pub fn output(&mut self) -> std::io::Result<Output> {
        self.inner.stdin(Stdio::piped()).stdout(Stdio::piped()).stderr(Stdio::piped());
        let mut child = self.inner.spawn()?;
        let input = self.stdin.clone().unwrap_or_default();
        let mut stdin = child.stdin.take().expect("piped");
        // A child that exits without reading gives EPIPE here: not the test's failure.
        let writer = std::thread::spawn(move || drop(stdin.write_all(&input)));
        let drain = |mut r: Box<dyn Read + Send>| {
            std::thread::spawn(move || {
                let mut v = Vec::new();
                let _ = r.read_to_end(&mut v);
                v
            })
        };
        let out = drain(Box::new(child.stdout.take().expect("piped")));
        let err = drain(Box::new(child.stderr.take().expect("piped")));
        let status = match self.timeout {
            None => child.wait()?,
            Some(limit) => {
                let start = Instant::now();
                loop {
                    if let Some(s) = child.try_wait()? {
                        break s;
                    }
                    if start.elapsed() > limit {
                        let _ = child.kill();
                        let _ = child.wait();
                        return Err(std::io::Error::new(
                            std::io::ErrorKind::TimedOut,
                            format!("{:?} still running after {limit:?}: killed", self.inner),
                        ));
                    }
                    std::thread::sleep(Duration::from_millis(10));
                }
            }
        };
        let _ = writer.join();
        Ok(Output { status, stdout: out.join().expect("stdout reader"), stderr: err.join().expect("stderr reader") })
    }

    /// Run it (panicking if it cannot start or outlives its timeout) and assert on the result.
    pub fn assert(&mut self) -> Assert {
        let what = format!("{:?}", self.inner);
        match self.output() {
            Ok(output) => Assert { what, output },
            Err(e) => panic!("{what}: {e}"),
        }
    }
}

/// A finished run and the assertions on it; each panics with the command, its status and output.
pub struct Assert {
    what: String,
    output: Output,
}

/// The exit codes a run may end with.
pub trait Codes {
    fn allows(&self, code: i32) -> bool;
}

impl Codes for i32 {
    fn allows(&self, code: i32) -> bool {
        *self == code
    }
}

impl<const N: usize> Codes for [i32; N] {
    fn allows(&self, code: i32) -> bool {
        self.contains(&code)
    }
}

impl Assert {
    fn fail(&self, why: &str) -> ! {
        panic!(
            "{why}\ncommand: {}\nstatus: {}\nstdout:\n{}\nstderr:\n{}",
            self.what,
            self.output.status,
            String::from_utf8_lossy(&self.output.stdout),
            String::from_utf8_lossy(&self.output.stderr)
        )
    }

    pub fn get_output(&self) -> &Output {
        &self.output
    }

    pub fn success(self) -> Self {
        if !self.output.status.success() {
            self.fail("expected success");
        }
        self
    }

    pub fn failure(self) -> Self {
        if self.output.status.success() {
            self.fail("expected a failure");
        }
        self
    }

    pub fn code(self, want: impl Codes) -> Self {
        match self.output.status.code() {
            Some(c) if want.allows(c) => self,
            _ => self.fail("unexpected exit status"),
        }
    }

    pub fn stdout(self, p: Pred) -> Self {
        if !p.holds(&String::from_utf8_lossy(&self.output.stdout)) {
            self.fail(&format!("stdout: expected {p}"));
        }
        self
    }

    pub fn stderr(self, p: Pred) -> Self {
        if !p.holds(&String::from_utf8_lossy(&self.output.stderr)) {
            self.fail(&format!("stderr: expected {p}"));
        }
        self
    }
}

/// What a run's output must hold.
pub enum Pred {
    Contains(String),
    And(Box<Pred>, Box<Pred>),
}

/// The output holds `s`.
pub fn contains(s: impl Into<String>) -> Pred {
    Pred::Contains(s.into())
}

impl Pred {
    fn holds(&self, text: &str) -> bool {
        match self {
            Pred::Contains(s) => text.contains(s.as_str()),
            Pred::And(a, b) => a.holds(text) && b.holds(text),
        }
    }

    pub fn and(self, other: Pred) -> Pred {
        Pred::And(Box::new(self), Box::new(other))
    }
}

impl std::fmt::Display for Pred {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Pred::Contains(s) => write!(f, "to contain {s:?}"),
            Pred::And(a, b) => write!(f, "{a} and {b}"),
        }
    }
}
