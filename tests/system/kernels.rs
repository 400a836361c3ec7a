//! The workload's kernels compile to PTX with NVRTC, and the worker fails cleanly without a GPU.
//!
//! Compiling needs libnvrtc. Without it these tests print a notice and skip, unless
//! EPDOCTOR_REQUIRE_NVRTC=1 (set by CI, which installs the nvidia-cuda-nvrtc-cu12 wheel), which
//! turns the skip into a failure.

use std::io::Write as _;

const ENTRIES: [&str; 4] = ["ep_notify", "ep_dispatch", "ep_combine", "ep_barrier"];

use crate::common::epdoctor;

/// True when NVRTC can be loaded; otherwise skip (or fail when CI requires NVRTC).
fn nvrtc_or_skip(test: &str) -> bool {
    if epdoctor::worker::kernels::nvrtc_present() {
        return true;
    }
    if std::env::var("EPDOCTOR_REQUIRE_NVRTC").is_ok_and(|v| v == "1") {
        panic!(
            "{test}: libnvrtc cannot be loaded and EPDOCTOR_REQUIRE_NVRTC=1; put NVRTC's lib folder on LD_LIBRARY_PATH"
        );
    }
    notice(&format!("{test} skipped: libnvrtc not found (set LD_LIBRARY_PATH to an NVRTC lib folder to run it)"));
    false
}

/// Straight to the stderr handle: the test harness captures eprintln! of passing tests.
fn notice(msg: &str) {
    let _ = writeln!(std::io::stderr().lock(), "NOTICE: {msg}");
}

#[test]
fn every_kernel_compiles_to_ptx_for_sm_90() {
    if !nvrtc_or_skip("every_kernel_compiles_to_ptx_for_sm_90") {
        return;
    }
    let tmp = tempfile::tempdir().unwrap();
    let out_dir = tmp.path().join("ptx");
    let assert = epdoctor()
        .env("XDG_CACHE_HOME", tmp.path().join("cache"))
        .args(["kernels", "--arch", "sm_90", "--out"])
        .arg(&out_dir)
        .assert()
        .success();
    let stdout = String::from_utf8_lossy(&assert.get_output().stdout).into_owned();
    for e in ENTRIES {
        assert!(stdout.lines().any(|l| l.trim() == e), "entry point {e} not listed:\n{stdout}");
    }
    let ptx = std::fs::read_to_string(out_dir.join("intranode.sm_90.ptx")).unwrap();
    assert!(ptx.contains(".target sm_90"), "PTX is not for sm_90");
    for e in ENTRIES {
        assert!(ptx.contains(&format!(".entry {e}(")), "PTX lacks .entry {e}");
    }
    // The file is never overwritten.
    let again = epdoctor().args(["kernels", "--arch", "sm_90", "--out"]).arg(&out_dir).assert().code(2);
    assert!(String::from_utf8_lossy(&again.get_output().stderr).contains("already exists"));
}

#[test]
fn kernels_compile_for_other_architectures() {
    if !nvrtc_or_skip("kernels_compile_for_other_architectures") {
        return;
    }
    for arch in ["sm_80", "sm_90a"] {
        let a = epdoctor()
            .env("XDG_CACHE_HOME", tempfile::tempdir().unwrap().path())
            .args(["kernels", "--arch", arch])
            .assert()
            .success();
        let out = String::from_utf8_lossy(&a.get_output().stdout).into_owned();
        assert!(ENTRIES.iter().all(|e| out.contains(e)), "{arch}:\n{out}");
    }
}

#[test]
fn kernels_rejects_a_bad_arch_before_loading_nvrtc() {
    let a = epdoctor().args(["kernels", "--arch", "banana"]).assert().code(2);
    let err = String::from_utf8_lossy(&a.get_output().stderr).into_owned();
    assert!(err.contains("--arch banana") && err.contains("sm_XY"), "{err}");
    let a = epdoctor().args(["kernels", "--arch", "sm_60"]).assert().code(2);
    assert!(String::from_utf8_lossy(&a.get_output().stderr).contains("7.0 or newer"));
    // No GPU has compute capability 900.0: a usage error here too, with or without NVRTC.
    let a = epdoctor().args(["kernels", "--arch", "sm_9000"]).assert().code(2);
    let err = String::from_utf8_lossy(&a.get_output().stderr).into_owned();
    assert!(err.contains("--arch sm_9000") && err.contains("sm_90,"), "{err}");
}

#[test]
fn worker_names_the_bad_flag() {
    let tmp = tempfile::tempdir().unwrap();
    let rdv = tmp.path().join("rdv");
    let cases: [(&[&str], &str); 6] = [
        (&["--rank", "2", "--world", "2"], "--rank 2 is out of range"),
        (&["--rank", "0", "--world", "2", "--teardown", "nuke"], "--teardown nuke"),
        (&["--rank", "0", "--world", "2", "--hidden", "7"], "--hidden 7"),
        (&["--rank", "0", "--world", "3", "--experts", "256"], "--experts 256"),
        (&["--rank", "0", "--world", "1", "--teardown", "kill-peer"], "--world 2 or more"),
        (&["--rank", "0", "--world", "2", "--iters", "0"], "--iters"),
    ];
    for (args, want) in cases {
        let a = epdoctor().arg("worker").arg("--rendezvous").arg(&rdv).args(args).assert().code(2);
        let err = String::from_utf8_lossy(&a.get_output().stderr).into_owned();
        assert!(err.contains(want), "{args:?}: expected {want:?} in {err:?}");
        assert!(!err.contains("panicked"), "{err}");
    }
    let a = epdoctor()
        .env("EPDOCTOR_BARRIER_TIMEOUT", "soon")
        .args(["worker", "--rank", "0", "--world", "2", "--rendezvous"])
        .arg(&rdv)
        .assert()
        .code(2);
    assert!(String::from_utf8_lossy(&a.get_output().stderr).contains("EPDOCTOR_BARRIER_TIMEOUT=soon"));
}

#[test]
fn worker_without_a_driver_says_which_library_is_missing() {
    // SAFETY: dlopen/dlclose of candidate names only.
    if unsafe { cudarc::driver::sys::is_culib_present() } {
        notice("worker_without_a_driver_says_which_library_is_missing skipped: this machine has libcuda");
        return;
    }
    let tmp = tempfile::tempdir().unwrap();
    let a = epdoctor().args(["worker", "--rank", "0", "--world", "2", "--rendezvous"]).arg(tmp.path()).assert().code(2);
    let err = String::from_utf8_lossy(&a.get_output().stderr).into_owned();
    assert_eq!(err.trim_end().lines().count(), 1, "one line expected:\n{err}");
    assert!(err.contains("libcuda.so.1") && err.contains("explain"), "{err}");
    assert!(!err.contains("panicked"));
    assert!(a.get_output().stdout.is_empty(), "no marker line before the libraries are known");
}

#[test]
fn kernels_without_nvrtc_is_a_clear_error() {
    if epdoctor::worker::kernels::nvrtc_present() {
        notice("kernels_without_nvrtc_is_a_clear_error skipped: this machine has libnvrtc");
        return;
    }
    let a = epdoctor().args(["kernels", "--arch", "sm_90"]).assert().code(2);
    let err = String::from_utf8_lossy(&a.get_output().stderr).into_owned();
    assert!(err.contains("libnvrtc") && !err.contains("panicked"), "{err}");
}
