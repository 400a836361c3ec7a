//! `env`, `clean` and `report` end to end on a machine without a GPU, plus the /proc and
//! library-version parsers on fixture files (tests/fixtures/env/README.md says where each came from).

use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::time::{Duration, Instant};

use crate::common;
use crate::common::cmd::contains;
use epdoctor::env::{libs, vars};
use epdoctor::sys::procs;

fn fixture(name: &str) -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/env").join(name)
}
fn fixture_text(name: &str) -> String {
    std::fs::read_to_string(fixture(name)).unwrap()
}

/// A clean environment: no inherited NCCL_* or EPDOCTOR_* variables, a temp HOME, and a PATH whose
/// first folder may hold a fake python3.
fn epdoctor(home: &Path, bin: &Path) -> common::cmd::Command {
    let mut c = common::cmd::Command::new(common::bin());
    c.env_clear()
        .env("PATH", format!("{}:/usr/local/bin:/usr/bin:/bin:/usr/sbin:/sbin", bin.display()))
        .env("HOME", home)
        .env("NO_COLOR", "1");
    c
}

/// A fake `python3` that answers like the probe with torch 2.11 and the given site-packages.
fn fake_python(bin: &Path, site: &Path) {
    let answer = serde_json::json!({
        "python": "3.12.3",
        "executable": "/usr/bin/python3",
        "site_packages": [site.display().to_string()],
        "torch": "2.11.0+cu130",
        "torch_path": site.join("torch").display().to_string(),
        "torch_cuda": "13.0",
        "torch_nccl": "2.28.9",
    });
    write_exe(&bin.join("python3"), &format!("#!/bin/sh\necho 'some import noise'\necho 'EPDOCTOR-PY {answer}'\n"));
}

fn write_exe(p: &Path, text: &str) {
    std::fs::write(p, text).unwrap();
    std::fs::set_permissions(p, std::fs::Permissions::from_mode(0o755)).unwrap();
}

/// site-packages with the wheel layouts: nvidia/nccl/lib and nvidia/nvshmem/lib, holding the
/// carved bytes of the real libraries.
fn fake_site(root: &Path) -> PathBuf {
    let site = root.join("site-packages");
    let nccl = site.join("nvidia/nccl/lib");
    let nvshmem = site.join("nvidia/nvshmem/lib");
    std::fs::create_dir_all(&nccl).unwrap();
    std::fs::create_dir_all(&nvshmem).unwrap();
    std::fs::create_dir_all(site.join("torch/lib")).unwrap();
    std::fs::copy(fixture("libnccl-2.32.3.rodata.bin"), nccl.join("libnccl.so.2")).unwrap();
    std::fs::copy(fixture("libnvshmem_host-3.8.0.rodata.bin"), nvshmem.join("libnvshmem_host.so.3")).unwrap();
    site
}

fn json(out: &std::process::Output) -> serde_json::Value {
    serde_json::from_slice(&out.stdout)
        .unwrap_or_else(|e| panic!("not JSON ({e}): {}", String::from_utf8_lossy(&out.stdout)))
}

fn check<'a>(v: &'a serde_json::Value, id: &str) -> Vec<&'a serde_json::Value> {
    v["checks"].as_array().unwrap().iter().filter(|c| c["id"] == id).collect()
}

// ---------------------------------------------------------------------------------------------
// Parsers on fixtures

#[test]
fn nccl_versions_from_real_bytes() {
    let b22 = std::fs::read(fixture("libnccl-2.22.3.rodata.bin")).unwrap();
    assert_eq!(libs::nccl_version_in(&b22), Some(("2.22.3".into(), Some("12.5".into()))));
    // Here the "+cuda" string comes first, the help text second: the +cuda form wins either way.
    let b32 = std::fs::read(fixture("libnccl-2.32.3.rodata.bin")).unwrap();
    assert_eq!(libs::nccl_version_in(&b32), Some(("2.32.3".into(), Some("13.4".into()))));
    let mut reversed = b32[500..].to_vec();
    reversed.extend_from_slice(&b32[..500]);
    assert_eq!(libs::nccl_version_in(&reversed), Some(("2.32.3".into(), Some("13.4".into()))));
    // The same through the file reader (not ELF, so the whole-file scan).
    let (v, cuda, how) = libs::read_nccl_version(&fixture("libnccl-2.22.3.rodata.bin")).unwrap().unwrap();
    assert_eq!((v.as_str(), cuda.as_deref(), how.as_str()), ("2.22.3", Some("12.5"), "file scan"));
}

