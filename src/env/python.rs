//! torch and its NCCL through `python3`, bounded by a timeout (importing torch can take seconds,
//! and a broken install can hang).
use std::io::Read;
use std::os::unix::process::CommandExt;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

pub use crate::model::env::{PythonInfo, PythonStatus};

const MARK: &str = "EPDOCTOR-PY ";

const SCRIPT: &str = r#"
import json, os, sys
out = {"python": sys.version.split()[0], "executable": sys.executable}
paths = []
try:
    import site
    paths += site.getsitepackages()
    paths.append(site.getusersitepackages())
except Exception:
    pass
paths += [p for p in sys.path if p.endswith(("site-packages", "dist-packages"))]
seen = []
for p in paths:
    if p and os.path.isdir(p) and p not in seen:
        seen.append(p)
out["site_packages"] = seen
try:
    import importlib.util
    spec = importlib.util.find_spec("torch")
except Exception as e:
    spec = None
    out["torch_error"] = repr(e)
if spec is not None and spec.origin:
    out["torch_path"] = os.path.dirname(spec.origin)
    try:
        import torch
        out["torch"] = str(torch.__version__)
        out["torch_cuda"] = torch.version.cuda
        try:
            v = torch.cuda.nccl.version()
            out["torch_nccl"] = ".".join(str(x) for x in v) if isinstance(v, tuple) else str(v)
        except Exception as e:
            out["torch_error"] = "torch.cuda.nccl.version(): " + repr(e)
    except Exception as e:
        out["torch_error"] = "import torch: " + repr(e)
sys.stdout.write("EPDOCTOR-PY " + json.dumps(out) + "\n")
"#;

/// Run `python3` (as found on PATH) for at most `timeout`.
pub fn probe(timeout: Duration) -> PythonInfo {
    let mut cmd = Command::new("python3");
    cmd.arg("-c").arg(SCRIPT).stdin(Stdio::null()).stdout(Stdio::piped()).stderr(Stdio::piped()).process_group(0);
    let mut child = match cmd.spawn() {
        Ok(c) => c,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
            return PythonInfo {
                status: PythonStatus::NotFound,
                detail: Some("no python3 on PATH".into()),
                ..Default::default()
            }
        }
        Err(e) => {
            return PythonInfo {
                status: PythonStatus::Error,
                detail: Some(format!("python3: {e}")),
                ..Default::default()
            }
        }
    };
    // Drain both pipes in threads so a chatty import cannot block on a full pipe.
    let mut so = child.stdout.take().unwrap();
    let mut se = child.stderr.take().unwrap();
    let out_t = std::thread::spawn(move || {
        let mut s = String::new();
        let _ = so.read_to_string(&mut s);
        s
    });
    let err_t = std::thread::spawn(move || {
        let mut s = Vec::new();
        let _ = se.read_to_end(&mut s);
        String::from_utf8_lossy(&s).into_owned()
    });
    let start = Instant::now();
    let status = loop {
        match child.try_wait() {
            Ok(Some(st)) => break Some(st),
            Ok(None) if start.elapsed() >= timeout => {
                // The whole group: torch may have started helpers.
                let _ = nix::sys::signal::killpg(
                    nix::unistd::Pid::from_raw(child.id() as i32),
                    nix::sys::signal::Signal::SIGKILL,
                );
                let _ = child.wait();
                break None;
            }
            Ok(None) => std::thread::sleep(Duration::from_millis(20)),
            Err(e) => {
                return PythonInfo {
                    status: PythonStatus::Error,
                    detail: Some(format!("python3: {e}")),
                    ..Default::default()
                }
            }
        }
    };
    let stdout = out_t.join().unwrap_or_default();
    let stderr = err_t.join().unwrap_or_default();
    let Some(status) = status else {
        return PythonInfo {
            status: PythonStatus::TimedOut,
            detail: Some(format!(
                "python3 did not answer within {:.0} s (see --python-timeout)",
                timeout.as_secs_f64()
            )),
            ..Default::default()
        };
    };
    parse_output(&stdout, &stderr, status.code())
}

/// The probe's answer: the last marked line of stdout.
pub fn parse_output(stdout: &str, stderr: &str, code: Option<i32>) -> PythonInfo {
    let Some(json) = stdout.lines().rev().find_map(|l| l.strip_prefix(MARK)) else {
        let tail: String =
            stderr.lines().rev().take(3).collect::<Vec<_>>().into_iter().rev().collect::<Vec<_>>().join(" | ");
        return PythonInfo {
            status: PythonStatus::Error,
            detail: Some(format!(
                "python3 exited with {} and printed no answer{}",
                code.map_or("a signal".to_string(), |c| format!("status {c}")),
                if tail.is_empty() { String::new() } else { format!(": {tail}") }
            )),
            ..Default::default()
        };
    };
    match serde_json::from_str::<PythonInfo>(json) {
        Ok(mut p) => {
            p.status = PythonStatus::Ok;
            p
        }
        Err(e) => PythonInfo {
            status: PythonStatus::Error,
            detail: Some(format!("python3 answer is not valid JSON: {e}")),
            ..Default::default()
        },
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn answer_after_noise() {
        let out = "Warning: something\nEPDOCTOR-PY {\"python\": \"3.12.3\", \"executable\": \"/usr/bin/python3\", \"site_packages\": [\"/x\"], \"torch\": \"2.11.0+cu130\", \"torch_cuda\": \"13.0\", \"torch_nccl\": \"2.28.9\"}\n";
        let p = parse_output(out, "", Some(0));
        assert_eq!(p.status, PythonStatus::Ok);
        assert_eq!(p.torch.as_deref(), Some("2.11.0+cu130"));
        assert_eq!(p.torch_nccl.as_deref(), Some("2.28.9"));
    }

    #[test]
    fn no_answer_keeps_stderr_tail() {
        let p = parse_output("", "Traceback\nImportError: boom\n", Some(1));
        assert_eq!(p.status, PythonStatus::Error);
        assert!(p.detail.unwrap().contains("ImportError: boom"));
    }
}
