/**
 * `orbit-server` and `orbit-admin` as programs, run in this process (test/helpers/programs.ts:
 * the same `main` the binaries run, with the environment a spawned program would get):
 * `--help` everywhere (usage on stdout, exit 0, nothing else done - not even a database
 * connection), wrong arguments (one line on stderr in one format, exit 2) and bad environment
 * variables (one line naming the variable, exit 2). Everything here is decided before any
 * database is touched: the database URL given points at a listener of this test that counts
 * connections, and it must have had none at the end. test/integration/cli.test.ts runs the real
 * binaries for a few of these cases and checks that they print exactly what the in-process run
 * prints.
 */
import { after, before, describe, test } from 'node:test';
import assert from 'node:assert/strict';
import { readFileSync, readdirSync } from 'node:fs';
import { createServer, type Socket } from 'node:net';
import { join } from 'node:path';
import { SETTINGS } from '../../server/config.ts';
import { ROOT, adminInProcess, lines, serverArgsInProcess } from '../helpers/programs.ts';

const HEX = '0123456789abcdef0123456789abcdef';

/** Stands where a database would be: any connection to it is counted (and dropped). */
const fakeDatabase = createServer((socket: Socket) => {
  connections += 1;
  socket.destroy();
});
let connections = 0;
let URL_OF_UNTOUCHED = '';

before(async () => {
  await new Promise<void>((resolve) => fakeDatabase.listen(0, '127.0.0.1', resolve));
  URL_OF_UNTOUCHED = `mysql://root@127.0.0.1:${(fakeDatabase.address() as { port: number }).port}/orbit_cli_untouched`;
});

after(async () => {
  await new Promise<void>((resolve) => fakeDatabase.close(() => resolve()));
  assert.equal(connections, 0, 'some --help or refused command connected to the database');
});

/** Exit 2, nothing on stdout, exactly `expected` as the one line on stderr. */
function assertUsageFailure(result: { code: number | null; stdout: string; stderr: string }, expected: string): void {
  assert.deepEqual({ code: result.code, stdout: result.stdout, stderr: lines(result.stderr) }, { code: 2, stdout: '', stderr: [expected] });
}

describe('orbit-admin --help', () => {
  const env = () => ({ ORBIT_DATABASE_URL: URL_OF_UNTOUCHED });
  const commands = [
    'migrate',
    'bootstrap',
    'application enable',
    'application disable',
    'namespace enable',
    'namespace disable',
    'credential create',
    'credential revoke',
    'verify',
    'prune',
  ];

  test('--help, -h and help print every command on stdout and exit 0', async () => {
    for (const args of [['--help'], ['-h'], ['help']]) {
      const result = await adminInProcess(args, env());
      assert.equal(result.code, 0, `${args}: ${result.stderr}`);
      assert.equal(result.stderr, '', `${args}: nothing on stderr (no database was opened)`);
      assert.match(result.stdout, /^usage: orbit-admin /);
      for (const command of commands) assert.match(result.stdout, new RegExp(`^ *(usage: )?orbit-admin ${command}\\b`, 'm'), `${args} lists ${command}`);
      assert.match(result.stdout, /ORBIT_DATABASE_URL/);
    }
  });

  test('COMMAND --help, COMMAND -h and help COMMAND print that command usage only, for every command and subcommand', async () => {
    for (const command of commands) {
      const words = command.split(' ');
      const forms = [
        [...words, '--help'],
        [...words, '-h'],
        ['help', ...words],
      ];
      // Help wins over anything else on the line, also over what would be an error.
      forms.push([...words, '--no-such-flag', '--help']);
      const outputs = new Set<string>();
      for (const args of forms) {
        const result = await adminInProcess(args, env());
        assert.equal(result.code, 0, `${args.join(' ')}: ${result.stderr}`);
        assert.equal(result.stderr, '', `${args.join(' ')}: nothing on stderr`);
        assert.ok(result.stdout.startsWith(`usage: orbit-admin ${command}`), `${args.join(' ')}:\n${result.stdout}`);
        outputs.add(result.stdout);
      }
      assert.equal(outputs.size, 1, `${command}: every form prints the same usage`);
    }
  });

  test('a command group with --help lists its subcommands', async () => {
    for (const [group, subs] of [
      ['credential', ['create', 'revoke']],
      ['application', ['enable', 'disable']],
      ['namespace', ['enable', 'disable']],
    ] as const) {
      const result = await adminInProcess([group, '--help'], env());
      assert.equal(result.code, 0);
      assert.equal(result.stderr, '');
      for (const sub of subs) assert.match(result.stdout, new RegExp(`orbit-admin ${group} ${sub} `));
    }
  });

  test('migrate --help does not migrate: nothing connected to the database (checked after all tests)', async () => {
    const result = await adminInProcess(['migrate', '--help'], env());
    assert.equal(result.code, 0);
    assert.doesNotMatch(result.stdout + result.stderr, /applying|up to date/);
  });

  test('verify --help prints its usage without a database', async () => {
    const help = await adminInProcess(['verify', '--help'], env());
    assert.equal(help.code, 0, help.stderr);
    assert.equal(help.stderr, '');
    assert.match(help.stdout, /^usage: orbit-admin verify \[--repair\] \[--application-id ID\]/);
  });
});