#[test]
fn nvshmem_facts_from_real_bytes() {
    let (facts, _) = libs::read_nvshmem(&fixture("libnvshmem_host-3.8.0.rodata.bin")).unwrap();
    assert_eq!(facts.version.as_deref(), Some("3.8.0"));
    assert_eq!(facts.use_nccl, Some(true));
    assert!(facts.names_libnccl && facts.names_nccl_symbols);
    let s = facts.support(false);
    assert_eq!(s.built_with_nccl, Some(true));
    assert!(s.evidence.contains("NVSHMEM_USE_NCCL=ON"), "{}", s.evidence);
}

#[test]
fn proc_net_unix_fixture() {
    let socks = procs::parse_net_unix(&fixture_text("net_unix.txt"));
    assert_eq!(socks.len(), 6);
    let nccl: Vec<_> =
        socks.iter().filter(|s| s.path.as_deref().is_some_and(epdoctor::sys::names::is_nccl_socket)).collect();
    assert_eq!(nccl.len(), 2);
    assert_eq!(nccl[0].inode, 88121);
    assert!(socks.iter().any(|s| s.path.as_deref() == Some("/var/run/my app/with space.sock")));
    assert!(socks.iter().any(|s| s.inode == 90001 && s.path.is_none()));
}

#[test]
fn sysvipc_fixture_with_large_uids() {
    let segs = procs::parse_sysvipc_shm(&fixture_text("sysvipc_shm.txt"));
    assert_eq!(segs.len(), 2);
    assert_eq!((segs[0].shmid, segs[0].size, segs[0].cpid, segs[0].nattch), (3, 524288, 2213, 2));
    assert_eq!(segs[0].perms, "1600");
    assert_eq!(segs[1].uid, 100000);
    assert!(procs::parse_sysvipc_shm("").is_empty());
}

#[test]
fn mounts_fixture_docker_default_shm() {
    let m = procs::parse_mounts(&fixture_text("mounts_docker_64m.txt"));
    let shm = procs::mount_of(&m, "/dev/shm").unwrap();
    assert_eq!(shm.fstype, "tmpfs");
    assert!(shm.options.contains("size=65536k"), "{}", shm.options);
    assert_eq!(procs::mount_of(&m, "/etc/hosts").unwrap().fstype, "ext4");
    assert_eq!(procs::mount_of(&m, "/usr/lib").unwrap().fstype, "overlay");
}

#[test]
fn cgroup_fixtures() {
    let v1 = procs::parse_cgroup(&fixture_text("cgroup_v1_docker.txt"));
    assert_eq!(v1.len(), 4);
    assert!(procs::container_hint_in_cgroup(&v1).unwrap().contains("docker"));
    let k8s = procs::parse_cgroup(&fixture_text("cgroup_v2_k8s.txt"));
    assert!(procs::container_hint_in_cgroup(&k8s).unwrap().contains("kubepods"));
    let host = procs::parse_cgroup(&fixture_text("cgroup_v2_host.txt"));
    assert_eq!(procs::container_hint_in_cgroup(&host), None);
}

#[test]
fn small_proc_and_etc_fixtures() {
    let (total, avail) = procs::parse_meminfo(&fixture_text("meminfo.txt"));
    assert_eq!(total, Some(2113381344 * 1024));
    assert_eq!(avail, Some(2050000000 * 1024));
    let cap = procs::parse_cap_eff(&fixture_text("status_no_ptrace.txt")).unwrap();
    assert_eq!(cap & (1 << procs::CAP_SYS_PTRACE), 0);
    assert_eq!(
        procs::parse_nvidia_driver_version(&fixture_text("nvidia_version_open.txt")).as_deref(),
        Some("580.95.05")
    );
    assert_eq!(procs::parse_os_release(&fixture_text("os-release.txt")).as_deref(), Some("Ubuntu 24.04.1 LTS"));
    let cache = libs::parse_ldconfig(&fixture_text("ldconfig_p.txt"));
    let nccl: Vec<_> = cache.iter().filter(|(n, _)| libs::is_nccl_name(n)).collect();
    assert_eq!(nccl.len(), 2, "libnccl-net.so is a plugin, not NCCL: {nccl:?}");
    assert!(cache.iter().any(|(n, _)| libs::is_nvshmem_name(n)));
}

