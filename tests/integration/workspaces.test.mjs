// Workspaces: a tenant's /work kept between the run_code calls that name it.
// open_workspace / close_workspace, run_code's workspace_id and artifact_ids:
// the reconciliation example's loop as an agent runs it (a wrong first program,
// a fix that reads the first run's intermediate file, a plain job checking the
// artifact), what persists (files, directories, symlinks, a venv, a --target
// style package dir) and what does not (/tmp, /outputs, processes), the size
// cap (ENOSPC, then usable again), tenants (a foreign id reads like a made-up
// one), expiry while idle and refresh on use, two calls on one workspace at
// once (busy), a restart on the same state directory, warm and cold sandboxes,
// the per-tenant cap, bad arguments, and the tool list and instructions.
// Closing or expiring leaves no byte of the workspace under the state
// directory.
// Every server here gets its own policy (from $THROWBOX_POLICY) with a
// `workspaces` section of small values.
//
// Beyond the contract, the test takes as given: an open workspace shows
// under <state>/workspaces as a path holding its id or as plain files (its
// bytes findable); removal after a close may lag up to 5 s; `full` describes
// /work when the job ended (a fill deleted before the end is not full); the
// code file may sit in the workspace's /work; close_workspace during a call
// is busy too; busy, clash and unknown texts name the ids verbatim (the
// unknown ones say "workspace" / "artifact"); a plain job's result has no
// `workspace`; a crash of an idle server keeps workspaces like a clean stop.
import test, { after } from 'node:test';
import assert from 'node:assert/strict';
import crypto from 'node:crypto';
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { spawnSync } from 'node:child_process';
import {
  REPO_ROOT, connect, mkStateDir, upload, runCode, fetchArtifact, artifactText, findArtifact, readRepoFile, textOf,
  throwboxBin, scaled, REQUEST_TIMEOUT_MS,
} from './lib/client.mjs';
import { startHttpServer, connectHttp } from './lib/http.mjs';
import { pgrep } from './lib/host.mjs';
import { skipCase } from './lib/skip.mjs';

const MiB = 1024 * 1024;
const PY = String.raw;  // python sources: backslashes reach python as written
const delay = (ms) => new Promise((resolve) => setTimeout(resolve, ms));

const scratch = fs.mkdtempSync(path.join(os.tmpdir(), 'throwbox-ws-'));
fs.chmodSync(scratch, 0o755);
const ownDirs = [];  // state directories this file made itself (restart case)
const servers = [];
after(async () => {
  for (const s of servers.reverse()) await s.close().catch(() => {});
  for (const d of [scratch, ...ownDirs]) {
    try {
      fs.rmSync(d, { recursive: true, force: true });
    } catch (error) {
      process.stderr.write(`[workspaces.test] could not remove ${d}: ${error.message}\n`);
    }
  }
});

// ---------------------------------------------------------------- policies

const BASE_POLICY = JSON.parse(fs.readFileSync(
  process.env.THROWBOX_POLICY ?? path.join(REPO_ROOT, 'policies/default.json'), 'utf8'));
// The workspaces section most servers here get: a 4 MiB cap (the fill case),
// a one-hour ceiling for ttl_s (the argument case).
const WS = { ttl_s: { default: 1800, max: 3600 }, per_tenant_max: 8, size_max_bytes: 4 * MiB };

function writePolicy(name, edit) {
  const doc = structuredClone(BASE_POLICY);
  doc.workspaces = structuredClone(WS);
  edit?.(doc);
  const file = path.join(scratch, `policy-${name}.json`);
  fs.writeFileSync(file, JSON.stringify(doc, null, 2));
  fs.chmodSync(file, 0o644);
  return { file, doc };
}

// A stdio server started on first use and shared by the cases that name it;
// a server that cannot start fails each of them with its error.
function lazyServer(name, edit) {
  let started;
  return () => (started ??= (async () => {
    const { file, doc } = writePolicy(name, edit);
    const stateDir = mkStateDir();
    const conn = await connect({ stateDir, policy: file, label: `workspaces ${name}` });
    servers.push(conn);
    return { ...conn, stateDir, policy: doc };
  })());
}
const mainServer = lazyServer('main');
const expiryServer = lazyServer('expiry', (d) => {
  d.workspaces.ttl_s = { default: 2, max: 60 };
  d.retention = { ...d.retention, janitor_interval_s: 1 };
});
const limitServer = lazyServer('limit', (d) => { d.workspaces.per_tenant_max = 2; });
const warmServer = lazyServer('warm', (d) => { d.pool = { ...d.pool, enabled: true, claim_wait_ms: 20000 }; });
const coldServer = lazyServer('cold', (d) => { d.pool = { ...d.pool, enabled: false }; });

// ---------------------------------------------------------------- calls

const call = (client, name, args, timeout = REQUEST_TIMEOUT_MS) =>
  client.callTool({ name, arguments: args }, undefined, { timeout });

const ISO_UTC = /^\d{4}-\d{2}-\d{2}T\d{2}:\d{2}:\d{2}(\.\d{1,9})?Z$/;
function expiresMs(text) {
  assert.match(String(text), ISO_UTC, 'expires_at is ISO 8601 UTC');
  const ms = Date.parse(text);
  assert.ok(Number.isFinite(ms), `expires_at ${text} parses`);
  return ms;
}

async function openWs(srv, args = {}, client = srv.client) {
  const r = await call(client, 'open_workspace', args);
  assert.ok(!r.isError, `open_workspace ${JSON.stringify(args)}: ${textOf(r)}`);
  const sc = r.structuredContent;
  assert.equal(typeof sc?.workspace_id, 'string', `open_workspace result: ${JSON.stringify(r)}`);
  assert.ok(sc.workspace_id.length > 0);
  const ws = srv.policy.workspaces;
  assert.equal(sc.size_max_bytes, ws.size_max_bytes);
  assert.equal(sc.ttl_s, args.ttl_s ?? ws.ttl_s.default);
  const exp = expiresMs(sc.expires_at);
  const want = Date.now() + sc.ttl_s * 1000;
  assert.ok(Math.abs(exp - want) < scaled(3000), `expires_at ${sc.expires_at}: ${(exp - want) / 1000} s from now + ttl_s`);
  return sc;
}

async function closeWs(client, id) {
  const r = await call(client, 'close_workspace', { workspace_id: id });
  assert.ok(!r.isError, `close_workspace ${id}: ${textOf(r)}`);
  assert.equal(r.structuredContent?.workspace_id, id, JSON.stringify(r));
  assert.equal(r.structuredContent.closed, true);
}

// run_code (python by default); asserts the call itself was accepted.
async function run(client, code, extra = {}, timeout = REQUEST_TIMEOUT_MS) {
  const r = await runCode(client, { runtime: 'python', code, ...extra }, { timeout });
  assert.ok(!r.isError, `run_code isError: ${textOf(r)}`);
  assert.ok(r.structuredContent, 'run_code returns structuredContent');
  return r.structuredContent;
}
function completed(sc) {
  assert.equal(sc.status, 'completed', `status ${sc.status}, exit ${sc.exit_code}; stderr: ${sc.stderr}; error: ${sc.error}`);
  return sc;
}
const lastJson = (sc) => JSON.parse(sc.stdout.trim().split('\n').at(-1));

