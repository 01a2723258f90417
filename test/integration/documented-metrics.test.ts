/**
 * Every metric docs/operations.md documents, and every metric the Grafana dashboard queries, is
 * really counted: a real server process gets real traffic - submissions (accepted, replayed,
 * refused), a worker's claims, starts (by frame and on claim), a result, a release, an empty
 * claim, a running attempt left to lose its lease (recovery), a schedule that fires and one that
 * fails, a subscription - and /metrics must then show at least one sample of each metric with exactly the
 * labels the docs table names (and only the values it lists, where the list is closed), every
 * label the dashboard groups by, and no `orbit_` metric the docs do not name.
 *
 * The metrics come from the docs tables, not from a list here: a metric documented later is
 * checked too, and fails until this file drives the traffic that counts it (add that to
 * `driveTraffic`).
 */
import { after, before, describe, test } from 'node:test';
import assert from 'node:assert/strict';
import { readFileSync } from 'node:fs';
import { freshDatabase, type TestDatabase } from '../helpers/database.ts';
import { createTenant, type TestTenant } from '../helpers/tenants.ts';
import { assertCountersMatchRecount } from '../helpers/recount.ts';
import { call, startServerProcess, type ServerProcess } from '../helpers/server-process.ts';
import { connectRaw, type RawSession } from '../helpers/ws-session.ts';
import { waitFor } from '../helpers/wait.ts';
import { endLeases } from '../helpers/leases.ts';
import { dashboardQueries } from '../helpers/grafana-dashboard.ts';
import { routes } from '../../server/generated/routes.ts';
import { UNMATCHED_OPERATION } from '../../server/http/app.ts';

/**
 * Long enough that no lease runs out on its own while the traffic is driven, however slow the
 * machine; the one attempt meant to lose its lease has it ended by the test (recovery, every
 * 100 ms, does the rest).
 */
const LEASE_SECONDS = 600;

/** A label as the docs table names it, with the values it lists (`open`: the list ends with "…", or there is none). */
interface DocumentedLabel {
  name: string;
  values: string[];
  open: boolean;
}

interface DocumentedMetric {
  /** The full name; for a wildcard row (`orbit_process_*`), the prefix. */
  name: string;
  wildcard: boolean;
  /** null: labels of their own (a wildcard row's "prom-client's"). */
  labels: DocumentedLabel[] | null;
}

/**
 * The rows of the tables under "## Metrics" of docs/operations.md. A row names one metric, or
 * several of one family as `orbit_queue_unfinished_tasks`, `_max_unfinished_tasks`, … (the
 * family prefix is the first name's first two words: `orbit_queue`); its labels cell is `-`, or
 * backquoted label names, each optionally followed by its values in parentheses.
 */
function documentedMetrics(): DocumentedMetric[] {
  const text = readFileSync(new URL('../../docs/operations.md', import.meta.url), 'utf8');
  const start = text.indexOf('\n## Metrics');
  assert.ok(start >= 0, 'docs/operations.md has a "## Metrics" section');
  const end = text.indexOf('\n## ', start + 1);
  const out: DocumentedMetric[] = [];
  for (const line of text.slice(start, end === -1 ? undefined : end).split('\n')) {
    if (!line.startsWith('| `')) continue;
    const [, namesCell = '', labelsCell = ''] = line.split('|').map((cell) => cell.trim());
    const names = [...namesCell.matchAll(/`([a-z_*]+)`/g)].map((m) => m[1] as string);
    const first = names[0] as string;
    const family = first.split('_').slice(0, 2).join('_');
    let labels: DocumentedLabel[] | null;
    if (labelsCell === '-') labels = [];
    else if (!labelsCell.includes('`')) labels = null;
    else {
      labels = [...labelsCell.matchAll(/`([a-z_]+)`(?:\s*\(([^)]*)\))?/g)].map((m) => {
        const values = (m[2] ?? '')
          .split(',')
          .map((v) => v.trim())
          .filter((v) => v !== '');
        return { name: m[1] as string, values: values.filter((v) => v !== '…'), open: values.length === 0 || values.includes('…') };
      });
    }
    for (const name of names) {
      const full = name.startsWith('_') ? `${family}${name}` : name;
      const wildcard = full.endsWith('*');
      assert.ok(labels !== null || wildcard, `docs/operations.md: the labels of ${full} are neither "-" nor backquoted names: ${labelsCell}`);
      out.push({ name: wildcard ? full.slice(0, -1) : full, wildcard, labels });
    }
  }
  return out;
}

