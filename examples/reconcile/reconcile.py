"""Reconcile an orders export against a payments export (throwbox example job).

Runs inside the throwbox sandbox as `python3 -I /work/main.py`: inputs are read
from /inputs, the exceptions file is written to /outputs, the report goes to
stdout as JSON. Python 3.11 standard library only.

For local runs outside the sandbox, INPUT_DIR and OUTPUT_DIR override the two
folders, e.g. `INPUT_DIR=inputs OUTPUT_DIR=/tmp/out python3 reconcile.py`.
"""

import csv
import json
import os
import sys
from decimal import Decimal, InvalidOperation

INPUT_DIR = os.environ.get("INPUT_DIR", "/inputs")
OUTPUT_DIR = os.environ.get("OUTPUT_DIR", "/outputs")
CENT = Decimal("0.01")

ASSUMPTIONS = [
    "A repeated transaction_id with an identical order, amount and currency is a "
    "duplicated export row: it is counted once and listed under duplicates.",
    "A repeated transaction_id with a different payload is an error; the run stops "
    "rather than guessing which row is right.",
    "A payment whose order_id is not in the orders export is unmatched: reported, "
    "never allocated.",
    "Amounts are exact decimals (Python Decimal), reported to the cent.",
    "Every row in both files uses the same currency.",
    "Reversals, fees, refunds and settlement dates are out of scope.",
    "The report marks no order paid and issues no refund; those actions belong to "
    "a separate, authorised workflow.",
]


def money(value):
    return str(value.quantize(CENT))


def read_rows(path, required):
    with open(path, newline="", encoding="utf-8-sig") as handle:
        reader = csv.DictReader(handle)
        header = [name.strip() for name in (reader.fieldnames or [])]
        missing = [name for name in required if name not in header]
        if missing:
            raise ValueError(f"{path}: missing column(s) {', '.join(missing)}")
        reader.fieldnames = header
        rows = []
        for line, row in enumerate(reader, start=2):
            if not any((value or "").strip() for value in row.values()):
                continue  # blank line
            rows.append((line, {key: (row.get(key) or "").strip() for key in required}))
        return rows


def parse_amount(text, where):
    try:
        value = Decimal(text)
    except InvalidOperation:
        raise ValueError(f"{where}: amount {text!r} is not a decimal number") from None
    if not value.is_finite():
        raise ValueError(f"{where}: amount {text!r} is not a finite number")
    return value


def check_currency(currency, expected, where):
    if not currency:
        raise ValueError(f"{where}: currency is empty")
    if expected is not None and currency != expected:
        raise ValueError(f"{where}: currency {currency} differs from {expected}; "
                         "one currency is required")
    return currency


def reconcile(orders_path, payments_path):
    currency = None

    orders = {}  # order_id -> expected amount, in file order
    for line, row in read_rows(orders_path, ["order_id", "amount", "currency"]):
        where = f"orders.csv line {line}"
        order_id = row["order_id"]
        if not order_id:
            raise ValueError(f"{where}: order_id is empty")
        if order_id in orders:
            raise ValueError(f"{where}: order {order_id} appears more than once")
        currency = check_currency(row["currency"], currency, where)
        orders[order_id] = parse_amount(row["amount"], where)

    seen = {}  # transaction_id -> (order_id, amount, currency)
    paid = {order_id: Decimal("0") for order_id in orders}
    payments_total = Decimal("0")
    duplicates, unmatched, exceptions = [], [], []

    for line, row in read_rows(payments_path,
                               ["transaction_id", "order_id", "amount", "currency"]):
        where = f"payments.csv line {line}"
        transaction_id, order_id = row["transaction_id"], row["order_id"]
        if not transaction_id:
            raise ValueError(f"{where}: transaction_id is empty")
        currency = check_currency(row["currency"], currency, where)
        value = parse_amount(row["amount"], where)
        payments_total += value
        payload = (order_id, value, row["currency"])

        if transaction_id in seen:
            if seen[transaction_id] != payload:
                first = seen[transaction_id]
                raise ValueError(
                    f"Conflicting duplicate transaction {transaction_id}: "
                    f"{first[0]} {money(first[1])} {first[2]} vs "
                    f"{order_id} {money(value)} {row['currency']} ({where})")
            duplicates.append(transaction_id)
            exceptions.append(["duplicate", transaction_id, order_id, money(value),
                               "repeated export row, counted once"])
            continue
        seen[transaction_id] = payload

        if order_id not in orders:
            unmatched.append({"transaction_id": transaction_id,
                              "order_id": order_id, "amount": money(value)})
            exceptions.append(["unmatched", transaction_id, order_id, money(value),
                               "order not in orders export"])
            continue
        paid[order_id] += value

    shortfalls, overpaid, paid_in_full = [], [], []
    for order_id, expected in orders.items():
        got = paid[order_id]
        if got < expected:
            shortfalls.append({"order_id": order_id, "expected": money(expected),
                               "paid": money(got), "short": money(expected - got)})
            exceptions.append(["shortfall", "", order_id, money(expected - got),
                               f"expected {money(expected)} paid {money(got)}"])
        else:
            paid_in_full.append(order_id)
            if got > expected:
                overpaid.append({"order_id": order_id, "expected": money(expected),
                                 "paid": money(got), "over": money(got - expected)})
                exceptions.append(["overpaid", "", order_id, money(got - expected),
                                   f"expected {money(expected)} paid {money(got)}"])

    report = {
        "assumptions": ASSUMPTIONS,
        "currency": currency,
        "orders_total": money(sum(orders.values(), Decimal("0"))),
        "payments_total": money(payments_total),
        "allocated_total": money(sum(paid.values(), Decimal("0"))),
        "shortfalls": shortfalls,
        "overpaid": overpaid,
        "duplicates": duplicates,
        "unmatched": unmatched,
        "paid_in_full": paid_in_full,
    }
    return report, exceptions


def write_exceptions(path, rows):
    with open(path, "w", newline="", encoding="utf-8") as handle:
        writer = csv.writer(handle)
        writer.writerow(["kind", "transaction_id", "order_id", "amount", "detail"])
        writer.writerows(rows)


def main():
    try:
        report, exceptions = reconcile(os.path.join(INPUT_DIR, "orders.csv"),
                                       os.path.join(INPUT_DIR, "payments.csv"))
    except (OSError, ValueError) as error:
        print(f"reconcile: {error}", file=sys.stderr)
        return 1
    os.makedirs(OUTPUT_DIR, exist_ok=True)
    write_exceptions(os.path.join(OUTPUT_DIR, "exceptions.csv"), exceptions)
    print(json.dumps(report, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
