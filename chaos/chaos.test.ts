import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { startChaosBackend } from './backends/index.ts';
import { machine } from './format.ts';
import { renderMarkdownTable, writeReport } from './report.ts';
import { runScenario, type ScenarioSpec } from './runner.ts';
import { moreScenarios, multiInstance, needsProcess, scenarios } from './scenarios.ts';
import type { ChaosBackend, ScenarioResult } from './types.ts';

let backend: ChaosBackend;
const results: ScenarioResult[] = [];
const startedAt = new Date().toISOString();

beforeAll(async () => {
  backend = await startChaosBackend();
  console.log(`chaos backend: ${backend.kind} — ${backend.why}`);
});

afterAll(async () => {
  try {
    if (results.length > 0) {
      const dir = join(process.env['CHAOS_REPORT_DIR'] ?? 'reports/chaos', startedAt.replace(/[:.]/g, '-'));
      const written = await writeReport(dir, results, {
        backend: backend.kind,
        why: backend.why,
        startedAt,
        node: process.version,
        machine: machine(),
      });
      console.log(`\n${renderMarkdownTable(results)}\nchaos report: ${written.markdown}`);
    }
  } finally {
    await backend?.close();
  }
});

async function scenario(spec: ScenarioSpec, skip: (note: string) => void): Promise<ScenarioResult | undefined> {
  if (needsProcess.has(spec.name) && backend.process === undefined) {
    skip(`the ${backend.kind} backend cannot freeze, kill or restart the Redis process`);
    return undefined;
  }
  if (spec.name === 'misconf' && backend.process?.failSave === undefined) {
    skip(`the ${backend.kind} backend cannot make a save fail`);
    return undefined;
  }
  const result = await runScenario(backend, spec);
  results.push(result);
  const m = result.metrics;
  console.log(
    `${spec.name}: ${m.decisions} decisions, fault p50/p99/max ${m.faultLatency.p50.toFixed(2)}/` +
      `${m.faultLatency.p99.toFixed(2)}/${m.faultLatency.max.toFixed(1)} ms, open ${m.timeToOpenMs ?? '—'} ms, ` +
      `close ${m.timeToCloseMs ?? '—'} ms, excess ${m.overLimit.maxExcess}, reasons ${JSON.stringify(m.byReason)}`,
  );
  return result;
}

describe('chaos: one limiter under each fault', () => {
  for (const spec of scenarios) {
    it(spec.title, async (context) => {
      const result = await scenario(spec, (note) => context.skip(note));
      if (result === undefined) return;
      expect(result.checks.filter((c) => !c.pass)).toEqual([]);
    });
  }
});

describe('chaos: one limiter, MISCONF and a long outage over many keys', () => {
  for (const spec of moreScenarios) {
    it(spec.title, async (context) => {
      const result = await scenario(spec, (note) => context.skip(note));
      if (result === undefined) return;
      expect(result.checks.filter((c) => !c.pass)).toEqual([]);
    });
  }
});

describe('chaos: four instances sharing the limit through an outage', () => {
  const byName = new Map<string, ScenarioResult>();
  for (const spec of multiInstance) {
    it(spec.title, async (context) => {
      const result = await scenario(spec, (note) => context.skip(note));
      if (result === undefined) return;
      byName.set(spec.name, result);
      expect(result.checks.filter((c) => !c.pass)).toEqual([]);
    });
  }

  it('shows reconciliation preventing a fresh limit on top of the outage', () => {
    const withIt = byName.get('four-instances-reconciled');
    const without = byName.get('four-instances-not-reconciled');
    expect(withIt).toBeDefined();
    expect(without).toBeDefined();
    expect(without!.metrics.overLimit.callsOver).toBeGreaterThan(withIt!.metrics.overLimit.callsOver);
  });
});