interface Sample {
  labels: Record<string, string>;
  value: number;
}

interface Scrape {
  /** `# TYPE` of every metric family. */
  types: Map<string, string>;
  /** Sample name (a histogram's `_bucket`, `_sum`, `_count` apart) → its samples. */
  samples: Map<string, Sample[]>;
}

async function scrape(url: string): Promise<Scrape> {
  const response = await fetch(`${url}/metrics`);
  assert.equal(response.status, 200);
  const types = new Map<string, string>();
  const samples = new Map<string, Sample[]>();
  for (const line of (await response.text()).split('\n')) {
    const type = /^# TYPE (\S+) (\S+)$/.exec(line);
    if (type) {
      types.set(type[1] as string, type[2] as string);
      continue;
    }
    const m = /^([a-zA-Z_:][a-zA-Z0-9_:]*)(?:\{(.*)\})? (\S+)/.exec(line);
    if (!m) continue;
    const labels = Object.fromEntries([...(m[2] ?? '').matchAll(/([a-zA-Z_]+)="((?:[^"\\]|\\.)*)"/g)].map((l) => [l[1] as string, l[2] as string]));
    samples.set(m[1] as string, [...(samples.get(m[1] as string) ?? []), { labels, value: Number(m[3]) }]);
  }
  return { types, samples };
}

/** A metric's samples by its documented name: a histogram's are its `_count` series (one per label set, without `le`). */
function samplesOf(s: Scrape, name: string): Sample[] {
  const type = s.types.get(name);
  return s.samples.get(type === 'histogram' || type === 'summary' ? `${name}_count` : name) ?? [];
}

/**
 * Whether a metric was counted: a gauge has a sample; a counter or a histogram has one above 0 -
 * prom-client shows a counter without labels as 0 before anything counted it, which is no
 * sample of real traffic.
 */
function counted(s: Scrape, name: string): boolean {
  const counts = s.types.get(name) === 'gauge' ? () => true : (sample: Sample) => sample.value > 0;
  return samplesOf(s, name).some(counts);
}

/** Documented metrics not counted (a wildcard row: no metric of its prefix). */
function uncounted(s: Scrape, documented: DocumentedMetric[]): string[] {
  return documented
    .filter((m) => (m.wildcard ? ![...s.types.keys()].some((name) => name.startsWith(m.name)) : !counted(s, m.name)))
    .map((m) => (m.wildcard ? `${m.name}*` : m.name));
}

