#!/usr/bin/env node
// An installed server forks python jobs from its template: runs short python
// jobs through THROWBOX_BIN with THROWBOX_POLICY (a policy whose pool has
// templates for python) until one reports the "template_fork" layer, and
// fails if none does within the budget (the template never became ready,
// e.g. a profile that denies what it needs, or the server fell back to
// starting interpreters). Prints the forked job's layers.
// Usage: THROWBOX_BIN=... THROWBOX_POLICY=... [THROWBOX_STATE_DIR=...] node tests/package/template_fork.mjs
import { connect, runCode, textOf, scaled } from '../integration/lib/client.mjs';

const BUDGET_MS = scaled(90_000);

async function main() {
  const { client, close, stderrText } = await connect({
    stateDir: process.env.THROWBOX_STATE_DIR || undefined, label: 'template_fork',
  });
  try {
    const start = Date.now();
    let jobs = 0;
    let last = null;
    while (Date.now() - start < BUDGET_MS) {
      const result = await runCode(client, { runtime: 'python', code: 'print(6 * 7)', timeout_s: 20 });
      jobs += 1;
      if (result.isError) throw new Error(`run_code refused the job: ${textOf(result)}`);
      last = result.structuredContent;
      if (last.status !== 'completed' || last.stdout.trim() !== '42')
        throw new Error(`job ${last.job_id}: status ${last.status}, stdout ${JSON.stringify(last.stdout)}, stderr ${JSON.stringify(last.stderr)}`);
      if ((last.sandbox_layers ?? []).includes('template_fork')) {
        process.stdout.write(`template_fork: job ${jobs} was forked from its template (${last.start}; ` +
          `${last.duration_ms} ms): ${last.sandbox_layers.join(' ')}\n`);
        return 0;
      }
      await new Promise((resolve) => setTimeout(resolve, 500));
    }
    process.stdout.write(`template_fork: none of ${jobs} python jobs in ${BUDGET_MS} ms was a template's fork; ` +
      `the last had ${JSON.stringify(last?.sandbox_layers)}\n--- server stderr (tail)\n${stderrText().slice(-4000)}\n`);
    return 1;
  } finally {
    await close();
  }
}

main().then(
  (code) => { process.exitCode = code; },
  (error) => {
    process.stderr.write(`template_fork: ${error.stack ?? error}\n`);
    process.exitCode = 1;
  },
);
