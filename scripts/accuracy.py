#!/usr/bin/env python3
"""Measure epdoctor's accuracy on the real-log corpus in tests/accuracy/.

Each case folder holds the log file(s) of one real run and a case.toml with the
label the public thread established (see docs/accuracy.md). This script runs
`epdoctor explain --format json` over each case's log files and compares:
  - the verdict (clean / benign / actionable / unknown) with the expected one;
  - on actionable cases, whether primary.evidence[0].text contains the expected
    `primary` substring.

It prints a per-case table and, per set, the verdict accuracy (strict, and lenient:
`clean` accepted for a case labelled benign, since a log whose only warnings are
harmless differs from one with none by a judgement epdoctor may not share), the
primary-line accuracy on actionable cases, the `unknown` rate and the fail-safe
violations (failures called clean or benign). `--json FILE` writes the per-case
results and the per-set totals as JSON. The table never prints a holdout log line:
rules must not be fitted to the holdout set.

Beside epdoctor's figures it gives those of a bare regex on the same cases (what grep
would tell): every log with a warning- or error-looking line is `actionable`, its
primary the first error-looking line (else the first warning line); every other log is
`clean`. A figure no better than that one says the tool adds nothing on those logs.

Python 3.11+ standard library only. Exit status: 0 whatever the figures; 2 when a
case folder is malformed (the message names the file) or the binary cannot run.
"""

import argparse
import json
import re
import subprocess
import sys
import tomllib
from pathlib import Path

SETS = ("holdout", "dev")
VERDICTS = ("clean", "benign", "actionable")
REQUIRED = ("source", "summary", "conclusion", "verdict")
OPTIONAL = ("primary", "family", "nccl", "torch")


class Malformed(Exception):
    pass


def load_case(folder):
    """The case's label and log files, or Malformed naming what is wrong."""
    toml_path = folder / "case.toml"
    if not toml_path.is_file():
        raise Malformed(f"{toml_path}: missing")
    try:
        label = tomllib.loads(toml_path.read_text(encoding="utf-8"))
    except (tomllib.TOMLDecodeError, UnicodeDecodeError) as e:
        raise Malformed(f"{toml_path}: not valid TOML: {e}")
    for key in REQUIRED:
        if not isinstance(label.get(key), str) or not label[key].strip():
            raise Malformed(f"{toml_path}: `{key}` missing or empty")
    unknown = sorted(set(label) - set(REQUIRED) - set(OPTIONAL))
    if unknown:
        raise Malformed(f"{toml_path}: unknown key(s) {', '.join(unknown)}")
    if label["verdict"] not in VERDICTS:
        raise Malformed(f"{toml_path}: verdict must be one of {', '.join(VERDICTS)}")
    has_primary = isinstance(label.get("primary"), str) and label["primary"].strip()
    if label["verdict"] == "actionable" and not has_primary:
        raise Malformed(f"{toml_path}: actionable case without `primary`")
    if label["verdict"] != "actionable" and "primary" in label:
        raise Malformed(f"{toml_path}: `primary` given for a {label['verdict']} case")
    logs = sorted(p for p in folder.iterdir() if p.is_file() and p.name != "case.toml")
    if not logs:
        raise Malformed(f"{folder}: no log file next to case.toml")
    texts = []
    for p in logs:
        if p.stat().st_size == 0:
            raise Malformed(f"{p}: empty log file")
        texts.append(p.read_bytes().decode("utf-8", "replace"))
    if has_primary and not any(label["primary"] in t for t in texts):
        raise Malformed(f"{toml_path}: `primary` text is in none of the case's log files")
    return label, logs


def discover(root):
    """(set, folder, label, logs) for every case, validated before anything runs."""
    cases = []
    for name in SETS:
        set_dir = root / name
        if not set_dir.is_dir():
            continue
        for folder in sorted(p for p in set_dir.iterdir() if p.is_dir()):
            label, logs = load_case(folder)
            cases.append((name, folder, label, logs))
    return cases


