#!/usr/bin/env node
// The run view (MCP Apps): its resource's size, and how long headless
// Chromium takes to render a result in it, through the same host page the
// browser test uses (tests/integration/lib/view_host.mjs: the ext-apps
// AppBridge, an iframe sandboxed to scripts).
//
// Render time: from the host's sendToolResult to the view's own mark that it
// rendered (both clocks are the page's epoch-based high-resolution time), for
// three results made once by a real server and rendered --runs times each,
// interleaved: print(1) (text only), the reconciliation (a CSV preview
// fetched with fetch_artifact through the bridge, a check, the receipt
// verified with WebCrypto) and the chart (a 17 KiB PNG fetched and decoded).
// Usage: THROWBOX_BIN=build/throwbox node bench/view.mjs [--runs 30]
import fs from 'node:fs';
import path from 'node:path';
import { gzipSync } from 'node:zlib';
import { connect, runCode, runExample, REPO_ROOT } from '../tests/integration/lib/client.mjs';
import { CHROMIUM, startViewHost } from '../tests/integration/lib/view_host.mjs';

const runs = Number(process.argv[process.argv.indexOf('--runs') + 1] || 30) || 30;
process.env.THROWBOX_BIN ??= path.join(REPO_ROOT, 'build', 'throwbox');
if (!fs.existsSync(CHROMIUM)) {
  process.stderr.write(`view.mjs: ${CHROMIUM} is missing (apt-get install chromium)\n`);
  process.exit(2);
}
const capabilities = { extensions: { 'io.modelcontextprotocol/ui': { mimeTypes: ['text/html;profile=mcp-app'] } } };
const VIEW = 'ui://throwbox/run-view';

const quantile = (xs, q) => {
  const s = [...xs].sort((a, b) => a - b);
  return s[Math.min(s.length - 1, Math.floor(q * (s.length - 1) + 0.5))];
};

const reconcile = await connect({ label: 'bench view reconcile', capabilities,
  policy: path.join(REPO_ROOT, 'examples/reconcile/policy.json') });
const plain = await connect({ label: 'bench view', capabilities,
  policy: path.join(REPO_ROOT, 'policies/default.json') });
let current = plain.client;
const host = await startViewHost({ callTool: (params) => current.callTool(params) });
try {
  const pages = {
    reconcile: (await reconcile.client.readResource({ uri: VIEW })).contents[0].text,
    plain: (await plain.client.readResource({ uri: VIEW })).contents[0].text,
  };
  const bytes = Buffer.byteLength(pages.plain);
  const cases = [
    { name: 'print(1)', client: plain.client, page: pages.plain,
      ...(await (async () => { const args = { runtime: 'python', code: 'print(1)' };
        return { args, result: await runCode(plain.client, args) }; })()) },
    { name: 'reconciliation', client: reconcile.client, page: pages.reconcile,
      ...(await runExample(reconcile.client, 'reconcile')) },
    { name: 'chart', client: plain.client, page: pages.plain, ...(await runExample(plain.client, 'chart')) },
  ];
  const times = Object.fromEntries(cases.map((c) => [c.name, []]));
  // One untimed render of each first (the browser's own first-use costs).
  for (const round of [-1, ...Array.from({ length: runs }, (_, i) => i)]) {
    for (const c of cases) {
      current = c.client;
      const { ms } = await host.show(round % 2 ? 'a' : 'b', c.page, c.args, c.result);
      if (round >= 0) times[c.name].push(ms);
    }
  }
  const version = (await host.page.context().browser().version());
  process.stdout.write(`throwbox run view benchmark, ${new Date().toISOString().slice(0, 10)}, Chromium ${version}, ` +
    `${runs} renders of each result, interleaved\n`);
  process.stdout.write(`resource ${VIEW}: ${bytes} bytes (${(bytes / 1024).toFixed(1)} KiB; gzip ` +
    `${gzipSync(pages.plain).length} bytes); target at most 64 KiB\n`);
  process.stdout.write('   result             median ms   p90 ms   min-max ms\n');
  for (const c of cases) {
    const t = times[c.name];
    process.stdout.write(`   ${c.name.padEnd(18)} ${quantile(t, 0.5).toFixed(1).padStart(9)} ` +
      `${quantile(t, 0.9).toFixed(1).padStart(8)}   ${Math.min(...t).toFixed(1)}-${Math.max(...t).toFixed(1)}\n`);
  }
} finally {
  await host.close();
  await reconcile.close();
  await plain.close();
}
