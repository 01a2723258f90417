/**
 * deploy/grafana/orbit-dashboard.json uses only metrics Orbit exposes: every `orbit_…` name in its
 * queries is registered by a server process (the counters and histograms of metrics.ts, the usage
 * gauges of usage-metrics.ts), and every label it groups by is one those metrics carry.
 * (test/integration/documented-metrics.test.ts checks the same queries against a real server's
 * samples.)
 */
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { Registry } from 'prom-client';
import { createMetrics } from '../../server/metrics.ts';
import { registerUsageGauges } from '../../server/usage-metrics.ts';
import { silentLogger } from '../../server/log.ts';
import { dashboardQueries } from '../helpers/grafana-dashboard.ts';

test('every metric and label the Grafana dashboard queries exists', async () => {
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
  let queried = 0;
  for (const query of dashboardQueries()) {
    for (const name of query.metrics) {
      queried += 1;
      assert.ok(registered.has(name), `${query.panel}: ${name} is not a metric Orbit exposes`);
    }
    for (const label of query.groupBy) {
      const carriers = query.metrics.filter((n) => registered.get(n)?.has(label));
      assert.ok(carriers.length > 0, `${query.panel}: no metric of "${query.expr}" has the label ${label}`);
    }
  }
  assert.ok(queried >= 20, `the dashboard queries ${queried} metrics`);
});
