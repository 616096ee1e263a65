"""Correlate a load-balancer access log with an application log (throwbox example job).

The operations report: two logs written in different formats and time
zones are normalised to UTC, matched by request id, and every exception is
listed: unparseable lines, duplicated lines, requests seen by only one side,
errors without a request, clock skew beyond a threshold, and offsets that do
not fit the zone the host is known to run in.

Runs inside the throwbox sandbox as `python3 -I /work/main.py`: reads
/inputs/lb_access.log and /inputs/app.log, prints a JSON report (figures,
"assumptions", "evidence", "exceptions") on stdout, writes
/outputs/ops_report.md and /outputs/exceptions.csv. Python 3.11 standard
library only (zoneinfo reads the read-only /usr/share/zoneinfo).

For local runs outside the sandbox, INPUT_DIR and OUTPUT_DIR override the two
folders, e.g. `INPUT_DIR=inputs OUTPUT_DIR=/tmp/out python3 ops_report.py`.
"""

import csv
import json
import os
import re
import statistics
import sys
from datetime import datetime, timedelta, timezone
from zoneinfo import ZoneInfo

INPUT_DIR = os.environ.get("INPUT_DIR", "/inputs")
OUTPUT_DIR = os.environ.get("OUTPUT_DIR", "/outputs")
LB_FILE = "lb_access.log"
APP_FILE = "app.log"

SKEW_THRESHOLD_S = 2.0
BUCKET_MINUTES = 10
# Where each writer runs, as the operations team states it: used only to check
# that every written offset fits the zone at that instant, never to guess one.
HOST_ZONES = {
    "lb": "America/New_York",
    "app-1": "Africa/Johannesburg",
    "app-2": "Africa/Johannesburg",
    "app-3": "UTC",
}

ASSUMPTIONS = [
    "lb_access.log is the load balancer's access log (nginx style); each line is "
    "written when the response completes, stamped in the balancer's local time "
    "with its UTC offset ([01/Nov/2026:01:20:06 -0400]), to the whole second.",
    "app.log is the application servers' log, merged from app-1, app-2 and app-3; "
    "each request line is written when the response completes, ISO 8601 with "
    "milliseconds and an offset (+02:00 or Z).",
    "Every timestamp is converted to UTC with the offset written on its own line. "
    "A timestamp without an offset is not guessed: its line is unparseable.",
    "The balancer runs in America/New_York (this window crosses the end of daylight "
    "saving time on 2026-11-01 at 06:00 UTC, so local 01:00-02:00 occurs twice); "
    "app-1 and app-2 run in Africa/Johannesburg, app-3 in UTC. Offsets are checked "
    "against these zones; a mismatch is listed, not corrected.",
    "The balancer stamps each request with rid=<8 hex digits> and passes it on; the "
    "application logs it as req=<id>. Requests are matched on this id only, never "
    "by time proximity.",
    "Clock skew of a matched request is app time minus balancer time. Both sides log "
    "at completion and the balancer truncates to the second, so an in-sync pair "
    "differs by under about one second; beyond %.1f s in either direction is listed."
    % SKEW_THRESHOLD_S,
    "A line identical to an earlier line of the same file is a duplicate written by "
    "the log shipper: counted once and listed. The same request id on two different "
    "lines is a conflict: the first line is kept and the second listed.",
    "Indented lines in app.log (tracebacks) continue the entry above them.",
    "app.log lines with req=- are background work, not requests; among them only "
    "ERROR lines are exceptions (errors without a matching request).",
    "This report lists and counts; it restarts nothing and closes no incident.",
]

LB_LINE = re.compile(
    r'^(?P<client>\S+) \S+ \S+ \[(?P<ts>\d{2}/[A-Z][a-z]{2}/\d{4}:\d{2}:\d{2}:\d{2} [+-]\d{4})\] '
    r'"(?P<method>[A-Z]+) (?P<path>\S+) HTTP/[\d.]+" (?P<status>\d{3}) (?P<bytes>\d+|-) '
    r'rt=(?P<rt>[\d.]+|-) upstream=(?P<upstream>\S+) rid=(?P<rid>[0-9a-f]{8})$')
APP_LINE = re.compile(
    r'^(?P<ts>\d{4}-\d{2}-\d{2}[T ]\d{2}:\d{2}:\d{2}(?:[.,]\d+)?)(?P<offset>Z|[+-]\d{2}:\d{2})? '
    r'(?P<host>[\w-]+) +(?P<level>INFO|WARN|ERROR) +req=(?P<req>[0-9a-f]{8}|-) (?P<rest>.*)$')
