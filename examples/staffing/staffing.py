"""Agents needed per arrival rate on a support phone desk (throwbox example job).

The staffing question: how many agents answer 80% of calls within 20 s
at each arrival rate? A seeded discrete-event simulation of the queue (Poisson
arrivals, handle times resampled from last fortnight's calls, first come first
served, one queue, every agent alike) answers it, and the Erlang C formula
checks it: a second simulation with exponential handle times of the same mean
must agree with the formula, which assumes exactly that.

Runs inside the throwbox sandbox as `python3 -I /work/main.py`: reads
/inputs/handle_times.csv and /inputs/scenario.json, prints a JSON report
(figures, "assumptions", "evidence") on stdout, writes /outputs/staffing.png
(matplotlib, Agg) and /outputs/staffing.csv.

For local runs outside the sandbox, INPUT_DIR and OUTPUT_DIR override the two
folders, e.g. `INPUT_DIR=inputs OUTPUT_DIR=/tmp/out python3 staffing.py`.
"""

import csv
import heapq
import json
import math
import os
import random
import re
import statistics
import sys

INPUT_DIR = os.environ.get("INPUT_DIR", "/inputs")
OUTPUT_DIR = os.environ.get("OUTPUT_DIR", "/outputs")
MINUTES_SECONDS = re.compile(r"^(\d+):([0-5]\d)$")
BATCHES = 20
T_975 = 2.093  # Student t, 97.5th percentile, BATCHES - 1 = 19 degrees of freedom


def load_scenario(path):
    with open(path, encoding="utf-8") as handle:
        scenario = json.load(handle)
    rates = scenario["arrival_rates_per_hour"]
    if not rates or any(not isinstance(r, (int, float)) or r <= 0 for r in rates):
        raise ValueError("scenario.json: arrival_rates_per_hour must be positive numbers")
    target = scenario["service_level"]["target_fraction"]
    if not 0 < target < 1:
        raise ValueError("scenario.json: service_level.target_fraction must be in (0, 1)")
    sim = scenario["simulation"]
    if not 0 <= sim["warmup_calls"] < sim["calls_per_run"] <= 200000:
        raise ValueError("scenario.json: need 0 <= warmup_calls < calls_per_run <= 200000")
    return scenario


def load_handle_times(path, valid):
    """Handle times in seconds, and every row left out with the reason."""
    times, excluded, converted = [], [], 0
    with open(path, newline="", encoding="utf-8-sig") as handle:
        reader = csv.DictReader(handle)
        missing = {"call_id", "outcome", "handle_time"} - set(reader.fieldnames or [])
        if missing:
            raise ValueError("handle_times.csv: missing column(s) %s" % ", ".join(sorted(missing)))
        for line, row in enumerate(reader, start=2):
            call, outcome = row["call_id"].strip(), row["outcome"].strip().lower()
            text = (row["handle_time"] or "").strip()
            if outcome == "abandoned":
                excluded.append({"call_id": call, "line": line, "why": "abandoned: no handle time"})
                continue
            match = MINUTES_SECONDS.match(text)
            if match:
                seconds = int(match[1]) * 60 + int(match[2])
                converted += 1
            elif text.isdigit():
                seconds = int(text)
            else:
                excluded.append({"call_id": call, "line": line,
                                 "why": "handle_time %r is neither seconds nor m:ss" % text})
                continue
            if not valid["min"] <= seconds <= valid["max"]:
                excluded.append({"call_id": call, "line": line,
                                 "why": "handle_time %d s outside %d..%d s" % (seconds, valid["min"],
                                                                             valid["max"])})
                continue
            times.append(seconds)
    if len(times) < 30:
        raise ValueError("handle_times.csv: only %d usable handle times; need at least 30" % len(times))
    return times, excluded, converted


def erlang_c_wait_probability(agents, load):
    """P(wait > 0) in M/M/c; 1.0 when the queue is unstable (agents <= load)."""
    if agents <= load:
        return 1.0
    blocking = 1.0  # Erlang B by its recursion: no factorials, no overflow
    for k in range(1, agents + 1):
        blocking = load * blocking / (k + load * blocking)
    return agents * blocking / (agents - load * (1.0 - blocking))