// The workspace part of a run_code result.
function wsOf(sc, id, sizeMax) {
  const w = sc.workspace;
  assert.ok(w && typeof w === 'object', `result has workspace: ${JSON.stringify(sc).slice(0, 400)}`);
  assert.equal(w.workspace_id, id);
  assert.equal(w.size_max_bytes, sizeMax);
  assert.ok(Number.isInteger(w.size_bytes) && w.size_bytes >= 0 && w.size_bytes <= w.size_max_bytes,
    `size_bytes ${w.size_bytes} of ${w.size_max_bytes}`);
  assert.equal(typeof w.full, 'boolean');
  assert.equal(typeof w.saved, 'boolean');
  expiresMs(w.expires_at);
  return w;
}

// A made-up id of the same shape: its hex digits replaced by random ones.
function lookalike(id) {
  if (!/[0-9a-f]/.test(id)) return `${id}0`;
  for (;;) {
    const fake = id.replace(/[0-9a-f]/g, () => '0123456789abcdef'[crypto.randomInt(16)]);
    if (fake !== id) return fake;
  }
}
const masked = (text, id) => text.split(id).join('<ID>');

// `callWith(id)` with the real id (closed, expired, foreign) and with a
// made-up one: both are errors with the same text, the id aside.
async function assertReadsUnknown(what, callWith, realId) {
  const fake = lookalike(realId);
  const made = await callWith(fake);
  const real = await callWith(realId);
  assert.equal(made.isError, true, `${what} with a made-up id: ${JSON.stringify(made).slice(0, 400)}`);
  assert.equal(real.isError, true, `${what} with ${realId}: ${JSON.stringify(real).slice(0, 400)}`);
  assert.equal(masked(textOf(real), realId), masked(textOf(made), fake), `${what}: the real id reads differently`);
  return textOf(made);
}
const runWithWs = (client) => (id) => runCode(client, { runtime: 'python', code: 'print(1)', workspace_id: id });
const closeWith = (client) => (id) => call(client, 'close_workspace', { workspace_id: id });
const runWithArtifact = (client) => (id) => runCode(client, { runtime: 'python', code: 'print(1)', artifact_ids: [id] });

// ---------------------------------------------------------------- the state directory

function walk(root) {
  const out = { paths: [], files: [], unreadable: [] };
  const visit = (dir) => {
    let entries;
    try {
      entries = fs.readdirSync(dir, { withFileTypes: true });
    } catch (error) {
      if (error.code !== 'ENOENT') out.unreadable.push(`${dir} (${error.code})`);
      return;
    }
    for (const e of entries) {
      const p = path.join(dir, e.name);
      out.paths.push(p);
      if (e.isDirectory()) visit(p);
      else if (e.isFile()) out.files.push(p);
    }
  };
  visit(root);
  return out;
}
function fileHas(file, needle) {
  try { return fs.readFileSync(file).includes(needle); } catch { return false; }
}
// What of a workspace is under the state directory: paths whose name holds
// its id, and files holding its marker bytes (bytes only a job of that
// workspace wrote, never printed, so no ledger or log holds them).
function traces(stateDir, id, marker) {
  const w = walk(stateDir);
  return {
    named: w.paths.filter((p) => path.relative(stateDir, p).includes(id)),
    withMarker: marker ? w.files.filter((f) => fileHas(f, marker)) : [],
    unreadable: w.unreadable,
  };
}
// Positive control: the open workspace is under <state>/workspaces, named
// after its id or holding its marker bytes.
function assertPresent(t, stateDir, id, marker) {
  const wsRoot = path.join(stateDir, 'workspaces');
  const tr = traces(stateDir, id, marker);
  const inWs = (p) => p.startsWith(`${wsRoot}${path.sep}`);
  if (tr.unreadable.length) t.diagnostic(`unreadable under the state dir: ${tr.unreadable.join(', ')}`);
  assert.ok(tr.named.some(inWs) || tr.withMarker.some(inWs),
    `workspace ${id} is under ${wsRoot} while open: ${JSON.stringify(tr)}`);
  return tr;
}
// After a close or an expiry: nothing named after the id, no marker bytes,
// anywhere under the state directory (within `ms`: removal may lag a little).
async function pollGone(stateDir, id, marker, ms) {
  const deadline = Date.now() + ms;
  for (;;) {
    const tr = traces(stateDir, id, marker);
    if (tr.named.length === 0 && tr.withMarker.length === 0) return;
    if (Date.now() > deadline) assert.fail(`workspace ${id} still under the state dir after ${ms} ms: ${JSON.stringify(tr)}`);
    await delay(100);
  }
}

// ---------------------------------------------------------------- the reconciliation example

// The figures, from the example's inputs, in cents.
function parseCsv(text) {
  assert.ok(!text.includes('"'), 'the example CSVs have no quoting');
  const [head, ...lines] = text.trim().split(/\r?\n/);
  const names = head.split(',').map((s) => s.trim());
  return lines.filter((l) => l.trim()).map((l) => Object.fromEntries(l.split(',').map((v, i) => [names[i], v.trim()])));
}
function cents(text) {
  const m = /^(\d+)(?:\.(\d{1,2}))?$/.exec(text);
  assert.ok(m, `amount ${text}`);
  return Number(m[1]) * 100 + Number((m[2] ?? '').padEnd(2, '0'));
}
const money = (c) => `${Math.floor(c / 100)}.${String(c % 100).padStart(2, '0')}`;
function expectedReconciliation(ordersCsv, paymentsCsv) {
  const orders = parseCsv(ordersCsv);
  const payments = parseCsv(paymentsCsv);
  const paid = new Map(orders.map((o) => [o.order_id, 0]));
  const seen = new Map();
  const duplicates = [];
  const unmatched = [];
  let naive = 0;
  for (const p of payments) {
    naive += cents(p.amount);
    const payload = `${p.order_id}|${cents(p.amount)}|${p.currency}`;
    if (seen.has(p.transaction_id)) {
      assert.equal(seen.get(p.transaction_id), payload, 'the example has no conflicting duplicate');
      duplicates.push(p.transaction_id);
      continue;
    }
    seen.set(p.transaction_id, payload);
    if (!paid.has(p.order_id)) {
      unmatched.push({ transaction_id: p.transaction_id, order_id: p.order_id, amount: money(cents(p.amount)) });
      continue;
    }
    paid.set(p.order_id, paid.get(p.order_id) + cents(p.amount));
  }
  const rows = orders.map((o) => {
    const want = cents(o.amount);
    const got = paid.get(o.order_id);
    return [o.order_id, money(want), money(got), money(Math.max(0, want - got)), got >= want ? 'paid_in_full' : 'short'];
  });
  const allocated = [...paid.values()].reduce((a, b) => a + b, 0);
  const due = orders.reduce((a, o) => a + cents(o.amount), 0);
  return {
    rows: payments.length,
    naiveTotal: money(naive),
    ordersTotal: money(due),
    naiveCoversOrders: naive >= due,
    allocatedTotal: money(allocated),
    duplicates,
    unmatched,
    short: Object.fromEntries(rows.filter((r) => r[4] === 'short').map((r) => [r[0], r[3]])),
    reconciled: rows,
  };
}

