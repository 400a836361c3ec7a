//! The rule attributes that shape a verdict beyond one line (issue 11 points 5, 9, 10):
//! `needs_success`, `success_seen`, `precursor_of`, `other_reading`. The lines are real (cited); the rules are
//! small test rules over them, so each mechanism is seen on its own.

use epdoctor::log::Input;
use epdoctor::model::{Analysis, RunOutcome, Verdict};
use epdoctor::rules::schema::{load_rules, parse_rule_file};
use epdoctor::rules::{Engine, Options};

/// The built-in rules plus `extra` (a rule file's text).
fn engine(extra: &str) -> Engine {
    let mut rules = load_rules(&[]).unwrap();
    rules.extend(parse_rule_file("test-rules.toml", extra).unwrap());
    Engine::new(rules).unwrap()
}

fn analyze(e: &Engine, text: &str) -> Analysis {
    let inputs = [Input::Memory { name: "job.log".into(), text: text.into() }];
    e.analyze(&inputs, &Options { evidence: 3, ..Default::default() }).unwrap()
}

// NVIDIA/nccl#1504 (torch 2.5): NCCL picks its bootstrap interface; the INFO line names it.
const BOOTSTRAP: &str = "paraai-n32-h-01-agent-18:749452:749452 [0] NCCL INFO Bootstrap : Using eth0:172.16.4.235<0>";
// NVIDIA/nccl-tests#166 (comment): the connect that then fails.
const CONNECT_FAILED: &str = "ubuntu:39964:40075 [0] misc/socket.cc:483 NCCL WARN socketStartConnect: Connect to 10.0.0.2<45763> failed : Software caused connection abort";

const PRECURSOR: &str = r#"
[[rule]]
id = "test-bootstrap-interface"
title = "NCCL's bootstrap interface"
category = "test"
severity = "info"
patterns = ['NCCL INFO Bootstrap : Using \w+:']
precursor_of = ["nccl-net-connect-failed", "transport"]
root_cause = "test"
fix = "test"
"#;

#[test]
fn a_precursor_is_silent_alone_and_leads_beside_its_failure() {
    let e = engine(PRECURSOR);
    let alone = analyze(&e, &format!("{BOOTSTRAP}\n"));
    assert_eq!(alone.verdict, Verdict::Clean, "{:?}", alone.findings);
    assert!(alone.findings.is_empty());
    let both = analyze(&e, &format!("{BOOTSTRAP}\n{CONNECT_FAILED}\n"));
    assert_eq!(both.verdict, Verdict::Actionable);
    let p = both.primary.unwrap();
    assert_eq!(p.rule, "test-bootstrap-interface");
    assert!(p.context.unwrap().contains("names the cause of `nccl-net-connect-failed`"));
}

// The H200 run of NCCL 2.32.3 (docs/results): the IB plugin does not come up on a host without IB.
const PLUGIN: &str =
    "[2026-11-29 14:35:35] vm:766:766 [0] plugin/net.cc:229 (ncclNetPluginInit) NCCL ATTN Failed to initialize NET plugin IB";

#[test]
fn needs_success_is_benign_only_on_a_run_seen_to_succeed() {
    let e = engine("");
    let unknown = analyze(&e, &format!("{PLUGIN}\n"));
    assert_eq!(unknown.outcome.status, RunOutcome::Unknown);
    assert_eq!(unknown.verdict, Verdict::Benign);
    assert!(unknown.findings[0].context.as_deref().unwrap().contains("benign only if the run completed"));
    // nccl-tests' footer (NVIDIA/nccl-tests#182) is a success marker.
    let ok = analyze(&e, &format!("{PLUGIN}\n# Avg bus bandwidth    : 21.9137 \n"));
    assert_eq!(ok.outcome.status, RunOutcome::Succeeded);
    assert_eq!(ok.verdict, Verdict::Benign);
    // No caveat left (the catalogue's level note on this ATTN line may remain).
    assert!(!ok.findings[0].context.as_deref().unwrap_or("").contains("benign only if"));
    // Open MPI's banner (NVIDIA/nccl-tests#294) is a failure marker.
    let failed = analyze(
        &e,
        &format!("{PLUGIN}\nmpirun detected that one or more processes exited with non-zero status, thus causing\n"),
    );
    assert_eq!(failed.outcome.status, RunOutcome::Failed);
    let f = failed.findings.iter().find(|f| f.rule == "startup-nccl-net-plugin-init-failed").unwrap();
    assert!(!f.benign);
}

// DeepEP#303: a single-node low-latency test; the IBGDA probe fails, the benchmark runs over NVLink.
const IBGDA: &str = "/DeepEP-test/nvshmem_src/src/host/transport/transport.cpp:nvshmemi_transport_init:282: init failed for transport: IBGDA";
const LL_BENCH: &str =
    "[rank 7] Dispatch + combine bandwidth: 99.09 GB/s, avg_t=222.52 us, min_t=217.31 us, max_t=228.74 us";

#[test]
fn success_seen_is_a_warning_until_the_run_is_seen_to_succeed() {
    let e = engine("");
    let unknown = analyze(&e, &format!("{IBGDA}\n"));
    assert_eq!(unknown.outcome.status, RunOutcome::Unknown);
    assert_eq!(unknown.verdict, Verdict::Actionable);
    let f = &unknown.findings[0];
    assert!(!f.benign && f.context.as_deref().unwrap().contains("harmless only if the run completed"));
    let ok = analyze(&e, &format!("{IBGDA}\n{LL_BENCH}\n"));
    assert_eq!(ok.outcome.status, RunOutcome::Succeeded);
    assert_eq!(ok.verdict, Verdict::Benign);
}

#[test]
fn a_version_not_pinned_down_gives_both_readings() {
    // DeepEP#41's abort pair without NCCL's file:line: only the WARN level narrows the version
    // (these lines are ATTN in 2.32), which leaves both readings.
    let e = engine("");
    let text = "host:1:2 [0] NCCL WARN [Service thread] Could not receive type from localRank 1, res=3, closed=0\n\
                host:1:2 [0] NCCL WARN [Proxy Service 1] Failed to execute operation Close from rank 1, retcode 3\n";
    let a = analyze(&e, text);
    assert!(a.nccl_version.is_none());
    let ctx: Vec<&str> = a.findings.iter().filter_map(|f| f.context.as_deref()).collect();
    assert!(ctx.iter().any(|c| c.contains("only; this reading holds for NCCL >=2.12.7, <2.23.4")), "{ctx:?}");
}