def erlang_c_service_level(agents, load, handle_s, answer_s):
    if agents <= load:
        return 0.0  # unstable: in the long run every call waits without bound
    wait = erlang_c_wait_probability(agents, load)
    return 1.0 - wait * math.exp(-(agents - load) * answer_s / handle_s)


def erlang_c_staff(load, handle_s, answer_s, target):
    agents = math.floor(load) + 1
    while erlang_c_service_level(agents, load, handle_s, answer_s) < target:
        agents += 1
    return agents


def simulate(arrivals, services, agents, answer_s, warmup):
    """First come first served, one queue, `agents` identical servers.

    Each call takes the agent who frees up first (a heap of the agents' next free
    times): the event order of the FCFS multi-server queue, without a calendar.
    """
    free_at = [0.0] * agents
    replace = heapq.heapreplace
    waits = []
    record = waits.append
    for arrival, service in zip(arrivals, services):
        free = free_at[0]
        start = arrival if arrival > free else free
        replace(free_at, start + service)
        record(start - arrival)
    del waits[:warmup]
    counted = len(waits)
    answered = sum(1 for wait in waits if wait <= answer_s)
    # Batch means: waits of neighbouring calls are correlated, so the spread of
    # the batches' service levels, not of single calls, gives the uncertainty.
    size = counted // BATCHES
    levels = [sum(1 for wait in waits[b * size:(b + 1) * size] if wait <= answer_s) / size
              for b in range(BATCHES)]
    half_width = T_975 * statistics.stdev(levels) / math.sqrt(BATCHES)
    total_wait = math.fsum(waits)
    return {"service_level": answered / counted, "asa_s": total_wait / counted,
            "ci95_half_width": half_width}


def staff_by_simulation(arrivals, services, start, answer_s, warmup, target):
    """Smallest staff whose simulated service level meets the target.

    The same calls are replayed for every staff level (common random numbers),
    so the service level can only rise with staff and the search is exact for
    this sample.
    """
    runs = {}

    def run(agents):
        if agents not in runs:
            runs[agents] = simulate(arrivals, services, agents, answer_s, warmup)
        return runs[agents]["service_level"]

    agents = start
    if run(agents) >= target:
        while agents > 1 and run(agents - 1) >= target:
            agents -= 1
    else:
        while run(agents) < target:
            agents += 1
    if agents > 1:
        run(agents - 1)
    return agents, runs


def r4(value):
    return round(value, 4)