#[test]
fn process_scan_on_a_fake_proc_tree() {
    use std::os::unix::fs::MetadataExt;
    let d = tempfile::tempdir().unwrap();
    let shm = d.path().join("shm");
    std::fs::create_dir(&shm).unwrap();
    let opened = shm.join("nccl-open01");
    let mapped = shm.join("nccl-mapped");
    let loose = shm.join("nccl-loose1");
    for f in [&opened, &mapped, &loose] {
        std::fs::write(f, b"x").unwrap();
    }
    let md = std::fs::metadata(&mapped).unwrap();
    let (maj, min) = (libc::major(md.dev()), libc::minor(md.dev()));
    let proc_ = d.path().join("proc");
    let p = proc_.join("4242");
    std::fs::create_dir_all(p.join("fd")).unwrap();
    std::fs::write(p.join("comm"), "python3\n").unwrap();
    std::os::unix::fs::symlink(&opened, p.join("fd/7")).unwrap();
    std::os::unix::fs::symlink("socket:[88121]", p.join("fd/8")).unwrap();
    std::os::unix::fs::symlink("/dev/nvidia0", p.join("fd/9")).unwrap();
    std::fs::write(
        p.join("maps"),
        format!(
            "7f0000000000-7f0000001000 rw-s 00000000 {maj:02x}:{min:02x} {} {}\n7ffd1c5f2000-7ffd1c613000 rw-p 00000000 00:00 0 [stack]\n",
            md.ino(),
            mapped.display()
        ),
    )
    .unwrap();
    let scan = procs::ProcScan::scan(&proc_, std::slice::from_ref(&shm));
    assert!(scan.alive(4242));
    let holder = procs::Holder { pid: 4242, comm: "python3".into() };
    assert_eq!(scan.holders_of(&opened).into_iter().collect::<Vec<_>>(), vec![holder.clone()]);
    assert_eq!(scan.holders_of(&mapped).into_iter().collect::<Vec<_>>(), vec![holder.clone()]);
    assert!(scan.holders_of(&loose).is_empty());
    assert!(scan.sockets[&88121].contains(&holder));
    assert!(scan.nvidia_holders()[&holder].contains("nvidia0"));
}

#[test]
fn conf_file_values_feed_the_effective_value() {
    let d = tempfile::tempdir().unwrap();
    let conf = d.path().join("nccl.conf");
    std::fs::write(&conf, "NCCL_DEBUG=INFO\nNCCL_IB_TOKEN=abc\n").unwrap();
    let files = vars::conf_files(Some(conf.to_str().unwrap()), None, d.path());
    assert_eq!(vars::effective("NCCL_DEBUG", &[], &files).unwrap().0, "INFO");
    assert_eq!(vars::effective("NCCL_IB_TOKEN", &[], &files).unwrap().0, vars::MASK);
}

// ---------------------------------------------------------------------------------------------
// env

#[test]
fn env_text_runs_without_gpu_and_says_so() {
    let d = tempfile::tempdir().unwrap();
    let out = epdoctor(d.path(), d.path()).args(["env", "--python-timeout", "5"]).output().unwrap();
    assert_eq!(out.status.code(), Some(0), "{}", String::from_utf8_lossy(&out.stderr));
    let text = String::from_utf8(out.stdout).unwrap();
    for part in [
        "host:",
        "gpu:",
        "libnccl",
        "NVSHMEM host library",
        "variables",
        "leftovers",
        "checklist",
        "[warn] NCCL_DEBUG is not set where epdoctor ran",
    ] {
        assert!(text.contains(part), "missing {part:?} in:\n{text}");
    }
    // The hint says whose environment it describes: this shell's, not necessarily the job's.
    assert!(
        text.contains("a job started from this environment") && text.contains("the job's own environment"),
        "{text}"
    );
    // SAFETY: only tries to dlopen libcuda.
    if !unsafe { cudarc::driver::sys::is_culib_present() } {
        assert!(text.contains("gpu:               no GPU driver"), "{text}");
        assert!(text.contains("[info] no GPU driver"), "{text}");
    }
}

