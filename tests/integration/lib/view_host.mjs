// A small MCP Apps host for the run view, in headless Chromium (Debian's
// /usr/bin/chromium, driven by playwright-core): a page built on the
// extension's host-side bridge (AppBridge from @modelcontextprotocol/ext-apps,
// bundled here by esbuild, served from 127.0.0.1), each view in an iframe
// sandboxed to scripts alone (an opaque origin), as hosts render them. The
// view's tools/call requests reach `callTool` (the test's MCP client), and
// only the tools in `allowTools`: a host's consent flow, here a refusal.
import fs from 'node:fs';
import http from 'node:http';
import path from 'node:path';
import { fileURLToPath } from 'node:url';

export const CHROMIUM = '/usr/bin/chromium';
const TESTS_DIR = path.resolve(path.dirname(fileURLToPath(import.meta.url)), '../..');

// Exits 77 (skipped) where there is no browser to drive.
export function skipWithoutChromium() {
  if (!fs.existsSync(CHROMIUM)) {
    process.stderr.write(`skip: ${CHROMIUM} is missing (Debian package chromium; scripts/test installs it)\n`);
    process.exit(77);
  }
}

const HOST_ENTRY = `
import { AppBridge, PostMessageTransport } from '@modelcontextprotocol/ext-apps/app-bridge';
window.__pwned = 0;
window.addEventListener('message', (e) => { if (e.data && e.data.pwned) window.__pwned += 1; });
// Shows one run in the iframe with id \`slot\`: a new iframe, a new bridge.
window.showRun = async (slot, html, input, result) => {
  const iframe = document.createElement('iframe');
  iframe.id = slot;
  iframe.className = 'view';
  iframe.setAttribute('sandbox', 'allow-scripts');
  document.getElementById(slot).replaceWith(iframe);
  const bridge = new AppBridge(null, { name: 'throwbox-test-host', version: '1.0.0' }, { serverTools: {} });
  bridge.oncalltool = (params) => window.hostCallTool(params);
  bridge.onsizechange = ({ height }) => { if (height) iframe.style.height = Math.ceil(height) + 'px'; };
  const initialized = new Promise((resolve) => { bridge.oninitialized = resolve; });
  await bridge.connect(new PostMessageTransport(iframe.contentWindow, iframe.contentWindow));
  iframe.srcdoc = html;
  await initialized;
  await bridge.sendToolInput({ arguments: input });
  const t0 = performance.now();
  await bridge.sendToolResult(result);
  return t0;
};
`;

const HOST_PAGE = `<!doctype html>
<html><head><meta charset="utf-8"><title>throwbox view host</title>
<style>body{margin:0;padding:12px;background:#fff;font:13px system-ui}
.row{display:flex;gap:12px;align-items:flex-start}
iframe.view,div.view{width:560px;height:200px;border:1px solid #d0d7de;border-radius:6px;background:#fff}</style>
</head><body><div class="row"><div class="view" id="a"></div><div class="view" id="b"></div></div>
<script src="/host.js"></script></body></html>`;

// Starts the browser and the host page. Returns { page, show, close, calls }.
export async function startViewHost({ callTool, allowTools = ['fetch_artifact'] }) {
  const { build } = await import('esbuild');
  const bundle = await build({
    stdin: { contents: HOST_ENTRY, resolveDir: TESTS_DIR, loader: 'js' },
    bundle: true, format: 'iife', write: false, platform: 'browser', logLevel: 'silent',
  });
  const hostJs = bundle.outputFiles[0].text;
  const server = http.createServer((req, res) => {
    if (req.url === '/') { res.writeHead(200, { 'content-type': 'text/html' }); res.end(HOST_PAGE); return; }
    if (req.url === '/host.js') { res.writeHead(200, { 'content-type': 'text/javascript' }); res.end(hostJs); return; }
    res.writeHead(404); res.end();
  });
  await new Promise((resolve) => server.listen(0, '127.0.0.1', resolve));
  const { chromium } = await import('playwright-core');
  const browser = await chromium.launch({
    executablePath: CHROMIUM,
    args: ['--no-sandbox', '--disable-gpu', '--disable-quic', '--no-first-run', '--disable-background-networking',
      '--disable-component-update', '--disable-sync'],
  });
  const page = await browser.newPage({ viewport: { width: 1160, height: 900 } });
  const calls = [];
  const dialogs = [];
  page.on('dialog', async (d) => { dialogs.push(d.message()); await d.dismiss(); });
  await page.exposeFunction('hostCallTool', async (params) => {
    calls.push(params.name);
    if (!allowTools.includes(params.name)) {
      return { isError: true, content: [{ type: 'text', text: `the host did not allow ${params.name}` }] };
    }
    return callTool(params);
  });
  await page.goto(`http://127.0.0.1:${server.address().port}/`);

  // Shows `result` (a CallToolResult) of a call with `input` in slot 'a' or
  // 'b'; resolves once the view says it rendered, with the frame and the
  // milliseconds from the result's notification to the render's end.
  async function show(slot, html, input, result) {
    const t0 = await page.evaluate(async ([s, h, i, r]) => performance.timeOrigin + await window.showRun(s, h, i, r),
      [slot, html, input, result]);
    const frame = await (await page.$(`#${slot}`)).contentFrame();
    await frame.waitForFunction(() => document.body && document.body.dataset.rendered, null, { timeout: 30_000 });
    const renderedAt = Number(await frame.evaluate(() => document.body.dataset.renderedAt));
    return { frame, ms: renderedAt - t0 };
  }

  async function close() {
    await browser.close().catch(() => {});
    await new Promise((resolve) => server.close(resolve));
  }
  return { page, show, close, calls, dialogs };
}
