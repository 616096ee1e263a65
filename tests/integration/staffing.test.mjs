// The staffing example (examples/staffing) end to end: handle times and a
// scenario go in, agents needed per arrival rate come out, with a PNG chart.
// The test checks the program against figures it computes itself: the
// handle-time sample (its own CSV rules), Erlang C (its own evaluation), and a
// queue simulation of its own (different code, different random numbers) at the
// staff the program reports.
import test, { after } from 'node:test';
import assert from 'node:assert/strict';
import fs from 'node:fs';
import path from 'node:path';
import {
  REPO_ROOT, connect, upload, runCode, fetchArtifact, artifactText, findArtifact, textOf,
} from './lib/client.mjs';

const dir = path.join(REPO_ROOT, 'examples', 'staffing');
const example = JSON.parse(fs.readFileSync(path.join(dir, 'example.json'), 'utf8'));
const scenario = JSON.parse(fs.readFileSync(path.join(dir, 'inputs', 'scenario.json'), 'utf8'));
const csvText = fs.readFileSync(path.join(dir, 'inputs', 'handle_times.csv'), 'utf8');
const ANSWER_S = scenario.service_level.answer_within_s;
const TARGET = scenario.service_level.target_fraction;
// How far the test's own simulation may sit on the wrong side of the target:
// two independent samples of the same queue differ by sampling error alone.
const SIM_TOLERANCE = 0.025;

// The handle-time sample, by the rules the example's README states.
function handleTimes(text) {
  const [header, ...rows] = text.trim().split(/\r?\n/).map((l) => l.split(','));
  const col = Object.fromEntries(header.map((name, i) => [name, i]));
  const times = [];
  let excluded = 0, converted = 0;
  for (const row of rows) {
    const value = row[col.handle_time].trim();
    if (row[col.outcome].trim() === 'abandoned') { excluded += 1; continue; }
    let seconds;
    const mss = /^(\d+):([0-5]\d)$/.exec(value);
    if (mss) { seconds = Number(mss[1]) * 60 + Number(mss[2]); converted += 1; } else if (/^\d+$/.test(value)) seconds = Number(value);
    else { excluded += 1; continue; }
    if (seconds < scenario.handle_time_valid_s.min || seconds > scenario.handle_time_valid_s.max) { excluded += 1; continue; }
    times.push(seconds);
  }
  return { times, excluded, converted };
}

// Erlang C from its textbook form, A^c/c! * c/(c-A) over the sum, in logs.
function erlangServiceLevel(agents, load, handleS) {
  if (agents <= load) return 0;
  let logTerm = 0; // log(A^k / k!)
  let sum = 0;
  for (let k = 0; k < agents; k += 1) {
    if (k > 0) logTerm += Math.log(load) - Math.log(k);
    sum += Math.exp(logTerm);
  }
  const top = Math.exp(logTerm + Math.log(load) - Math.log(agents)) * agents / (agents - load);
  const wait = top / (sum + top);
  return 1 - wait * Math.exp(-(agents - load) * ANSWER_S / handleS);
}

function erlangStaff(load, handleS) {
  let agents = Math.floor(load) + 1;
  while (erlangServiceLevel(agents, load, handleS) < TARGET) agents += 1;
  return agents;
}

// mulberry32: a small seeded generator, unrelated to Python's Mersenne Twister.
function rng(seed) {
  let a = seed >>> 0;
  return () => {
    a = (a + 0x6d2b79f5) >>> 0;
    let t = a;
    t = Math.imul(t ^ (t >>> 15), t | 1);
    t ^= t + Math.imul(t ^ (t >>> 7), t | 61);
    return ((t ^ (t >>> 14)) >>> 0) / 4294967296;
  };
}

// M/G/c, first come first served: each call goes to the agent free first.
function simulatedServiceLevel(ratePerHour, agents, times, seed) {
  const random = rng(seed);
  const free = new Float64Array(agents);
  const { calls_per_run: calls, warmup_calls: warmup } = scenario.simulation;
  let clock = 0, answered = 0;
  for (let i = 0; i < calls; i += 1) {
    clock += -Math.log(1 - random()) * 3600 / ratePerHour;
    const service = times[Math.floor(random() * times.length)];
    let k = 0;
    for (let j = 1; j < agents; j += 1) if (free[j] < free[k]) k = j;
    const start = Math.max(clock, free[k]);
    free[k] = start + service;
    if (i >= warmup && start - clock <= ANSWER_S) answered += 1;
  }
  return answered / (calls - warmup);
}