#[test]
fn env_json_lists_libraries_torch_and_nvshmem() {
    let d = tempfile::tempdir().unwrap();
    let bin = d.path().join("bin");
    std::fs::create_dir(&bin).unwrap();
    let site = fake_site(d.path());
    fake_python(&bin, &site);
    // A second NCCL on LD_LIBRARY_PATH, with the usual symlink chain.
    let llp = d.path().join("llp");
    std::fs::create_dir(&llp).unwrap();
    std::fs::copy(fixture("libnccl-2.22.3.rodata.bin"), llp.join("libnccl.so.2.22.3")).unwrap();
    std::os::unix::fs::symlink("libnccl.so.2.22.3", llp.join("libnccl.so.2")).unwrap();
    std::os::unix::fs::symlink("libnccl.so.2", llp.join("libnccl.so")).unwrap();
    std::fs::write(llp.join("libnccl-net.so"), b"plugin, not NCCL").unwrap();
    let out = epdoctor(d.path(), &bin).env("LD_LIBRARY_PATH", &llp).args(["env", "--format", "json"]).output().unwrap();
    assert_eq!(out.status.code(), Some(0), "{}", String::from_utf8_lossy(&out.stderr));
    let v = json(&out);
    assert_eq!(v["schema_version"], 1);
    let nccl = v["libraries"]["nccl"].as_array().unwrap();
    let ours22 = nccl
        .iter()
        .find(|l| l["real_path"].as_str().unwrap().ends_with("llp/libnccl.so.2.22.3"))
        .expect("the LD_LIBRARY_PATH copy");
    assert_eq!(ours22["version"], "2.22.3");
    assert_eq!(ours22["cuda"], "12.5");
    assert_eq!(ours22["loader_default"], true, "first on LD_LIBRARY_PATH");
    let mut names: Vec<&str> = ours22["names"].as_array().unwrap().iter().map(|n| n.as_str().unwrap()).collect();
    names.sort();
    assert_eq!(names, ["libnccl.so", "libnccl.so.2", "libnccl.so.2.22.3"], "symlinks fold into one entry");
    let ours32 = nccl.iter().find(|l| l["path"].as_str().unwrap().contains("nvidia/nccl/lib")).expect("the wheel copy");
    assert_eq!(ours32["version"], "2.32.3");
    assert_eq!(ours32["found_via"][0], "python: nvidia/nccl");
    assert!(!nccl.iter().any(|l| l["path"].as_str().unwrap().ends_with("libnccl-net.so")));
    let nvshmem = &v["libraries"]["nvshmem"][0];
    assert_eq!(nvshmem["version"], "3.8.0");
    assert_eq!(nvshmem["nccl_support"]["built_with_nccl"], true);
    assert_eq!(v["python"]["torch"], "2.11.0+cu130");
    assert_eq!(v["python"]["torch_nccl"], "2.28.9");
    // The checklist: one line per NCCL version (two libraries + torch's), torch >= 2.6 is the clean path.
    let versions: Vec<String> =
        check(&v, "nccl-version").iter().map(|c| c["title"].as_str().unwrap().to_string()).collect();
    assert!(versions.iter().any(|t| t.starts_with("NCCL 2.22.3")), "{versions:?}");
    assert!(versions.iter().any(|t| t.starts_with("NCCL 2.32.3")), "{versions:?}");
    assert!(versions.iter().any(|t| t.starts_with("NCCL 2.28.9 (torch")), "{versions:?}");
    let old = check(&v, "nccl-version")
        .into_iter()
        .find(|c| c["title"].as_str().unwrap().starts_with("NCCL 2.22.3"))
        .unwrap();
    assert_eq!(old["status"], "warn");
    assert_eq!(check(&v, "torch-teardown")[0]["status"], "ok");
    assert_eq!(check(&v, "nccl-libraries")[0]["status"], "warn", "two different versions");
    let nv = check(&v, "nvshmem");
    assert!(nv[0]["title"].as_str().unwrap().contains("built with NCCL support"));
    assert!(nv[0]["detail"].as_str().unwrap().contains("NVSHMEM_DISABLE_NCCL"));
    // NCCL's own SHM facts: never SysV.
    assert!(check(&v, "sysv-shm")[0]["detail"].as_str().unwrap().contains("never uses SysV"));
}

#[test]
fn env_python_timeout_is_bounded() {
    let d = tempfile::tempdir().unwrap();
    write_exe(&d.path().join("python3"), "#!/bin/sh\nexec sleep 30\n");
    let start = Instant::now();
    let out =
        epdoctor(d.path(), d.path()).args(["env", "--format", "json", "--python-timeout", "0.5"]).output().unwrap();
    assert!(start.elapsed() < Duration::from_secs(15), "took {:?}", start.elapsed());
    assert_eq!(out.status.code(), Some(0));
    let v = json(&out);
    assert_eq!(v["python"]["status"], "timed out");
    assert_eq!(check(&v, "torch")[0]["title"], "python3 probe: timed out");
}

/// `EPDOCTOR_FORMAT=github` (set for explain in CI): env has no such format, so it writes text and
/// says so on stderr instead of refusing to run (issue 28).
#[test]
fn env_falls_back_to_text_under_a_format_variable_it_lacks() {
    let d = tempfile::tempdir().unwrap();
    write_exe(&d.path().join("python3"), "#!/bin/sh\nexit 1\n");
    let out = epdoctor(d.path(), d.path())
        .env("EPDOCTOR_FORMAT", "github")
        .args(["env", "--python-timeout", "5"])
        .output()
        .unwrap();
    let (stdout, stderr) = (String::from_utf8_lossy(&out.stdout), String::from_utf8_lossy(&out.stderr));
    assert_eq!(out.status.code(), Some(0), "{stderr}");
    assert!(stderr.contains("EPDOCTOR_FORMAT=github is not a format of `epdoctor env`"), "{stderr}");
    assert!(serde_json::from_str::<serde_json::Value>(&stdout).is_err() && !stdout.contains("::"), "text: {stdout}");
    assert!(stdout.contains("libnccl") || stdout.contains("python"), "the text report: {stdout}");
    // A format env has is used, silently.
    let out = epdoctor(d.path(), d.path())
        .env("EPDOCTOR_FORMAT", "json")
        .args(["env", "--python-timeout", "5"])
        .output()
        .unwrap();
    let _ = json(&out);
    assert!(out.stderr.is_empty(), "{}", String::from_utf8_lossy(&out.stderr));
}