// Run 1, as a first attempt would be: normalise the payments into
// /work/normalized.csv and sum the payment column (duplicates and unknown
// orders included). It also leaves marker bytes the test can look for.
const reconcileRun1 = (token) => PY`
import csv, hashlib, json, os
from decimal import Decimal
CENT = Decimal("0.01")
rows = list(csv.DictReader(open("/inputs/payments.csv", newline="", encoding="utf-8-sig")))
with open("/work/normalized.csv", "w", newline="") as f:
    w = csv.writer(f, lineterminator="\n")
    w.writerow(["transaction_id", "order_id", "amount", "currency"])
    for r in rows:
        w.writerow([r["transaction_id"].strip(), r["order_id"].strip(),
                    str(Decimal(r["amount"].strip()).quantize(CENT)), r["currency"].strip()])
open("/work/.marker", "w").write(hashlib.sha256(b"${token}").hexdigest())
orders = list(csv.DictReader(open("/inputs/orders.csv", newline="", encoding="utf-8-sig")))
paid = sum((Decimal(r["amount"]) for r in rows), Decimal(0))
due = sum((Decimal(o["amount"]) for o in orders), Decimal(0))
print(json.dumps({"rows": len(rows), "payments_total": str(paid.quantize(CENT)),
                  "orders_total": str(due.quantize(CENT)), "all_paid": paid >= due,
                  "normalized_bytes": os.path.getsize("/work/normalized.csv")}))
`;

// Run 2, the fix: the payments come only from run 1's /work/normalized.csv;
// identical repeated transactions count once, unknown orders are reported.
const RECONCILE_RUN2 = PY`
import csv, json, os
from decimal import Decimal
CENT = Decimal("0.01")
q = lambda d: str(d.quantize(CENT))
orders = {}
for r in csv.DictReader(open("/inputs/orders.csv", newline="", encoding="utf-8-sig")):
    orders[r["order_id"].strip()] = Decimal(r["amount"].strip())
paid = {k: Decimal(0) for k in orders}
seen, duplicates, unmatched, n = {}, [], [], 0
for r in csv.DictReader(open("/work/normalized.csv", newline="")):
    n += 1
    tx, payload = r["transaction_id"], (r["order_id"], Decimal(r["amount"]), r["currency"])
    if tx in seen:
        if seen[tx] != payload:
            raise SystemExit("conflicting duplicate transaction " + tx)
        duplicates.append(tx)
        continue
    seen[tx] = payload
    if payload[0] not in orders:
        unmatched.append({"transaction_id": tx, "order_id": payload[0], "amount": q(payload[1])})
        continue
    paid[payload[0]] += payload[1]
with open("/outputs/reconciled.csv", "w", newline="") as f:
    w = csv.writer(f, lineterminator="\n")
    w.writerow(["order_id", "expected", "paid", "short", "status"])
    for oid, due in orders.items():
        got = paid[oid]
        w.writerow([oid, q(due), q(got), q(max(due - got, Decimal(0))), "paid_in_full" if got >= due else "short"])
print(json.dumps({"normalized_rows": n, "work": sorted(os.listdir("/work")),
                  "payments_input": os.path.exists("/inputs/payments.csv"),
                  "allocated_total": q(sum(paid.values(), Decimal(0))), "duplicates": duplicates,
                  "unmatched": unmatched, "short": {k: q(orders[k] - paid[k]) for k in orders if paid[k] < orders[k]}}))
`;

// Run 3, a plain job: the artifact of run 2 at /inputs/<name>, read-only.
const reconcileRun3 = (name) => PY`
import csv, errno, json, os
p = "/inputs/${name}"
def attempt(f):
    try:
        f()
        return "allowed"
    except OSError as e:
        return errno.errorcode.get(e.errno, str(e.errno))
print(json.dumps({"rows": list(csv.reader(open(p, newline=""))), "text": open(p).read(),
                  "inputs": sorted(os.listdir("/inputs")), "work": sorted(os.listdir("/work")),
                  "write": attempt(lambda: open(p, "a").write("x")), "unlink": attempt(lambda: os.unlink(p))}))
`;

const READ_ONLY_ERRNOS = ['EROFS', 'EACCES', 'EPERM'];

// ================================================================ tests

test('the tools are listed with their schemas; the instructions tell of workspaces and closing them',
  { timeout: scaled(30_000) }, async () => {
    const srv = await mainServer();
    const { tools } = await srv.client.listTools(undefined, { timeout: REQUEST_TIMEOUT_MS });
    const byName = Object.fromEntries(tools.map((t) => [t.name, t]));
    for (const name of ['upload_input', 'run_code', 'fetch_artifact', 'open_workspace', 'close_workspace']) {
      assert.ok(byName[name], `${name} is listed: ${Object.keys(byName)}`);
      assert.equal(byName[name].inputSchema?.type, 'object', `${name} inputSchema`);
      assert.equal(byName[name].outputSchema?.type, 'object', `${name} outputSchema`);
      assert.ok(byName[name].description?.trim(), `${name} has a description`);
    }
    const open = byName.open_workspace;
    assert.ok(open.inputSchema.properties?.ttl_s, 'open_workspace has ttl_s');
    assert.ok(!(open.inputSchema.required ?? []).includes('ttl_s'), 'ttl_s is optional');
    for (const key of ['workspace_id', 'expires_at', 'size_max_bytes', 'ttl_s']) {
      assert.ok(open.outputSchema.properties?.[key], `open_workspace outputSchema has ${key}`);
    }
    const close = byName.close_workspace;
    assert.ok((close.inputSchema.required ?? []).includes('workspace_id'), 'close_workspace requires workspace_id');
    const runProps = byName.run_code.inputSchema.properties ?? {};
    assert.equal(runProps.workspace_id?.type, 'string', 'run_code has workspace_id');
    assert.equal(runProps.artifact_ids?.type, 'array', 'run_code has artifact_ids');
    assert.deepEqual([...(byName.run_code.inputSchema.required ?? [])].sort(), ['code', 'runtime'],
      'workspace_id and artifact_ids are optional');
    assert.ok(byName.run_code.outputSchema.properties?.workspace, 'run_code outputSchema has workspace');

    const instructions = srv.client.getInstructions();
    assert.equal(typeof instructions, 'string');
    assert.match(instructions, /workspace/i);
    assert.match(instructions, /\bclos(e|ed|ing)\b|close_workspace/i);
  });

