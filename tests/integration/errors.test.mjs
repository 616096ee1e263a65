// Error surfaces: an unknown tool is a JSON-RPC error; bad arguments, unknown
// runtimes and unknown ids are tool results with isError and a message naming
// the field.
import test, { before, after } from 'node:test';
import assert from 'node:assert/strict';
import { McpError } from '@modelcontextprotocol/sdk/types.js';
import { connect, REQUEST_TIMEOUT_MS, textOf } from './lib/client.mjs';

let conn;
// No tools/list up front: the SDK only validates structuredContent against a
// tool's outputSchema after tools/list, and these tests are about error
// results, whatever structured content they may carry.
before(async () => { conn = await connect({ validateOutput: false }); });
after(async () => { await conn?.close(); });

const call = (name, args) =>
  conn.client.callTool({ name, arguments: args }, undefined, { timeout: REQUEST_TIMEOUT_MS });

async function expectToolError(name, args, pattern) {
  const result = await call(name, args);
  assert.equal(result.isError, true, `expected isError for ${JSON.stringify(args)}, got ${JSON.stringify(result)}`);
  const text = textOf(result);
  assert.ok(text.length > 0, 'error result carries a text message');
  assert.match(text, pattern);
  return text;
}

test('(a) unknown tool is a JSON-RPC error -32602', { timeout: 30_000 }, async () => {
  await assert.rejects(call('no_such_tool', {}), (err) => {
    assert.ok(err instanceof McpError, `expected McpError, got ${err}`);
    assert.equal(err.code, -32602);
    return true;
  });
});

test('(b) run_code without code names the field', { timeout: 30_000 }, async () => {
  await expectToolError('run_code', { runtime: 'python' }, /code/);
});

test('(c) run_code with code of the wrong type names the field', { timeout: 30_000 }, async () => {
  await expectToolError('run_code', { runtime: 'python', code: 42 }, /code/);
});

test('(d) unknown runtime names the field', { timeout: 30_000 }, async () => {
  await expectToolError('run_code', { runtime: 'cobol', code: 'DISPLAY "HI".' }, /runtime/);
});

test('(e) negative timeout_s names the field', { timeout: 30_000 }, async () => {
  await expectToolError('run_code', { runtime: 'python', code: 'print(1)', timeout_s: -1 }, /timeout_s/);
});

test('(f) foreign and unknown artifact ids look alike', { timeout: 30_000 }, async () => {
  const traversal = await expectToolError('fetch_artifact', { artifact_id: '../../etc/passwd' }, /artifact/i);
  const unknown = await expectToolError('fetch_artifact', { artifact_id: '0123456789abcdef0123456789abcdef' }, /artifact/i);
  assert.equal(traversal, unknown, 'the same message for a malformed and an unknown id');
  assert.doesNotMatch(traversal, /root:|passwd/, 'nothing of the host file leaks');
});

test('(g) unknown input id names the field', { timeout: 30_000 }, async () => {
  await expectToolError('run_code', { runtime: 'python', code: 'print(1)', input_ids: ['nope'] }, /input/i);
});

test('(h) two inputs with the same name in one run is a clear error', { timeout: 30_000 }, async () => {
  const a = await call('upload_input', { name: 'data.csv', content: 'x\n1\n' });
  const b = await call('upload_input', { name: 'data.csv', content: 'x\n2\n' });
  assert.notEqual(a.structuredContent.input_id, b.structuredContent.input_id);
  await expectToolError('run_code', {
    runtime: 'python', code: 'print(1)',
    input_ids: [a.structuredContent.input_id, b.structuredContent.input_id],
  }, /input_ids: two inputs are both named "data\.csv"/);
});

test('(i) upload names that could traverse or hide are refused', { timeout: 30_000 }, async () => {
  await expectToolError('upload_input', { name: '../etc/passwd', content: 'x' }, /name: must be a plain file name/);
  await expectToolError('upload_input', { name: '..', content: 'x' }, /name:/);
  await expectToolError('upload_input', { name: 'a\u0000b', content: 'x' }, /name: must not contain NUL or control characters/);
  await expectToolError('upload_input', { name: 'x', content: '!!', encoding: 'base64' }, /content: not valid base64/);
});

test('(j) fetch_artifact with an empty id is an error', { timeout: 30_000 }, async () => {
  await expectToolError('fetch_artifact', { artifact_id: '' }, /artifact_id: unknown artifact_id/);
});

test('server still answers after the errors', { timeout: 30_000 }, async () => {
  assert.deepEqual(await conn.client.ping({ timeout: REQUEST_TIMEOUT_MS }), {});
});
