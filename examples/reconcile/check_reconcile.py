"""Acceptance check for the reconciliation job (a throwbox check program).

The operator installs it (policy checks.reconcile, examples/reconcile/policy.json);
the agent never sees or changes it. throwbox runs it after the job has ended, in
a sandbox of its own, with the job's view read-only under /job:

  /job/result.json              the job's result (status, stdout, artifacts, inputs)
  /job/inputs/orders.csv        the job's inputs, as uploaded
  /job/inputs/payments.csv
  /job/artifacts/exceptions.csv the artifact as the gate delivered it

It recomputes the reconciliation from the inputs on its own (duplicated rows by
transaction id, unknown orders, short and over payments) and compares the job's
exceptions.csv and its report with it. The last line it prints is the verdict:
{"verdict": "pass"|"fail", "evidence": "..."}. Python 3 standard library only.
"""

import csv
import json
import os
import sys
from decimal import Decimal, InvalidOperation

JOB = os.environ.get("CHECK_JOB_DIR", "/job")
CENT = Decimal("0.01")


def verdict(kind, evidence):
    print(json.dumps({"verdict": kind, "evidence": evidence}))
    return 0 if kind == "pass" else 1


def rows(path):
    with open(path, newline="", encoding="utf-8-sig") as handle:
        return [{k.strip(): (v or "").strip() for k, v in row.items() if k} for row in csv.DictReader(handle)]


def amount(text):
    return Decimal(text).quantize(CENT)


def expected_exceptions(orders, payments):
    """The exceptions a correct reconciliation reports, as (kind, transaction, order, amount)."""
    due = {o["order_id"]: amount(o["amount"]) for o in orders}
    paid = {order: Decimal("0") for order in due}
    seen, out = {}, set()
    for p in payments:
        tx, order, value = p["transaction_id"], p["order_id"], amount(p["amount"])
        if tx in seen:
            out.add(("duplicate", tx, order, str(value)))
            continue
        seen[tx] = (order, value)
        if order not in due:
            out.add(("unmatched", tx, order, str(value)))
            continue
        paid[order] += value
    for order, owed in due.items():
        if paid[order] < owed:
            out.add(("shortfall", "", order, str(owed - paid[order])))
        elif paid[order] > owed:
            out.add(("overpaid", "", order, str(paid[order] - owed)))
    return out, due, paid


def describe(row):
    kind, tx, order, value = row
    return f"{kind} {tx + ' ' if tx else ''}{order} {value}"


def main():
    with open(os.path.join(JOB, "result.json"), encoding="utf-8") as handle:
        result = json.load(handle)
    if result.get("status") != "completed":
        return verdict("fail", f"the job did not complete (status {result.get('status')})")
    orders = rows(os.path.join(JOB, "inputs", "orders.csv"))
    payments = rows(os.path.join(JOB, "inputs", "payments.csv"))
    expected, due, paid = expected_exceptions(orders, payments)

    artifact = os.path.join(JOB, "artifacts", "exceptions.csv")
    if not os.path.isfile(artifact):
        reported = None
    else:
        try:
            reported = {(r.get("kind", ""), r.get("transaction_id", ""), r.get("order_id", ""),
                         str(amount(r.get("amount", "")))) for r in rows(artifact)}
        except (InvalidOperation, ValueError):
            return verdict("fail", "exceptions.csv has an amount that is not a decimal number")

    problems = []
    counts = {}
    for p in payments:
        counts[p["transaction_id"]] = counts.get(p["transaction_id"], 0) + 1
    repeated = sorted(tx for tx, n in counts.items() if n > 1)
    if reported is None:
        problems.append("no exceptions.csv artifact was delivered")
    else:
        for row in sorted(expected - reported):
            why = ""
            if row[0] == "duplicate":
                why = f" ({row[1]} appears {counts[row[1]]} times in payments.csv: it was counted more than once)"
            problems.append("missing " + describe(row) + why)
        for row in sorted(reported - expected):
            problems.append("unexpected " + describe(row))

    # The report on stdout: what it says was allocated must be what was paid.
    try:
        report = json.loads(result.get("stdout", ""))
    except ValueError:
        report = None
    if not isinstance(report, dict):
        problems.append("stdout is not the JSON report")
    else:
        allocated = str(sum(paid.values(), Decimal("0")).quantize(CENT))
        if str(report.get("allocated_total")) != allocated:
            problems.append(f"allocated_total is {report.get('allocated_total')}, recomputed {allocated}")
        full = sorted(o for o in due if paid[o] >= due[o])
        if sorted(report.get("paid_in_full") or []) != full:
            problems.append(f"paid_in_full is {report.get('paid_in_full')}, recomputed {full}")

    if problems:
        return verdict("fail", "; ".join(problems))
    return verdict("pass", f"{len(orders)} orders and {len(payments)} payments recomputed: "
                           f"{len(expected)} exceptions match ({', '.join(describe(r) for r in sorted(expected))})"
                           + (f"; duplicated rows {', '.join(repeated)} counted once" if repeated else ""))


if __name__ == "__main__":
    try:
        sys.exit(main())
    except (OSError, ValueError, KeyError, InvalidOperation) as error:
        # A view the check cannot read is not a pass: the job gets "fail" with the reason.
        sys.exit(verdict("fail", f"the job's view could not be checked: {error}"))
