/**
 * deploy/grafana/orbit-dashboard.json uses only metrics Orbit exposes: every `orbit_…` name in its
 * queries is registered by a server process (the counters and histograms of metrics.ts, the usage
 * gauges of usage-metrics.ts), and every label it groups by is one those metrics carry.
 */
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { readFileSync } from 'node:fs';
import { Registry } from 'prom-client';
import { createMetrics } from '../../server/metrics.ts';
import { registerUsageGauges } from '../../server/usage-metrics.ts';
import { silentLogger } from '../../server/log.ts';

test('every metric and label the Grafana dashboard queries exists', async () => {
  const dashboard = JSON.parse(readFileSync(new URL('../../deploy/grafana/orbit-dashboard.json', import.meta.url), 'utf8')) as {
    panels: Array<{ title: string; targets: Array<{ expr: string }> }>;
  };
  const metrics = createMetrics();
  const usage = new Registry();
  registerUsageGauges(usage, async () => ({ applications: [], queues: [], subscriptions: [] }), silentLogger());
  const registered = new Map<string, Set<string>>();
  for (const registry of [metrics.registry, usage]) {
    for (const metric of await registry.getMetricsAsJSON()) {
      const labels = new Set((metric as unknown as { values: Array<{ labels: Record<string, unknown> }> }).values.flatMap((v) => Object.keys(v.labels)));
      const declared = ((registry.getSingleMetric(metric.name) as unknown as { labelNames?: string[] }).labelNames ?? []) as string[];
      registered.set(metric.name, new Set([...labels, ...declared, 'le', 'instance']));
    }
  }
  const names = (expr: string) => [...expr.matchAll(/\b(orbit_[a-z_]+?)(?:_bucket)?\b(?=[{[\s)]|$)/g)].map((m) => m[1] as string);
  let queried = 0;
  for (const panel of dashboard.panels) {
    for (const target of panel.targets) {
      for (const name of names(target.expr)) {
        queried += 1;
        assert.ok(registered.has(name), `${panel.title}: ${name} is not a metric Orbit exposes`);
        for (const by of target.expr.matchAll(/by \(([^)]*)\)/g)) {
          for (const label of (by[1] as string).split(',').map((l) => l.trim())) {
            if (label !== 'le') {
              const carriers = names(target.expr).filter((n) => registered.get(n)?.has(label));
              assert.ok(carriers.length > 0, `${panel.title}: no metric of "${target.expr}" has the label ${label}`);
            }
          }
        }
      }
    }
  }
  assert.ok(queried >= 20, `the dashboard queries ${queried} metrics`);
});
