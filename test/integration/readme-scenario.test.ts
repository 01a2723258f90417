/**
 * The README's scenario, run as written: the shell block after the `scenario` marker (CLI
 * bootstrap twice, then the example) against a real server process, with only the server URL
 * and the `.local/` directory pointed at this test's own; its output must be exactly the
 * README's expected lines. Twice, because a user may run it again.
 */
import { after, before, describe, test } from 'node:test';
import assert from 'node:assert/strict';
import { execFile, spawn } from 'node:child_process';
import { mkdtempSync, readFileSync, rmSync, statSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { freshDatabase, type TestDatabase } from '../helpers/database.ts';
import { assertCountersMatchRecount } from '../helpers/recount.ts';
import { call, startServerProcess, type ServerProcess } from '../helpers/server-process.ts';

const ROOT = fileURLToPath(new URL('../..', import.meta.url));

function blockAfter(readme: string, marker: string): string {
  const at = readme.indexOf(marker);
  assert.ok(at >= 0, `no ${marker} marker`);
  const match = /```[a-z]*\n([\s\S]*?)```/.exec(readme.slice(at));
  assert.ok(match, `no code block after ${marker}`);
  return match[1] as string;
}

describe('the README scenario', () => {
  let t: TestDatabase;
  let server: ServerProcess;
  let dir: string;

  before(async () => {
    t = await freshDatabase('readme');
    server = await startServerProcess(t.url);
    dir = mkdtempSync(join(tmpdir(), 'orbit-readme-'));
  });
  after(async () => {
    await server.stop();
    await assertCountersMatchRecount(t.db);
    await t.drop();
    rmSync(dir, { recursive: true, force: true });
  });

  test('prints exactly the expected lines, and again on a second run', async () => {
    const readme = readFileSync(join(ROOT, 'README.md'), 'utf8');
    const script = blockAfter(readme, '<!-- scenario:').replaceAll('.local', join(dir, '.local')).replaceAll('http://127.0.0.1:8080', server.url);
    const expected = blockAfter(readme, '<!-- scenario-output -->');
    for (let run = 1; run <= 2; run++) {
      const { stdout, stderr } = await new Promise<{ stdout: string; stderr: string }>((resolve, reject) => {
        execFile(
          'bash',
          ['-euo', 'pipefail', '-c', script],
          { cwd: ROOT, env: { ...process.env, ORBIT_DATABASE_URL: t.url }, timeout: 120_000 },
          (error, stdout, stderr) => (error ? reject(Object.assign(error, { stdout, stderr })) : resolve({ stdout, stderr })),
        );
      });
      assert.equal(stdout, expected, `run ${run}; stderr:\n${stderr}`);
      const credentials = join(dir, '.local', 'app-first.credentials.json');
      assert.equal(statSync(credentials).mode & 0o777, 0o600);
      const text = readFileSync(credentials, 'utf8');
      assert.equal(text.split('\n').length, 2, 'one line of JSON');
      assert.match(text, /^\{"application_id":"[0-9a-f]{32}",/);
    }
    // The example restored the limits it changed.
    const [row] = await t.db.rows<{ max_unfinished_tasks: number; revision: string }>('SELECT max_unfinished_tasks, revision FROM orbit_application_resources');
    assert.equal(row?.max_unfinished_tasks, 1000000);
    assert.equal(row?.revision, '5', 'two runs, each: set the limit, restore it');
  });

  test('the floors example after it prints exactly its expected lines, twice, and undoes everything it changed', async () => {
    const readme = readFileSync(join(ROOT, 'README.md'), 'utf8');
    const local = (text: string) => text.replaceAll('.local', join(dir, '.local')).replaceAll('http://127.0.0.1:8080', server.url);
    const floors = local(blockAfter(readme, '<!-- floors-scenario:'));
    const expected = blockAfter(readme, '<!-- floors-scenario-output -->');
    for (let run = 1; run <= 2; run++) {
      const { stdout, stderr } = await new Promise<{ stdout: string; stderr: string }>((resolve, reject) => {
        execFile(
          'bash',
          ['-euo', 'pipefail', '-c', floors],
          { cwd: ROOT, env: { ...process.env, ORBIT_DATABASE_URL: t.url }, timeout: 120_000 },
          (error, stdout, stderr) => (error ? reject(Object.assign(error, { stdout, stderr })) : resolve({ stdout, stderr })),
        );
      });
      assert.equal(stdout, expected, `run ${run}; stderr:\n${stderr}`);
    }
    const [app] = await t.db.rows<{ max_unfinished_tasks: number; reserved_unfinished_tasks: string }>(
      'SELECT max_unfinished_tasks, reserved_unfinished_tasks FROM orbit_application_resources',
    );
    assert.deepEqual(app, { max_unfinished_tasks: 1000000, reserved_unfinished_tasks: '0' }, 'the limits and floors are back');
  });

  test("the worker block of docs/workers.md, after the README's setup, processes the tasks it submits", async () => {
    const readme = readFileSync(join(ROOT, 'README.md'), 'utf8');
    const workers = readFileSync(join(ROOT, 'docs', 'workers.md'), 'utf8');
    const script = `${blockAfter(readme, '<!-- docs: setup -->')}\n${blockAfter(workers, '<!-- worker-scenario:')}`
      .replaceAll('.local', join(dir, '.local'))
      .replaceAll('http://127.0.0.1:8080', server.url);
    const { stdout } = await new Promise<{ stdout: string; stderr: string }>((resolve, reject) => {
      execFile(
        'bash',
        ['-euo', 'pipefail', '-c', script],
        { cwd: ROOT, env: { ...process.env, ORBIT_DATABASE_URL: t.url }, timeout: 60_000 },
        (error, stdout, stderr) => (error ? reject(Object.assign(error, { stdout, stderr })) : resolve({ stdout, stderr })),
      );
    });
    const lines = stdout
      .trim()
      .split('\n')
      .map((line) => JSON.parse(line) as { task_id: string; attempt: number; queue: string; payload: { n: number } });
    assert.deepEqual(lines.map((l) => l.payload.n).sort(), [1, 2, 3]);
    assert.ok(lines.every((l) => l.queue === 'emails' && l.attempt === 1));
    const states = await t.db.rows<{ state: string }>(
      `SELECT state FROM orbit_tasks WHERE task_id IN (${lines.map(() => '?').join(', ')})`,
      lines.map((l) => Buffer.from(l.task_id, 'hex')),
    );
    assert.deepEqual(
      states.map((r) => r.state),
      ['SUCCEEDED', 'SUCCEEDED', 'SUCCEEDED'],
    );
  });

  /** Runs the example with a pause after it lowered the limit; `during` runs in the pause, then SIGINT. */
  async function interrupted(during: () => Promise<void>): Promise<{ code: number | null; stderr: string; stdout: string }> {
    const child = spawn(process.execPath, ['--import', 'tsx', 'examples/application-resources/main.ts'], {
      cwd: ROOT,
      env: {
        ...process.env,
        ORBIT_URL: server.url,
        ORBIT_CREDENTIALS_FILE: join(dir, '.local', 'app-first.credentials.json'),
        ORBIT_SECOND_CREDENTIALS_FILE: join(dir, '.local', 'app-second.credentials.json'),
        ORBIT_EXAMPLE_PAUSE_MS: '20000',
      },
      stdio: ['ignore', 'pipe', 'pipe'],
    });
    let stdout = '';
    let stderr = '';
    child.stdout.on('data', (d) => (stdout += d));
    const paused = new Promise<void>((resolve) =>
      child.stderr.on('data', (d) => {
        stderr += d;
        if (stderr.includes('paused for')) resolve();
      }),
    );
    const exited = new Promise<number | null>((resolve) => child.once('exit', (code) => resolve(code)));
    await paused;
    await during();
    child.kill('SIGINT');
    return { code: await exited, stderr, stdout };
  }

  async function limits() {
    const [row] = await t.db.rows<{ max_unfinished_tasks: number; revision: string }>('SELECT max_unfinished_tasks, revision FROM orbit_application_resources');
    return row!;
  }

  test('Ctrl-C while the limit is lowered restores it', async () => {
    const before = await limits();
    const run = await interrupted(async () => assert.equal((await limits()).max_unfinished_tasks, 1));
    assert.equal(run.code, 130, run.stderr);
    assert.match(run.stderr, /interrupted: restoring the original limits/);
    const after = await limits();
    assert.equal(after.max_unfinished_tasks, before.max_unfinished_tasks);
    assert.equal(after.revision, String(BigInt(before.revision) + 2n));
  });

  test('a change by someone else meanwhile is reported, not overwritten', async () => {
    const token = JSON.parse(readFileSync(join(dir, '.local', 'app-second.credentials.json'), 'utf8')).token as string;
    const run = await interrupted(async () => {
      const current = await limits();
      const other = await call(server.url, 'POST', '/v1/application/resources:configure', {
        token,
        key: 'someone-else',
        body: { expected_revision: current.revision, reason: 'another operator', max_unfinished_tasks: 77, max_concurrency: 10000, rate_per_second: 100000 },
      });
      assert.equal(other.status, 200);
    });
    assert.equal(run.code, 130);
    assert.match(run.stderr, /restore_conflict: .*their change was kept, not overwritten/);
    assert.equal((await limits()).max_unfinished_tasks, 77);
  });
});