#[test]
fn env_bad_timeout_is_a_usage_error() {
    let d = tempfile::tempdir().unwrap();
    epdoctor(d.path(), d.path())
        .args(["env", "--python-timeout", "0"])
        .assert()
        .code(2)
        .stderr(contains("--python-timeout"));
}

#[test]
fn env_checks_follow_variables_and_config_files() {
    let d = tempfile::tempdir().unwrap();
    let conf = d.path().join("my-nccl.conf");
    std::fs::write(&conf, "# site settings\nNCCL_DEBUG=INFO\n").unwrap();
    let out = epdoctor(d.path(), d.path())
        .env("NCCL_CONF_FILE", &conf)
        .env("NVSHMEM_USE_NCCL", "0")
        .env("NCCL_ABORT_ON_ERROR", "1")
        .env("NCCL_IB_TOKEN", "s3cr3t-value")
        .env("TORCH_NCCL_ASYNC_ERROR_HANDLING", "1")
        .args(["env", "--format", "json", "--python-timeout", "5"])
        .output()
        .unwrap();
    let v = json(&out);
    let dbg = &check(&v, "nccl-debug")[0];
    assert_eq!(dbg["status"], "ok");
    assert_eq!(dbg["title"], "NCCL_DEBUG=INFO");
    assert!(dbg["detail"].as_str().unwrap().contains("my-nccl.conf"));
    assert_eq!(check(&v, "nvshmem-use-nccl")[0]["status"], "warn");
    assert_eq!(check(&v, "unknown-variable")[0]["status"], "warn");
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(!text.contains("s3cr3t-value"), "secret-looking values are masked in every format");
    let vars = v["variables"].as_array().unwrap();
    assert!(vars.iter().any(|x| x["name"] == "TORCH_NCCL_ASYNC_ERROR_HANDLING" && x["value"] == "1"));
    assert!(vars.iter().any(|x| x["name"] == "NCCL_IB_TOKEN" && x["masked"] == true));
    assert!(v["config_files"]
        .as_array()
        .unwrap()
        .iter()
        .any(|f| f["role"] == "NCCL_CONF_FILE" && f["present"] == true));
}

fn hostname() -> Option<String> {
    let h = std::fs::read_to_string("/proc/sys/kernel/hostname").ok()?.trim().to_string();
    (h.len() >= 2 && h != "localhost").then_some(h)
}

fn has_word(text: &str, word: &str) -> bool {
    regex::Regex::new(&format!(r"\b{}\b", regex::escape(word))).unwrap().is_match(text)
}

#[test]
fn env_markdown_is_redacted_unless_asked() {
    let d = tempfile::tempdir().unwrap();
    let md = epdoctor(d.path(), d.path()).args(["env", "--format", "md", "--python-timeout", "5"]).output().unwrap();
    assert_eq!(md.status.code(), Some(0));
    let md = String::from_utf8(md.stdout).unwrap();
    assert!(md.contains("## Environment"), "{md}");
    assert!(md.contains("### Checklist"));
    assert!(md.contains("<details>"));
    if let Some(h) = hostname() {
        assert!(!has_word(&md, &h), "hostname {h} leaked:\n{md}");
        assert!(md.contains("host-1"), "{md}");
        let raw = epdoctor(d.path(), d.path())
            .args(["env", "--format", "md", "--no-redact", "--python-timeout", "5"])
            .output()
            .unwrap();
        assert!(has_word(&String::from_utf8_lossy(&raw.stdout), &h));
    }
}

// ---------------------------------------------------------------------------------------------
// clean