test('the reconciliation example in a workspace: a wrong first run, a fix reading its intermediate file, a plain job checking the artifact',
  { timeout: scaled(60_000) }, async (t) => {
    const srv = await mainServer();
    const { client, stateDir } = srv;
    const sizeMax = srv.policy.workspaces.size_max_bytes;
    const ordersCsv = readRepoFile('examples/reconcile/inputs/orders.csv');
    const paymentsCsv = readRepoFile('examples/reconcile/inputs/payments.csv');
    const want = expectedReconciliation(ordersCsv, paymentsCsv);
    // The example is the awkward one: the naive sum looks like full payment and is wrong.
    assert.notEqual(want.naiveTotal, want.allocatedTotal);
    assert.equal(want.naiveCoversOrders, true);
    assert.ok(want.duplicates.length > 0 && want.unmatched.length > 0 && Object.keys(want.short).length > 0);

    const orders = await upload(client, 'orders.csv', ordersCsv);
    const payments = await upload(client, 'payments.csv', paymentsCsv);
    const ws = await openWs(srv);
    const id = ws.workspace_id;
    const token = `reconcile-${crypto.randomUUID()}`;
    const marker = Buffer.from(crypto.createHash('sha256').update(token).digest('hex'));

    // Run 1: wrong, and it says the total is covered.
    const r1 = completed(await run(client, reconcileRun1(token),
      { workspace_id: id, input_ids: [orders.input_id, payments.input_id], timeout_s: 20 }));
    const o1 = lastJson(r1);
    assert.equal(o1.rows, want.rows);
    assert.equal(o1.payments_total, want.naiveTotal);
    assert.equal(o1.orders_total, want.ordersTotal);
    assert.equal(o1.all_paid, want.naiveCoversOrders);
    const w1 = wsOf(r1, id, sizeMax);
    assert.equal(w1.saved, true);
    assert.equal(w1.full, false);
    assert.ok(w1.size_bytes >= o1.normalized_bytes, `size_bytes ${w1.size_bytes} counts normalized.csv (${o1.normalized_bytes})`);
    assert.ok(expiresMs(w1.expires_at) >= expiresMs(ws.expires_at), 'a use does not move expires_at earlier');
    assertPresent(t, stateDir, id, marker);

    // Run 2: the fix, from /work/normalized.csv; the payments input is not even mounted.
    const r2 = completed(await run(client, RECONCILE_RUN2,
      { workspace_id: id, input_ids: [orders.input_id], timeout_s: 20 }));
    const o2 = lastJson(r2);
    assert.equal(o2.payments_input, false);
    assert.ok(o2.work.includes('normalized.csv'), `run 2's /work: ${o2.work}`);
    assert.equal(o2.normalized_rows, want.rows);
    assert.equal(o2.allocated_total, want.allocatedTotal);
    assert.notEqual(o2.allocated_total, o1.payments_total);
    assert.deepEqual(o2.duplicates, want.duplicates);
    assert.deepEqual(o2.unmatched, want.unmatched);
    assert.deepEqual(o2.short, want.short);
    const w2 = wsOf(r2, id, sizeMax);
    assert.equal(w2.saved, true);
    assert.ok(expiresMs(w2.expires_at) >= expiresMs(w1.expires_at));
    const art = findArtifact(r2.artifacts, 'reconciled.csv');
    assert.ok(art?.artifact_id, `artifacts: ${JSON.stringify(r2.artifacts)}`);
    assert.notEqual(art.verdict, 'rejected');
    const fetched = await fetchArtifact(client, art.artifact_id);
    assert.ok(!fetched.isError, textOf(fetched));
    const artText = artifactText(fetched);

    // Run 3: a plain job takes the artifact through artifact_ids.
    const name = path.posix.basename(art.name);
    const r3 = completed(await run(client, reconcileRun3(name), { artifact_ids: [art.artifact_id] }));
    assert.equal(r3.workspace, undefined, 'a plain job has no workspace');
    const o3 = lastJson(r3);
    assert.deepEqual(o3.rows[0], ['order_id', 'expected', 'paid', 'short', 'status']);
    assert.deepEqual(o3.rows.slice(1), want.reconciled);
    assert.equal(o3.text, artText, '/inputs/<name> holds the stored artifact');
    assert.deepEqual(o3.inputs, [name]);
    assert.ok(!o3.work.includes('normalized.csv'), `a plain job's /work is fresh: ${o3.work}`);
    assert.ok(READ_ONLY_ERRNOS.includes(o3.write), `write to the artifact: ${o3.write}`);
    assert.ok(READ_ONLY_ERRNOS.includes(o3.unlink), `unlink of the artifact: ${o3.unlink}`);

    // An input of the same name beside the artifact: an error naming both.
    const clash = await upload(client, name, 'not the artifact\n');
    const both = await runCode(client, { runtime: 'python', code: 'print(1)', input_ids: [clash.input_id],
      artifact_ids: [art.artifact_id] });
    assert.equal(both.isError, true, `a name clash ran: ${JSON.stringify(both.structuredContent)}`);
    assert.ok(textOf(both).includes(clash.input_id) && textOf(both).includes(art.artifact_id), textOf(both));
    // A made-up artifact id.
    const fakeArt = await runWithArtifact(client)(lookalike(art.artifact_id));
    assert.equal(fakeArt.isError, true);
    assert.match(textOf(fakeArt), /artifact/i);

    await closeWs(client, id);
    const unknownRun = await assertReadsUnknown('run_code after close', runWithWs(client), id);
    assert.match(unknownRun, /workspace/i);
    await assertReadsUnknown('close_workspace after close', closeWith(client), id);
    await pollGone(stateDir, id, marker, scaled(5000));
  });