def analyse(scenario, handle_times):
    answer_s = scenario["service_level"]["answer_within_s"]
    target = scenario["service_level"]["target_fraction"]
    sim = scenario["simulation"]
    n_calls, warmup, seed = sim["calls_per_run"], sim["warmup_calls"], sim["seed"]
    mean_s = statistics.fmean(handle_times)

    rows = []
    for rate in scenario["arrival_rates_per_hour"]:
        load = rate * mean_s / 3600.0
        erlang_staff = erlang_c_staff(load, mean_s, answer_s, target)
        # One random stream per rate and purpose, seeded by name: adding a rate
        # or reordering them changes no other rate's calls.
        arrivals_rng = random.Random("%s/arrivals/%s" % (seed, rate))
        empirical_rng = random.Random("%s/empirical/%s" % (seed, rate))
        exponential_rng = random.Random("%s/exponential/%s" % (seed, rate))
        clock, arrivals = 0.0, []
        for _ in range(n_calls):
            clock += arrivals_rng.expovariate(rate / 3600.0)
            arrivals.append(clock)
        empirical = [empirical_rng.choice(handle_times) for _ in range(n_calls)]
        exponential = [exponential_rng.expovariate(1.0 / mean_s) for _ in range(n_calls)]

        sim_staff, sim_runs = staff_by_simulation(arrivals, empirical, erlang_staff, answer_s,
                                                  warmup, target)
        exp_staff, exp_runs = staff_by_simulation(arrivals, exponential, erlang_staff, answer_s,
                                                  warmup, target)
        # The exponential model at the formula's own staff levels, for the cross-check.
        for agents in (erlang_staff - 1, erlang_staff):
            if agents >= 1 and agents not in exp_runs:
                exp_runs[agents] = simulate(arrivals, exponential, agents, answer_s, warmup)

        def sl(runs, agents):
            return r4(runs[agents]["service_level"]) if agents in runs else None

        def ci(runs, agents):
            if agents not in runs:
                return None
            run = runs[agents]
            return [r4(run["service_level"] - run["ci95_half_width"]),
                    r4(run["service_level"] + run["ci95_half_width"])]

        # Marginal: the target lies inside the 95% interval at the chosen staff
        # or one below, so another sample could move the answer by one agent.
        marginal = any(interval and interval[0] <= target <= interval[1]
                       for interval in (ci(sim_runs, sim_staff), ci(sim_runs, sim_staff - 1)))

        rows.append({
            "calls_per_hour": rate,
            "offered_load_erlangs": r4(load),
            "erlang_c": {
                "staff": erlang_staff,
                "service_level": r4(erlang_c_service_level(erlang_staff, load, mean_s, answer_s)),
                "service_level_staff_minus_1": r4(erlang_c_service_level(erlang_staff - 1, load,
                                                                         mean_s, answer_s)),
                "wait_probability": r4(erlang_c_wait_probability(erlang_staff, load)),
                "occupancy": r4(load / erlang_staff),
            },
            "simulation": {
                "staff": sim_staff,
                "service_level": sl(sim_runs, sim_staff),
                "service_level_ci95": ci(sim_runs, sim_staff),
                "service_level_staff_minus_1": sl(sim_runs, sim_staff - 1),
                "service_level_staff_minus_1_ci95": ci(sim_runs, sim_staff - 1),
                "marginal": marginal,
                "asa_s": round(sim_runs[sim_staff]["asa_s"], 1),
                "service_level_by_staff": {str(k): r4(v["service_level"])
                                           for k, v in sorted(sim_runs.items())},
            },
            "exponential_check": {
                "staff": exp_staff,
                "service_level_at_erlang_staff": sl(exp_runs, erlang_staff),
                "service_level_at_erlang_staff_minus_1": sl(exp_runs, erlang_staff - 1),
                "difference_from_erlang_c": r4(exp_runs[erlang_staff]["service_level"]
                                               - erlang_c_service_level(erlang_staff, load,
                                                                        mean_s, answer_s)),
            },
        })
    return rows


def draw_chart(path, rows, answer_s, target):
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    rates = [row["calls_per_hour"] for row in rows]
    fig, ax = plt.subplots(figsize=(6.5, 4), dpi=100)
    ax.plot(rates, [row["offered_load_erlangs"] for row in rows], color="#999999",
            linestyle=":", label="offered load (Erlangs)")
    ax.plot(rates, [row["erlang_c"]["staff"] for row in rows], marker="s", color="#4c72b0",
            label="Erlang C (exponential handle times)")
    ax.plot(rates, [row["simulation"]["staff"] for row in rows], marker="o", color="#dd8452",
            linestyle="--", label="simulation (observed handle times)")
    marginal = [row for row in rows if row["simulation"]["marginal"]]
    if marginal:
        ax.plot([row["calls_per_hour"] for row in marginal],
                [row["simulation"]["staff"] for row in marginal], linestyle="none", marker="o",
                markersize=12, markerfacecolor="none", color="#c44e52",
                label="marginal: target inside the 95% interval")
    for row in rows:
        ax.annotate(str(row["simulation"]["staff"]),
                    (row["calls_per_hour"], row["simulation"]["staff"]),
                    textcoords="offset points", xytext=(0, 7), ha="center", fontsize=8)
    top = max(max(row["erlang_c"]["staff"], row["simulation"]["staff"]) for row in rows)
    ax.set_ylim(0, top * 1.15)
    ax.set_xlabel("calls per hour")
    ax.set_ylabel("agents")
    ax.set_title("Agents needed to answer %d%% of calls within %d s" % (round(target * 100), answer_s))
    ax.grid(alpha=0.3)
    ax.legend(loc="upper left", fontsize=8)
    fig.tight_layout()
    fig.savefig(path)
    plt.close(fig)


