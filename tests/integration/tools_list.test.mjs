// tools/list, server identity, instructions and ping over the SDK client.
import test from 'node:test';
import assert from 'node:assert/strict';
import { connect, REQUEST_TIMEOUT_MS } from './lib/client.mjs';

test('server advertises exactly the three throwbox tools', { timeout: 30_000 }, async () => {
  const { client, close } = await connect({ validateOutput: false });
  try {
    const version = client.getServerVersion();
    assert.equal(version?.name, 'throwbox');
    assert.equal(typeof version?.version, 'string');

    const capabilities = client.getServerCapabilities();
    assert.ok(capabilities?.tools, 'server declares the tools capability');

    const instructions = client.getInstructions();
    assert.equal(typeof instructions, 'string', 'initialize result carries instructions');
    assert.match(instructions, /\/inputs/);
    assert.match(instructions, /\/outputs/);

    const { tools } = await client.listTools(undefined, { timeout: REQUEST_TIMEOUT_MS });
    assert.deepEqual(tools.map((t) => t.name).sort(), ['close_workspace', 'fetch_artifact', 'open_workspace', 'run_code', 'upload_input']);

    for (const tool of tools) {
      assert.equal(typeof tool.description, 'string', `${tool.name} description`);
      assert.ok(tool.description.trim().length > 0, `${tool.name} description is not empty`);
      assert.equal(typeof tool.inputSchema, 'object', `${tool.name} inputSchema`);
      assert.equal(tool.inputSchema.type, 'object', `${tool.name} inputSchema.type`);
      assert.equal(typeof tool.outputSchema, 'object', `${tool.name} outputSchema`);
      assert.ok(tool.outputSchema !== null, `${tool.name} outputSchema is not null`);
      assert.equal(tool.outputSchema.type, 'object', `${tool.name} outputSchema.type`);
    }

    const byName = Object.fromEntries(tools.map((t) => [t.name, t]));
    const run = byName.run_code;
    assert.deepEqual(
      [...(run.inputSchema.required ?? [])].sort(), ['code', 'runtime'],
      'run_code requires runtime and code');
    assert.equal(run.annotations?.readOnlyHint, false, 'run_code readOnlyHint');
    assert.equal(run.annotations?.openWorldHint, false, 'run_code openWorldHint');

    const fetch = byName.fetch_artifact;
    assert.equal(fetch.annotations?.readOnlyHint, true, 'fetch_artifact readOnlyHint');
    assert.equal(fetch.annotations?.idempotentHint, true, 'fetch_artifact idempotentHint');
    assert.ok((fetch.inputSchema.required ?? []).includes('artifact_id'));

    const up = byName.upload_input;
    assert.ok((up.inputSchema.required ?? []).includes('name'));
    assert.ok((up.inputSchema.required ?? []).includes('content'));

    const pong = await client.ping({ timeout: REQUEST_TIMEOUT_MS });
    assert.deepEqual(pong, {});
  } finally {
    await close();
  }
});
