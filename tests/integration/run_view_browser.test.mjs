// The run view rendered in a real browser: headless Chromium (Debian's), a
// host page on the MCP Apps host-side bridge (lib/view_host.mjs), the server
// over stdio with a client that declares the extension. Each case runs a job,
// reads the view (resources/read), hands the bridge the job's CallToolResult
// and checks what the page shows; a screenshot of each is written to
// <build>/view-screenshots/ for a person to look at.
// - the reconciliation example: completed, its check's pass, the receipt
//   verifies, exceptions.csv previewed cell for cell;
// - the chart example: its PNG fetched through the bridge and decoded;
// - a hostile job (markup, </script>, javascript: links in stdout and stderr,
//   a formula in a CSV cell): all shown as text, nothing runs;
// - a job that timed out and one that ran out of memory: their status;
// - an output cut at its cap, a receipt changed after signing, a network
//   profile's connections with their verdicts.
import test, { before, after } from 'node:test';
import assert from 'node:assert/strict';
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { spawnSync } from 'node:child_process';
import { connect, runCode, runExample, fetchArtifact, artifactText, REPO_ROOT, throwboxBin } from './lib/client.mjs';
import { skipWithoutChromium, startViewHost } from './lib/view_host.mjs';

skipWithoutChromium();

const UI = 'io.modelcontextprotocol/ui';
const VIEW = 'ui://throwbox/run-view';
const capabilities = { extensions: { [UI]: { mimeTypes: ['text/html;profile=mcp-app'] } } };
const SHOTS = path.join(path.dirname(throwboxBin()), 'view-screenshots');

let reconcile, plain, host;
const clients = {};
const pages = {};  // each server's view (it names that server's receipt key)

before(async () => {
  fs.mkdirSync(SHOTS, { recursive: true });
  reconcile = await connect({ label: 'view reconcile', capabilities,
    policy: path.join(REPO_ROOT, 'examples/reconcile/policy.json') });
  plain = await connect({ label: 'view default', capabilities });
  clients.reconcile = reconcile.client;
  clients.plain = plain.client;
  for (const which of ['reconcile', 'plain']) pages[which] = (await clients[which].readResource({ uri: VIEW })).contents[0].text;
  host = await startViewHost({ callTool: (params) => clients.current.callTool(params) });
});
after(async () => {
  await host?.close();
  await reconcile?.close();
  await plain?.close();
});

// Renders `result` in slot a (or b) through the client that made it.
async function render(which, args, result, slot = 'a') {
  clients.current = clients[which];
  const { frame, ms } = await host.show(slot, pages[which], args, result);
  return { frame, ms };
}

const text = (frame, selector) => frame.locator(selector).first().textContent();