describe('documented metrics are counted', () => {
  let t: TestDatabase;
  let server: ServerProcess;
  let tenant: TestTenant;
  let worker: RawSession;
  let keys = 0;
  const key = (label: string) => `${label}-${++keys}`;
  const documented = documentedMetrics();

  before(async () => {
    t = await freshDatabase('documented_metrics');
    tenant = await createTenant(t.db, { namespace: 'metrics', queues: ['jobs', 'timed'], resourceAccess: true });
    server = await startServerProcess(t.url, {
      ORBIT_LEASE_SECONDS: String(LEASE_SECONDS),
      ORBIT_RECOVERY_INTERVAL_MS: '100',
      ORBIT_SCHEDULE_INTERVAL_MS: '100',
      ORBIT_PRUNE_INTERVAL_MS: '100',
    });
  });
  after(async () => {
    await worker?.close();
    await server.stop();
    await assertCountersMatchRecount(t.db);
    await t.drop();
  });

  const http = (method: string, path: string, body?: unknown, token = tenant.token) =>
    call(server.url, method, path, { token, key: method === 'POST' ? key('k') : undefined, body });
  let claims = 0;
  const claim = async (max: number, start = false) => {
    const answer = await worker.request({ type: 'claim', claim_id: `c${++claims}`, max, ...(start ? { start: true } : {}) });
    assert.equal(answer.type, 'claimed', JSON.stringify(answer));
    return answer.attempts as Array<{ attempt_id: string; task_id: string }>;
  };

  /** What counts each documented metric (see the header): everything a metric needs to get a sample. */
  async function driveTraffic(): Promise<void> {
    // Submissions: accepted, replayed with the same key, and refusals (no credential: 401 under
    // the operation; a path and a method no operation serves: 404 and 405 under `unmatched`).
    const first = await call(server.url, 'POST', '/v1/queues/jobs/tasks', { token: tenant.token, key: 'first', body: { payload: { n: 1 } } });
    assert.equal(first.status, 200, JSON.stringify(first.body));
    const replay = await call(server.url, 'POST', '/v1/queues/jobs/tasks', { token: tenant.token, key: 'first', body: { payload: { n: 1 } } });
    assert.equal(replay.body.data.deduplicated, true);
    assert.equal((await http('POST', '/v1/queues/jobs/tasks', { payload: { n: 2 } })).status, 200);
    assert.equal((await http('POST', '/v1/queues/jobs/tasks', { payload: {} }, 'orbit_not-a-token')).status, 401);
    assert.equal((await http('GET', '/v1/nothing-here')).status, 404);
    assert.equal((await http('DELETE', '/v1/queues')).status, 405);

    // A worker: claim, start, succeed; claim and release; claim-and-start and go silent; an empty claim.
    worker = await connectRaw(server.url, tenant.token);
    assert.equal((await worker.request({ type: 'hello', node_id: 'metrics', queues: ['jobs'], capacity: 4 })).type, 'welcome');
    const [done] = await claim(1);
    assert.ok(done);
    assert.equal((await worker.request({ type: 'start', attempt_id: done.attempt_id })).type, 'started');
    assert.equal((await worker.request({ type: 'complete', attempt_id: done.attempt_id, outcome: 'succeeded', result: { ok: true } })).type, 'completed');
    const [given] = await claim(1);
    assert.ok(given);
    assert.equal((await worker.request({ type: 'release', attempt_id: given.attempt_id })).type, 'released');
    const [silent] = await claim(1, true);
    assert.ok(silent && silent.task_id === given.task_id);
    assert.deepEqual(await claim(1), [], 'nothing left to claim');
    // The silent attempt's lease runs out (the worker said nothing for all of it: ended now):
    // recovery puts its task back (expired_lease).
    await endLeases(t.db, [silent.attempt_id]);
    await waitFor(async () => (await http('GET', `/v1/tasks/${silent.task_id}`)).body.data.state === 'WAITING');

    // A schedule that fires (every second, into a queue nobody consumes), then pauses.
    const schedule = (
      await http('POST', '/v1/queues/timed/schedules', { name: 'every-second', reason: '指标', interval_seconds: 1, payload: { from: 'schedule' } })
    ).body.data.schedule;
    await waitFor(async () => Number((await http('GET', `/v1/schedules/${schedule.schedule_id}`)).body.data.fired) >= 1);
    assert.equal((await http('POST', `/v1/schedules/${schedule.schedule_id}:pause`, { reason: '够了' })).status, 200);

    // A schedule that cannot be evaluated - its stored cron expression is broken - fails its
    // rounds (orbit_schedule_failures_total). It belongs to an application of its own, so its
    // failure touches nothing of the rest.
    const broken = await createTenant(t.db, { namespace: 'broken', queues: ['q'] });
    const every = await call(server.url, 'POST', '/v1/queues/q/schedules', {
      token: broken.token,
      key: 'broken',
      body: { name: 'broken', reason: '指标', cron: '* * * * * *', payload: {} },
    });
    assert.equal(every.status, 200, JSON.stringify(every.body));
    await t.db.exec("UPDATE orbit_schedules SET cron_expression = 'not a cron' WHERE schedule_id = UNHEX(?) AND application_id = UNHEX(?)", [
      every.body.data.schedule.schedule_id,
      broken.applicationId,
    ]);

    // A transaction run again: a submission waits for the application row this test holds locked,
    // past the server's lock-wait timeout (ER_LOCK_WAIT_TIMEOUT), and is retried whole; the row is
    // let go once the retry is counted, and the submission succeeds.
    const holder = await t.db.pool.getConnection();
    try {
      await holder.query('START TRANSACTION');
      await holder.query('SELECT application_id FROM orbit_application_resources WHERE application_id = UNHEX(?) FOR UPDATE', [tenant.applicationId]);
      const waiting = http('POST', '/v1/queues/jobs/tasks', { payload: { waits: true } });
      await waitFor(async () => (await scrape(server.url)).samples.has('orbit_db_transaction_retries_total'));
      await holder.query('ROLLBACK');
      assert.equal((await waiting).status, 200);
    } finally {
      holder.release();
    }

    // A subscription: the lag gauges.
    assert.equal((await http('POST', '/v1/subscriptions', { name: 'lagging', reason: '指标', from: 'beginning' })).status, 200);

    // Pruning: a policy of one minute, and a cancelled task that finished an hour ago (moved back
    // in the database) - the pruning loop removes it and its attempts' and receipts' rows.
    const retention = (await http('GET', '/v1/application/retention')).body.data;
    const configured = await http('POST', '/v1/application/retention:configure', {
      expected_revision: retention.revision,
      reason: '指标',
      finished_task_retention_seconds: 60,
      receipt_retention_seconds: 60,
    });
    assert.equal(configured.status, 200, JSON.stringify(configured.body));
    const old = (await http('POST', '/v1/queues/timed/tasks', { payload: { old: true } })).body.data.task.task_id as string;
    assert.equal((await http('POST', `/v1/tasks/${old}:cancel`, { reason: '指标' })).status, 200);
    await t.db.exec('UPDATE orbit_tasks SET finished_at = finished_at - INTERVAL 1 HOUR WHERE task_id = UNHEX(?) AND application_id = UNHEX(?)', [
      old,
      tenant.applicationId,
    ]);
  }

  test('every metric of docs/operations.md and of the dashboard has samples with exactly the documented labels', async () => {
    assert.ok(documented.length >= 30, `docs/operations.md documents ${documented.length} metrics`);
    await driveTraffic();
    // Usage gauges are read at most once a second, and recovery and the schedule loop count
    // asynchronously: wait until every documented metric has a sample (generously: on a loaded
    // machine the loops run late), then check them all.
    let last = await scrape(server.url);
    await waitFor(async () => {
      last = await scrape(server.url);
      return uncounted(last, documented).length === 0;
    }, 60_000).catch(() => {});
    assert.deepEqual(uncounted(last, documented), [], 'documented metrics never counted: drive what counts them in driveTraffic');

    for (const metric of documented.filter((m) => !m.wildcard)) {
      const expected = (metric.labels ?? []).map((l) => l.name).sort();
      for (const { labels } of samplesOf(last, metric.name)) {
        assert.deepEqual(Object.keys(labels).sort(), expected, `${metric.name}${JSON.stringify(labels)}: the labels docs/operations.md names`);
        for (const label of metric.labels ?? []) {
          if (label.open) continue;
          assert.ok(
            label.values.includes(labels[label.name] as string),
            `${metric.name}: ${label.name}="${labels[label.name]}" is not among the documented values (${label.values.join(', ')})`,
          );
        }
      }
    }

    // Nothing exposed that the docs do not name.
    const undocumented = [...last.types.keys()].filter(
      (name) => name.startsWith('orbit_') && !documented.some((m) => (m.wildcard ? name.startsWith(m.name) : name === m.name)),
    );
    assert.deepEqual(undocumented, [], 'orbit_ metrics missing from docs/operations.md');

    // The dashboard: every metric it reads has samples, and every label it groups by is on them.
    for (const query of dashboardQueries()) {
      for (const name of query.metrics) assert.ok(counted(last, name), `${query.panel}: ${name} has no sample`);
      for (const label of query.groupBy) {
        assert.ok(
          query.metrics.some((name) => samplesOf(last, name).some((sample) => label in sample.labels)),
          `${query.panel}: no sample of "${query.expr}" has the label ${label}`,
        );
      }
    }

    // The HTTP counter: every answer under its operation (refusals included), `unmatched` for the
    // rest, never anything else; the accepted worker upgrade as 101.
    const answers = samplesOf(last, 'orbit_http_requests_total').map((sample) => sample.labels);
    const operations = new Set<string>([...routes.map((r) => r.operationId), UNMATCHED_OPERATION]);
    assert.deepEqual(
      answers.filter((l) => !operations.has(l.operation as string)),
      [],
      'operation labels that are no operationId',
    );
    const has = (operation: string, status: string) => answers.some((l) => l.operation === operation && l.status === status);
    for (const [operation, status] of [
      ['submitTask', '200'],
      ['submitTask', '401'],
      [UNMATCHED_OPERATION, '404'],
      [UNMATCHED_OPERATION, '405'],
      ['connectWorker', '101'],
      ['getMetrics', '200'],
    ] as const) {
      assert.ok(has(operation, status), `orbit_http_requests_total{operation="${operation}",status="${status}"}: ${JSON.stringify(answers)}`);
    }
    // While the worker is connected, this process counts its session.
    assert.deepEqual(
      samplesOf(last, 'orbit_worker_sessions').map((sample) => sample.value),
      [1],
    );
  });
});
