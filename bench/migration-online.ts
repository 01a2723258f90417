/**
 * `npm run bench:migration`: what migration 0007 (retention) does to a large table, on this
 * machine. A private database is migrated, its orbit_tasks table filled with
 * ORBIT_BENCH_MIGRATION_ROWS finished tasks (10,000,000 by default; few applications, as a busy
 * deployment has), and 0007's index on it - `ix_orbit_tasks_finished (application_id,
 * finished_at)` - dropped and built again exactly as the migration builds it
 * (`ALGORITHM=INPLACE, LOCK=NONE`) while a writer keeps submitting and finishing tasks in the
 * same table. Printed: how long the build took, and the writer's latency (p50 / p99 / max) and
 * count before and during the build - whether the table took writes throughout.
 */
import { benchDatabase, fmt, percentile } from './common.ts';
import { newId } from '../server/ids.ts';

const ROWS = Number(process.env.ORBIT_BENCH_MIGRATION_ROWS ?? 10_000_000);
const CHUNK = 250_000;

async function main(): Promise<void> {
  const { db, drop } = await benchDatabase({ timeoutMs: 0 });
  try {
    const app = newId();
    const namespace = newId();
    const queue = newId();
    console.log(`filling orbit_tasks with ${fmt(ROWS)} finished tasks …`);
    const fillStarted = Date.now();
    await db.exec('ALTER TABLE orbit_tasks DROP INDEX ix_orbit_tasks_finished');
    for (let from = 0; from < ROWS; from += CHUNK) {
      const to = Math.min(ROWS, from + CHUNK) - 1;
      // Ids as the server makes them (time-ordered), 8 applications, finished over the last week.
      await db.exec(
        `INSERT INTO orbit_tasks (task_id, application_id, namespace_id, queue_id, state, priority, payload, max_attempts, on_unknown_outcome, idempotency_key,
                                  created_at, available_at, deadline_at, finished_at, updated_at)
         SELECT UNHEX(LPAD(HEX(seq), 32, '0')), CONCAT(LEFT(?, 15), CHAR(seq MOD 8)), ?, ?, 'SUCCEEDED', 5, '{"n":1}', 3, 'retry', CONCAT('k', seq),
                NOW(6) - INTERVAL ((${ROWS} - seq) DIV 16) SECOND, NOW(6) - INTERVAL ((${ROWS} - seq) DIV 16) SECOND, NOW(6) + INTERVAL 1 DAY,
                NOW(6) - INTERVAL ((${ROWS} - seq) DIV 16) SECOND, NOW(6)
           FROM seq_${from}_to_${to}`,
        [app, namespace, queue],
      );
    }
    console.log(`filled in ${fmt((Date.now() - fillStarted) / 1000, 1)} s`);
    await db.rows('ANALYZE TABLE orbit_tasks');
    const [size] = await db.rows<{ bytes: string }>(
      "SELECT DATA_LENGTH + INDEX_LENGTH AS bytes FROM information_schema.TABLES WHERE TABLE_SCHEMA = DATABASE() AND TABLE_NAME = 'orbit_tasks'",
    );
    console.log(`orbit_tasks: ~${fmt(Number(size?.bytes) / 2 ** 30, 2)} GiB with its indexes`);

    // The writer: submit a task, then finish it, one after another; each pair's latency.
    let phase = 'before' as 'before' | 'during' | 'stop';
    const latencies: Record<'before' | 'during', number[]> = { before: [], during: [] };
    let n = 0;
    const writer = (async () => {
      while (phase !== 'stop') {
        const started = performance.now();
        const id = newId();
        n += 1;
        await db.exec(
          `INSERT INTO orbit_tasks (task_id, application_id, namespace_id, queue_id, state, priority, payload, max_attempts, on_unknown_outcome, idempotency_key, created_at, available_at, deadline_at, updated_at)
           VALUES (?, ?, ?, ?, 'WAITING', 5, '{}', 3, 'retry', ?, NOW(6), NOW(6), NOW(6) + INTERVAL 1 DAY, NOW(6))`,
          [id, app, namespace, queue, `w${n}`],
        );
        await db.exec("UPDATE orbit_tasks SET state = 'SUCCEEDED', finished_at = NOW(6), updated_at = NOW(6) WHERE task_id = ?", [id]);
        const p: string = phase;
        if (p === 'before' || p === 'during') latencies[p].push(performance.now() - started);
        await new Promise((resolve) => setTimeout(resolve, 5));
      }
    })();
    await new Promise((resolve) => setTimeout(resolve, 5000));
    phase = 'during';
    const buildStarted = Date.now();
    await db.exec('ALTER TABLE orbit_tasks ADD INDEX ix_orbit_tasks_finished (application_id, finished_at), ALGORITHM=INPLACE, LOCK=NONE');
    const buildSeconds = (Date.now() - buildStarted) / 1000;
    phase = 'stop';
    await writer;
    const line = (label: string, values: number[]) => {
      const sorted = [...values].sort((a, b) => a - b);
      return `${label}: ${fmt(values.length)} submit+finish pairs, p50 ${fmt(percentile(sorted, 50), 1)} ms, p99 ${fmt(percentile(sorted, 99), 1)} ms, max ${fmt(sorted.at(-1) ?? 0, 1)} ms`;
    };
    console.log(`ADD INDEX ix_orbit_tasks_finished, ALGORITHM=INPLACE, LOCK=NONE on ${fmt(ROWS)} rows: ${fmt(buildSeconds, 1)} s`);
    console.log(line('writer before the build (5 s)', latencies.before));
    console.log(line(`writer during the build (${fmt(buildSeconds, 1)} s)`, latencies.during));
  } finally {
    await drop();
  }
}

await main();
