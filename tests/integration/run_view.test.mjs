// The run view (MCP Apps, io.modelcontextprotocol/ui) as the protocol offers
// it, without a browser (run_view_browser.test.mjs renders it):
// - a client that declares the extension with the HTML profile sees
//   run_code's _meta.ui.resourceUri, the ui:// resource in resources/list and
//   the extension in the server's capabilities; resources/read gives the page
//   (its profile, an empty CSP allowance, at most 64 KiB, a strict CSP of its
//   own whose hashes match its one script and one style, the receipt key);
// - a client without it, or with the extension but not the HTML profile, gets
//   exactly the lists and capabilities it got before the view existed;
// - the same over stateless HTTP (2026-07-28), per request.
import test from 'node:test';
import assert from 'node:assert/strict';
import crypto from 'node:crypto';
import { connect } from './lib/client.mjs';
import { startHttpServer, post } from './lib/http.mjs';

const UI = 'io.modelcontextprotocol/ui';
const PROFILE = 'text/html;profile=mcp-app';
const VIEW = 'ui://throwbox/run-view';
const withView = { extensions: { [UI]: { mimeTypes: [PROFILE] } } };

// The page's CSP lists sha256 hashes; each must be that of the element's text.
function checkPage(html, receiptKeyId) {
  assert.ok(Buffer.byteLength(html) <= 64 * 1024, `the page is ${Buffer.byteLength(html)} bytes`);
  const csp = /<meta http-equiv="Content-Security-Policy" content="([^"]+)">/.exec(html)?.[1];
  assert.ok(csp, 'the page has a CSP');
  assert.match(csp, /default-src 'none'/);
  assert.doesNotMatch(csp, /unsafe-inline|unsafe-eval|https?:/);
  const hash = (t) => `'sha256-${crypto.createHash('sha256').update(t, 'utf8').digest('base64')}'`;
  const script = /<script>([\s\S]*?)<\/script>/.exec(html)[1];
  const style = /<style>([\s\S]*?)<\/style>/.exec(html)[1];
  assert.match(csp, new RegExp(`script-src ${hash(script).replace(/[+/]/g, '\\$&')}`));
  assert.match(csp, new RegExp(`style-src ${hash(style).replace(/[+/]/g, '\\$&')}`));
  assert.equal((html.match(/<script>/g) ?? []).length, 1, 'one script runs');
  assert.doesNotMatch(html, / on[a-z]+=/i, 'no inline event handler');
  const key = JSON.parse(/<script type="application\/json" id="receipt-key">([^<]*)<\/script>/.exec(html)[1]);
  assert.equal(key.key_id, receiptKeyId);
  assert.match(key.spki, /^[A-Za-z0-9+/]+=*$/);
  assert.doesNotMatch(html, /@[A-Z_0-9]+@/, 'every placeholder filled');
}

test('stdio: a client with the extension is offered the view; one without gets the plain lists', async () => {
  const plain = await connect({ label: 'run_view plain' });
  const wrongProfile = await connect({ label: 'run_view other profile',
    capabilities: { extensions: { [UI]: { mimeTypes: ['text/html'] } } } });
  const apps = await connect({ label: 'run_view apps', capabilities: withView });
  try {
    const plainTools = (await plain.client.listTools()).tools;
    const viewTools = (await apps.client.listTools()).tools;
    assert.deepEqual((await wrongProfile.client.listTools()).tools, plainTools);
    const run = viewTools.find((t) => t.name === 'run_code');
    assert.deepEqual(run._meta?.ui, { resourceUri: VIEW });
    assert.equal(plainTools.find((t) => t.name === 'run_code')._meta, undefined);
    // Nothing else differs.
    assert.deepEqual(viewTools.map((t) => { const c = { ...t }; if (c.name === 'run_code') delete c._meta; return c; }),
      plainTools);
    assert.equal(plain.client.getServerCapabilities().extensions, undefined);
    assert.deepEqual(apps.client.getServerCapabilities().extensions, { [UI]: {} });
    assert.ok(!(await plain.client.listResources()).resources.some((r) => r.uri === VIEW));
    const listed = (await apps.client.listResources()).resources.find((r) => r.uri === VIEW);
    assert.equal(listed?.mimeType, PROFILE);

    const read = await apps.client.readResource({ uri: VIEW });
    assert.equal(read.contents.length, 1);
    const [page] = read.contents;
    assert.equal(page.uri, VIEW);
    assert.equal(page.mimeType, PROFILE);
    assert.deepEqual(page._meta?.ui?.csp, { connectDomains: [], resourceDomains: [] });
    // The key the receipts are signed with (a job's receipt names it).
    const job = (await apps.client.callTool({ name: 'run_code', arguments: { runtime: 'python', code: 'print(1)' } })).structuredContent;
    checkPage(page.text, job.receipt.key_id);
    // A job's result is the same whether or not the client has the view.
    const plainJob = (await plain.client.callTool({ name: 'run_code', arguments: { runtime: 'python', code: 'print(1)' } })).structuredContent;
    assert.deepEqual(Object.keys(job).sort(), Object.keys(plainJob).sort());
    assert.equal(job.stdout, '1\n');
  } finally {
    await plain.close();
    await wrongProfile.close();
    await apps.close();
  }
});

test('stateless HTTP: the view per request, by the request\'s own client capabilities', async () => {
  const server = await startHttpServer({ tenants: ['alice'] });
  try {
    let id = 0;
    const call = async (method, params, caps) => {
      const msg = { jsonrpc: '2.0', id: ++id, method, params: { ...params, _meta: {
        'io.modelcontextprotocol/protocolVersion': '2026-07-28',
        'io.modelcontextprotocol/clientCapabilities': caps,
        'io.modelcontextprotocol/clientInfo': { name: 'run-view-test', version: '1' } } } };
      const headers = { 'MCP-Protocol-Version': '2026-07-28', 'Mcp-Method': method };
      if (method === 'resources/read') headers['Mcp-Name'] = params.uri;
      const r = await post(server.url, msg, { token: server.tokens.alice, headers });
      assert.equal(r.status, 200, r.text);
      return r.body.result;
    };
    const plain = await call('tools/list', {}, {});
    const apps = await call('tools/list', {}, withView);
    assert.equal(plain.tools.find((x) => x.name === 'run_code')._meta, undefined);
    assert.deepEqual(apps.tools.find((x) => x.name === 'run_code')._meta?.ui, { resourceUri: VIEW });
    assert.equal((await call('server/discover', {}, {})).capabilities.extensions?.[UI], undefined);
    assert.deepEqual((await call('server/discover', {}, withView)).capabilities.extensions?.[UI], {});
    const read = await call('resources/read', { uri: VIEW }, withView);
    assert.equal(read.contents[0].mimeType, PROFILE);
    assert.match(read.contents[0].text, /^<!doctype html>/);
  } finally {
    await server.stop();
  }
});
