/**
 * `orbit-server` and `orbit-admin` as real programs (bin/*.mjs, spawned): a few of the cases
 * test/unit/cli.test.ts runs in process - `--help`, a wrong argument, a bad environment
 * variable - end to end, with their exit codes, and each printing exactly what the in-process
 * run of the same `main` prints (so that what the unit test proves holds for the binaries).
 * Everything here is decided before any database is touched; the database URL given points at
 * a database on the real server that must still not exist at the end, so nothing ran a
 * migration behind our back.
 */
import { after, describe, test } from 'node:test';
import assert from 'node:assert/strict';
import { randomBytes } from 'node:crypto';
import mysql from 'mysql2/promise';
import { SETTINGS } from '../../server/config.ts';
import { testServerUrl } from '../helpers/database.ts';
import { type InProcessResult, type ProgramResult, admin, adminInProcess, lines, server, serverArgsInProcess, unusedPort } from '../helpers/programs.ts';

const HEX = '0123456789abcdef0123456789abcdef';
/** A database on the real server that nothing may create. */
const UNTOUCHED = `orbit_cli_untouched_${randomBytes(4).toString('hex')}`;
const URL_OF_UNTOUCHED = `${testServerUrl()}/${UNTOUCHED}`;

after(async () => {
  const conn = await mysql.createConnection({ uri: testServerUrl() });
  try {
    const [rows] = (await conn.query('SELECT SCHEMA_NAME FROM information_schema.SCHEMATA WHERE SCHEMA_NAME = ?', [UNTOUCHED])) as unknown as [unknown[]];
    await conn.query(`DROP DATABASE IF EXISTS \`${UNTOUCHED}\``);
    assert.equal(rows.length, 0, `${UNTOUCHED} was created: some --help or refused command ran a migration`);
  } finally {
    await conn.end();
  }
});

/** Exit 2, nothing on stdout, exactly `expected` as the one line on stderr. */
function assertUsageFailure(result: { code: number | null; stdout: string; stderr: string }, expected: string): void {
  assert.deepEqual({ code: result.code, stdout: result.stdout, stderr: lines(result.stderr) }, { code: 2, stdout: '', stderr: [expected] });
}

/** The spawned program printed and exited exactly as the in-process run did. */
function assertSameAsInProcess(spawned: ProgramResult, inProcess: InProcessResult): void {
  assert.deepEqual({ code: spawned.code, stdout: spawned.stdout, stderr: spawned.stderr }, inProcess);
}

describe('orbit-admin, spawned', () => {
  const env = { ORBIT_DATABASE_URL: URL_OF_UNTOUCHED };

  test('--help prints every command on stdout and exits 0, as in process', async () => {
    const result = await admin(['--help'], env);
    assert.equal(result.code, 0, result.stderr);
    assert.equal(result.stderr, '', 'nothing on stderr (no database was opened)');
    assert.match(result.stdout, /^usage: orbit-admin /);
    for (const command of ['migrate', 'bootstrap', 'credential create', 'verify', 'prune']) {
      assert.match(result.stdout, new RegExp(`^ *(usage: )?orbit-admin ${command}\\b`, 'm'), `--help lists ${command}`);
    }
    assertSameAsInProcess(result, await adminInProcess(['--help'], env));
  });

  test('migrate --help does not migrate: the database it names is still not there (checked after all tests)', async () => {
    const result = await admin(['migrate', '--help'], env);
    assert.equal(result.code, 0, result.stderr);
    assert.ok(result.stdout.startsWith('usage: orbit-admin migrate'), result.stdout);
    assert.doesNotMatch(result.stdout + result.stderr, /applying|up to date/);
    assertSameAsInProcess(result, await adminInProcess(['migrate', '--help'], env));
  });

  test('a wrong argument is one line on stderr, exit 2, no database opened, as in process', async () => {
    const args = ['credential', 'revoke', '--credential-id', HEX, 'extra'];
    const result = await admin(args, env);
    assertUsageFailure(result, "orbit-admin: unexpected argument 'extra' (see orbit-admin credential revoke --help)");
    assertSameAsInProcess(result, await adminInProcess(args, env));
  });
});

describe('orbit-server, spawned', () => {
  test('--help prints the usage with every environment variable, exit 0, and starts nothing, as in process', async () => {
    const port = await unusedPort();
    // A database that does not answer: starting would fail with exit 1.
    const env = { ORBIT_DATABASE_URL: `mysql://root@127.0.0.1:${port}/orbit` };
    const result = await server(['--help'], env);
    assert.equal(result.code, 0, result.stderr);
    assert.equal(result.stderr, '');
    assert.match(result.stdout, /^usage: orbit-server/);
    for (const setting of SETTINGS) {
      assert.ok(result.stdout.includes(`${setting.name}: ${setting.range}; default ${setting.default}`), `--help lists ${setting.name}`);
    }
    assertSameAsInProcess(result, await serverArgsInProcess(['--help'], env));
  });

  test('a bad environment variable stops it at once: one line naming it, password redacted, exit 2, as in process', async () => {
    const port = await unusedPort();
    const env = { ORBIT_DATABASE_URL: `mysql://orbit:hunter2@127.0.0.1:${port}/`, ORBIT_LISTEN: '127.0.0.1:0' };
    const result = await server([], env);
    assert.doesNotMatch(result.stdout + result.stderr, /hunter2/);
    assertUsageFailure(
      result,
      `orbit-server: ORBIT_DATABASE_URL must be mysql://user:password@host:port/database (cluster nodes: host1:port1,host2:port2; database name of [A-Za-z0-9_]), got "mysql://orbit:***@127.0.0.1:${port}/"`,
    );
    assertSameAsInProcess(result, await serverArgsInProcess([], env));
  });
});
