/**
 * The SDK as a client app gets it, following sdk/README.md (the tarball's README): its setup
 * block makes the credential (`orbit-admin bootstrap`: queue `emails`); `npm pack` of the
 * workspace package is installed into a fresh `npm init -y` project of each module kind - one
 * CommonJS, as npm makes it, one ES module (`"type": "module"`) - with TypeScript set up as the
 * README says (`tsc --init …`); the README's worker and client code blocks, taken from the
 * README (not copied here), type-check, compile and run against a real server process: the
 * worker runs the task the client submits, the client sees it SUCCEEDED. The CommonJS project
 * also type-checks under the classic `module: commonjs` (node10 resolution, where
 * `@orbit-tasks/sdk/worker` comes from typesVersions). Nothing here sleeps: every step waits
 * for what it needs (a process's exit, a line of output, the server's long-poll).
 */
import { after, before, describe, test } from 'node:test';
import assert from 'node:assert/strict';
import { type ChildProcess, execFileSync, spawn, spawnSync } from 'node:child_process';
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { fileURLToPath } from 'node:url';
import { freshDatabase, type TestDatabase } from '../helpers/database.ts';
import { assertCountersMatchRecount } from '../helpers/recount.ts';
import { startServerProcess, type ServerProcess } from '../helpers/server-process.ts';
import { waitFor } from '../helpers/wait.ts';

const ROOT = fileURLToPath(new URL('../..', import.meta.url));
const TSC = path.join(ROOT, 'node_modules', 'typescript', 'bin', 'tsc');
const README = fs.readFileSync(path.join(ROOT, 'sdk', 'README.md'), 'utf8');
const TYPES_NODE = (JSON.parse(fs.readFileSync(path.join(ROOT, 'node_modules', '@types', 'node', 'package.json'), 'utf8')) as { version: string }).version;
const npm = (args: string[], cwd: string) => execFileSync('npm', args, { cwd, encoding: 'utf8', stdio: ['ignore', 'pipe', 'pipe'] });

/** The fenced code block right after `<!-- sdk-readme: name -->` in sdk/README.md. */
function readmeBlock(name: string): string {
  const marker = `<!-- sdk-readme: ${name} -->`;
  const at = README.indexOf(marker);
  assert.ok(at >= 0, `sdk/README.md has no ${marker}`);
  const match = /```[a-z]*\n([\s\S]*?)```/.exec(README.slice(at + marker.length));
  assert.ok(match?.[1], `no code block after ${marker}`);
  return match[1];
}

/** How the README says to set TypeScript up in each kind of project (checked to be in the README). */
const TSC_INIT = {
  commonjs: { readme: 'npx tsc --init --types node --verbatimModuleSyntax false', args: ['--init', '--types', 'node', '--verbatimModuleSyntax', 'false'] },
  module: { readme: 'npm pkg set type=module && npx tsc --init --types node', args: ['--init', '--types', 'node'] },
} as const;

interface Running {
  child: ChildProcess;
  lines: string[];
  stderr: () => string;
  exited: Promise<number | null>;
}

function run(cwd: string, file: string, args: string[], env: Record<string, string>): Running {
  const child = spawn(process.execPath, [file, ...args], { cwd, env: { ...process.env, ...env }, stdio: ['ignore', 'pipe', 'pipe'] });
  const lines: string[] = [];
  let stdout = '';
  let stderr = '';
  child.stdout.on('data', (chunk: Buffer) => {
    stdout += chunk.toString();
    const parts = stdout.split('\n');
    stdout = parts.pop() ?? '';
    lines.push(...parts.filter((l) => l.trim() !== ''));
  });
  child.stderr.on('data', (chunk: Buffer) => (stderr += chunk.toString()));
  const exited = new Promise<number | null>((resolve) => child.once('exit', (code) => resolve(code)));
  return { child, lines, stderr: () => stderr, exited };
}

/** The exit code, or a failure naming the process when it has not exited within `ms` (a bound, not a wait). */
async function exitOf(p: Running, what: string, ms = 60_000): Promise<number | null> {
  let timer: NodeJS.Timeout | undefined;
  const bound = new Promise<never>((_, reject) => {
    timer = setTimeout(() => reject(new Error(`${what} did not exit within ${ms} ms; stdout ${p.lines.join(' | ')}; stderr ${p.stderr()}`)), ms);
  });
  try {
    return await Promise.race([p.exited, bound]);
  } finally {
    clearTimeout(timer);
  }
}