def run_case(binary, logs):
    """epdoctor's JSON for the case, or an error string."""
    cmd = [str(binary), "explain", "--format", "json", *map(str, logs)]
    try:
        out = subprocess.run(cmd, capture_output=True, timeout=120)
    except subprocess.TimeoutExpired:
        return None, "timed out after 120 s"
    except OSError as e:
        raise SystemExit(f"accuracy.py: cannot run {binary}: {e}")
    try:
        return json.loads(out.stdout), None
    except json.JSONDecodeError:
        err = out.stderr.decode("utf-8", "replace").strip().splitlines()
        return None, f"exit {out.returncode}: {err[-1] if err else 'no JSON on stdout'}"


# The bare regex: a warning word, an error word (each as a word, any case).
WARN_RE = re.compile(r"\b(warn|warning|warnings)\b", re.I)
ERROR_RE = re.compile(r"\b(error|errors|exception|traceback|fatal|failed|failure)\b|\w(Error|Exception|Warning):", re.I)


def baseline_case(logs):
    """The bare regex's result, in the shape of epdoctor's JSON."""
    first_error = first_warn = None
    for p in logs:
        for line in p.read_bytes().decode("utf-8", "replace").splitlines():
            if first_error is None and ERROR_RE.search(line):
                first_error = line
            if first_warn is None and WARN_RE.search(line):
                first_warn = line
    line = first_error if first_error is not None else first_warn
    if line is None:
        return {"verdict": "clean", "primary": None}
    return {"verdict": "actionable", "primary": {"rule": "bare-regex", "evidence": [{"text": line}]}}


def judge(set_name, folder, label, result, error):
    expected = label["verdict"]
    row = {"set": set_name, "case": folder.name, "expected": expected}
    if error:
        row.update(got="error", rule="-", line=error, verdict_ok=False, lenient_ok=False,
                   primary_ok=None)
        return row
    got = result.get("verdict", "?")
    primary = result.get("primary") or {}
    evidence = primary.get("evidence") or [{}]
    line = evidence[0].get("text") or ""
    row.update(got=got, rule=primary.get("rule") or "-", verdict_ok=got == expected)
    # Lenient: a harmless-only log called clean is not a wrong call a user acts on.
    row["lenient_ok"] = row["verdict_ok"] or (expected == "benign" and got == "clean")
    row["primary_ok"] = (label["primary"] in line) if expected == "actionable" else None
    # Holdout lines are never shown: the lead writes no rule from them.
    row["line"] = line if set_name == "dev" else ""
    return row


def totals(rows):
    n = len(rows)
    actionable = [r for r in rows if r["expected"] == "actionable"]
    return {
        "cases": n,
        "verdict_ok": sum(r["verdict_ok"] for r in rows),
        "lenient_ok": sum(r["lenient_ok"] for r in rows),
        "actionable": len(actionable),
        "primary_ok": sum(bool(r["primary_ok"]) for r in actionable),
        "unknown": sum(r["got"] == "unknown" for r in rows),
        "fail_safe": sum(r["got"] in ("clean", "benign") for r in actionable),
        "errors": sum(r["got"] == "error" for r in rows),
    }


def pct(a, b):
    return f"{a}/{b} ({100 * a / b:.0f} %)" if b else "-"


def summary_lines(name, t, b=None):
    """epdoctor's figures, each with the bare regex's beside it when `b` is given."""
    def fig(key, of):
        mine = pct(t[key], t[of])
        return f"{mine}; bare regex {pct(b[key], b[of])}" if b else mine

    def count(key):
        return f"{t[key]}; bare regex {b[key]}" if b else f"{t[key]}"
    return [
        f"verdict accuracy: {fig('verdict_ok', 'cases')}",
        f"verdict accuracy, clean accepted for benign: {fig('lenient_ok', 'cases')}",
        f"primary-line accuracy on actionable cases: {fig('primary_ok', 'actionable')}",
        f"unknown rate: {pct(t['unknown'], t['cases'])}",
        f"fail-safe violations (failures called clean or benign): {count('fail_safe')}",
    ] + ([f"cases epdoctor could not read: {t['errors']}"] if t["errors"] else [])


