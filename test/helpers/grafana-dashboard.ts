/**
 * The queries of deploy/grafana/orbit-dashboard.json: which Orbit metrics each panel's
 * expressions read and which labels they group by. The unit test checks them against the
 * registered metrics, the integration test against a server's samples.
 */
import { readFileSync } from 'node:fs';

export interface DashboardQuery {
  panel: string;
  expr: string;
  /** The `orbit_…` metrics the expression reads (a histogram by its name, without `_bucket`). */
  metrics: string[];
  /** The labels of its `by (…)` clauses, `le` left out (the histogram's bucket bound). */
  groupBy: string[];
}

export const DASHBOARD_FILE = new URL('../../deploy/grafana/orbit-dashboard.json', import.meta.url);

/** The `orbit_…` metric names an expression reads. */
export function metricNames(expr: string): string[] {
  return [...expr.matchAll(/\b(orbit_[a-z_]+?)(?:_bucket)?\b(?=[{[\s)]|$)/g)].map((m) => m[1] as string);
}

export function dashboardQueries(): DashboardQuery[] {
  const dashboard = JSON.parse(readFileSync(DASHBOARD_FILE, 'utf8')) as { panels: Array<{ title: string; targets: Array<{ expr: string }> }> };
  return dashboard.panels.flatMap((panel) =>
    panel.targets.map((target) => ({
      panel: panel.title,
      expr: target.expr,
      metrics: metricNames(target.expr),
      groupBy: [...target.expr.matchAll(/by \(([^)]*)\)/g)].flatMap((by) =>
        (by[1] as string)
          .split(',')
          .map((label) => label.trim())
          .filter((label) => label !== 'le'),
      ),
    })),
  );
}
