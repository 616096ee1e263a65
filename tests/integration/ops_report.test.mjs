// The operations report example (examples/ops-report) end to end: two logs in
// different formats and time zones go in, the program normalises them to UTC,
// matches requests by id and lists the exceptions. This test parses both logs
// itself (its own rules, written from the example's README, in JavaScript) and
// compares every figure and exception with the program's report; then it checks
// the two artifacts passed the gate and come back as text.
import test, { after } from 'node:test';
import assert from 'node:assert/strict';
import fs from 'node:fs';
import path from 'node:path';
import {
  REPO_ROOT, connect, upload, runCode, fetchArtifact, artifactText, findArtifact, textOf,
} from './lib/client.mjs';

const dir = path.join(REPO_ROOT, 'examples', 'ops-report');
const example = JSON.parse(fs.readFileSync(path.join(dir, 'example.json'), 'utf8'));
const SKEW_THRESHOLD_S = 2.0;
const LB_ZONE = 'America/New_York';
const HOST_ZONES = { 'app-1': 'Africa/Johannesburg', 'app-2': 'Africa/Johannesburg', 'app-3': 'UTC' };
const MONTHS = ['Jan', 'Feb', 'Mar', 'Apr', 'May', 'Jun', 'Jul', 'Aug', 'Sep', 'Oct', 'Nov', 'Dec'];

const LB_RE = new RegExp('^(\\S+) \\S+ \\S+ \\[(\\d{2})/([A-Z][a-z]{2})/(\\d{4}):(\\d{2}):(\\d{2}):(\\d{2}) ([+-])(\\d{2})(\\d{2})\\] '
  + '"([A-Z]+) (\\S+) HTTP/[\\d.]+" (\\d{3}) (\\d+|-) rt=([\\d.]+|-) upstream=(\\S+) rid=([0-9a-f]{8})$');
const APP_RE = /^(\d{4}-\d{2}-\d{2}[T ]\d{2}:\d{2}:\d{2}(?:[.,]\d+)?)(Z|[+-]\d{2}:\d{2})? ([\w-]+) +(INFO|WARN|ERROR) +req=([0-9a-f]{8}|-) (.*)$/;
const APP_REQUEST_RE = /^[A-Z]+ \S+ (\d{3}) \d+ms/;

function lines(text) {
  const out = text.split('\n');
  if (out.at(-1) === '') out.pop();
  return out.map((line) => line.replace(/\r$/, ''));
}

// The UTC offset, in minutes, of `zone` at instant `ms`, from the platform's tz data.
function zoneOffsetMinutes(zone, ms) {
  const name = new Intl.DateTimeFormat('en-US', { timeZone: zone, timeZoneName: 'longOffset' })
    .formatToParts(new Date(ms)).find((p) => p.type === 'timeZoneName').value; // "GMT-05:00" or "GMT"
  const m = /^GMT(?:([+-])(\d{2}):(\d{2}))?$/.exec(name);
  assert.ok(m, `unexpected zone name ${name}`);
  return m[1] ? (m[1] === '-' ? -1 : 1) * (Number(m[2]) * 60 + Number(m[3])) : 0;
}

function offsetLabel(minutes) {
  const sign = minutes < 0 ? '-' : '+';
  const abs = Math.abs(minutes);
  return `${sign}${String(Math.floor(abs / 60)).padStart(2, '0')}:${String(abs % 60).padStart(2, '0')}`;
}

function parseLb(text) {
  const seen = new Set();
  const out = { requests: new Map(), duplicates: [], unparseable: [], offsets: {}, zoneMismatches: 0, backSteps: [] };
  let previous = null;
  lines(text).forEach((line, i) => {
    const number = i + 1;
    if (!line.trim()) return;
    if (seen.has(line)) { out.duplicates.push(number); return; }
    seen.add(line);
    const m = LB_RE.exec(line);
    if (!m) { out.unparseable.push(number); return; }
    const [, , dd, mon, yyyy, hh, mi, ss, sign, oh, om, method, urlPath, status, , , upstream, rid] = m;
    const offset = (sign === '-' ? -1 : 1) * (Number(oh) * 60 + Number(om));
    const wallMs = Date.UTC(Number(yyyy), MONTHS.indexOf(mon), Number(dd), Number(hh), Number(mi), Number(ss));
    const utcMs = wallMs - offset * 60_000;
    assert.ok(!out.requests.has(rid), `the inputs hold rid ${rid} twice with different lines`);
    out.offsets[offsetLabel(offset)] = (out.offsets[offsetLabel(offset)] ?? 0) + 1;
    if (zoneOffsetMinutes(LB_ZONE, utcMs) !== offset) out.zoneMismatches += 1;
    if (previous && wallMs < previous.wallMs && utcMs > previous.utcMs) out.backSteps.push(number);
    previous = { wallMs, utcMs };
    out.requests.set(rid, { line: number, utcMs, status: Number(status), method, path: urlPath, upstream });
  });
  return out;
}

