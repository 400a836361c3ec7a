//! The variables that steer NCCL, torch.distributed, NVSHMEM and CUDA, and NCCL's config files.
use std::path::{Path, PathBuf};

pub use crate::model::env::{ConfFile, Var};

const PREFIXES: [&str; 5] = ["NCCL_", "TORCH_NCCL_", "TORCH_DISTRIBUTED_", "NVSHMEM_", "CUDA_"];
/// A few more that decide which library loads and where ranks meet.
const EXTRA: [&str; 8] = [
    "LD_LIBRARY_PATH",
    "LD_PRELOAD",
    "TORCH_CPP_LOG_LEVEL",
    "TORCH_SHOW_CPP_STACKTRACES",
    "MASTER_ADDR",
    "MASTER_PORT",
    "WORLD_SIZE",
    "LOCAL_WORLD_SIZE",
];

pub const MASK: &str = "<masked>";

/// Names whose values must not reach a bug report (vLLM's list plus a few).
pub fn is_secret_name(name: &str) -> bool {
    let up = name.to_ascii_uppercase();
    const ANYWHERE: [&str; 6] = ["SECRET", "TOKEN", "PASSWORD", "PASSWD", "CREDENTIAL", "PRIVATE"];
    const WORDS: [&str; 4] = ["API", "ACCESS", "KEY", "AUTH"];
    ANYWHERE.iter().any(|w| up.contains(w)) || up.split('_').any(|part| WORDS.contains(&part))
}

fn wanted(name: &str) -> bool {
    PREFIXES.iter().any(|p| name.starts_with(p)) || EXTRA.contains(&name)
}

pub fn make_var(name: &str, value: &str) -> Var {
    let masked = is_secret_name(name);
    Var { name: name.to_string(), value: if masked { MASK.into() } else { value.to_string() }, masked }
}

/// The relevant variables of `env`, sorted by name.
pub fn collect<I: IntoIterator<Item = (String, String)>>(env: I) -> Vec<Var> {
    let mut v: Vec<Var> = env.into_iter().filter(|(n, _)| wanted(n)).map(|(n, val)| make_var(&n, &val)).collect();
    v.sort_by(|a, b| a.name.cmp(&b.name));
    v
}

/// NCCL's file format: `NAME=VALUE` per line, the value taken verbatim; `#` lines are comments.
pub fn parse_conf(text: &str) -> Vec<(String, String)> {
    text.lines()
        .filter(|l| !l.trim_start().starts_with('#'))
        .filter_map(|l| {
            let (n, v) = l.split_once('=')?;
            let n = n.trim();
            (!n.is_empty()).then(|| (n.to_string(), v.to_string()))
        })
        .collect()
}

/// The files NCCL reads at init, in its order: NCCL_CONF_FILE if set (else ~/.nccl.conf), then
/// /etc/nccl.conf. NCCL sets each NAME without overwriting, so the environment wins, then the
/// first file.
pub fn conf_files(nccl_conf_file: Option<&str>, home: Option<&Path>, etc: &Path) -> Vec<ConfFile> {
    let mut list: Vec<(PathBuf, &str)> = Vec::new();
    match nccl_conf_file.filter(|s| !s.is_empty()) {
        Some(f) => list.push((f.into(), "NCCL_CONF_FILE")),
        None => {
            if let Some(h) = home {
                list.push((h.join(".nccl.conf"), "~/.nccl.conf"));
            }
        }
    }
    list.push((etc.join("nccl.conf"), "/etc/nccl.conf"));
    list.into_iter()
        .map(|(path, role)| {
            let mut c = ConfFile {
                path: path.display().to_string(),
                role: role.into(),
                present: false,
                entries: Vec::new(),
                error: None,
            };
            match std::fs::read_to_string(&path) {
                Ok(t) => {
                    c.present = true;
                    c.entries = parse_conf(&t).iter().map(|(n, v)| make_var(n, v)).collect();
                }
                Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
                Err(e) => {
                    c.present = true;
                    c.error = Some(e.to_string());
                }
            }
            c
        })
        .collect()
}

/// The value NCCL will see for `name`: the environment's, else the first config file's.
/// Returns (value, where it came from).
pub fn effective<'a>(name: &str, vars: &'a [Var], files: &'a [ConfFile]) -> Option<(&'a str, &'a str)> {
    if let Some(v) = vars.iter().find(|v| v.name == name) {
        return Some((v.value.as_str(), "environment"));
    }
    files.iter().find_map(|f| f.entries.iter().find(|e| e.name == name).map(|e| (e.value.as_str(), f.path.as_str())))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn secrets() {
        for n in ["HF_TOKEN", "AWS_SECRET_ACCESS_KEY", "WANDB_API_KEY", "NCCL_IB_AUTH", "MY_PASSWORD"] {
            assert!(is_secret_name(n), "{n}");
        }
        for n in ["NCCL_DEBUG", "NCCL_IB_HCA", "CUDA_VISIBLE_DEVICES", "NCCL_SOCKET_IFNAME", "NVSHMEM_DISABLE_NCCL"] {
            assert!(!is_secret_name(n), "{n}");
        }
    }

    #[test]
    fn collect_filters_sorts_and_masks() {
        let env =
            [("PATH", "/bin"), ("NCCL_DEBUG", "WARN"), ("CUDA_VISIBLE_DEVICES", "0"), ("NCCL_API_KEY", "hunter2")];
        let v = collect(env.iter().map(|(a, b)| (a.to_string(), b.to_string())));
        let names: Vec<_> = v.iter().map(|v| v.name.as_str()).collect();
        assert_eq!(names, ["CUDA_VISIBLE_DEVICES", "NCCL_API_KEY", "NCCL_DEBUG"]);
        assert_eq!(v[1].value, MASK);
        assert!(!v.iter().any(|v| v.value.contains("hunter2")));
    }

    #[test]
    fn conf_precedence() {
        let dir = tempfile::tempdir().unwrap();
        let home = dir.path().join("home");
        let etc = dir.path().join("etc");
        std::fs::create_dir_all(&home).unwrap();
        std::fs::create_dir_all(&etc).unwrap();
        std::fs::write(home.join(".nccl.conf"), "# mine\nNCCL_DEBUG=INFO\n").unwrap();
        std::fs::write(etc.join("nccl.conf"), "NCCL_DEBUG=WARN\nNCCL_P2P_DISABLE=1\n").unwrap();
        let files = conf_files(None, Some(&home), &etc);
        assert_eq!(files.len(), 2);
        assert_eq!(effective("NCCL_DEBUG", &[], &files).unwrap().0, "INFO");
        assert_eq!(effective("NCCL_P2P_DISABLE", &[], &files).unwrap().0, "1");
        let env = [make_var("NCCL_DEBUG", "TRACE")];
        assert_eq!(effective("NCCL_DEBUG", &env, &files), Some(("TRACE", "environment")));
        // NCCL_CONF_FILE replaces ~/.nccl.conf, /etc/nccl.conf is still read.
        let f = conf_files(Some("/nonexistent/x.conf"), Some(&home), &etc);
        assert_eq!(f[0].role, "NCCL_CONF_FILE");
        assert!(!f[0].present);
        assert_eq!(effective("NCCL_DEBUG", &[], &f).unwrap().0, "WARN");
    }
}
