/**
 * Start-up of the real programs against real and unreachable databases: an unreachable one
 * fails fast with one line; a password never appears in any output; a busy port is one line
 * (also through `npm start`'s script) and the process exits; a database with a migration this
 * build does not know is refused by orbit-server and orbit-admin migrate and makes /readyz 503;
 * revoking twice says so.
 */
import { after, before, describe, test } from 'node:test';
import assert from 'node:assert/strict';
import { randomBytes } from 'node:crypto';
import { mkdtempSync, readdirSync, readFileSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import mysql from 'mysql2/promise';
import { silentLogger } from '../../server/log.ts';
import { StartupError, startServer } from '../../server/server.ts';
import { freshDatabase, testServerUrl, type TestDatabase, testConfig } from '../helpers/database.ts';
import { startServerProcess } from '../helpers/server-process.ts';
import { ROOT, admin, adminEnv, adminInProcess, lines, occupiedPort, runProgram, server, unusedPort } from '../helpers/programs.ts';

const FUTURE = { version: 9003, name: 'from_the_future' };
/** The migrations of this build, oldest first, and the newest (`0003_schedules`). */
const MIGRATIONS = readdirSync(new URL('../../migrations/', import.meta.url))
  .filter((f) => /^\d{4}_.*\.sql$/.test(f))
  .sort()
  .map((f) => f.replace(/\.sql$/, ''));
const NEWEST = MIGRATIONS.at(-1) as string;

async function onServer<T>(fn: (conn: mysql.Connection) => Promise<T>): Promise<T> {
  const conn = await mysql.createConnection({ uri: testServerUrl() });
  try {
    return await fn(conn);
  } finally {
    await conn.end();
  }
}

describe('an unreachable database', () => {
  test('orbit-server and orbit-admin fail fast with one line naming the URL, password redacted, exit 1', async () => {
    const port = await unusedPort();
    const url = `mysql://orbit:s3cret-pw@127.0.0.1:${port}/orbit`;
    const shown = `mysql://orbit:***@127.0.0.1:${port}/orbit`;
    const expected = `cannot reach the database at ${shown} (ECONNREFUSED); set ORBIT_DATABASE_URL`;

    // Fast: it exits on the refusal at once, not after retrying (it starts in about a second; the
    // bound is generous for a loaded machine, and the program is killed - a failure - after 30 s).
    const s = await server([], { ORBIT_DATABASE_URL: url, ORBIT_LISTEN: '127.0.0.1:0' }, 30_000);
    assert.equal(s.code, 1);
    assert.deepEqual(lines(s.stderr), [`orbit-server: ${expected}`]);
    assert.doesNotMatch(s.stdout + s.stderr, /s3cret-pw/);
    assert.match(s.stdout, new RegExp(`"database":"${shown.replaceAll('*', '\\*')}"`), 'the start-up log line names the database, redacted');
    assert.ok(s.ms < 20_000, `failed within ${s.ms} ms`);

    for (const args of [['migrate'], ['credential', 'revoke', '--credential-id', '0123456789abcdef0123456789abcdef']]) {
      const a = await admin(args, { ORBIT_DATABASE_URL: url }, 30_000);
      assert.equal(a.code, 1, args.join(' '));
      assert.deepEqual(lines(a.stderr), [`using database ${shown}`, `orbit-admin: ${expected}`]);
      assert.equal(a.stdout, '');
    }
  });

  test('without ORBIT_DATABASE_URL both use the documented default and never start a database of their own', async () => {
    const a = await admin(['application', 'enable', '--application-id', randomBytes(16).toString('hex')], { ORBIT_DATABASE_URL: undefined }, 30_000);
    const [first, second, ...more] = lines(a.stderr);
    assert.equal(first, 'using database mysql://root@127.0.0.1:3306/orbit');
    // Whatever is (or is not) at the default address: an answer about that database, exit 1.
    assert.equal(a.code, 1, a.stderr);
    assert.match(
      second ?? '',
      /^orbit-admin: (application [0-9a-f]{32} does not exist|cannot reach the database at mysql:\/\/root@127\.0\.0\.1:3306\/orbit \(\w+\); set ORBIT_DATABASE_URL|the database at mysql:\/\/root@127\.0\.0\.1:3306\/orbit (does not exist|has no Orbit schema|refused the login).*)$/,
    );
    assert.deepEqual(more, []);
    assert.doesNotMatch(a.stderr, /private MariaDB|mariadb/i);
  });
});

describe('a database user with a password', () => {
  let t: TestDatabase;
  const user = `orbit_t_${randomBytes(3).toString('hex')}`;
  const password = `pw-${randomBytes(8).toString('hex')}`;
  let url: string;

  before(async () => {
    t = await freshDatabase('cli_password');
    await onServer(async (conn) => {
      for (const host of ['%', 'localhost']) {
        await conn.query(`CREATE USER '${user}'@'${host}' IDENTIFIED BY '${password}'`);
        await conn.query(`GRANT ALL ON \`${t.name}\`.* TO '${user}'@'${host}'`);
      }
    });
    const parsed = new URL(t.url);
    parsed.username = user;
    parsed.password = password;
    url = parsed.href;
  });
  after(async () => {
    await onServer(async (conn) => {
      for (const host of ['%', 'localhost']) await conn.query(`DROP USER IF EXISTS '${user}'@'${host}'`);
    });
    await t.drop();
  });

  test('never appears in any output of orbit-admin or orbit-server; the redacted URL does', async () => {
    const shown = url.replace(password, '***');
    const migrate = await admin(['migrate'], { ORBIT_DATABASE_URL: url });
    assert.equal(migrate.code, 0, migrate.stderr);
    assert.deepEqual(lines(migrate.stderr), [`using database ${shown}`, `database is up to date (migration ${NEWEST})`]);

    const dir = mkdtempSync(join(tmpdir(), 'orbit-cli-'));
    try {
      const output = join(dir, 'creds.json');
      const boot = await admin(
        ['bootstrap', '--application', 'pw-app', '--namespace', 'pw', '--environment', 'development', '--queue', 'q', '--output', output],
        { ORBIT_DATABASE_URL: url },
      );
      assert.equal(boot.code, 0, boot.stderr);
      assert.doesNotMatch(boot.stdout + boot.stderr + readFileSync(output, 'utf8'), new RegExp(password));
    } finally {
      rmSync(dir, { recursive: true, force: true });
    }

    const running = await startServerProcess(url);
    await running.stop();
    const logs = JSON.stringify(running.logs);
    assert.doesNotMatch(logs, new RegExp(password));
    assert.ok(
      running.logs.some((entry) => entry.msg === 'starting' && entry.database === shown),
      logs,
    );

    const wrong = url.replace(password, 'not-the-password');
    for (const result of [
      await admin(['migrate'], { ORBIT_DATABASE_URL: wrong }),
      await server([], { ORBIT_DATABASE_URL: wrong, ORBIT_LISTEN: '127.0.0.1:0' }),
    ]) {
      assert.equal(result.code, 1);
      assert.doesNotMatch(result.stdout + result.stderr, /not-the-password/);
      assert.match(
        result.stderr,
        new RegExp(
          `: the database at ${shown.replace(/[.*?]/g, '\\$&')} refused the login \\(ER_ACCESS_DENIED_ERROR\\); check the user and password in ORBIT_DATABASE_URL\n$`,
        ),
      );
    }
  });
});

describe('a busy port', () => {
  let t: TestDatabase;
  before(async () => {
    t = await freshDatabase('cli_port');
  });
  after(async () => {
    await t.drop();
  });

  test('orbit-server says so in one line and exits 1 (nothing left running keeps it alive)', async () => {
    const busy = await occupiedPort();
    try {
      const result = await server([], { ORBIT_DATABASE_URL: t.url, ORBIT_LISTEN: `127.0.0.1:${busy.port}` }, 30_000);
      assert.equal(result.code, 1);
      assert.deepEqual(lines(result.stderr), [`orbit-server: 127.0.0.1:${busy.port} is already in use; set ORBIT_LISTEN=host:port to listen elsewhere`]);
    } finally {
      await busy.close();
    }
  });

  test("npm start's script ends the same way, without a stack trace", async () => {
    const busy = await occupiedPort();
    try {
      const result = await runProgram(join(ROOT, 'scripts', 'start.mjs'), [], {
        env: { ORBIT_DATABASE_URL: t.url, ORBIT_LISTEN: `127.0.0.1:${busy.port}` },
        timeoutMs: 60_000,
      });
      assert.equal(result.code, 1, result.stderr);
      assert.ok(
        lines(result.stderr).includes(`orbit-server: 127.0.0.1:${busy.port} is already in use; set ORBIT_LISTEN=host:port to listen elsewhere`),
        result.stderr,
      );
      assert.doesNotMatch(result.stderr, /^\s+at /m, 'no stack trace');
    } finally {
      await busy.close();
    }
  });

  test('startServer rejects with a StartupError instead of crashing the process', async () => {
    const busy = await occupiedPort();
    try {
      await assert.rejects(
        startServer({ ...testConfig(), databaseUrl: t.url, listenPort: busy.port }, { log: silentLogger() }),
        (error: unknown) =>
          error instanceof StartupError && error.message === `127.0.0.1:${busy.port} is already in use; set ORBIT_LISTEN=host:port to listen elsewhere`,
      );
    } finally {
      await busy.close();
    }
  });
});

describe('a database from a newer build', () => {
  let t: TestDatabase;
  before(async () => {
    t = await freshDatabase('cli_future');
  });
  after(async () => {
    await t.drop();
  });

  const expected = (program: string) =>
    `the database has migration ${FUTURE.version}_${FUTURE.name} that this build does not know (this build knows up to ${NEWEST}); run a newer ${program}`;

  async function addFuture(): Promise<void> {
    await t.db.exec('INSERT INTO orbit_schema_migrations (version, name, checksum, applied_at) VALUES (?, ?, ?, UTC_TIMESTAMP(6))', [
      FUTURE.version,
      FUTURE.name,
      '0'.repeat(64),
    ]);
  }
  async function removeFuture(): Promise<void> {
    await t.db.exec('DELETE FROM orbit_schema_migrations WHERE version = ?', [FUTURE.version]);
  }

  test('a running server reports /readyz 503 with the versions once it appears, 200 again once it is gone', async () => {
    const running = await startServerProcess(t.url);
    try {
      assert.equal((await fetch(`${running.url}/readyz`)).status, 200);
      await addFuture();
      const response = await fetch(`${running.url}/readyz`);
      assert.equal(response.status, 503);
      assert.deepEqual(await response.json(), { status: 'unavailable', detail: expected('orbit-server') });
      await removeFuture();
      assert.equal((await fetch(`${running.url}/readyz`)).status, 200);
    } finally {
      await running.stop();
    }
  });

  test('orbit-server refuses to start and orbit-admin migrate refuses to migrate, exit 1', async () => {
    await addFuture();
    try {
      const s = await server([], { ORBIT_DATABASE_URL: t.url, ORBIT_LISTEN: '127.0.0.1:0' });
      assert.equal(s.code, 1);
      assert.deepEqual(lines(s.stderr), [`orbit-server: ${expected('orbit-server')}`]);
      const m = await admin(['migrate'], { ORBIT_DATABASE_URL: t.url });
      assert.equal(m.code, 1);
      assert.deepEqual(lines(m.stderr), [`using database ${t.url}`, `orbit-admin: ${expected('orbit-admin')}`]);
    } finally {
      await removeFuture();
    }
  });

  test('an applied migration whose file differs from this build is refused the same way', async () => {
    const [row] = await t.db.rows<{ checksum: string }>('SELECT checksum FROM orbit_schema_migrations WHERE version = 2');
    await t.db.exec('UPDATE orbit_schema_migrations SET checksum = ? WHERE version = 2', ['f'.repeat(64)]);
    try {
      const s = await server([], { ORBIT_DATABASE_URL: t.url, ORBIT_LISTEN: '127.0.0.1:0' });
      assert.equal(s.code, 1);
      assert.match(
        s.stderr,
        /^orbit-server: the database's migration 0002_tasks_and_workers differs from this build's 0002_tasks_and_workers \(checksum\); .*\n$/,
      );
      const m = await admin(['migrate'], { ORBIT_DATABASE_URL: t.url });
      assert.equal(m.code, 1);
      assert.match(m.stderr, /\norbit-admin: the database's migration 0002_tasks_and_workers differs/);
    } finally {
      await t.db.exec('UPDATE orbit_schema_migrations SET checksum = ? WHERE version = 2', [row!.checksum]);
    }
  });

  test('pending migrations: orbit-server refuses with one line, exit 1', async () => {
    const name = `orbit_cli_empty_${randomBytes(4).toString('hex')}`;
    await onServer((conn) => conn.query(`CREATE DATABASE \`${name}\``));
    try {
      const s = await server([], { ORBIT_DATABASE_URL: `${testServerUrl()}/${name}`, ORBIT_LISTEN: '127.0.0.1:0' });
      assert.equal(s.code, 1);
      assert.deepEqual(lines(s.stderr), [`orbit-server: the database has pending migrations (${MIGRATIONS.join(', ')}); run \`orbit-admin migrate\` first`]);
    } finally {
      await onServer((conn) => conn.query(`DROP DATABASE IF EXISTS \`${name}\``));
    }
  });
});

/**
 * What the command does to the database, so in process (`adminInProcess`, the output and exit
 * code the program would have): the real program against a database is the cases above.
 */
describe('orbit-admin credential revoke', () => {
  let t: TestDatabase;
  let dir: string;
  before(async () => {
    t = await freshDatabase('cli_revoke');
    dir = mkdtempSync(join(tmpdir(), 'orbit-cli-'));
  });
  after(async () => {
    await t.drop();
    rmSync(dir, { recursive: true, force: true });
  });

  test('revokes once; again says when it was revoked (exit 0); an unknown id is exit 1', async () => {
    const env = adminEnv(t.url);
    const output = join(dir, 'creds.json');
    const boot = await adminInProcess(
      ['bootstrap', '--application', 'revoke-app', '--namespace', 'r', '--environment', 'staging', '--queue', 'q', '--output', output],
      env,
    );
    assert.equal(boot.code, 0, boot.stderr);
    const id = (JSON.parse(readFileSync(output, 'utf8')) as { credential_id: string }).credential_id;

    const first = await adminInProcess(['credential', 'revoke', '--credential-id', id], env);
    assert.equal(first.code, 0, first.stderr);
    const [, revoked] = lines(first.stderr);
    const match = new RegExp(`^revoked credential ${id} at (\\d{4}-\\d\\d-\\d\\dT\\d\\d:\\d\\d:\\d\\d\\.\\d{3}Z)$`).exec(revoked ?? '');
    assert.ok(match, first.stderr);

    const second = await adminInProcess(['credential', 'revoke', '--credential-id', id], env);
    assert.equal(second.code, 0, second.stderr);
    assert.deepEqual(lines(second.stderr), [`using database ${t.url}`, `credential ${id} was already revoked at ${match[1]}`]);

    const unknown = randomBytes(16).toString('hex');
    const third = await adminInProcess(['credential', 'revoke', '--credential-id', unknown], env);
    assert.equal(third.code, 1);
    assert.deepEqual(lines(third.stderr), [`using database ${t.url}`, `orbit-admin: credential ${unknown} does not exist`]);
  });
});