struct Child(std::process::Child);
impl Drop for Child {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// A child that holds `path` open on fd 3 until killed.
fn hold_open(path: &Path) -> Child {
    let c = std::process::Command::new("/bin/sh")
        .arg("-c")
        .arg("exec 3<\"$1\"; exec sleep 60")
        .arg("sh")
        .arg(path)
        .stdin(Stdio::null())
        .spawn()
        .unwrap();
    // Wait until the fd is there.
    let fd3 = PathBuf::from(format!("/proc/{}/fd/3", c.id()));
    let t = Instant::now();
    while std::fs::read_link(&fd3).ok().as_deref() != Some(path) && t.elapsed() < Duration::from_secs(5) {
        std::thread::sleep(Duration::from_millis(20));
    }
    Child(c)
}

#[test]
fn clean_dry_run_lists_and_keeps() {
    let d = tempfile::tempdir().unwrap();
    let stale = d.path().join("nccl-Ab12Cd");
    std::fs::write(&stale, vec![0u8; 8192]).unwrap();
    std::fs::write(d.path().join("other-file"), b"x").unwrap();
    let out = epdoctor(d.path(), d.path()).args(["clean", "--dir"]).arg(d.path()).output().unwrap();
    assert_eq!(out.status.code(), Some(0));
    let text = String::from_utf8(out.stdout).unwrap();
    assert!(text.contains("1 nccl-* file(s)"), "{text}");
    assert!(text.contains("stale") && text.contains("nccl-Ab12Cd"), "{text}");
    assert!(text.contains("dry run"), "{text}");
    assert!(!text.contains("other-file"));
    assert!(stale.exists(), "a dry run deletes nothing");
}

#[test]
fn clean_yes_deletes_only_unheld_nccl_files() {
    let d = tempfile::tempdir().unwrap();
    let stale = d.path().join("nccl-stale1");
    let held = d.path().join("nccl-held01");
    let mapped = d.path().join("nccl-mappd1");
    let torch = d.path().join("torch_1_2_3");
    let other = d.path().join("unrelated");
    for f in [&stale, &held, &mapped, &torch, &other] {
        std::fs::write(f, vec![1u8; 4096]).unwrap();
    }
    // A FIFO with an NCCL-like name is not NCCL's and must not block the scan.
    let fifo = d.path().join("nccl-fifo01");
    let c = std::ffi::CString::new(fifo.to_str().unwrap()).unwrap();
    // SAFETY: a valid NUL-terminated path.
    assert_eq!(unsafe { libc::mkfifo(c.as_ptr(), 0o600) }, 0);
    let _child = hold_open(&held);
    // This test process maps one file and closes the fd, as NCCL does after mmap.
    let map = {
        use std::os::fd::AsRawFd;
        let f = std::fs::OpenOptions::new().read(true).write(true).open(&mapped).unwrap();
        // SAFETY: a fresh shared mapping of a 4 KiB file we own; unmapped below.
        let p = unsafe {
            libc::mmap(
                std::ptr::null_mut(),
                4096,
                libc::PROT_READ | libc::PROT_WRITE,
                libc::MAP_SHARED,
                f.as_raw_fd(),
                0,
            )
        };
        assert_ne!(p, libc::MAP_FAILED);
        p
    };
    let out = epdoctor(d.path(), d.path()).args(["clean", "--yes", "--dir"]).arg(d.path()).output().unwrap();
    // SAFETY: the mapping made above.
    unsafe { libc::munmap(map, 4096) };
    let text = String::from_utf8(out.stdout).unwrap();
    assert_eq!(out.status.code(), Some(0), "{text}");
    assert!(!stale.exists(), "{text}");
    assert!(held.exists(), "a file open in a live process is never deleted:\n{text}");
    assert!(mapped.exists(), "a file mapped by a live process is never deleted:\n{text}");
    assert!(torch.exists() && other.exists(), "only nccl-* files are touched");
    assert!(fifo.exists(), "only regular files are touched");
    assert!(text.contains("deleted 1 file(s)"), "{text}");
    assert!(text.contains("held by"), "{text}");
}

#[test]
fn clean_bad_dir_is_an_error_naming_it() {
    let d = tempfile::tempdir().unwrap();
    let missing = d.path().join("no-such-dir");
    epdoctor(d.path(), d.path())
        .args(["clean", "--dir"])
        .arg(&missing)
        .assert()
        .code(2)
        .stderr(contains("no-such-dir").and(contains("does not exist")));
    // A file where a folder should be is a different mistake, said as such.
    let file = d.path().join("a-file");
    std::fs::write(&file, "x").unwrap();
    epdoctor(d.path(), d.path())
        .args(["clean", "--dir"])
        .arg(&file)
        .assert()
        .code(2)
        .stderr(contains("a-file is not a folder"));
}

// ---------------------------------------------------------------------------------------------
// report

fn example_log() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("examples/h200-nccl-2.22.3-abort-teardown.log")
}

#[test]
fn report_to_a_new_file_and_never_over_one() {
    let d = tempfile::tempdir().unwrap();
    let out = d.path().join("issue.md");
    epdoctor(d.path(), d.path())
        .args(["report", "--python-timeout", "5", "-o"])
        .arg(&out)
        .arg(example_log())
        .assert()
        .code(0);
    let md = std::fs::read_to_string(&out).unwrap();
    for part in [
        "# epdoctor report",
        "logs: verdict **benign**",
        "## Logs",
        "epdoctor explain",
        "## Environment",
        "The machine `epdoctor report` ran on, which need not be where the job ran.",
        "### Checklist",
    ] {
        assert!(md.contains(part), "missing {part:?}:\n{md}");
    }
    // The log's own host (0bc8f5b83646 in DeepEP #41) and this machine's are redacted.
    assert!(!md.contains("0bc8f5b83646"), "{md}");
    if let Some(h) = hostname() {
        assert!(!has_word(&md, &h), "hostname {h} leaked");
    }
    // A second run to the same file fails and leaves it alone.
    epdoctor(d.path(), d.path())
        .args(["report", "--python-timeout", "5", "-o"])
        .arg(&out)
        .arg(example_log())
        .assert()
        .code(2)
        .stderr(contains("already exists"));
    assert_eq!(std::fs::read_to_string(&out).unwrap(), md);
}