describe('orbit-admin wrong arguments', () => {
  const env = () => ({ ORBIT_DATABASE_URL: URL_OF_UNTOUCHED });
  const cases: Array<[string[], string]> = [
    [['--foo'], "unknown option '--foo' (see orbit-admin --help)"],
    [['nosuch'], "unknown command 'nosuch' (see orbit-admin --help)"],
    [['help', 'nosuch'], "unknown command 'nosuch' (see orbit-admin --help)"],
    [['migrate', '--force'], "unknown option '--force' (see orbit-admin migrate --help)"],
    [['migrate', '-x'], "unknown option '-x' (see orbit-admin migrate --help)"],
    [['migrate', 'now'], "unexpected argument 'now' (see orbit-admin migrate --help)"],
    [['bootstrap', '--colour'], "unknown option '--colour' (see orbit-admin bootstrap --help)"],
    [
      ['bootstrap', '--application', 'a', '--namespace', 'n', '--environment', 'development', '--queue', 'q'],
      '--output is required (see orbit-admin bootstrap --help)',
    ],
    [['bootstrap', '--application', 'a', '--namespace', 'n', '--queue', 'q', '--output', 'f'], '--environment is required (see orbit-admin bootstrap --help)'],
    [
      ['bootstrap', '--application', 'a', '--namespace', 'n', '--environment', 'dev', '--queue', 'q', '--output', 'f'],
      '--environment must be one of development, staging, production (see orbit-admin bootstrap --help)',
    ],
    [
      ['bootstrap', '--application', 'a', '--namespace', 'n', '--environment', 'development', '--output', 'f'],
      '--queue is required (see orbit-admin bootstrap --help)',
    ],
    [['bootstrap', '--namespace', 'n'], 'give exactly one of --application NAME or --application-id ID (see orbit-admin bootstrap --help)'],
    [['bootstrap', '--resource-access=yes'], "option '--resource-access' takes no value (see orbit-admin bootstrap --help)"],
    [['bootstrap', '--application', 'a', '--application', 'b'], "option '--application' is given more than once (see orbit-admin bootstrap --help)"],
    [['application'], 'application needs a subcommand: enable or disable (see orbit-admin application --help)'],
    [['application', '--foo'], "unknown option '--foo' (see orbit-admin application --help)"],
    [['application', 'enable', '--namespace-id', HEX], "unknown option '--namespace-id' (see orbit-admin application enable --help)"],
    [['application', 'disable'], '--application-id is required (see orbit-admin application disable --help)'],
    [['namespace', 'disable'], '--namespace-id is required (see orbit-admin namespace disable --help)'],
    [['namespace', 'enable', '--namespace-id', 'NOT-HEX'], '--namespace-id must be 32 lowercase hex characters (see orbit-admin namespace enable --help)'],
    [['credential'], 'credential needs a subcommand: create or revoke (see orbit-admin credential --help)'],
    [['credential', 'delete'], "unknown command 'credential delete' (see orbit-admin credential --help)"],
    [['credential', 'create', '--namespace-id', HEX, '--output', 'f', '--bogus'], "unknown option '--bogus' (see orbit-admin credential create --help)"],
    [['credential', 'create', '--namespace-id', HEX], '--output is required (see orbit-admin credential create --help)'],
    [['credential', 'create', '--namespace-id', HEX, '--output', '--queue', 'q'], "option '--output' needs a value (see orbit-admin credential create --help)"],
    [
      ['credential', 'create', '--namespace-id', HEX, '--output', 'f', '--action', 'tasks:fly'],
      '--action tasks:fly: unknown action (see orbit-admin credential create --help)',
    ],
    [['credential', 'revoke'], '--credential-id is required (see orbit-admin credential revoke --help)'],
    [['credential', 'revoke', '--credential-id'], "option '--credential-id' needs a value (see orbit-admin credential revoke --help)"],
    [['credential', 'revoke', '--credential-id', HEX, 'extra'], "unexpected argument 'extra' (see orbit-admin credential revoke --help)"],
    [['verify', '--bogus'], "unknown option '--bogus' (see orbit-admin verify --help)"],
    [['verify', '--application-id', 'nope'], '--application-id must be 32 lowercase hex characters (see orbit-admin verify --help)'],
    [['verify', 'extra'], "unexpected argument 'extra' (see orbit-admin verify --help)"],
    [['prune', '--dry-run=yes'], "option '--dry-run' takes no value (see orbit-admin prune --help)"],
    [['prune', '--application-id', 'nope'], '--application-id must be 32 lowercase hex characters (see orbit-admin prune --help)'],
  ];

  test('each is one line `orbit-admin: <problem> (see orbit-admin [command] --help)`, exit 2, no database opened', async () => {
    for (const [args, problem] of cases) {
      assertUsageFailure(await adminInProcess(args, env()), `orbit-admin: ${problem}`);
    }
  });

  test('no command at all: the usage on stderr, exit 2', async () => {
    const result = await adminInProcess([], env());
    assert.equal(result.code, 2);
    assert.equal(result.stdout, '');
    assert.match(result.stderr, /^usage: orbit-admin migrate\n/);
  });

  test('a bad ORBIT_DATABASE_URL is one line naming it, its password redacted, exit 2', async () => {
    for (const url of [
      'mysql://admin:hunter2@db.example:3306/',
      'postgres://admin:hunter2@db.example/orbit',
      'admin:hunter2@db.example/orbit',
      'mysql://admin:hunter2@db.example/orbit-prod',
    ]) {
      const result = await adminInProcess(['credential', 'revoke', '--credential-id', HEX], { ORBIT_DATABASE_URL: url });
      assert.doesNotMatch(result.stdout + result.stderr, /hunter2/);
      assertUsageFailure(
        result,
        `orbit-admin: ORBIT_DATABASE_URL must be mysql://user:password@host:port/database (cluster nodes: host1:port1,host2:port2; database name of [A-Za-z0-9_]), got ${JSON.stringify(url.replace('hunter2', '***'))}`,
      );
    }
  });
});