test('what persists in /work (files, directories, symlinks, a venv, a package dir) and what does not (/tmp, /outputs, processes)',
  { timeout: scaled(60_000) }, async () => {
    const srv = await mainServer();
    const { client } = srv;
    const sizeMax = srv.policy.workspaces.size_max_bytes;
    const token = `persist-${crypto.randomUUID()}`;
    const sleepArg = `30.${crypto.randomInt(1000, 10000)}`;
    const { workspace_id: id } = await openWs(srv);

    const first = completed(await run(client, PY`
import json, os, subprocess, time, venv
T = "${token}"
quiet = dict(stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True)
open("/work/f.txt", "w").write("file " + T)
os.makedirs("/work/d/sub")
open("/work/d/sub/g.txt", "w").write("nested " + T)
os.symlink("f.txt", "/work/link")
os.symlink("d/sub", "/work/dlink")
os.makedirs("/work/lib/wspkg")
open("/work/lib/wspkg/__init__.py", "w").write("VALUE = " + repr(T) + chr(10))
venv.create("/work/venv", with_pip=False, symlinks=True)
open("/tmp/t.txt", "w").write("tmp")
open("/outputs/o.txt", "w").write("out " + T)
subprocess.Popen(["sleep", "${sleepArg}"], **quiet)
subprocess.Popen(["/bin/sh", "-c", "while :; do echo " + T + " >> /work/beat.txt; sleep 0.1; done"], **quiet)
time.sleep(0.6)
procs = []
for p in os.listdir("/proc"):
    if p.isdigit():
        try:
            procs.append(open("/proc/" + p + "/cmdline", "rb").read().replace(bytes([0]), b" ").decode().strip())
        except OSError:
            pass
print(json.dumps({"beat_lines": open("/work/beat.txt").read().count(T),
                  "procs": [c for c in procs if T in c or "${sleepArg}" in c]}))
`, { workspace_id: id, timeout_s: 20 }));
    const o1 = lastJson(first);
    assert.ok(o1.beat_lines >= 2, `the background writer ran in call 1: ${o1.beat_lines} lines`);
    assert.equal(o1.procs.length, 2, `both background processes were visible in call 1: ${o1.procs}`);
    assert.ok(findArtifact(first.artifacts, 'o.txt'), `call 1's /outputs came back: ${JSON.stringify(first.artifacts)}`);
    assert.equal(wsOf(first, id, sizeMax).saved, true);
    // No process of call 1 is left on the host once its result is back.
    const deadline = Date.now() + scaled(2000);
    let left;
    for (;;) {
      left = [...pgrep(token), ...pgrep(`sleep ${sleepArg}`)];
      if (left.length === 0 || Date.now() > deadline) break;
      await delay(100);
    }
    assert.deepEqual(left, [], `processes of call 1 still on the host: ${left}`);

    const second = completed(await run(client, PY`
import json, os, subprocess, sys, time
T = "${token}"
procs = []
for p in os.listdir("/proc"):
    if p.isdigit():
        try:
            procs.append(open("/proc/" + p + "/cmdline", "rb").read().replace(bytes([0]), b" ").decode().strip())
        except OSError:
            pass
s1 = os.path.getsize("/work/beat.txt")
time.sleep(0.5)
s2 = os.path.getsize("/work/beat.txt")
sys.path.insert(0, "/work/lib")
import wspkg
py = subprocess.run(["/work/venv/bin/python", "-c", "import sys; print(sys.prefix)"], capture_output=True, text=True)
print(json.dumps({
    "work": sorted(os.listdir("/work")), "cwd": os.getcwd(),
    "f": open("/work/f.txt").read(), "g": open("/work/d/sub/g.txt").read(),
    "d_is_dir": os.path.isdir("/work/d") and not os.path.islink("/work/d"),
    "link": os.readlink("/work/link") if os.path.islink("/work/link") else None,
    "via_link": open("/work/link").read(),
    "dlink": os.readlink("/work/dlink") if os.path.islink("/work/dlink") else None,
    "via_dlink": sorted(os.listdir("/work/dlink")),
    "pkg": wspkg.VALUE, "venv": [py.returncode, py.stdout.strip(), py.stderr[-300:]],
    "tmp": sorted(os.listdir("/tmp")), "outputs": sorted(os.listdir("/outputs")),
    "beat": [s1, s2], "beat_lines": open("/work/beat.txt").read().count(T),
    "procs": [c for c in procs if T in c or "${sleepArg}" in c or c.startswith("sleep ")]}))
`, { workspace_id: id, timeout_s: 20 }));
    const o2 = lastJson(second);
    for (const name of ['f.txt', 'd', 'link', 'dlink', 'lib', 'venv', 'beat.txt']) {
      assert.ok(o2.work.includes(name), `/work/${name} persisted: ${o2.work}`);
    }
    assert.equal(o2.cwd, '/work');
    assert.equal(o2.f, `file ${token}`);
    assert.equal(o2.g, `nested ${token}`);
    assert.equal(o2.d_is_dir, true);
    assert.equal(o2.link, 'f.txt', 'the symlink persisted as a symlink');
    assert.equal(o2.via_link, `file ${token}`);
    assert.equal(o2.dlink, 'd/sub');
    assert.deepEqual(o2.via_dlink, ['g.txt']);
    assert.equal(o2.pkg, token, 'a package dir in /work imports in the next call');
    assert.deepEqual(o2.venv.slice(0, 2), [0, '/work/venv'], `the venv runs in the next call: ${o2.venv}`);
    assert.deepEqual(o2.tmp, [], '/tmp is per call');
    assert.deepEqual(o2.outputs, [], '/outputs is per call');
    assert.deepEqual(second.artifacts, [], 'call 1\'s /outputs does not come back again');
    assert.ok(o2.beat_lines >= 2, `call 1's beat.txt persisted: ${o2.beat_lines} lines`);
    assert.equal(o2.beat[0], o2.beat[1], `nothing writes beat.txt in call 2: sizes ${o2.beat}`);
    assert.deepEqual(o2.procs, [], 'no process of call 1 is visible in call 2');
    await closeWs(client, id);
  });

test('the size cap: ENOSPC in the job, workspace.full, and the next call can delete and write again',
  { timeout: scaled(60_000) }, async () => {
    const srv = await mainServer();
    const { client } = srv;
    const cap = srv.policy.workspaces.size_max_bytes;
    const { workspace_id: id } = await openWs(srv);

    const fill = completed(await run(client, PY`
import errno, json, os
chunk = b"z" * (256 * 1024)
written, err = 0, None
with open("/work/big.bin", "wb", buffering=0) as f:
    while written < ${2 * cap}:
        try:
            n = f.write(chunk)
        except OSError as e:
            err = e.errno
            break
        written += n
print(json.dumps({"written": written, "error": errno.errorcode.get(err, err) if err else None,
                  "size": os.path.getsize("/work/big.bin")}))
`, { workspace_id: id, timeout_s: 20 }));
    const o1 = lastJson(fill);
    assert.equal(o1.error, 'ENOSPC', `writing ${2 * cap} bytes to a ${cap}-byte workspace: ${JSON.stringify(o1)}`);
    assert.ok(o1.written <= cap, `wrote ${o1.written} bytes past the cap ${cap}`);
    assert.ok(o1.written >= cap - MiB, `the fill stopped at ${o1.written}, well below the cap ${cap}`);
    const w1 = wsOf(fill, id, cap);
    assert.equal(w1.full, true);
    assert.equal(w1.saved, true);
    assert.ok(w1.size_bytes >= o1.size, `size_bytes ${w1.size_bytes} counts big.bin (${o1.size})`);

    const again = completed(await run(client, PY`
import json, os
before = {n: os.path.getsize("/work/" + n) for n in os.listdir("/work")}
os.unlink("/work/big.bin")
with open("/work/small.bin", "wb") as f:
    f.write(b"y" * ${MiB})
print(json.dumps({"before": before, "small": os.path.getsize("/work/small.bin")}))
`, { workspace_id: id }));
    const o2 = lastJson(again);
    assert.equal(o2.before['big.bin'], o1.size, 'the next call sees the partial file');
    assert.equal(o2.small, MiB);
    const w2 = wsOf(again, id, cap);
    assert.equal(w2.full, false);
    assert.equal(w2.saved, true);
    assert.ok(w2.size_bytes >= MiB && w2.size_bytes < 2 * MiB, `size_bytes ${w2.size_bytes} after the clean-up`);

    const third = completed(await run(client, PY`
import json, os
print(json.dumps({n: os.path.getsize("/work/" + n) for n in os.listdir("/work")}))
`, { workspace_id: id }));
    const o3 = lastJson(third);
    assert.equal(o3['big.bin'], undefined);
    assert.equal(o3['small.bin'], MiB);
    await closeWs(client, id);
  });