#[test]
fn report_with_a_repro_folder() {
    let d = tempfile::tempdir().unwrap();
    let run = repro_run(d.path(), "run", "echo ran");
    // A run cut short: cells.json says so (repro rewrites it after every cell).
    let cells = run.join("cells.json");
    let mut v: serde_json::Value = serde_json::from_str(&std::fs::read_to_string(&cells).unwrap()).unwrap();
    v["status"] = "interrupted".into();
    std::fs::write(&cells, v.to_string()).unwrap();
    let out =
        epdoctor(d.path(), d.path()).args(["report", "--python-timeout", "5", "--repro"]).arg(&run).output().unwrap();
    assert_eq!(out.status.code(), Some(0), "{}", String::from_utf8_lossy(&out.stderr));
    let md = String::from_utf8(out.stdout).unwrap();
    assert!(md.contains("## Reproduction"), "{md}");
    assert!(md.contains("\n### epdoctor repro\n"), "headings are nested under Reproduction:\n{md}");
    assert!(md.contains("#### Cells"), "{md}");
    assert!(md.contains("PARTIAL: interrupted"), "{md}");
    assert!(md.contains("No logs were given"));
}

#[test]
fn report_repro_folder_without_cells_json_is_a_clear_error() {
    let d = tempfile::tempdir().unwrap();
    epdoctor(d.path(), d.path())
        .args(["report", "--repro"])
        .arg(d.path())
        .assert()
        .code(2)
        .stderr(contains("no cells.json in it"));
}

#[test]
fn report_bad_inputs_are_clear_errors() {
    let d = tempfile::tempdir().unwrap();
    epdoctor(d.path(), d.path())
        .args(["report", "-o"])
        .arg(d.path().join("no-such-folder/r.md"))
        .arg(example_log())
        .assert()
        .code(2)
        .stderr(contains("no-such-folder"));
    epdoctor(d.path(), d.path())
        .args(["report", "--python-timeout", "5"])
        .arg(d.path().join("missing.log"))
        .assert()
        .code(2)
        .stderr(contains("missing.log"));
}

/// A real repro run folder: `script` run by `sh -c` as the user's command, one cell.
fn repro_run(d: &Path, name: &str, script: &str) -> PathBuf {
    let run = d.join(name);
    let out =
        epdoctor(d, d).args(["repro", "-q", "--out"]).arg(&run).args(["--", "sh", "-c", script]).output().unwrap();
    assert!(run.join("cells.json").is_file(), "{}", String::from_utf8_lossy(&out.stderr));
    run
}

const PEER_LINE: &str =
    "gpu-a17:1139:1151 [0] misc/socket.cc:50 NCCL WARN socketProgress: Connection closed by remote peer gpu-a18<41234>";

#[test]
fn report_is_one_document_with_one_redactor() {
    let d = tempfile::tempdir().unwrap();
    // The run sees another host first, so a redactor of its own would number gpu-a17 differently.
    let run = repro_run(
        d.path(),
        "run",
        &format!("echo 'other-node:5:5 [0] x.cc:1 NCCL WARN first'; echo '{PEER_LINE}'; exit 1"),
    );
    let out = epdoctor(d.path(), d.path())
        .args(["report", "--python-timeout", "5"])
        .arg("tests/fixtures/snap/two-ranks.log")
        .arg("--repro")
        .arg(&run)
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(0), "{}", String::from_utf8_lossy(&out.stderr));
    let md = String::from_utf8(out.stdout).unwrap();
    for leak in ["gpu-a17", "gpu-a18", "other-node"] {
        assert!(!md.contains(leak), "{leak} unredacted:\n{md}");
    }
    let names: std::collections::BTreeSet<&str> = md
        .lines()
        .filter_map(|l| l.find(":1139:1151 [0] misc/socket.cc:50").map(|i| l[..i].rsplit([' ', '`']).next().unwrap()))
        .collect();
    assert!(md.contains("## Reproduction") && md.contains("last line"), "{md}");
    assert_eq!(names.len(), 1, "one host, one pseudonym in the whole document: {names:?}\n{md}");
}