APP_REQUEST = re.compile(r'^(?P<method>[A-Z]+) (?P<path>\S+) (?P<status>\d{3}) (?P<ms>\d+)ms(?: (?P<message>.*))?$')
MONTHS = {m: i for i, m in enumerate(
    "Jan Feb Mar Apr May Jun Jul Aug Sep Oct Nov Dec".split(), start=1)}


def utc_text(moment):
    return moment.astimezone(timezone.utc).strftime("%Y-%m-%dT%H:%M:%S.%f")[:-3] + "Z"


def offset_text(moment):
    seconds = int(moment.utcoffset().total_seconds())
    sign = "-" if seconds < 0 else "+"
    return "%s%02d:%02d" % (sign, abs(seconds) // 3600, abs(seconds) % 3600 // 60)


def parse_lb_time(text):
    # Not strptime("%b"): month names must not depend on the process locale.
    day, month, rest = text.split("/", 2)
    year, hh, mm, rest = rest.split(":", 3)
    ss, offset = rest.split(" ")
    sign = -1 if offset[0] == "-" else 1
    zone = timezone(sign * timedelta(hours=int(offset[1:3]), minutes=int(offset[3:5])))
    return datetime(int(year), MONTHS[month], int(day), int(hh), int(mm), int(ss), tzinfo=zone)


class Exceptions:
    def __init__(self):
        self.items = []

    def add(self, kind, source, line, request_id, moment, detail):
        self.items.append({
            "kind": kind, "source": source, "line": line, "request_id": request_id or "",
            "time_utc": utc_text(moment) if moment else "", "detail": detail,
        })

    def counts(self):
        out = {}
        for item in self.items:
            out[item["kind"]] = out.get(item["kind"], 0) + 1
        return out


def read_lines(path):
    # A stray non-UTF-8 byte spoils its line (then unparseable), not the report.
    with open(path, encoding="utf-8", errors="replace", newline="") as handle:
        return [line.rstrip("\r\n") for line in handle]


def check_zone(host, moment, source, line, request_id, exceptions, checked):
    zone_name = HOST_ZONES.get(host)
    if zone_name is None:
        exceptions.add("unknown_host", source, line, request_id, moment,
                       "host %s has no known zone; offset %s not checked" % (host, offset_text(moment)))
        return
    expected = moment.astimezone(ZoneInfo(zone_name)).utcoffset()
    checked[host] = checked.get(host, 0) + 1
    if expected != moment.utcoffset():
        exceptions.add("offset_mismatch", source, line, request_id, moment,
                       "%s wrote offset %s but %s is at %s at that instant" % (
                           host, offset_text(moment), zone_name,
                           offset_text(moment.astimezone(ZoneInfo(zone_name)))))


def parse_lb(lines, exceptions, zone_checks):
    requests, seen_lines, stats = {}, set(), {"lines": len(lines), "blank": 0, "duplicates": 0,
                                              "unparseable": 0, "conflicts": 0}
    offsets, local_back_steps = {}, []
    previous = None
    for number, text in enumerate(lines, start=1):
        if not text.strip():
            stats["blank"] += 1
            continue
        if text in seen_lines:
            stats["duplicates"] += 1
            match = LB_LINE.match(text)
            exceptions.add("duplicate", "lb", number, match["rid"] if match else "", None,
                           "identical to an earlier line; counted once")
            continue
        seen_lines.add(text)
        match = LB_LINE.match(text)
        if not match:
            stats["unparseable"] += 1
            exceptions.add("unparseable", "lb", number, "", None,
                           "not an access-log line: %r" % text[:80])
            continue
        try:
            moment = parse_lb_time(match["ts"])
        except (ValueError, KeyError) as error:  # 31/Nov, 25:00, an unknown month name
            stats["unparseable"] += 1
            exceptions.add("unparseable", "lb", number, match["rid"], None,
                           "bad timestamp %r: %s" % (match["ts"], error))
            continue
        rid = match["rid"]
        if rid in requests:
            stats["conflicts"] += 1
            exceptions.add("conflicting_id", "lb", number, rid, moment,
                           "rid already on line %d with different content" % requests[rid]["line"])
            continue
        offsets[offset_text(moment)] = offsets.get(offset_text(moment), 0) + 1
        check_zone("lb", moment, "lb", number, rid, exceptions, zone_checks)
        if previous and moment.replace(tzinfo=None) < previous[1].replace(tzinfo=None) \
                and moment > previous[1]:
            local_back_steps.append({
                "line": number,
                "local_before": previous[1].isoformat(), "local_after": moment.isoformat(),
                "utc_before": utc_text(previous[1]), "utc_after": utc_text(moment),
            })
        previous = (number, moment)
        requests[rid] = {
            "line": number, "utc": moment.astimezone(timezone.utc), "status": int(match["status"]),
            "method": match["method"], "path": match["path"], "upstream": match["upstream"],
        }
    stats["requests"] = len(requests)
    stats["offsets"] = dict(sorted(offsets.items()))
    return requests, stats, local_back_steps


def parse_app(lines, exceptions, zone_checks):
    entries, seen_lines = [], set()
    stats = {"lines": len(lines), "blank": 0, "entries": 0, "continuation_lines": 0,
             "duplicates": 0, "unparseable": 0, "conflicts": 0}
    offsets = {}
    last = None
    for number, text in enumerate(lines, start=1):
        if not text.strip():
            stats["blank"] += 1
            continue
        if text[0] in " \t":
            if last is None:
                stats["unparseable"] += 1
                exceptions.add("unparseable", "app", number, "", None,
                               "indented line without a parsed entry above it")
            else:
                stats["continuation_lines"] += 1
                last["continuation"].append(text.strip())
            continue
        last = None  # a line that is not an entry ends the previous entry's traceback
        if text in seen_lines:
            stats["duplicates"] += 1
            match = APP_LINE.match(text)
            exceptions.add("duplicate", "app", number, match["req"] if match else "", None,
                           "identical to an earlier line; counted once")
            last = {"continuation": []}  # its traceback belongs to the duplicate
            continue
        seen_lines.add(text)
        match = APP_LINE.match(text)
        if not match:
            stats["unparseable"] += 1
            exceptions.add("unparseable", "app", number, "", None, "not a log entry: %r" % text[:80])
            continue
        if match["offset"] is None:
            stats["unparseable"] += 1
            exceptions.add("unparseable", "app", number, match["req"].strip("-"), None,
                           "timestamp %r has no UTC offset; not guessed" % match["ts"])
            continue
        try:
            moment = datetime.fromisoformat(match["ts"].replace(",", ".") + match["offset"])
        except ValueError as error:
            stats["unparseable"] += 1
            exceptions.add("unparseable", "app", number, "", None, "bad timestamp: %s" % error)
            continue
        request = APP_REQUEST.match(match["rest"]) if match["req"] != "-" else None
        if match["req"] != "-" and request is None:
            stats["unparseable"] += 1
            exceptions.add("unparseable", "app", number, match["req"], moment,
                           "request line without method, path, status and duration")
            continue
        offsets[offset_text(moment)] = offsets.get(offset_text(moment), 0) + 1
        check_zone(match["host"], moment, "app", number, match["req"].strip("-"), exceptions,
                   zone_checks)
        last = {
            "line": number, "utc": moment.astimezone(timezone.utc), "host": match["host"],
            "level": match["level"], "req": None if match["req"] == "-" else match["req"],
            "status": int(request["status"]) if request else None,
            "message": (request["message"] if request else match["rest"]) or "",
            "continuation": [],
        }
        entries.append(last)
        stats["entries"] += 1
    stats["offsets"] = dict(sorted(offsets.items()))
    return entries, stats


def status_class(status):
    return "%dxx" % (status // 100)


def correlate(lb_requests, app_entries, exceptions, app_stats):
    app_requests, background = {}, []
    for entry in app_entries:
        if entry["req"] is None:
            background.append(entry)
        elif entry["req"] in app_requests:
            app_stats["conflicts"] += 1
            exceptions.add("conflicting_id", "app", entry["line"], entry["req"], entry["utc"],
                           "req already on line %d with different content"
                           % app_requests[entry["req"]]["line"])
        else:
            app_requests[entry["req"]] = entry
    app_stats["requests"] = len(app_requests)
    app_stats["background"] = len(background)

    matched, skews = [], {}
    for rid, lb in sorted(lb_requests.items(), key=lambda item: item[1]["utc"]):
        app = app_requests.get(rid)
        if app is None:
            exceptions.add("lb_without_app", "lb", lb["line"], rid, lb["utc"],
                           "%s %s -> %s, status %d; no app.log entry" % (
                               lb["method"], lb["path"], lb["upstream"], lb["status"]))
            continue
        skew = round((app["utc"] - lb["utc"]).total_seconds(), 3)
        skews.setdefault(app["host"], []).append(skew)
        matched.append(rid)
        if lb["upstream"] != app["host"]:
            exceptions.add("upstream_mismatch", "app", app["line"], rid, app["utc"],
                           "balancer sent it to %s, logged by %s" % (lb["upstream"], app["host"]))
        if abs(skew) > SKEW_THRESHOLD_S:
            exceptions.add("clock_skew", "app", app["line"], rid, app["utc"],
                           "%s is %+.3f s from the balancer (lb line %d)" % (app["host"], skew, lb["line"]))

    for rid, app in sorted(app_requests.items(), key=lambda item: item[1]["utc"]):
        if rid in lb_requests:
            continue
        if app["level"] == "ERROR":
            exceptions.add("error_without_request", "app", app["line"], rid, app["utc"],
                           "%s ERROR, req %s not in the balancer log: %s" % (
                               app["host"], rid, app["message"]))
        else:
            exceptions.add("app_without_lb", "app", app["line"], rid, app["utc"],
                           "%s %s, req %s not in the balancer log" % (app["host"], app["level"], rid))
    for entry in background:
        if entry["level"] == "ERROR":
            exceptions.add("error_without_request", "app", entry["line"], "", entry["utc"],
                           "%s ERROR (background, req=-): %s" % (entry["host"], entry["message"]))
    return app_requests, matched, skews


def buckets(lb_requests, app_requests):
    out = {}
    for rid, lb in lb_requests.items():
        start = lb["utc"].replace(minute=lb["utc"].minute - lb["utc"].minute % BUCKET_MINUTES,
                                  second=0, microsecond=0)
        row = out.setdefault(start, {"requests": 0, "5xx": 0, "app_errors": 0})
        row["requests"] += 1
        if lb["status"] >= 500:
            row["5xx"] += 1
        app = app_requests.get(rid)
        if app and app["level"] == "ERROR":
            row["app_errors"] += 1
    return [{"start_utc": utc_text(start)[:16] + "Z", **row} for start, row in sorted(out.items())]


def build_report():
    exceptions = Exceptions()
    zone_checks = {}
    lb_requests, lb_stats, back_steps = parse_lb(read_lines(os.path.join(INPUT_DIR, LB_FILE)),
                                                 exceptions, zone_checks)
    app_entries, app_stats = parse_app(read_lines(os.path.join(INPUT_DIR, APP_FILE)),
                                       exceptions, zone_checks)
    app_requests, matched, skews = correlate(lb_requests, app_entries, exceptions, app_stats)

    skew_by_host = {}
    for host, values in sorted(skews.items()):
        skew_by_host[host] = {
            "matched": len(values), "median_s": round(statistics.median(values), 3),
            "min_s": min(values), "max_s": max(values),
            "beyond_threshold": sum(1 for v in values if abs(v) > SKEW_THRESHOLD_S),
        }
    lb_status = {}
    for lb in lb_requests.values():
        lb_status[status_class(lb["status"])] = lb_status.get(status_class(lb["status"]), 0) + 1
    all_times = [lb["utc"] for lb in lb_requests.values()] + [e["utc"] for e in app_entries]
    counts = exceptions.counts()

    evidence = [
        "lb_access.log: %d lines, %d requests, %d duplicate and %d unparseable lines; offsets %s."
        % (lb_stats["lines"], lb_stats["requests"], lb_stats["duplicates"], lb_stats["unparseable"],
           ", ".join("%s x%d" % kv for kv in lb_stats["offsets"].items())),
        "app.log: %d lines, %d entries (%d requests, %d background), %d traceback lines, "
        "%d duplicate and %d unparseable lines; offsets %s."
        % (app_stats["lines"], app_stats["entries"], app_stats["requests"], app_stats["background"],
           app_stats["continuation_lines"], app_stats["duplicates"], app_stats["unparseable"],
           ", ".join("%s x%d" % kv for kv in app_stats["offsets"].items())),
        "%d requests matched by id; %d balancer requests have no app entry, %d app requests "
        "no balancer entry." % (len(matched), counts.get("lb_without_app", 0),
                                counts.get("app_without_lb", 0)),
    ]
    for step in back_steps:
        evidence.append(
            "Balancer local time steps back at line %d (%s -> %s) while UTC moves on "
            "(%s -> %s): the DST change; sorting by local time would misorder this hour."
            % (step["line"], step["local_before"], step["local_after"],
               step["utc_before"], step["utc_after"]))
    evidence.append("Offsets checked against each host's zone: %s; %d mismatches."
                    % (", ".join("%s %d" % kv for kv in sorted(zone_checks.items())),
                       counts.get("offset_mismatch", 0)))
    for host, row in skew_by_host.items():
        evidence.append("%s: median skew %+.3f s over %d matched requests (range %+.3f to %+.3f s), "
                        "%d beyond %.1f s." % (host, row["median_s"], row["matched"], row["min_s"],
                                               row["max_s"], row["beyond_threshold"], SKEW_THRESHOLD_S))

    report = {
        "window_utc": {"first": utc_text(min(all_times)), "last": utc_text(max(all_times))},
        "zones": HOST_ZONES,
        "lb": lb_stats,
        "app": app_stats,
        "matched": len(matched),
        "skew_threshold_s": SKEW_THRESHOLD_S,
        "skew_by_host": skew_by_host,
        "lb_status": dict(sorted(lb_status.items())),
        "lb_local_time_steps_back": back_steps,
        "per_%d_min_utc" % BUCKET_MINUTES: buckets(lb_requests, app_requests),
        "exception_counts": dict(sorted(counts.items())),
        "exceptions": exceptions.items,
        "assumptions": ASSUMPTIONS,
        "evidence": evidence,
    }
    return report


def md_cell(text):
    # Backslash escapes (CommonMark): a pipe would split the table cell, and
    # "<id>" would read as an HTML tag.
    return str(text).replace("|", "\\|").replace("<", "\\<")


def write_markdown(path, report):
    buckets_key = "per_%d_min_utc" % BUCKET_MINUTES
    out = ["# Operations report: balancer and application logs, in UTC", "",
           "Window %s to %s. %d requests matched by request id; %d exceptions."
           % (report["window_utc"]["first"], report["window_utc"]["last"], report["matched"],
              len(report["exceptions"])), "",
           "## Requests per %d minutes (UTC)" % BUCKET_MINUTES, "",
           "| start (UTC) | requests | 5xx at balancer | app errors |", "|---|---:|---:|---:|"]
    for row in report[buckets_key]:
        out.append("| %s | %d | %d | %d |" % (row["start_utc"], row["requests"], row["5xx"],
                                             row["app_errors"]))
    out += ["", "## Clock skew by host (app minus balancer)", "",
            "| host | matched | median s | min s | max s | beyond %.1f s |" % report["skew_threshold_s"],
            "|---|---:|---:|---:|---:|---:|"]
    for host, row in report["skew_by_host"].items():
        out.append("| %s | %d | %+.3f | %+.3f | %+.3f | %d |" % (
            host, row["matched"], row["median_s"], row["min_s"], row["max_s"], row["beyond_threshold"]))
    out += ["", "## Exceptions", "", "| kind | count |", "|---|---:|"]
    for kind, count in report["exception_counts"].items():
        out.append("| %s | %d |" % (kind, count))
    out += ["", "| kind | file | line | request id | time (UTC) | detail |", "|---|---|---:|---|---|---|"]
    for item in report["exceptions"]:
        out.append("| %s | %s | %d | %s | %s | %s |" % (
            item["kind"], item["source"], item["line"], md_cell(item["request_id"]),
            item["time_utc"], md_cell(item["detail"])))
    out += ["", "## Evidence", ""] + ["- " + md_cell(e) for e in report["evidence"]]
    out += ["", "## Assumptions", ""] + ["- " + md_cell(a) for a in report["assumptions"]]
    with open(path, "w", encoding="utf-8") as handle:
        handle.write("\n".join(out) + "\n")


def write_csv(path, items):
    with open(path, "w", newline="", encoding="utf-8") as handle:
        writer = csv.writer(handle)
        writer.writerow(["kind", "file", "line", "request_id", "time_utc", "detail"])
        for item in items:
            writer.writerow([item["kind"], item["source"], item["line"], item["request_id"],
                             item["time_utc"], item["detail"]])


def main():
    try:
        report = build_report()
    except (OSError, ValueError, KeyError) as error:
        print("ops_report: %s" % error, file=sys.stderr)
        return 1
    os.makedirs(OUTPUT_DIR, exist_ok=True)
    write_markdown(os.path.join(OUTPUT_DIR, "ops_report.md"), report)
    write_csv(os.path.join(OUTPUT_DIR, "exceptions.csv"), report["exceptions"])
    print(json.dumps(report, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