def mark(ok):
    return "-" if ok is None else ("ok" if ok else "WRONG")


COLUMNS = ("case", "expected", "got", "verdict", "primary", "rule", "line (dev only)")


def cells(r):
    return (r["case"], r["expected"], r["got"], mark(r["verdict_ok"]), mark(r["primary_ok"]),
            r["rule"], r["line"])


def text_report(by_set, base):
    out = []
    for name, rows in by_set.items():
        out.append(f"== {name} ({len(rows)} cases)")
        table = [COLUMNS] + [cells(r) for r in rows]
        widths = [max(len(row[i]) for row in table) for i in range(len(COLUMNS) - 1)]
        for row in table:
            line = "  ".join(c.ljust(w) for c, w in zip(row, widths))
            last = row[-1] if len(row[-1]) <= 100 else row[-1][:97] + "..."
            out.append((line + "  " + last).rstrip())
        out += [""] + [f"  {s}" for s in summary_lines(name, totals(rows), totals(base[name]))] + [""]
    return "\n".join(out)


def md_escape(s):
    return s.replace("\\", "\\\\").replace("|", "\\|").replace("`", "\\`").replace("\n", " ")


def markdown_report(by_set, base, binary):
    out = ["# epdoctor accuracy on the real-log corpus", "",
           f"Binary: `{md_escape(str(binary))}`. Generated by `scripts/accuracy.py`.", ""]
    for name, rows in by_set.items():
        out += [f"## {name} ({len(rows)} cases)", ""]
        out += [f"- {s}" for s in summary_lines(name, totals(rows), totals(base[name]))] + [""]
        out.append("| " + " | ".join(COLUMNS) + " |")
        out.append("|" + "---|" * len(COLUMNS))
        for r in rows:
            out.append("| " + " | ".join(md_escape(c) for c in cells(r)) + " |")
        out.append("")
    return "\n".join(out)


def main():
    here = Path(__file__).resolve().parent.parent
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--bin", default=str(here / "target/debug/epdoctor"),
                    help="epdoctor binary (default: target/debug/epdoctor)")
    ap.add_argument("--corpus", default=str(here / "tests/accuracy"),
                    help="folder holding holdout/ and dev/ (default: tests/accuracy)")
    ap.add_argument("--markdown", metavar="PATH", help="also write the report as Markdown to PATH")
    ap.add_argument("--json", metavar="PATH", help="also write the per-case results as JSON to PATH")
    args = ap.parse_args()

    try:
        cases = discover(Path(args.corpus))
    except Malformed as e:
        print(f"accuracy.py: malformed case: {e}", file=sys.stderr)
        return 2
    if not cases:
        print(f"accuracy.py: no cases under {args.corpus}", file=sys.stderr)
        return 2
    binary = Path(args.bin)
    if not binary.is_file():
        print(f"accuracy.py: no epdoctor binary at {binary} (run `cargo build`)", file=sys.stderr)
        return 2

    by_set, base = {}, {}
    for set_name, folder, label, logs in cases:
        result, error = run_case(binary, logs)
        by_set.setdefault(set_name, []).append(judge(set_name, folder, label, result, error))
        base.setdefault(set_name, []).append(judge(set_name, folder, label, baseline_case(logs), None))

    print(text_report(by_set, base))
    if args.markdown:
        Path(args.markdown).write_text(markdown_report(by_set, base, binary) + "\n", encoding="utf-8")
    if args.json:
        doc = {"binary": str(binary), "corpus": str(args.corpus),
               "sets": {name: {"totals": totals(rows), "baseline": totals(base[name]), "cases": rows,
                               "baseline_cases": base[name]}
                        for name, rows in by_set.items()}}
        Path(args.json).write_text(json.dumps(doc, indent=2) + "\n", encoding="utf-8")
    return 0


if __name__ == "__main__":
    sys.exit(main())