#[test]
fn report_takes_several_repro_folders_and_refuses_one_given_as_a_log() {
    let d = tempfile::tempdir().unwrap();
    let a = repro_run(d.path(), "run-a", "echo a-ran");
    let b = repro_run(d.path(), "run-b", "echo b-ran; exit 1");
    // One folder per --repro: the log after the first is a log, wherever it stands (issue 28).
    let out = epdoctor(d.path(), d.path())
        .args(["report", "--python-timeout", "5", "--repro"])
        .arg(&a)
        .arg(example_log())
        .arg("--repro")
        .arg(&b)
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(0), "{}", String::from_utf8_lossy(&out.stderr));
    let md = String::from_utf8(out.stdout).unwrap();
    assert_eq!(md.matches("## Reproduction").count(), 2, "{md}");
    assert!(md.contains("run-a") && md.contains("run-b") && md.contains("b-ran"), "{md}");
    assert!(md.contains("logs: verdict **benign**"), "the log is still explained: {md}");
    // A run folder among the logs (`--repro a/ b/`: one --repro for two folders) is refused.
    let out = epdoctor(d.path(), d.path())
        .args(["report", "--python-timeout", "5"])
        .arg(&b)
        .arg("--repro")
        .arg(&a)
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(2));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("run-b") && err.contains("is a repro run folder") && err.contains("--repro"), "{err}");
}

/// Checks cite public sources (or docs/), never a document outside the repository.
#[test]
fn env_checks_cite_nothing_outside_the_repository() {
    let d = tempfile::tempdir().unwrap();
    for extra in [
        vec![],
        vec![
            ("NCCL_DEBUG", "WARN"),
            ("NVSHMEM_USE_NCCL", "0"),
            ("NCCL_ABORT_ON_ERROR", "1"),
            ("NCCL_NVLS_ENABLE", "1"),
        ],
    ] {
        let mut c = epdoctor(d.path(), d.path());
        for (k, v) in &extra {
            c.env(k, v);
        }
        let out = c.args(["env", "--format", "json", "--python-timeout", "5"]).output().unwrap();
        let v = json(&out);
        for c in v["checks"].as_array().unwrap() {
            let all = c.to_string();
            assert!(!all.contains('§') && !all.contains("facts"), "{all}");
        }
    }
    let src = std::fs::read_to_string("src/env/checks.rs").unwrap();
    assert!(!src.contains("facts §"), "a check cites the shared facts document");
}

/// A venv whose lib64 is a link to lib (as `python -m venv` makes on many distributions): Python
/// names both site-packages, LD_LIBRARY_PATH may name either; it is one library, listed once, and
/// the other path it was found under is shown (issue 28, point 6).
#[test]
fn a_library_reached_through_a_linked_folder_is_listed_once_with_its_links() {
    let d = tempfile::tempdir().unwrap();
    let bin = d.path().join("bin");
    std::fs::create_dir(&bin).unwrap();
    let venv = d.path().join("venv");
    let lib_site = venv.join("lib/python3.12/site-packages");
    std::fs::create_dir_all(lib_site.join("nvidia/nccl/lib")).unwrap();
    std::fs::copy(fixture("libnccl-2.32.3.rodata.bin"), lib_site.join("nvidia/nccl/lib/libnccl.so.2")).unwrap();
    std::os::unix::fs::symlink("lib", venv.join("lib64")).unwrap();
    let lib64_site = venv.join("lib64/python3.12/site-packages");
    let answer = serde_json::json!({
        "python": "3.12.3",
        "executable": venv.join("bin/python3").display().to_string(),
        "site_packages": [lib64_site.display().to_string(), lib_site.display().to_string()],
    });
    write_exe(&bin.join("python3"), &format!("#!/bin/sh\necho 'EPDOCTOR-PY {answer}'\n"));
    let out = epdoctor(d.path(), &bin)
        .env("LD_LIBRARY_PATH", lib_site.join("nvidia/nccl/lib"))
        .args(["env", "--format", "json", "--python-timeout", "5"])
        .output()
        .unwrap();
    let v = json(&out);
    let ours: Vec<&serde_json::Value> = v["libraries"]["nccl"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|l| {
            l["real_path"].as_str().unwrap().starts_with(&d.path().canonicalize().unwrap().display().to_string())
        })
        .collect();
    assert_eq!(ours.len(), 1, "one file, one entry: {ours:#?}");
    let seen: Vec<&str> =
        ours[0]["also_at"].as_array().map_or(vec![], |a| a.iter().map(|p| p.as_str().unwrap()).collect());
    assert!(seen.iter().any(|p| p.contains("lib64/python3.12")), "the lib64 path is shown: {:#?}", ours[0]);
    let text = epdoctor(d.path(), &bin)
        .env("LD_LIBRARY_PATH", lib_site.join("nvidia/nccl/lib"))
        .args(["env", "--python-timeout", "5"])
        .output()
        .unwrap();
    let text = String::from_utf8_lossy(&text.stdout).into_owned();
    assert!(text.contains("lib64/python3.12"), "the text names the link too:\n{text}");
}
