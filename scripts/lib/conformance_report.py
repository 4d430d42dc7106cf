"""scripts/conformance's results: ginkgo's JSON report -> the count line and docs/conformance.md.

Usage: conformance_report.py REPORT_JSON SKIPS_FILE FOCUS SUITE_SECONDS PROCS OUT_MD [KNOWN_FILE]

SKIPS_FILE: one "test name|reason" a line (scripts/conformance's SKIPS). OUT_MD "-": no file.
KNOWN_FILE: one "start of a test name|cause and what fixing it needs" a line (scripts/conformance's
KNOWN): a failure whose name starts so gets that text after its own reason; it still fails.
Prints "N passed, M failed, K skipped" last. Exit status 0 (the counts are the result).
"""

import json
import re
import sys


def one_line(text, limit=300):
    text = " ".join((text or "").split())
    return text if len(text) <= limit else text[: limit - 3] + "..."


def main():
    report_json, skips_file, focus, secs, procs, out = sys.argv[1:7]
    with open(report_json) as f:
        suites = json.load(f)
    skips = {}
    with open(skips_file) as f:
        for line in f:
            line = line.rstrip("\n")
            if "|" in line:
                name, reason = line.split("|", 1)
                skips[name] = reason
    known = []
    if len(sys.argv) > 7:
        with open(sys.argv[7]) as f:
            for line in f:
                line = line.rstrip("\n")
                if "|" in line:
                    known.append(tuple(line.split("|", 1)))
    focus_re = re.compile(focus)
    rows = []
    for suite in suites:
        for spec in suite.get("SpecReports") or []:
            if spec.get("LeafNodeType") != "It":
                continue
            name = " ".join((spec.get("ContainerHierarchyTexts") or []) + [spec.get("LeafNodeText", "")])
            if not focus_re.search(name):
                continue
            state = spec.get("State", "")
            msg = (spec.get("Failure") or {}).get("Message", "")
            secs_ = (spec.get("RunTime") or 0) / 1e9
            if name in skips:
                rows.append((name, "skipped", "skipped by name: " + skips[name], secs_))
            elif state == "passed":
                rows.append((name, "passed", "", secs_))
            elif state == "skipped":
                rows.append((name, "skipped", one_line(msg) or "skipped", secs_))
            elif state == "pending":
                continue
            else:
                why = state + ": " + one_line(msg)
                for prefix, cause in known:
                    if name.startswith(prefix):
                        why += " **Known cause:** " + cause
                rows.append((name, "failed", why, secs_))
    rows.sort()
    n = {k: sum(1 for r in rows if r[1] == k) for k in ("passed", "failed", "skipped")}
    line = f"{n['passed']} passed, {n['failed']} failed, {n['skipped']} skipped"
    if out != "-":
        with open(out, "w") as f:
            f.write(
                "# Kubernetes node conformance: results\n\n"
                "Written by `scripts/conformance` (do not edit by hand; the analysis of each failure is\n"
                "in [conformance-notes.md](conformance-notes.md)): the e2e suite of Kubernetes v1.36.3\n"
                "(`e2e.test`, built by `scripts/upstream`) against nanolet as the only node of a real\n"
                "control plane (`scripts/cluster`).\n\n"
                f"Focus: `{focus}`; {procs} ginkgo processes; the suite ran {secs} s.\n\n"
                f"**{line}**\n\n"
                "| Test | Result | Reason (failures and skips) | s |\n|---|---|---|---|\n"
            )
            for name, res, why, t in rows:
                cell = name.replace("|", "\\|")
                why = why.replace("|", "\\|")
                f.write(f"| {cell} | {res} | {why} | {t:.0f} |\n")
    for name, res, why, _ in rows:
        if res != "passed":
            print(f"{res}: {name}: {why}")
    print(line)


if __name__ == "__main__":
    main()