test('a full workspace is always usable again: bash, a long program, and a clean-up all run', { timeout: scaled(90_000) }, async () => {
  const srv = await mainServer();
  const { client } = srv;
  const cap = srv.policy.workspaces.size_max_bytes;
  const { workspace_id: id } = await openWs(srv);
  // Filled to ENOSPC by a job whose code file is small: whatever the next
  // call's code, it and the copy of the workspace fit its /work.
  const fill = completed(await run(client, PY`
import errno, json, os
n, err = 0, None
try:
    with open("/work/fill.bin", "wb", buffering=0) as f:
        while True:
            n += f.write(b"f" * 65536)
except OSError as e:
    err = errno.errorcode.get(e.errno, e.errno)
print(json.dumps({"error": err, "size": os.path.getsize("/work/fill.bin")}))
`, { workspace_id: id, timeout_s: 20 }));
  assert.equal(lastJson(fill).error, 'ENOSPC');
  const w = wsOf(fill, id, cap);
  assert.equal(w.saved, true, JSON.stringify(w));
  assert.equal(w.full, true);

  // Another runtime (its code file of another name), and a python program of
  // 64 KiB (many pages), each on the full workspace.
  const bash = await runCode(client, { runtime: 'bash', workspace_id: id, code: 'ls -s /work; echo listed' });
  assert.ok(!bash.isError, textOf(bash));
  assert.equal(bash.structuredContent.status, 'completed',
    `bash on a full workspace: ${bash.structuredContent.status} ${bash.structuredContent.error ?? ''} ${bash.structuredContent.stderr}`);
  assert.match(bash.structuredContent.stdout, /fill\.bin[\s\S]*listed/);
  const long = completed(await run(client, `${'#'.repeat(100)}\n`.repeat(650) +
    'import os\nprint(os.path.getsize("/work/fill.bin"))\nos.unlink("/work/fill.bin")\n', { workspace_id: id }));
  assert.equal(Number(long.stdout.trim()), lastJson(fill).size);
  const after = wsOf(long, id, cap);
  assert.equal(after.saved, true);
  assert.equal(after.full, false);
  assert.ok(after.size_bytes < 64 * 1024, `cleaned: ${after.size_bytes} bytes left`);
  await closeWs(client, id);
});

// Bytes a directory's files occupy on the host (st_blocks), walking it.
function occupied(dir) {
  let total = 0;
  const walk = (d) => {
    for (const e of fs.readdirSync(d, { withFileTypes: true })) {
      const p = path.join(d, e.name);
      const st = fs.lstatSync(p);
      total += st.blocks * 512;
      if (e.isDirectory()) walk(p);
    }
  };
  if (fs.existsSync(dir)) walk(dir);
  return total;
}

test('a tenant cannot stack expired workspaces past per_tenant_max x size_max_bytes on disk', { timeout: scaled(120_000) }, async () => {
  const srv = await limitServer();
  const { client } = srv;
  const { per_tenant_max: most, size_max_bytes: cap } = srv.policy.workspaces;
  const bound = most * cap;
  const root = path.join(srv.stateDir, 'workspaces');
  let peak = 0;
  // Open with the shortest ttl_s, fill, let it expire, again: each expired
  // workspace counts until its tree is gone, and goes on the next open.
  for (let i = 0; i < most + 3; i += 1) {
    const { workspace_id: id } = await openWs(srv, { ttl_s: 1 });
    completed(await run(client, PY`open("/work/junk.bin", "wb").write(b"j" * ${cap - MiB})`, { workspace_id: id }));
    peak = Math.max(peak, occupied(root));
    await delay(1200);
  }
  assert.ok(peak <= bound + 256 * 1024, `the tenant's workspaces held ${peak} bytes on disk, over ${most} x ${cap}`);
  // And the cap itself holds for workspaces that have not expired.
  const kept = [];
  for (let i = 0; i < most; i += 1) kept.push((await openWs(srv)).workspace_id);
  const over = await call(client, 'open_workspace', {});
  assert.equal(over.isError, true, JSON.stringify(over));
  assert.match(textOf(over), /busy: this tenant has 2 open workspaces/);
  for (const id of kept) await closeWs(client, id);
});

test('tenants: another tenant\'s workspace and artifact read exactly like made-up ones; the owner is unaffected',
  { timeout: scaled(60_000) }, async (t) => {
    const help = spawnSync(throwboxBin(), ['serve', '--help'], { encoding: 'utf8' });
    if (!`${help.stdout}${help.stderr}`.includes('--http')) return skipCase(t, 'this throwbox has no serve --http');
    const { file, doc } = writePolicy('http');
    const server = await startHttpServer({ tenants: ['alice', 'bob'], policy: file, label: 'workspaces http' });
    const conns = [];
    try {
      const a = await connectHttp(server.url, server.tokens.alice);
      conns.push(a);
      const b = await connectHttp(server.url, server.tokens.bob);
      conns.push(b);
      const srvA = { client: a.client, policy: doc };
      const { workspace_id: id } = await openWs(srvA);
      const token = `alice-${crypto.randomUUID()}`;
      const first = completed(await run(a.client, PY`
open("/work/secret.txt", "w").write("${token}")
open("/outputs/secret.txt", "w").write("${token}")
`, { workspace_id: id }));
      const art = findArtifact(first.artifacts, 'secret.txt');
      assert.ok(art?.artifact_id, JSON.stringify(first.artifacts));
      const expiresBefore = expiresMs(wsOf(first, id, doc.workspaces.size_max_bytes).expires_at);

      const runText = await assertReadsUnknown('bob\'s run_code with alice\'s workspace', runWithWs(b.client), id);
      const closeText = await assertReadsUnknown('bob\'s close_workspace of alice\'s workspace', closeWith(b.client), id);
      const artText = await assertReadsUnknown('bob\'s artifact_ids with alice\'s artifact', runWithArtifact(b.client),
        art.artifact_id);
      for (const text of [runText, closeText, artText]) assert.doesNotMatch(text, /alice/);

      // Alice's workspace is still hers, with her file; her artifact works for her.
      const mine = completed(await run(a.client, PY`
import json, os
print(json.dumps({"work": open("/work/secret.txt").read(), "input": open("/inputs/secret.txt").read()}))
`, { workspace_id: id, artifact_ids: [art.artifact_id] }));
      assert.deepEqual(lastJson(mine), { work: token, input: token });
      assert.ok(expiresMs(wsOf(mine, id, doc.workspaces.size_max_bytes).expires_at) >= expiresBefore);
      await closeWs(a.client, id);
    } finally {
      for (const c of conns) await c.close();
      await server.stop();
    }
  });