def write_csv(path, rows):
    with open(path, "w", newline="", encoding="utf-8") as handle:
        writer = csv.writer(handle)
        writer.writerow(["calls_per_hour", "offered_load_erlangs", "erlang_c_staff",
                         "erlang_c_service_level", "simulated_staff", "simulated_service_level",
                         "simulated_service_level_staff_minus_1", "simulated_asa_s"])
        for row in rows:
            writer.writerow([row["calls_per_hour"], row["offered_load_erlangs"],
                             row["erlang_c"]["staff"], row["erlang_c"]["service_level"],
                             row["simulation"]["staff"], row["simulation"]["service_level"],
                             row["simulation"]["service_level_staff_minus_1"],
                             row["simulation"]["asa_s"]])


def main():
    try:
        scenario = load_scenario(os.path.join(INPUT_DIR, "scenario.json"))
        times, excluded, converted = load_handle_times(os.path.join(INPUT_DIR, "handle_times.csv"),
                                                       scenario["handle_time_valid_s"])
    except (OSError, ValueError, KeyError, TypeError) as error:
        print("staffing: %s" % error, file=sys.stderr)
        return 1

    answer_s = scenario["service_level"]["answer_within_s"]
    target = scenario["service_level"]["target_fraction"]
    sim = scenario["simulation"]
    mean_s = statistics.fmean(times)
    cv = statistics.pstdev(times) / mean_s
    rows = analyse(scenario, times)

    assumptions = [
        "Service level: the fraction of calls answered within %d s, target %d%%, measured over "
        "all calls of a long steady-state run, not per interval." % (answer_s, round(target * 100)),
        "Calls arrive as a Poisson process at each stated rate, all day at that rate.",
        "Handle times are drawn at random, with replacement, from the %d usable handle times "
        "in handle_times.csv (transferred and escalated calls count with the time "
        "recorded)." % len(times),
        "Abandoned calls have no handle time and are left out of the sample; callers are "
        "assumed never to hang up while waiting, which overstates waiting slightly and so "
        "errs towards more agents.",
        "handle_time is whole seconds or m:ss; values outside %d..%d s are recording errors "
        "(a zero, a call never closed) and left out." % (scenario["handle_time_valid_s"]["min"],
                                                       scenario["handle_time_valid_s"]["max"]),
        "One queue, first come first served, every agent takes any call; no breaks, "
        "wrap-up time or shrinkage: these are agents on the phones, not heads on the roster.",
        "Each run simulates %d calls and discards the first %d (the desk starts empty); "
        "seed %s, so every run of this job gives the same figures."
        % (sim["calls_per_run"], sim["warmup_calls"], sim["seed"]),
        "Uncertainty: a 95%% interval from %d batch means of each run; a rate is marginal "
        "when the target lies inside the interval at the chosen staff or one below." % BATCHES,
        "Erlang C (M/M/c) uses only the mean handle time; it is the cross-check, the "
        "simulation with the observed handle times is the answer.",
    ]

    erlang_agree = [r["calls_per_hour"] for r in rows if r["exponential_check"]["staff"] == r["erlang_c"]["staff"]]
    worst = max(rows, key=lambda r: abs(r["exponential_check"]["difference_from_erlang_c"]))
    fewer = [r["calls_per_hour"] for r in rows if r["simulation"]["staff"] < r["erlang_c"]["staff"]]
    more = [r["calls_per_hour"] for r in rows if r["simulation"]["staff"] > r["erlang_c"]["staff"]]
    evidence = [
        "%d handle times used of %d rows; %d left out (%s); %d given as m:ss converted."
        % (len(times), len(times) + len(excluded), len(excluded),
           "; ".join("%s %s" % (e["call_id"], e["why"]) for e in excluded if not e["why"].startswith("abandoned"))
           + ("; %d abandoned" % sum(e["why"].startswith("abandoned") for e in excluded)),
           converted),
        "Mean handle time %.1f s, median %.0f s, coefficient of variation %.2f (an exponential "
        "distribution has 1.00)." % (mean_s, statistics.median(times), cv),
        "Simulator check: with exponential handle times the simulation needs the same staff as "
        "Erlang C at %d of %d rates; the largest service-level difference at the Erlang C staff "
        "is %+.1f points (%d calls/h)." % (len(erlang_agree), len(rows),
                                           100 * worst["exponential_check"]["difference_from_erlang_c"],
                                           worst["calls_per_hour"]),
    ]
    if fewer or more:
        evidence.append(
            "With the observed handle times the simulation needs fewer agents than Erlang C at %s "
            "calls/h and more at %s calls/h." % (", ".join(map(str, fewer)) or "no",
                                                  ", ".join(map(str, more)) or "no"))
    else:
        evidence.append("With the observed handle times the simulation needs the same staff as "
                        "Erlang C at every rate.")
    same = [r for r in rows if r["simulation"]["staff"] == r["erlang_c"]["staff"]]
    if same:
        gaps = [r["simulation"]["service_level"] - r["erlang_c"]["service_level"] for r in same]
        evidence.append(
            "At equal staff the simulated service level differs from Erlang C's by %+.1f points on "
            "average (%+.1f to %+.1f); the observed handle times have a CV of %.2f, the "
            "exponential ones Erlang C assumes 1.00." % (
                100 * statistics.fmean(gaps), 100 * min(gaps), 100 * max(gaps), cv))
    for r in rows:
        if not r["simulation"]["marginal"]:
            continue
        below = r["simulation"]["service_level_staff_minus_1_ci95"]
        at = r["simulation"]["service_level_ci95"]
        evidence.append(
            "Marginal at %g calls/h: the 95%% interval of the simulated service level is "
            "%.1f-%.1f%% with %d agents and %.1f-%.1f%% with %d; the target %.0f%% lies inside one "
            "of them, so another sample could move the answer by one agent." % (
                r["calls_per_hour"], 100 * below[0], 100 * below[1], r["simulation"]["staff"] - 1,
                100 * at[0], 100 * at[1], r["simulation"]["staff"], 100 * target))
    for r in rows:
        evidence.append(
            "%g calls/h (%.2f Erlangs): %d agents answer %.1f%% within %d s in simulation, %d agents "
            "%.1f%%; Erlang C says %d (%.1f%%)." % (
                r["calls_per_hour"], r["offered_load_erlangs"], r["simulation"]["staff"],
                100 * r["simulation"]["service_level"], answer_s, r["simulation"]["staff"] - 1,
                100 * (r["simulation"]["service_level_staff_minus_1"] or 0.0),
                r["erlang_c"]["staff"], 100 * r["erlang_c"]["service_level"]))

    report = {
        "desk": scenario.get("desk", ""),
        "service_level_target": {"answer_within_s": answer_s, "fraction": target},
        "handle_time": {"used": len(times), "excluded": excluded, "converted_from_m_ss": converted,
                        "mean_s": round(mean_s, 3), "median_s": statistics.median(times),
                        "cv": round(cv, 3)},
        "simulation": {"seed": sim["seed"], "calls_per_run": sim["calls_per_run"],
                       "warmup_calls": sim["warmup_calls"]},
        "rates": rows,
        "assumptions": assumptions,
        "evidence": evidence,
    }
    os.makedirs(OUTPUT_DIR, exist_ok=True)
    write_csv(os.path.join(OUTPUT_DIR, "staffing.csv"), rows)
    draw_chart(os.path.join(OUTPUT_DIR, "staffing.png"), rows, answer_s, target)
    print(json.dumps(report, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