describe('the SDK package, installed from its tarball into fresh CommonJS and ES module projects, running its README', () => {
  let t: TestDatabase;
  let server: ServerProcess;
  let work: string;
  let tarball: string;
  let token: string;
  const children: ChildProcess[] = [];

  before(async () => {
    t = await freshDatabase('sdk_package');
    server = await startServerProcess(t.url);
    work = fs.mkdtempSync(path.join(os.tmpdir(), 'orbit-sdk-package-'));
  });
  after(async () => {
    for (const child of children) if (child.exitCode === null && child.signalCode === null) child.kill('SIGKILL');
    await server?.stop();
    await assertCountersMatchRecount(t.db);
    await t.drop();
    fs.rmSync(work, { recursive: true, force: true });
  });

  test("the README's setup block makes the credential (the queue emails), and npm pack holds the build of both formats", () => {
    // Run where the README says: the Orbit checkout (npx orbit-admin is the repository's own), with .local/ in the test's directory.
    const local = path.join(work, '.local');
    const setup = readmeBlock('setup').replace(/(\.\/)?\.local\b/g, local);
    const shown = execFileSync('bash', ['-euo', 'pipefail', '-c', `${setup}\nprintf '%s' "$ORBIT_TOKEN"`], {
      cwd: ROOT,
      encoding: 'utf8',
      env: { ...process.env, ORBIT_DATABASE_URL: t.url },
      stdio: ['ignore', 'pipe', 'pipe'],
    });
    const credentials = JSON.parse(fs.readFileSync(path.join(local, 'demo.credentials.json'), 'utf8')) as { token: string; queues: string[] };
    assert.deepEqual(credentials.queues, ['emails']);
    assert.equal(shown, credentials.token, 'the export line yields the token');
    token = credentials.token;

    // npm pack runs the package's prepack (the build) and writes the tarball.
    const packed = JSON.parse(npm(['pack', '--workspace', 'sdk', '--json', '--pack-destination', work], ROOT)) as Array<{
      filename: string;
      files: Array<{ path: string }>;
    }>;
    tarball = path.join(work, path.basename(packed[0]!.filename));
    const files = packed[0]!.files.map((f) => f.path).sort();
    for (const entry of ['index', 'worker']) {
      for (const ext of ['.js', '.cjs', '.d.ts', '.d.cts']) assert.ok(files.includes(`dist/${entry}${ext}`), `dist/${entry}${ext} in ${files.join(', ')}`);
    }
    assert.ok(files.includes('package.json') && files.includes('README.md'));
    assert.deepEqual(
      files.filter((f) => !f.startsWith('dist/') && !['package.json', 'README.md'].includes(f)),
      [],
      'nothing but the build, the manifest and the README',
    );
    assert.deepEqual(
      files.filter((f) => /\.[cm]?ts$/.test(f) && !/\.d\.[cm]?ts$/.test(f)),
      [],
      'no TypeScript sources',
    );
  });

  for (const kind of ['commonjs', 'module'] as const) {
    test(`${kind === 'commonjs' ? 'a CommonJS' : 'an ES module'} project: the README's worker and client type-check, compile and run`, async () => {
      assert.ok(token && tarball, 'the setup test ran first');
      assert.ok(README.includes(TSC_INIT[kind].readme), `the README says how: ${TSC_INIT[kind].readme}`);
      const app = path.join(work, `${kind}-app`);
      fs.mkdirSync(app);
      npm(['init', '-y'], app);
      if (kind === 'module') npm(['pkg', 'set', 'type=module'], app);
      const manifest = JSON.parse(fs.readFileSync(path.join(app, 'package.json'), 'utf8')) as { type?: string };
      assert.equal(manifest.type === 'module', kind === 'module', `package.json type: ${manifest.type}`);
      npm(['install', '--no-audit', '--no-fund', '--prefer-offline', tarball, `@types/node@${TYPES_NODE}`], app);
      assert.ok(!fs.existsSync(path.join(app, 'node_modules', 'mysql2')), 'the SDK does not bring server dependencies');

      fs.writeFileSync(path.join(app, 'worker.ts'), readmeBlock('worker.ts'));
      fs.writeFileSync(path.join(app, 'client.ts'), readmeBlock('client.ts'));
      // What the types promise, beyond what the README's code happens to use.
      fs.writeFileSync(
        path.join(app, 'types.ts'),
        `import { createOrbitClient, type ApplicationResources } from '@orbit-tasks/sdk';
import { OrbitWorker, type TaskContext } from '@orbit-tasks/sdk/worker';

export function checks(resources: ApplicationResources, task: TaskContext): string {
  const unfinished: number = resources.unfinished_tasks;
  const revision: string = resources.revision;
  // @ts-expect-error - counts are numbers, not bigint
  const big: bigint = resources.pending_starts;
  const orbit = createOrbitClient({ baseUrl: 'http://127.0.0.1:8080', token: 'orbit_x' });
  // @ts-expect-error - one options object with named fields, not (key, queue, body)
  void orbit.submitTask('welcome-42', 'emails', { payload: {} });
  return [unfinished, revision, big, task.task_id, typeof OrbitWorker].join();
}
`,
      );
      const init = spawnSync(process.execPath, [TSC, ...TSC_INIT[kind].args], { cwd: app, encoding: 'utf8' });
      assert.equal(init.status, 0, `tsc --init: ${init.stdout}${init.stderr}`);
      const compiled = spawnSync(process.execPath, [TSC, '-p', 'tsconfig.json'], { cwd: app, encoding: 'utf8' });
      assert.equal(compiled.status, 0, `tsc: ${compiled.stdout}${compiled.stderr}`);
      const client = fs.readFileSync(path.join(app, 'client.js'), 'utf8');
      if (kind === 'commonjs') {
        assert.match(client, /require\("@orbit-tasks\/sdk"\)/, 'compiled to CommonJS');
        // The classic CommonJS setup too (module commonjs: node10 resolution, no exports map).
        fs.writeFileSync(
          path.join(app, 'tsconfig.classic.json'),
          JSON.stringify({
            compilerOptions: {
              target: 'es2016',
              module: 'commonjs',
              esModuleInterop: true,
              forceConsistentCasingInFileNames: true,
              strict: true,
              skipLibCheck: true,
              noEmit: true,
            },
            files: ['worker.ts', 'client.ts', 'types.ts'],
          }),
        );
        const classic = spawnSync(process.execPath, [TSC, '-p', 'tsconfig.classic.json'], { cwd: app, encoding: 'utf8' });
        assert.equal(classic.status, 0, `tsc (module commonjs): ${classic.stdout}${classic.stderr}`);
      } else {
        assert.match(client, /from '@orbit-tasks\/sdk'/, 'compiled to an ES module');
      }

      // Node picks the build of the project's kind from the exports map.
      const resolved = spawnSync(
        process.execPath,
        kind === 'commonjs'
          ? ['-p', "[require.resolve('@orbit-tasks/sdk'), require.resolve('@orbit-tasks/sdk/worker')].join()"]
          : ['--input-type=module', '-e', "console.log([import.meta.resolve('@orbit-tasks/sdk'), import.meta.resolve('@orbit-tasks/sdk/worker')].join())"],
        { cwd: app, encoding: 'utf8' },
      );
      const ext = kind === 'commonjs' ? 'cjs' : 'js';
      assert.match(resolved.stdout.trim(), new RegExp(`dist/index\\.${ext},.*dist/worker\\.${ext}$`), resolved.stderr);

      const env = { ORBIT_URL: server.url, ORBIT_TOKEN: token };
      const worker = run(app, 'worker.js', [], env);
      children.push(worker.child);
      const signup = `${kind}-1`;
      const first = run(app, 'client.js', [signup], env);
      children.push(first.child);
      assert.equal(await exitOf(first, 'the client'), 0, `client: ${first.lines.join('\n')}\n${first.stderr()}`);
      const [resources, submitted, done] = first.lines.map((l) => JSON.parse(l) as Record<string, unknown>);
      assert.equal(typeof resources?.unfinished_tasks, 'number');
      assert.equal(resources?.max_unfinished_tasks, 1_000_000);
      assert.match(String(resources?.revision), /^[1-9][0-9]*$/);
      assert.equal(submitted?.deduplicated, false);
      assert.deepEqual(done, { task_id: submitted?.submitted, state: 'SUCCEEDED', result: { sent_to: `user-${signup}@example.com` }, timed_out: false });
      assert.match(first.stderr(), /submitTask: HTTP 200 \(request [0-9a-f]{32}\)/, "the client's onResponse hook");
      // The worker ran exactly that task (its line is written before its result is reported).
      const line = await waitFor(async () => worker.lines.find((l) => l.includes(String(submitted?.submitted))));
      assert.deepEqual(JSON.parse(line), { task_id: submitted?.submitted, attempt_number: 1, to: `user-${signup}@example.com` });

      // The same signup again: the same submission (the idempotency key), already finished.
      const again = run(app, 'client.js', [signup], env);
      children.push(again.child);
      assert.equal(await exitOf(again, 'the second client'), 0, again.stderr());
      assert.deepEqual(JSON.parse(again.lines[1] ?? '{}'), { submitted: submitted?.submitted, deduplicated: true });
      assert.deepEqual(JSON.parse(again.lines[2] ?? '{}'), done);

      // Ctrl-C (SIGTERM here): the worker stops gracefully and exits by itself.
      worker.child.kill('SIGTERM');
      assert.equal(await exitOf(worker, 'the worker'), 0, worker.stderr());
      assert.match(worker.stderr(), /worker stopped/);
      assert.equal(worker.lines.length, 1, 'one task, run once');
    });
  }
});