test('expiry: an idle workspace is unknown and gone after its ttl_s; one in use keeps moving its expires_at',
  { timeout: scaled(60_000) }, async (t) => {
    const srv = await expiryServer();
    const { client, stateDir } = srv;
    const ttlMs = srv.policy.workspaces.ttl_s.default * 1000;
    const sizeMax = srv.policy.workspaces.size_max_bytes;
    const idle = await openWs(srv);
    const used = await openWs(srv);
    assert.notEqual(idle.workspace_id, used.workspace_id);
    const token = `idle-${crypto.randomUUID()}`;
    const marker = Buffer.from(crypto.createHash('sha256').update(token).digest('hex'));
    completed(await run(client, PY`
import hashlib
open("/work/marker.txt", "w").write(hashlib.sha256(b"${token}").hexdigest())
`, { workspace_id: idle.workspace_id }));
    const idleSince = Date.now();
    assertPresent(t, stateDir, idle.workspace_id, marker);
    completed(await run(client, 'open("/work/keep.txt", "w").write("kept")', { workspace_id: used.workspace_id }));

    // Use the other one every 1.2 s (under its ttl of 2 s) until the idle one
    // has been idle twice its ttl and is gone from the state dir; only the
    // file system is looked at for the idle one (a call would refresh it).
    let previous = 0;
    let uses = 0;
    const deadline = idleSince + 2 * ttlMs + scaled(10_000);
    for (;;) {
      await delay(1200);
      const sc = completed(await run(client, 'print(open("/work/keep.txt").read())',
        { workspace_id: used.workspace_id }));
      assert.equal(sc.stdout, 'kept\n', `use ${uses + 1}: the used workspace kept its file`);
      const exp = expiresMs(wsOf(sc, used.workspace_id, sizeMax).expires_at);
      assert.ok(exp > previous,
        `use ${uses + 1}: expires_at moved later (${new Date(previous).toISOString()} -> ${new Date(exp).toISOString()})`);
      const left = exp - Date.now();
      assert.ok(left > -1000 && left <= ttlMs + 1000,
        `use ${uses + 1}: expires_at is ttl_s from this use (${left} ms left)`);
      previous = exp;
      uses += 1;
      const tr = traces(stateDir, idle.workspace_id, marker);
      const gone = tr.named.length === 0 && tr.withMarker.length === 0;
      if (gone && Date.now() - idleSince >= 2 * ttlMs) break;
      assert.ok(Date.now() < deadline, `the idle workspace is still under the state dir ${Date.now() - idleSince} ms ` +
        `after its last use: ${JSON.stringify(tr)}`);
    }
    t.diagnostic(`idle workspace gone after ${Date.now() - idleSince} ms; the other one used ${uses} times`);
    assert.ok(uses >= 3);
    await assertReadsUnknown('run_code on the expired workspace', runWithWs(client), idle.workspace_id);
    await assertReadsUnknown('close_workspace of the expired workspace', closeWith(client), idle.workspace_id);
    // The used one outlived twice its ttl_s by being used; closing it removes it.
    await closeWs(client, used.workspace_id);
    await pollGone(stateDir, used.workspace_id, null, scaled(5000));
  });

test('two calls on one workspace at once: the second is busy at once; another workspace is not affected',
  { timeout: scaled(60_000) }, async () => {
    const srv = await mainServer();
    const { client } = srv;
    const sizeMax = srv.policy.workspaces.size_max_bytes;
    const { workspace_id: one } = await openWs(srv);
    const { workspace_id: two } = await openWs(srv);

    const t0 = Date.now();
    let firstProgress;
    const progressed = new Promise((resolve) => { firstProgress = resolve; });
    const done = {};
    const long = client.callTool({ name: 'run_code', arguments: {
      runtime: 'python', workspace_id: one, timeout_s: 20,
      code: 'import time\nopen("/work/a.txt", "w").write("from the long call")\ntime.sleep(3)\nprint("slept")\n',
    } }, undefined, { timeout: REQUEST_TIMEOUT_MS, onprogress: () => firstProgress() })
      .then((r) => { done.long = Date.now() - t0; return r; });
    long.catch(() => {});  // awaited below; a failed test must not leave it unhandled
    // Running for sure: it sent progress (about a second in), or 1.5 s passed.
    await Promise.race([progressed, delay(scaled(1500)), long]);
    assert.equal(done.long, undefined, `the long call ended early: ${JSON.stringify(done)}`);

    const tb = Date.now();
    const second = await runCode(client, { runtime: 'python', code: 'print("second")', workspace_id: one },
      { timeout: scaled(10_000) });
    const secondMs = Date.now() - tb;
    assert.equal(second.isError, true, `the second call ran: ${JSON.stringify(second.structuredContent)}`);
    assert.match(textOf(second), /^busy:/);
    assert.ok(textOf(second).includes(one), `the busy text names the workspace: ${textOf(second)}`);
    assert.ok(secondMs < scaled(1000), `the second call was answered in ${secondMs} ms: it must not wait`);
    assert.equal(done.long, undefined, 'the busy answer came while the long call ran');

    const closing = await call(client, 'close_workspace', { workspace_id: one }, scaled(10_000));
    assert.equal(closing.isError, true, `close_workspace during a call: ${JSON.stringify(closing.structuredContent)}`);
    assert.match(textOf(closing), /^busy:/);
    assert.ok(textOf(closing).includes(one), textOf(closing));

    const other = completed(await run(client, 'open("/work/c.txt", "w").write("c")\nprint("other")',
      { workspace_id: two }));
    done.other = Date.now() - t0;
    assert.equal(other.stdout, 'other\n');
    assert.equal(wsOf(other, two, sizeMax).saved, true);
    assert.equal(done.long, undefined, `the other workspace ran while the long call ran: ${JSON.stringify(done)}`);

    const longResult = await long;
    assert.ok(!longResult.isError, textOf(longResult));
    completed(longResult.structuredContent);
    assert.equal(longResult.structuredContent.stdout, 'slept\n');
    assert.equal(wsOf(longResult.structuredContent, one, sizeMax).saved, true);
    assert.ok(done.long >= 2500, `the long call slept: ${JSON.stringify(done)}`);
    // Neither refusal closed or changed the workspace.
    const after1 = completed(await run(client, 'import os\nprint(open("/work/a.txt").read(), sorted(os.listdir("/work")))',
      { workspace_id: one }));
    assert.match(after1.stdout, /^from the long call /);
    assert.doesNotMatch(after1.stdout, /c\.txt/, 'the other workspace\'s file is not in this one');
    await closeWs(client, one);
    await closeWs(client, two);
  });