test('the reconciliation: completed, its check passes, the receipt verifies, the CSV cell for cell', async () => {
  const { args, result } = await runExample(reconcile.client, 'reconcile');
  assert.equal(result.structuredContent.status, 'completed', JSON.stringify(result.structuredContent));
  const { frame } = await render('reconcile', args, result);
  assert.equal(await text(frame, '#status'), 'completed');
  assert.equal(await text(frame, '#exit'), 'exit 0');
  assert.match(await text(frame, '#checks'), /reconcile pass/);
  assert.match(await text(frame, '#receipt'), /^verifies \(Ed25519/);
  assert.equal(await frame.locator('#receipt').getAttribute('class'), 'receipt-ok');
  // The preview's cells are the artifact's rows.
  const artifact = result.structuredContent.artifacts.find((a) => a.name === 'exceptions.csv');
  const csv = artifactText(await fetchArtifact(reconcile.client, artifact.artifact_id));
  // Parsed by Python's csv module, not by the view's own parser.
  const want = JSON.parse(spawnSync('/usr/bin/python3', ['-c',
    'import csv, json, sys; print(json.dumps(list(csv.reader(sys.stdin))))'], { input: csv, encoding: 'utf8' }).stdout);
  const got = await frame.locator('table.csv-preview tr').evaluateAll((rows) =>
    rows.map((r) => Array.from(r.children, (c) => c.textContent)));
  assert.deepEqual(got, want);
  assert.match(await text(frame, '#artifacts'), /exceptions\.csv.*accepted/);
  await host.page.screenshot({ path: path.join(SHOTS, 'reconcile.png'), fullPage: true });
});

test('the chart: its PNG is fetched through the bridge and decoded', async () => {
  const { args, result } = await runExample(plain.client, 'chart');
  assert.equal(result.structuredContent.status, 'completed', result.structuredContent.stderr);
  const { frame } = await render('plain', args, result, 'b');
  const size = await frame.locator('img.artifact-image').first().evaluate((img) => [img.naturalWidth, img.naturalHeight]);
  assert.ok(size[0] > 100 && size[1] > 100, `decoded ${size}`);
  assert.ok(host.calls.includes('fetch_artifact'));
  await host.page.screenshot({ path: path.join(SHOTS, 'chart.png'), fullPage: true });
  // Both examples side by side: the README's picture.
  await host.page.screenshot({ path: path.join(SHOTS, 'reconcile-and-chart.png'), fullPage: true });
});

test('a hostile job\'s markup, links and formulas are shown as text and run nothing', async () => {
  const payloads = [
    '<img src=x onerror="alert(1);parent.postMessage({pwned:1},\'*\')">',
    '</script><script>alert(2)</script>',
    '<a href="javascript:alert(3)">click</a> [md](javascript:alert(4))',
    '<svg onload=alert(5)>',
  ];
  const code = [
    'import sys',
    `print(${JSON.stringify(payloads.join('\n'))})`,
    `sys.stderr.write(${JSON.stringify(payloads[0])})`,
    `open("/outputs/<b>evil<script>.txt", "w").write("a name the gate refuses")`,
    `open("/outputs/links.csv", "w").write('name,link\\n"<img src=x onerror=alert(6)>","=HYPERLINK(""javascript:alert(7)"",""x"")"\\n')`,
  ].join('\n');
  const args = { runtime: 'python', code };
  const result = await runCode(plain.client, args);
  const { frame } = await render('plain', args, result);
  assert.equal(await text(frame, '#stdout'), `${payloads.join('\n')}\n`);
  assert.equal(await text(frame, '#stderr'), payloads[0]);
  // No element came from the job's text: no image, link, script or svg.
  assert.equal(await frame.locator('img, a, svg, iframe, object, embed').count(), 0);
  assert.equal(await frame.locator('script').count(), 2);  // the view's own data block and script
  assert.match(await text(frame, '#artifacts'), /<b>evil<script>\.txt.*rejected/);
  // The CSV passed the gate (its formula cell neutralised) and is previewed as text.
  const links = result.structuredContent.artifacts.find((a) => a.name === 'links.csv');
  assert.ok(links?.artifact_id, JSON.stringify(result.structuredContent.artifacts));
  const cells = await frame.locator('table.csv-preview td').allTextContents();
  assert.equal(cells[0], '<img src=x onerror=alert(6)>');
  assert.match(cells[1], /HYPERLINK\("javascript:alert\(7\)","x"\)/);
  await new Promise((r) => setTimeout(r, 300));  // an onerror would have fired by now
  assert.deepEqual(host.dialogs, []);
  assert.equal(await host.page.evaluate(() => window.__pwned), 0);
  assert.ok(host.calls.every((name) => name === 'fetch_artifact'), host.calls.join(' '));
  await host.page.screenshot({ path: path.join(SHOTS, 'hostile.png'), fullPage: true });
});

test('a job that timed out and one that ran out of memory show their status', async () => {
  const slow = { runtime: 'python', code: 'while True:\n    pass', timeout_s: 1 };
  const slowResult = await runCode(plain.client, slow);
  assert.equal(slowResult.structuredContent.status, 'timed_out');
  const { frame } = await render('plain', slow, slowResult);
  assert.equal(await text(frame, '#status'), 'timed out');
  assert.match(await text(frame, '.bars'), /time.*of 1000 ms/s);
  await host.page.screenshot({ path: path.join(SHOTS, 'timed-out.png'), fullPage: true });

  const big = { runtime: 'python', code: 'chunks = []\nwhile True:\n    chunks.append(b"x" * (16 << 20))', timeout_s: 30 };
  const bigResult = await runCode(plain.client, big, { timeout: 60_000 });
  const status = bigResult.structuredContent.status;
  const shown = await render('plain', big, bigResult, 'b');
  // memory_exceeded where the memory cgroup holds the cap; MemoryError
  // (failed) where only RLIMIT_DATA does (a server without cgroups).
  assert.ok(['memory_exceeded', 'failed'].includes(status), status);
  assert.equal(await text(shown.frame, '#status'), status.replace('_', ' '));
  await host.page.screenshot({ path: path.join(SHOTS, 'memory.png'), fullPage: true });
});

test('output cut at the cap is marked; a receipt changed after signing does not verify', async () => {
  const args = { runtime: 'python', code: 'print("x" * 100000)' };
  const result = await runCode(plain.client, args);
  const job = result.structuredContent;
  assert.equal(job.stdout_truncated, true);
  const { frame } = await render('plain', args, result);
  assert.match(await text(frame, '#stdout-cut'), new RegExp(`${job.stdout_cut_bytes} more bytes were not kept`));
  assert.match(await text(frame, '#receipt'), /^verifies/);
  // The same result with one fact of its statement changed.
  const forged = structuredClone(result);
  forged.structuredContent.receipt.statement.exit_code = 3;
  const shown = await render('plain', args, forged, 'b');
  assert.equal(await text(shown.frame, '#receipt'), 'does not verify: the signature does not match the statement');
  assert.equal(await shown.frame.locator('#receipt').getAttribute('class'), 'receipt-bad');
  await host.page.screenshot({ path: path.join(SHOTS, 'cut-and-forged.png'), fullPage: true });
});

test('a job with a network profile: each connection with its verdict and reason', async () => {
  const dir = fs.mkdtempSync(path.join(os.tmpdir(), 'throwbox-view-net-'));
  const policy = JSON.parse(fs.readFileSync(path.join(REPO_ROOT, 'policies/default.json'), 'utf8'));
  policy.network = { profiles: { web: { allow: ['example.org:443'], description: 'the view test' } } };
  fs.writeFileSync(path.join(dir, 'policy.json'), JSON.stringify(policy));
  const net = await connect({ label: 'view network', capabilities, policy: path.join(dir, 'policy.json') });
  try {
    clients.net = net.client;
    pages.net = (await net.client.readResource({ uri: VIEW })).contents[0].text;
    const code = [
      'import urllib.request',
      'for u in ["https://forbidden.invalid/", "http://169.254.169.254/latest/meta-data/"]:',
      '    try:',
      '        urllib.request.urlopen(u, timeout=5)',
      '    except Exception as e:',
      '        print(type(e).__name__)',
    ].join('\n');
    const args = { runtime: 'python', code, network: 'web' };
    const result = await runCode(net.client, args);
    const { frame } = await render('net', args, result);
    const rows = await frame.locator('#network tr').evaluateAll((trs) =>
      trs.map((tr) => Array.from(tr.children, (c) => c.textContent)));
    assert.deepEqual(rows[0], ['host', 'port', 'verdict', 'up', 'down', 'reason']);
    const byHost = Object.fromEntries(rows.slice(1).map((r) => [r[0], r]));
    assert.equal(byHost['forbidden.invalid']?.[2], 'refused', JSON.stringify(rows));
    assert.match(byHost['forbidden.invalid'][5], /not allowed by profile web/);
    assert.equal(byHost['169.254.169.254']?.[1], '80');
    assert.equal(byHost['169.254.169.254']?.[2], 'refused');
    assert.match(await text(frame, 'h2:has-text("network")'), /network \(web\)/);
    await host.page.screenshot({ path: path.join(SHOTS, 'network.png'), fullPage: true });
  } finally {
    await net.close();
    fs.rmSync(dir, { recursive: true, force: true });
  }
});