function parseApp(text) {
  const seen = new Set();
  const out = {
    requests: new Map(), background: [], entries: 0, continuation: 0, duplicates: [], unparseable: [],
    offsets: {}, zoneMismatches: 0,
  };
  let inEntry = false;
  lines(text).forEach((line, i) => {
    const number = i + 1;
    if (!line.trim()) return;
    if (line[0] === ' ' || line[0] === '\t') {
      if (inEntry) out.continuation += 1; else out.unparseable.push(number);
      return;
    }
    inEntry = false;
    if (seen.has(line)) { out.duplicates.push(number); inEntry = true; return; } // its traceback goes with it
    seen.add(line);
    const m = APP_RE.exec(line);
    if (!m || !m[2]) { out.unparseable.push(number); return; } // no match, or no UTC offset
    const [, ts, offset, host, level, req, rest] = m;
    const utcMs = Date.parse(ts.replace(',', '.') + offset);
    assert.ok(Number.isFinite(utcMs), `line ${number}: ${ts}${offset}`);
    if (req !== '-' && !APP_REQUEST_RE.test(rest)) { out.unparseable.push(number); return; }
    const minutes = offset === 'Z' ? 0 : (offset[0] === '-' ? -1 : 1) * (Number(offset.slice(1, 3)) * 60 + Number(offset.slice(4, 6)));
    out.offsets[offsetLabel(minutes)] = (out.offsets[offsetLabel(minutes)] ?? 0) + 1;
    if (zoneOffsetMinutes(HOST_ZONES[host], utcMs) !== minutes) out.zoneMismatches += 1;
    const entry = { line: number, utcMs, host, level, req };
    out.entries += 1;
    inEntry = true;
    if (req === '-') out.background.push(entry);
    else {
      assert.ok(!out.requests.has(req), `the inputs hold req ${req} twice with different lines`);
      out.requests.set(req, entry);
    }
  });
  return out;
}

// RFC 4180 enough for csv.writer output: quoted fields, doubled quotes, CRLF.
function parseCsv(text) {
  const rows = [];
  let row = [], field = '', quoted = false;
  for (let i = 0; i < text.length; i += 1) {
    const c = text[i];
    if (quoted) {
      if (c === '"' && text[i + 1] === '"') { field += '"'; i += 1; } else if (c === '"') quoted = false; else field += c;
    } else if (c === '"') quoted = true;
    else if (c === ',') { row.push(field); field = ''; } else if (c === '\n') { row.push(field); rows.push(row); row = []; field = ''; } else if (c !== '\r') field += c;
  }
  if (field || row.length) { row.push(field); rows.push(row); }
  return rows;
}

function median(values) {
  const s = [...values].sort((a, b) => a - b);
  const mid = Math.floor(s.length / 2);
  return s.length % 2 ? s[mid] : (s[mid - 1] + s[mid]) / 2;
}

const sorted = (values) => [...values].sort();
const ofKind = (report, kind) => report.exceptions.filter((e) => e.kind === kind);

let conn;
after(async () => conn?.close());

