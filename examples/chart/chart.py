"""Defect rates per production line from a messy QA export (throwbox example job).

Reads /inputs/line_defects.csv, cleans it with explicit rules, prints the
assumptions and the evidence as JSON, and draws /outputs/defect_rates.png.
Runs in throwbox's python runtime (python3-matplotlib from Debian).
"""
import csv
import json
import os
import sys
from collections import defaultdict
from datetime import datetime

import matplotlib
matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402

INPUT = os.path.join(os.environ.get("INPUT_DIR", "/inputs"), "line_defects.csv")
OUTPUT = os.path.join(os.environ.get("OUTPUT_DIR", "/outputs"), "defect_rates.png")

ASSUMPTIONS = [
    "The first line is an export banner, not data; the header is the first line starting with 'date,'.",
    "Line names are case- and space-insensitive ('LINE A', ' line b ' are Line A and Line B).",
    "Dates are ISO (2026-10-01) or day-first (01/10/2026).",
    "A row whose date and line repeat an earlier row with the same counts is a duplicate and counted once.",
    "Rows without a numeric units_inspected ('n/a') are excluded: no rate without a denominator.",
    "Rows whose notes say defects were not recorded are excluded: a zero there is missing data, not quality.",
    "Thousands separators in counts ('1,210') are removed.",
    "Blank lines and the TOTAL footer are not data.",
]


def parse_date(text):
    text = text.strip()
    for fmt in ("%Y-%m-%d", "%d/%m/%Y"):
        try:
            return datetime.strptime(text, fmt).date()
        except ValueError:
            pass
    raise ValueError("unrecognised date %r" % text)


def main():
    with open(INPUT, newline="", encoding="utf-8") as f:
        lines = f.read().splitlines()
    start = next(i for i, line in enumerate(lines) if line.lower().startswith("date,"))
    rows = list(csv.DictReader(lines[start:]))

    seen = {}
    excluded = []
    totals = defaultdict(lambda: [0, 0])  # line -> [units, defects]
    for number, row in enumerate(rows, start=start + 2):
        if not row.get("date") or row["date"].strip().upper() == "TOTAL":
            continue
        line = " ".join(row["line"].split()).title()
        date = parse_date(row["date"])
        notes = (row.get("notes") or "").strip()
        units_text = row["units_inspected"].replace(",", "").strip()
        if not units_text.isdigit():
            excluded.append({"row": number, "line": line, "date": str(date), "why": "units_inspected %r" % row["units_inspected"]})
            continue
        if "not recorded" in notes:
            excluded.append({"row": number, "line": line, "date": str(date), "why": notes})
            continue
        key = (date, line)
        payload = (int(units_text), int(row["defects"]))
        if key in seen:
            if seen[key] != payload:
                raise ValueError("conflicting rows for %s %s" % key)
            excluded.append({"row": number, "line": line, "date": str(date), "why": "duplicate row"})
            continue
        seen[key] = payload
        totals[line][0] += payload[0]
        totals[line][1] += payload[1]

    rates = {line: round(100.0 * d / u, 2) for line, (u, d) in sorted(totals.items())}
    fig, ax = plt.subplots(figsize=(6, 3.5), dpi=100)
    bars = ax.bar(list(rates), list(rates.values()), color=["#4c72b0", "#dd8452", "#55a868"][: len(rates)])
    ax.bar_label(bars, fmt="%.2f%%")
    ax.set_ylabel("defect rate (%)")
    ax.set_title("Defect rate by line, 1-5 Oct 2026")
    fig.tight_layout()
    fig.savefig(OUTPUT)

    print(json.dumps({
        "assumptions": ASSUMPTIONS,
        "rows_read": len(rows),
        "excluded": excluded,
        "units_inspected": {line: u for line, (u, _) in sorted(totals.items())},
        "defects": {line: d for line, (_, d) in sorted(totals.items())},
        "defect_rate_percent": rates,
        "worst_line": max(rates, key=rates.get),
        "chart": "/outputs/defect_rates.png",
    }, indent=2))


if __name__ == "__main__":
    try:
        main()
    except ValueError as e:
        print("chart: %s" % e, file=sys.stderr)
        sys.exit(1)