describe('orbit-server arguments and environment', () => {
  test('--help prints the usage with every environment variable, exit 0, and starts nothing', async () => {
    for (const flag of ['--help', '-h']) {
      // The database given counts connections: starting would connect to it.
      const result = await serverArgsInProcess([flag], { ORBIT_DATABASE_URL: URL_OF_UNTOUCHED });
      assert.equal(result.code, 0, result.stderr);
      assert.equal(result.stderr, '');
      assert.match(result.stdout, /^usage: orbit-server/);
      for (const setting of SETTINGS) {
        assert.ok(result.stdout.includes(`${setting.name}: ${setting.range}; default ${setting.default}`), `--help lists ${setting.name}`);
      }
    }
  });

  test('unknown options and arguments: one line, exit 2', async () => {
    assertUsageFailure(await serverArgsInProcess(['--port', '9000']), "orbit-server: unknown option '--port' (see orbit-server --help)");
    assertUsageFailure(await serverArgsInProcess(['-p']), "orbit-server: unknown option '-p' (see orbit-server --help)");
    assertUsageFailure(await serverArgsInProcess(['serve']), "orbit-server: unexpected argument 'serve' (see orbit-server --help)");
  });

  test('every bad environment variable stops it at once: one line naming it, exit 2', async () => {
    const cases: Array<[string, string, string]> = [
      ['ORBIT_ADMISSION_IN_FLIGHT', 'abc', 'must be an integer from 1 to 64, got "abc"'],
      ['ORBIT_ADMISSION_IN_FLIGHT', '0', 'must be an integer from 1 to 64, got "0"'],
      ['ORBIT_ADMISSION_IN_FLIGHT', '65', 'must be an integer from 1 to 64, got "65"'],
      ['ORBIT_ADMISSION_IN_FLIGHT', '2.5', 'must be an integer from 1 to 64, got "2.5"'],
      ['ORBIT_LEASE_SECONDS', '1e3', 'must be an integer from 1 to 3600, got "1e3"'],
      ['ORBIT_LEASE_SECONDS', ' 30', 'must be an integer from 1 to 3600, got " 30"'],
      ['ORBIT_RECOVERY_INTERVAL_MS', '5', 'must be an integer from 10 to 60000, got "5"'],
      ['ORBIT_AUTH_CACHE_MS', '-1', 'must be an integer from 0 to 60000, got "-1"'],
      ['ORBIT_DB_POOL_SIZE', '0x10', 'must be an integer from 2 to 500, got "0x10"'],
      ['ORBIT_LOG_LEVEL', 'verbose', 'must be one of fatal, error, warn, info, debug, trace, silent, got "verbose"'],
      ['ORBIT_LOG_LEVEL', 'INFO', 'must be one of fatal, error, warn, info, debug, trace, silent, got "INFO"'],
      ['ORBIT_LISTEN', 'garbage', 'must be host:port with a port from 0 to 65535, got "garbage"'],
      ['ORBIT_LISTEN', '127.0.0.1:65536', 'must be host:port with a port from 0 to 65535, got "127.0.0.1:65536"'],
      ['ORBIT_LISTEN', ':8080', 'must be host:port with a port from 0 to 65535, got ":8080"'],
      ['ORBIT_LISTEN', '[not-ipv6]:8080', 'must be host:port with a port from 0 to 65535, got "[not-ipv6]:8080"'],
      ['ORBIT_LISTEN', '127.0.0.1:80x', 'must be host:port with a port from 0 to 65535, got "127.0.0.1:80x"'],
      [
        'ORBIT_DATABASE_URL',
        'mysql://orbit:hunter2@db:3306/',
        'must be mysql://user:password@host:port/database (cluster nodes: host1:port1,host2:port2; database name of [A-Za-z0-9_]), got "mysql://orbit:***@db:3306/"',
      ],
      [
        'ORBIT_DATABASE_URL',
        'mysql://orbit:hunter2@db:0/orbit',
        'must be mysql://user:password@host:port/database (cluster nodes: host1:port1,host2:port2; database name of [A-Za-z0-9_]), got "mysql://orbit:***@db:0/orbit"',
      ],
    ];
    for (const [name, value, problem] of cases) {
      const env = { ORBIT_DATABASE_URL: URL_OF_UNTOUCHED, ORBIT_LISTEN: '127.0.0.1:0', [name]: value };
      const result = await serverArgsInProcess([], env);
      assert.doesNotMatch(result.stdout + result.stderr, /hunter2/);
      assertUsageFailure(result, `orbit-server: ${name} ${problem}`);
    }
  });

  test('good arguments and environment are not run in process: that would start a server', async () => {
    await assert.rejects(serverArgsInProcess([], { ORBIT_DATABASE_URL: URL_OF_UNTOUCHED, ORBIT_LISTEN: '127.0.0.1:0' }), /would start a server/);
  });

  test('only server/config.ts reads the environment', () => {
    const files = (dir: string): string[] =>
      readdirSync(join(ROOT, dir), { withFileTypes: true }).flatMap((entry) =>
        entry.isDirectory() ? files(join(dir, entry.name)) : /\.(ts|mjs|js)$/.test(entry.name) ? [join(dir, entry.name)] : [],
      );
    const readers = [...files('server'), ...files('bin')].filter(
      (file) => file !== join('server', 'config.ts') && /\bprocess\.env\b|process\[['"]env['"]\]/.test(readFileSync(join(ROOT, file), 'utf8')),
    );
    assert.deepEqual(readers, []);
  });

  test("docs/configuration.md's table lists every variable with its default and range", () => {
    const section = readFileSync(join(ROOT, 'docs', 'configuration.md'), 'utf8');
    const rows = new Map(
      section
        .split('\n')
        .filter((line) => /^\| `ORBIT_/.test(line))
        .map((line) =>
          line
            .split('|')
            .slice(1, -1)
            .map((cell) => cell.trim().replaceAll('`', '')),
        )
        .map(([name, byDefault, range]) => [name, { byDefault, range }]),
    );
    assert.deepEqual(
      [...rows.keys()],
      SETTINGS.map((s) => s.name),
    );
    for (const setting of SETTINGS) assert.deepEqual(rows.get(setting.name), { byDefault: setting.default, range: setting.range }, setting.name);
  });
});