test('the ops report normalises both logs to UTC and lists every exception', { timeout: 60_000 }, async (t) => {
  const lbText = fs.readFileSync(path.join(dir, 'inputs', 'lb_access.log'), 'utf8');
  const appText = fs.readFileSync(path.join(dir, 'inputs', 'app.log'), 'utf8');
  const lb = parseLb(lbText);
  const app = parseApp(appText);

  // What the test expects, derived from the logs alone.
  const matched = [...lb.requests.keys()].filter((rid) => app.requests.has(rid));
  const lbWithoutApp = [...lb.requests.keys()].filter((rid) => !app.requests.has(rid));
  const appOnly = [...app.requests.values()].filter((e) => !lb.requests.has(e.req));
  const appWithoutLb = appOnly.filter((e) => e.level !== 'ERROR').map((e) => e.line);
  const errorsWithoutRequest = [...appOnly.filter((e) => e.level === 'ERROR'),
    ...app.background.filter((e) => e.level === 'ERROR')].map((e) => e.line);
  const skew = new Map(matched.map((rid) => [rid, (app.requests.get(rid).utcMs - lb.requests.get(rid).utcMs) / 1000]));
  const skewed = matched.filter((rid) => Math.abs(skew.get(rid)) > SKEW_THRESHOLD_S);

  // The inputs must really hold the messy cases the example is about.
  for (const [what, n] of Object.entries({
    'lb duplicates': lb.duplicates.length, 'lb unparseable': lb.unparseable.length,
    'app duplicates': app.duplicates.length, 'app unparseable': app.unparseable.length,
    'app traceback lines': app.continuation, 'lb requests without app entry': lbWithoutApp.length,
    'app requests without lb entry': appWithoutLb.length, 'errors without request': errorsWithoutRequest.length,
    'skewed requests': skewed.length, 'DST step back': lb.backSteps.length,
  })) assert.ok(n > 0, `inputs: no ${what}`);
  assert.deepEqual(Object.keys(lb.offsets).sort(), ['-04:00', '-05:00'], 'the balancer log crosses the DST change');

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
  t.diagnostic(`ops-report job: ${sc.duration_ms} ms wall, ${sc.cpu_ms} ms cpu`);
  const report = JSON.parse(sc.stdout);

  // Per-file figures.
  assert.equal(report.lb.lines, lines(lbText).length);
  assert.equal(report.lb.requests, lb.requests.size);
  assert.equal(report.lb.duplicates, lb.duplicates.length);
  assert.equal(report.lb.unparseable, lb.unparseable.length);
  assert.deepEqual(report.lb.offsets, lb.offsets);
  assert.equal(report.app.lines, lines(appText).length);
  assert.equal(report.app.entries, app.entries);
  assert.equal(report.app.requests, app.requests.size);
  assert.equal(report.app.background, app.background.length);
  assert.equal(report.app.continuation_lines, app.continuation);
  assert.equal(report.app.duplicates, app.duplicates.length);
  assert.equal(report.app.unparseable, app.unparseable.length);
  assert.deepEqual(report.app.offsets, app.offsets);
  assert.equal(report.matched, matched.length);

  // Exceptions, kind by kind, by line (or request id) rather than by count alone.
  const lines_ = (kind, source) => sorted(ofKind(report, kind).filter((e) => !source || e.source === source).map((e) => e.line));
  assert.deepEqual(lines_('duplicate', 'lb'), sorted(lb.duplicates));
  assert.deepEqual(lines_('duplicate', 'app'), sorted(app.duplicates));
  assert.deepEqual(lines_('unparseable', 'lb'), sorted(lb.unparseable));
  assert.deepEqual(lines_('unparseable', 'app'), sorted(app.unparseable));
  assert.deepEqual(sorted(ofKind(report, 'lb_without_app').map((e) => e.request_id)), sorted(lbWithoutApp));
  assert.deepEqual(lines_('app_without_lb'), sorted(appWithoutLb));
  assert.deepEqual(lines_('error_without_request'), sorted(errorsWithoutRequest));
  assert.deepEqual(sorted(ofKind(report, 'clock_skew').map((e) => e.request_id)), sorted(skewed));
  assert.equal(ofKind(report, 'offset_mismatch').length, lb.zoneMismatches + app.zoneMismatches);
  assert.equal(ofKind(report, 'conflicting_id').length, 0);
  assert.equal(ofKind(report, 'unknown_host').length, 0);
  assert.equal(ofKind(report, 'upstream_mismatch').length,
    matched.filter((rid) => lb.requests.get(rid).upstream !== app.requests.get(rid).host).length);
  const kinds = {};
  for (const e of report.exceptions) kinds[e.kind] = (kinds[e.kind] ?? 0) + 1;
  assert.deepEqual(report.exception_counts, kinds);

  // Every time the report gives is UTC and agrees with the test's own conversion.
  for (const e of ofKind(report, 'lb_without_app')) {
    assert.equal(Date.parse(e.time_utc), lb.requests.get(e.request_id).utcMs, `lb_without_app ${e.request_id}`);
  }
  for (const e of ofKind(report, 'clock_skew')) {
    assert.equal(Date.parse(e.time_utc), app.requests.get(e.request_id).utcMs, `clock_skew ${e.request_id}`);
  }

  // Skew per host: the median of app minus balancer over matched requests.
  const hosts = {};
  for (const rid of matched) (hosts[app.requests.get(rid).host] ??= []).push(skew.get(rid));
  assert.deepEqual(Object.keys(report.skew_by_host).sort(), Object.keys(hosts).sort());
  for (const [host, values] of Object.entries(hosts)) {
    const row = report.skew_by_host[host];
    assert.equal(row.matched, values.length, host);
    assert.ok(Math.abs(row.median_s - median(values)) < 0.0015, `${host} median ${row.median_s} vs ${median(values)}`);
    assert.ok(Math.abs(row.max_s - Math.max(...values)) < 0.0015, `${host} max`);
    assert.equal(row.beyond_threshold, values.filter((v) => Math.abs(v) > SKEW_THRESHOLD_S).length, host);
  }

  // The DST change: local time steps back once while UTC moves on.
  assert.deepEqual(report.lb_local_time_steps_back.map((s) => s.line), lb.backSteps);

  // Requests and 5xx per 10 minutes of UTC at the balancer.
  const buckets = new Map();
  for (const r of lb.requests.values()) {
    const start = r.utcMs - (r.utcMs % 600_000);
    const b = buckets.get(start) ?? { requests: 0, fivexx: 0 };
    b.requests += 1;
    if (r.status >= 500) b.fivexx += 1;
    buckets.set(start, b);
  }
  const expectedBuckets = [...buckets.entries()].sort((a, b) => a[0] - b[0])
    .map(([start, b]) => [new Date(start).toISOString().slice(0, 16) + 'Z', b.requests, b.fivexx]);
  assert.deepEqual(report.per_10_min_utc.map((b) => [b.start_utc, b.requests, b['5xx']]), expectedBuckets);

  assert.ok(Array.isArray(report.assumptions) && report.assumptions.length >= 5);
  assert.ok(report.assumptions.every((a) => typeof a === 'string' && a.length > 0));
  assert.ok(Array.isArray(report.evidence) && report.evidence.length >= 3);
  assert.ok(report.evidence.every((e) => typeof e === 'string' && e.length > 0));

  // Artifacts: both pass the gate unchanged and come back as text.
  const md = findArtifact(sc.artifacts, 'ops_report.md');
  assert.ok(md, `artifacts: ${JSON.stringify(sc.artifacts)}`);
  assert.equal(md.verdict, 'accepted', md.reason);
  assert.equal(md.media_type, 'text/markdown');
  const mdFetched = await fetchArtifact(conn.client, md.artifact_id);
  assert.ok(!mdFetched.isError, textOf(mdFetched));
  const mdText = artifactText(mdFetched);
  assert.equal(Buffer.byteLength(mdText), md.size);
  for (const [kind, n] of Object.entries(kinds)) assert.ok(mdText.includes(`| ${kind} | ${n} |`), `markdown count row for ${kind}`);
  for (const rid of [...skewed, ...lbWithoutApp]) assert.ok(mdText.includes(rid), `markdown lists ${rid}`);

  const csvArtifact = findArtifact(sc.artifacts, 'exceptions.csv');
  assert.ok(csvArtifact, `artifacts: ${JSON.stringify(sc.artifacts)}`);
  assert.equal(csvArtifact.verdict, 'accepted', csvArtifact.reason);
  assert.equal(csvArtifact.media_type, 'text/csv');
  const csvFetched = await fetchArtifact(conn.client, csvArtifact.artifact_id);
  assert.ok(!csvFetched.isError, textOf(csvFetched));
  const rows = parseCsv(artifactText(csvFetched));
  assert.deepEqual(rows[0], ['kind', 'file', 'line', 'request_id', 'time_utc', 'detail']);
  assert.equal(rows.length - 1, report.exceptions.length);
  const csvKinds = {};
  for (const row of rows.slice(1)) csvKinds[row[0]] = (csvKinds[row[0]] ?? 0) + 1;
  assert.deepEqual(csvKinds, kinds);
});
