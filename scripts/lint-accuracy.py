#!/usr/bin/env python3
"""Precision and recall of `epdoctor lint` per check, on hand-labelled public scripts.

The labels are tests/lint-labels.toml (repository, commit, files, and the real mistakes with their
line). The code itself is not in this repository: CORPUS/<owner>+<name>/ must hold each repository
at the labelled commit (see docs/lint.md, "Accuracy", for how to fetch it). Each unit is one
`epdoctor lint --format json FILE...` run from the repository's root, with EPDOCTOR_PYTHON=none so
that this machine's Python does not decide the torch version (the project's pins do).

A finding at warning or error level is a claim of a mistake: it is a true positive when a label
names the same check, file and line (or one of the label's `also` lines), a false positive
otherwise. Info findings are advice, counted but not scored. Recall is over the labelled mistakes.

Python 3.11+ standard library only. Exit status: 0 whatever the figures; 2 when the labels are
malformed, a labelled file is missing from the corpus, or the binary cannot run.
"""

import argparse
import json
import os
import subprocess
import sys
import tomllib
from collections import defaultdict
from pathlib import Path

SCORED = ("warning", "error", "fatal")


def fail(msg):
    print(f"lint-accuracy: {msg}", file=sys.stderr)
    sys.exit(2)


def load(labels):
    try:
        data = tomllib.loads(labels.read_text(encoding="utf-8"))
    except (OSError, tomllib.TOMLDecodeError) as e:
        fail(f"{labels}: {e}")
    units = data.get("unit")
    if not isinstance(units, list) or not units:
        fail(f"{labels}: no [[unit]] tables")
    for i, u in enumerate(units):
        for k in ("repo", "commit", "files", "mistakes"):
            if k not in u:
                fail(f"{labels}: unit {i + 1} ({u.get('repo', '?')}) has no `{k}`")
        for m in u["mistakes"]:
            for k in ("path", "line", "check", "what"):
                if k not in m:
                    fail(f"{labels}: unit {i + 1} ({u['repo']}): a mistake has no `{k}`")
            if m["path"] not in u["files"]:
                fail(f"{labels}: unit {i + 1} ({u['repo']}): {m['path']} is not among its files")
    return units


def run(binary, root, files, extra):
    env = dict(os.environ)
    env["EPDOCTOR_PYTHON"] = "none"
    env.pop("EPDOCTOR_TORCH", None)
    env["NO_COLOR"] = "1"
    try:
        p = subprocess.run([binary, "lint", "--format", "json", *extra, *files], cwd=root, env=env,
                           capture_output=True, text=True, timeout=600)
    except (OSError, subprocess.TimeoutExpired) as e:
        fail(f"cannot run {binary}: {e}")
    if p.returncode not in (0, 1, 2):
        fail(f"{binary} lint in {root} exited {p.returncode}: {p.stderr.strip()[:400]}")
    try:
        return json.loads(p.stdout)
    except json.JSONDecodeError:
        fail(f"{binary} lint in {root} did not print JSON (exit {p.returncode}): {p.stderr.strip()[:400]}")


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--epdoctor", default="target/release/epdoctor", help="the binary to measure")
    ap.add_argument("--corpus", default="/tmp/lint-corpus", type=Path, help="CORPUS/<owner>+<name>/ folders")
    ap.add_argument("--labels", default=Path(__file__).resolve().parent.parent / "tests/lint-labels.toml", type=Path)
    ap.add_argument("--verbose", action="store_true", help="list every false positive and missed mistake")
    ap.add_argument("--lint-arg", action="append", default=[], help="extra argument for `epdoctor lint`")
    a = ap.parse_args()
    binary = str(Path(a.epdoctor).resolve()) if os.sep in a.epdoctor else a.epdoctor

    units = load(a.labels)
    tp = defaultdict(int)
    fp = defaultdict(int)
    labelled = defaultdict(int)
    found = defaultdict(int)
    info = defaultdict(int)
    fps, fns, torch_seen = [], [], []
    errors = 0
    for u in units:
        root = a.corpus / u["repo"].replace("/", "+")
        for f in u["files"]:
            if not (root / f).is_file():
                fail(f"{root / f}: missing (fetch {u['repo']} at {u['commit']} into {root})")
        report = run(binary, root, u["files"], a.lint_arg)
        errors += len(report.get("errors", []))
        torch_seen.append((u["repo"], u["files"][0], report.get("torch_version"), report.get("torch_source")))
        mistakes = u["mistakes"]
        for m in mistakes:
            labelled[m["check"]] += 1
        hit = set()
        for f in report.get("findings", []):
            ev = f["evidence"][0]
            where = (os.path.normpath(ev["source"]), ev["line"])
            if f["severity"] not in SCORED:
                info[f["rule"]] += 1
                continue
            match = None
            for i, m in enumerate(mistakes):
                lines = [m["line"], *m.get("also", [])]
                if m["check"] == f["rule"] and os.path.normpath(m["path"]) == where[0] and where[1] in lines:
                    match = i
                    break
            if match is None:
                fp[f["rule"]] += 1
                fps.append(f"{u['repo']} {where[0]}:{where[1]} {f['rule']}: {f.get('context', '')[:160]}")
            elif match not in hit:
                hit.add(match)
                tp[f["rule"]] += 1
                found[f["rule"]] += 1
            # A second finding on the same mistake (its `also` line) is neither.
        for i, m in enumerate(mistakes):
            if i not in hit:
                fns.append(f"{u['repo']} {m['path']}:{m['line']} {m['check']}: {m['what'][:120]}")

    checks = sorted(set(tp) | set(fp) | set(labelled) | set(info))
    ratio = lambda n, d: f"{n / d:.2f}" if d else "-"
    print(f"{len(units)} units, {sum(labelled.values())} labelled mistakes, binary {binary}")
    print()
    print("| check | warnings | right | precision | labelled | found | recall | info |")
    print("| --- | --- | --- | --- | --- | --- | --- | --- |")
    for c in checks:
        w = tp[c] + fp[c]
        print(f"| {c} | {w} | {tp[c]} | {ratio(tp[c], w)} | {labelled[c]} | {found[c]} | "
              f"{ratio(found[c], labelled[c])} | {info[c]} |")
    tw, tt = sum(tp.values()) + sum(fp.values()), sum(tp.values())
    tl, tf = sum(labelled.values()), sum(found.values())
    print(f"| **all** | {tw} | {tt} | {ratio(tt, tw)} | {tl} | {tf} | {ratio(tf, tl)} | {sum(info.values())} |")
    if errors:
        print(f"\n{errors} file(s) did not parse")
    if a.verbose:
        print("\nfalse positives:")
        for x in fps:
            print("  " + x)
        print("missed:")
        for x in fns:
            print("  " + x)
        print("torch per unit (version, from where):")
        for r, f, v, s in torch_seen:
            print(f"  {r} {f}: {v or 'unknown'} ({s or '-'})")


if __name__ == "__main__":
    main()