function pngSize(bytes) {
  assert.deepEqual([...bytes.subarray(0, 8)], [0x89, 0x50, 0x4e, 0x47, 0x0d, 0x0a, 0x1a, 0x0a], 'PNG signature');
  assert.equal(bytes.subarray(12, 16).toString('latin1'), 'IHDR');
  return { width: bytes.readUInt32BE(16), height: bytes.readUInt32BE(20) };
}

let conn;
after(async () => conn?.close());

test('the staffing job finds the agents needed per arrival rate and draws them', { timeout: 90_000 }, async (t) => {
  const sample = handleTimes(csvText);
  const meanS = sample.times.reduce((a, b) => a + b, 0) / sample.times.length;

  conn = await connect();
  const inputIds = [];
  for (const rel of example.inputs) {
    const input = await upload(conn.client, path.basename(rel), fs.readFileSync(path.join(dir, rel), 'utf8'));
    inputIds.push(input.input_id);
  }
  const result = await runCode(conn.client, {
    runtime: example.runtime, code: fs.readFileSync(path.join(dir, example.program), 'utf8'),
    input_ids: inputIds, timeout_s: example.timeout_s,
  }, { timeout: (example.timeout_s + 20) * 1000 });
  assert.ok(!result.isError, `run_code isError: ${textOf(result)}`);
  const sc = result.structuredContent;
  assert.equal(sc.status, 'completed', `stderr: ${sc.stderr}`);
  assert.equal(sc.stdout_truncated, false);
  t.diagnostic(`staffing job: ${sc.duration_ms} ms wall, ${sc.cpu_ms} ms cpu`);
  const report = JSON.parse(sc.stdout);

  // The handle-time sample.
  assert.equal(report.handle_time.used, sample.times.length);
  assert.equal(report.handle_time.excluded.length, sample.excluded);
  assert.equal(report.handle_time.converted_from_m_ss, sample.converted);
  assert.ok(Math.abs(report.handle_time.mean_s - meanS) < 0.001, `mean ${report.handle_time.mean_s} vs ${meanS}`);
  assert.deepEqual(report.service_level_target, { answer_within_s: ANSWER_S, fraction: TARGET });
  assert.deepEqual(report.rates.map((r) => r.calls_per_hour), scenario.arrival_rates_per_hour);

  let seed = 7;
  for (const row of report.rates) {
    const rate = row.calls_per_hour;
    const load = rate * meanS / 3600;
    assert.ok(Math.abs(row.offered_load_erlangs - load) < 1e-4, `${rate}/h load`);

    // Erlang C: the program's analytic answer is the test's.
    const staff = erlangStaff(load, meanS);
    assert.equal(row.erlang_c.staff, staff, `${rate}/h Erlang C staff`);
    assert.ok(Math.abs(row.erlang_c.service_level - erlangServiceLevel(staff, load, meanS)) < 1e-4, `${rate}/h Erlang C SL`);
    assert.ok(row.erlang_c.service_level >= TARGET);
    assert.ok(Math.abs(row.erlang_c.service_level_staff_minus_1 - erlangServiceLevel(staff - 1, load, meanS)) < 1e-4);
    assert.ok(row.erlang_c.service_level_staff_minus_1 < TARGET);

    // The program's simulator, fed exponential handle times, must reproduce
    // the formula: that is what makes its answer with the real times credible.
    assert.ok(Math.abs(row.exponential_check.service_level_at_erlang_staff - erlangServiceLevel(staff, load, meanS)) < 0.03,
      `${rate}/h exponential simulation ${row.exponential_check.service_level_at_erlang_staff} vs Erlang C`);
    assert.ok(Math.abs(row.exponential_check.staff - staff) <= 1);

    // The simulated answer: its own figures meet the target at staff and miss it one below...
    const sim = row.simulation;
    assert.ok(sim.service_level >= TARGET, `${rate}/h: simulated SL ${sim.service_level} at ${sim.staff}`);
    assert.ok(sim.service_level_staff_minus_1 < TARGET, `${rate}/h: simulated SL ${sim.service_level_staff_minus_1} at ${sim.staff - 1}`);
    assert.ok(sim.service_level_ci95[0] <= sim.service_level && sim.service_level <= sim.service_level_ci95[1]);
    assert.equal(sim.marginal, [sim.service_level_ci95, sim.service_level_staff_minus_1_ci95]
      .some(([lo, hi]) => lo <= TARGET && TARGET <= hi), `${rate}/h marginal flag`);

    // ...and the test's own simulation agrees, within sampling error.
    const atStaff = simulatedServiceLevel(rate, sim.staff, sample.times, seed += 1);
    const below = simulatedServiceLevel(rate, sim.staff - 1, sample.times, seed += 1);
    t.diagnostic(`${rate}/h: staff ${sim.staff} (Erlang C ${staff}); test's simulation ${atStaff.toFixed(4)} at ${sim.staff}, ${below.toFixed(4)} at ${sim.staff - 1}`);
    assert.ok(atStaff >= TARGET - SIM_TOLERANCE, `${rate}/h: test simulation ${atStaff} with ${sim.staff} agents`);
    assert.ok(below < TARGET + SIM_TOLERANCE, `${rate}/h: test simulation ${below} with ${sim.staff - 1} agents`);
    // Two independent samples: their difference has about 0.7 times the
    // program's 95% half-width as its standard deviation; allow about 4 of them.
    const near = (mine, theirs, [lo, hi]) => Math.abs(mine - theirs) <= 3 * (hi - lo) / 2 + 0.002;
    assert.ok(near(atStaff, sim.service_level, sim.service_level_ci95),
      `${rate}/h, ${sim.staff} agents: test ${atStaff} vs program ${sim.service_level} ${sim.service_level_ci95}`);
    assert.ok(near(below, sim.service_level_staff_minus_1, sim.service_level_staff_minus_1_ci95),
      `${rate}/h, ${sim.staff - 1} agents: test ${below} vs program ${sim.service_level_staff_minus_1} ${sim.service_level_staff_minus_1_ci95}`);
  }

  assert.ok(Array.isArray(report.assumptions) && report.assumptions.length >= 5);
  assert.ok(report.assumptions.every((a) => typeof a === 'string' && a.length > 0));
  assert.ok(Array.isArray(report.evidence) && report.evidence.length >= 4);
  assert.ok(report.evidence.every((e) => typeof e === 'string' && e.length > 0));

  // The chart: accepted by the gate as a PNG and returned as image content.
  const png = findArtifact(sc.artifacts, 'staffing.png');
  assert.ok(png, `artifacts: ${JSON.stringify(sc.artifacts)}`);
  assert.equal(png.verdict, 'accepted', png.reason);
  assert.equal(png.media_type, 'image/png');
  const fetched = await fetchArtifact(conn.client, png.artifact_id);
  assert.ok(!fetched.isError, textOf(fetched));
  const image = fetched.content.find((c) => c.type === 'image');
  assert.ok(image, `content types: ${fetched.content.map((c) => c.type)}`);
  assert.equal(image.mimeType, 'image/png');
  const bytes = Buffer.from(image.data, 'base64');
  assert.equal(bytes.length, png.size);
  const { width, height } = pngSize(bytes);
  assert.ok(width >= 300 && height >= 200, `PNG ${width}x${height}`);

  // The table: one row per rate, the same staff as the JSON report.
  const table = findArtifact(sc.artifacts, 'staffing.csv');
  assert.ok(table, `artifacts: ${JSON.stringify(sc.artifacts)}`);
  assert.equal(table.verdict, 'accepted', table.reason);
  const tableFetched = await fetchArtifact(conn.client, table.artifact_id);
  const [header, ...rows] = artifactText(tableFetched).trim().split(/\r?\n/).map((l) => l.split(','));
  assert.equal(rows.length, report.rates.length);
  const staffCol = header.indexOf('simulated_staff');
  const erlangCol = header.indexOf('erlang_c_staff');
  assert.deepEqual(rows.map((r) => [Number(r[erlangCol]), Number(r[staffCol])]),
    report.rates.map((r) => [r.erlang_c.staff, r.simulation.staff]));
});
