#!/usr/bin/env python3
# accuracy_tables.py — rewrite docs/accuracy.md's tables that quote bench_accuracy's summaries
# (by generation, size band, scale band, feature, feature and stack) from what this build's
# bench_accuracy prints. scripts/docs_examples.sh --check tests every number of those tables
# against the bench, but --update cannot rewrite a table it only quotes; this does.
#
#   scripts/accuracy_tables.py            # build/bin/bench_accuracy, docs/accuracy.md
#   scripts/accuracy_tables.py --bin DIR  # DIR/bench_accuracy
#
# A table is the run of `|` lines directly under its `<!-- docs-quotes: bench_accuracy ... -->`
# marker; the marker names the summary. Exit 1 with the reason when the bench cannot run or a
# marker or summary is missing.
import re
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
DOC = ROOT / "docs" / "accuracy.md"
TARGET = 10.0  # issue 29: no band above 10% median |error|
# The summaries a table is kept for, in the bench's words, and the table's first column.
BANDS = ["size band", "scale band", "feature", "feature and stack"]
GENERATIONS = [("A100", "A100"), ("H100", "H100"), ("H200", "H200"), ("B200", "B200 / GB200"), ("V100", "V100")]


def fail(why):
    print(f"accuracy_tables: {why}", file=sys.stderr)
    sys.exit(1)


def bench_output(bin_dir):
    exe = bin_dir / "bench_accuracy"
    if not exe.exists():
        fail(f"{exe} does not exist; build it first (cmake --build build --target bench_accuracy)")
    run = subprocess.run([str(exe)], capture_output=True, text=True)
    if run.returncode != 0:
        fail(f"{exe} exited {run.returncode}: {run.stderr.strip()[:400]}")
    return run.stdout.split("\n")


def summary(lines, title):
    """{group: {use: (runs, median, signed, worst, worst_run)}} of 'summary by TITLE'."""
    try:
        start = lines.index("summary by " + title) + 2  # the title, then the column header
    except ValueError:
        fail(f"bench_accuracy prints no 'summary by {title}'")
    rows = {}
    for line in lines[start:]:
        if not line.strip():
            break
        m = re.match(r"(\S+)\s+(calibrate|check)\s+(\d+)\s+\d+\s+(\S+)\s+(\S+)\s+(\S+)\s+(\S+)", line)
        if not m:
            fail(f"cannot read the 'summary by {title}' line: {line!r}")
        group, use, runs, median, signed, worst, worst_run = m.groups()
        rows.setdefault(group, {})[use] = (int(runs), median, signed, worst, worst_run)
    return rows


def html(text):
    return text.replace("<", "&lt;").replace(">", "&gt;")


def band_table(rows, title):
    out = [f"| {title} | calibrate runs · median | check runs | median \\|error\\| | signed median | worst check run | target |",
           "|---|---|---|---|---|---|---|"]
    for group, uses in rows.items():
        if "check" not in uses:
            continue
        cal = f"{uses['calibrate'][0]} · {uses['calibrate'][1]}" if "calibrate" in uses else "—"
        runs, median, signed, worst, worst_run = uses["check"]
        met = "met" if float(median.rstrip("%")) <= TARGET else "**missed**"
        out.append(f"| {html(group)} | {cal} | {runs} | {median} | {signed} | {worst} {worst_run} | {met} |")
    return out


def generation_table(rows):
    out = ["| generation | calibrate runs · median | check runs · median |", "|---|---|---|"]
    for key, name in GENERATIONS:
        if key not in rows or "check" not in rows[key] or "calibrate" not in rows[key]:
            fail(f"'summary by generation' has no calibrate and check line for {key}")
        cal, chk = rows[key]["calibrate"], rows[key]["check"]
        out.append(f"| {name} | {cal[0]} · {cal[1]} | {chk[0]} · {chk[1]} |")
    return out


def replace_table(doc, marker_part, table):
    for i, line in enumerate(doc):
        if line.startswith("<!-- docs-quotes: bench_accuracy") and marker_part in line:
            end = i + 1
            while end < len(doc) and doc[end].startswith("|"):
                end += 1
            doc[i + 1:end] = table
            return
    fail(f"{DOC} has no docs-quotes marker for {marker_part!r}")


def main():
    bin_dir = ROOT / "build" / "bin"
    args = sys.argv[1:]
    if args[:1] == ["--bin"] and len(args) == 2:
        bin_dir = Path(args[1])
    elif args:
        fail(f"unknown arguments {' '.join(args)!r}; allowed: --bin DIR")
    lines = bench_output(bin_dir)
    doc = DOC.read_text().split("\n")
    for title in BANDS:
        replace_table(doc, f"/^summary by {title}$/", band_table(summary(lines, title), title))
    replace_table(doc, "'^summary by generation'", generation_table(summary(lines, "generation")))
    DOC.write_text("\n".join(doc))
    print(f"accuracy_tables: rewrote {len(BANDS) + 1} tables in {DOC.relative_to(ROOT)}")


if __name__ == "__main__":
    main()