test('restart: a new server on the same state directory keeps the open workspace, after a clean stop and a crash',
  { timeout: scaled(60_000) }, async () => {
    const { file, doc } = writePolicy('restart');
    const stateDir = fs.mkdtempSync(path.join(os.tmpdir(), 'throwbox-ws-restart-'));
    ownDirs.push(stateDir);
    const start = async (n) => {
      const conn = await connect({ stateDir, policy: file, label: `workspaces restart ${n}` });
      servers.push(conn);
      return { ...conn, stateDir, policy: doc };
    };
    const exited = (pid) => {
      try { return /\) Z /.test(fs.readFileSync(`/proc/${pid}/stat`, 'utf8')); } catch { return true; }
    };
    const token = `restart-${crypto.randomUUID()}`;
    const srv1 = await start(1);
    const ws = await openWs(srv1);
    const id = ws.workspace_id;
    completed(await run(srv1.client, PY`
import os
os.makedirs("/work/kept/dir")
open("/work/kept/dir/file.txt", "w").write("${token}")
os.symlink("kept/dir/file.txt", "/work/link")
`, { workspace_id: id }));
    const pid1 = srv1.transport.pid;
    await srv1.close();  // stdin closed: the server ends by itself
    assert.ok(exited(pid1), 'the first server has exited');

    const srv2 = await start(2);
    const sc2 = completed(await run(srv2.client, PY`
import json, os
open("/work/second.txt", "w").write("${token}-2")
print(json.dumps([open("/work/kept/dir/file.txt").read(), os.readlink("/work/link"), open("/work/link").read()]))
`, { workspace_id: id }));
    assert.deepEqual(lastJson(sc2), [token, 'kept/dir/file.txt', token]);
    assert.ok(expiresMs(wsOf(sc2, id, doc.workspaces.size_max_bytes).expires_at) >= expiresMs(ws.expires_at));

    // A crash while the workspace is idle loses nothing either.
    const pid2 = srv2.transport.pid;
    process.kill(pid2, 'SIGKILL');
    const deadline = Date.now() + scaled(5000);
    while (srv2.transport.pid !== null && Date.now() < deadline) await delay(50);
    await srv2.close();
    assert.ok(exited(pid2), 'the second server was killed');
    const srv3 = await start(3);
    const sc3 = completed(await run(srv3.client, PY`
import json
print(json.dumps([open("/work/kept/dir/file.txt").read(), open("/work/second.txt").read()]))
`, { workspace_id: id }));
    assert.deepEqual(lastJson(sc3), [token, `${token}-2`]);
    await closeWs(srv3.client, id);
    await pollGone(stateDir, id, null, scaled(5000));
    await srv3.close();
  });

// A short persistence round, and the cap, in whatever sandbox the server gives.
async function persistenceRound(srv, start) {
  const { client } = srv;
  const cap = srv.policy.workspaces.size_max_bytes;
  const token = `${start}-${crypto.randomUUID()}`;
  const { workspace_id: id } = await openWs(srv);
  const first = completed(await run(client, PY`
import os
os.makedirs("/work/d")
open("/work/d/x.txt", "w").write("${token}")
os.symlink("d/x.txt", "/work/x")
open("/tmp/t", "w").write("t")
`, { workspace_id: id }));
  assert.equal(first.start, start, `call 1 started ${first.start}`);
  assert.equal(wsOf(first, id, cap).saved, true);
  const second = completed(await run(client, PY`
import errno, json, os
err = None
try:
    with open("/work/fill.bin", "wb", buffering=0) as f:
        for _ in range(${Math.ceil((cap + MiB) / (256 * 1024))}):
            f.write(b"z" * (256 * 1024))
except OSError as e:
    err = errno.errorcode.get(e.errno, e.errno)
os.unlink("/work/fill.bin")
print(json.dumps({"x": open("/work/x").read(), "link": os.readlink("/work/x"), "tmp": os.listdir("/tmp"), "fill": err}))
`, { workspace_id: id }));
  assert.equal(second.start, start, `call 2 started ${second.start}`);
  assert.deepEqual(lastJson(second), { x: token, link: 'd/x.txt', tmp: [], fill: 'ENOSPC' });
  const w2 = wsOf(second, id, cap);
  assert.equal(w2.full, false, 'the fill was deleted before the job ended');
  await closeWs(client, id);
  await pollGone(srv.stateDir, id, null, scaled(5000));
}

test('warm and cold: a workspace works in a warm sandbox and in a cold one, cap included',
  { timeout: scaled(60_000) }, async () => {
    const warm = await warmServer();
    await persistenceRound(warm, 'warm');
    await warm.close();
    const cold = await coldServer();
    await persistenceRound(cold, 'cold');
    await cold.close();
  });

test('per_tenant_max: the workspace past the cap is busy; closing one makes room',
  { timeout: scaled(30_000) }, async () => {
    const srv = await limitServer();
    const { client } = srv;
    const max = srv.policy.workspaces.per_tenant_max;
    const ids = [];
    for (let i = 0; i < max; i += 1) ids.push((await openWs(srv)).workspace_id);
    assert.equal(new Set(ids).size, max, `distinct ids: ${ids}`);
    const refused = await call(client, 'open_workspace', {});
    assert.equal(refused.isError, true, `open past per_tenant_max ${max}: ${JSON.stringify(refused.structuredContent)}`);
    assert.match(textOf(refused), /^busy:/);
    await closeWs(client, ids.shift());
    ids.push((await openWs(srv)).workspace_id);
    const again = await call(client, 'open_workspace', {});
    assert.equal(again.isError, true);
    assert.match(textOf(again), /^busy:/);
    for (const id of ids) await closeWs(client, id);
  });

test('bad arguments name the field', { timeout: scaled(30_000) }, async () => {
  const srv = await mainServer();
  const { client } = srv;
  const max = srv.policy.workspaces.ttl_s.max;
  for (const ttl of [0, -5, max + 1, 1.5e12, String(max)]) {
    const r = await call(client, 'open_workspace', { ttl_s: ttl });
    assert.equal(r.isError, true,
      `open_workspace ttl_s ${JSON.stringify(ttl)} was accepted: ${JSON.stringify(r.structuredContent)}`);
    assert.match(textOf(r), /ttl_s/, `ttl_s ${JSON.stringify(ttl)}: ${textOf(r)}`);
  }
  const above = await call(client, 'open_workspace', { ttl_s: max + 1 });
  assert.ok(textOf(above).includes(String(max)), `the text names the max ${max}: ${textOf(above)}`);
  // The max itself is fine.
  const atMax = await openWs(srv, { ttl_s: max });
  await closeWs(client, atMax.workspace_id);

  for (const bad of [42, ['x'], { id: 'x' }, true]) {
    const r = await runCode(client, { runtime: 'python', code: 'print(1)', workspace_id: bad });
    assert.equal(r.isError, true, `run_code workspace_id ${JSON.stringify(bad)} ran`);
    assert.match(textOf(r), /workspace_id/, textOf(r));
    const c = await call(client, 'close_workspace', { workspace_id: bad });
    assert.equal(c.isError, true);
    assert.match(textOf(c), /workspace_id/, textOf(c));
  }
  const missing = await call(client, 'close_workspace', {});
  assert.equal(missing.isError, true);
  assert.match(textOf(missing), /workspace_id/);
  for (const bad of ['x', [42]]) {
    const r = await runCode(client, { runtime: 'python', code: 'print(1)', artifact_ids: bad });
    assert.equal(r.isError, true, `run_code artifact_ids ${JSON.stringify(bad)} ran`);
    assert.match(textOf(r), /artifact_ids/, textOf(r));
  }
});
