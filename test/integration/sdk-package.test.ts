/**
 * The SDK as a client app gets it: `npm pack` of the workspace package, installed from the
 * tarball into a fresh temporary project with nothing else, a small TypeScript client
 * type-checked against the package's declarations, compiled, and run against a real server
 * process - the HTTP client reads the application's resources and submits a task, the worker
 * (imported from `@orbit-tasks/sdk/worker`) runs it.
 */
import { after, before, describe, test } from 'node:test';
import assert from 'node:assert/strict';
import { execFileSync, spawnSync } from 'node:child_process';
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { fileURLToPath } from 'node:url';
import { freshDatabase, type TestDatabase } from '../helpers/database.ts';
import { createTenant, type TestTenant } from '../helpers/tenants.ts';
import { assertCountersMatchRecount } from '../helpers/recount.ts';
import { startServerProcess, type ServerProcess } from '../helpers/server-process.ts';

const ROOT = fileURLToPath(new URL('../..', import.meta.url));
const TSC = path.join(ROOT, 'node_modules', 'typescript', 'bin', 'tsc');
const npm = (args: string[], cwd: string) => execFileSync('npm', args, { cwd, encoding: 'utf8', stdio: ['ignore', 'pipe', 'pipe'] });

const CLIENT = `import { createOrbitClient, isOrbitError, type ApplicationResources } from '@orbit-tasks/sdk';
import { OrbitWorker } from '@orbit-tasks/sdk/worker';

const orbit = createOrbitClient({ baseUrl: process.env.ORBIT_URL!, token: process.env.ORBIT_TOKEN! });
const resources: ApplicationResources = await orbit.getApplicationResources();
// Counters come back as bigint: the types say so, and this would not compile otherwise.
const unfinished: bigint = resources.unfinished_tasks;
// @ts-expect-error - a limit is a number, not a bigint
const wrong: bigint = resources.max_unfinished_tasks;
void wrong;

const done = new Promise<unknown>((resolve) => {
  const worker = new OrbitWorker({
    baseUrl: process.env.ORBIT_URL!,
    token: process.env.ORBIT_TOKEN!,
    nodeId: 'packaged-client',
    queues: ['packaged'],
    capacity: 2,
    handler: async (task) => {
      setTimeout(() => void worker.stop().then(() => resolve(task.payload)), 50);
      return { echoed: task.payload };
    },
  });
  void worker.start();
});
const submitted = await orbit.submitTask('packaged-1', 'packaged', { payload: { hello: 'from a packaged client' } });
const payload = await done;
const task = await orbit.getTask(submitted.task.task_id);
try {
  await orbit.getTask('0'.repeat(32));
} catch (error) {
  if (!isOrbitError(error)) throw error;
  console.log(JSON.stringify({ missing: error.code }));
}
console.log(JSON.stringify({ max_unfinished_tasks: resources.max_unfinished_tasks, unfinished: unfinished.toString(), state: task.state, payload }));
`;

describe('the SDK package, installed from its tarball into an empty project', () => {
  let t: TestDatabase;
  let server: ServerProcess;
  let tenant: TestTenant;
  let work: string;

  before(async () => {
    t = await freshDatabase('sdk_package');
    tenant = await createTenant(t.db, { namespace: 'packaged', queues: ['packaged'], resourceAccess: true });
    server = await startServerProcess(t.url);
    work = fs.mkdtempSync(path.join(os.tmpdir(), 'orbit-sdk-package-'));
  });
  after(async () => {
    await server.stop();
    await assertCountersMatchRecount(t.db);
    await t.drop();
    fs.rmSync(work, { recursive: true, force: true });
  });

  test('pack, install, type-check and run a client', async () => {
    // npm pack runs the package's prepack (the build) and writes the tarball.
    const packed = JSON.parse(npm(['pack', '--workspace', 'sdk', '--json', '--pack-destination', work], ROOT)) as Array<{
      filename: string;
      files: Array<{ path: string }>;
    }>;
    const tarball = path.join(work, path.basename(packed[0]!.filename));
    const files = packed[0]!.files.map((f) => f.path).sort();
    assert.ok(
      files.includes('dist/index.js') && files.includes('dist/index.d.ts') && files.includes('dist/worker.js') && files.includes('dist/worker.d.ts'),
      files.join(', '),
    );
    assert.ok(files.includes('package.json') && files.includes('README.md'));
    assert.deepEqual(
      files.filter((f) => !f.startsWith('dist/') && !['package.json', 'README.md'].includes(f)),
      [],
      'nothing but the build, the manifest and the README',
    );
    assert.deepEqual(
      files.filter((f) => f.endsWith('.ts') && !f.endsWith('.d.ts')),
      [],
      'no TypeScript sources',
    );

    const app = path.join(work, 'client-app');
    fs.mkdirSync(app);
    fs.writeFileSync(path.join(app, 'package.json'), JSON.stringify({ name: 'client-app', private: true, type: 'module' }, null, 2));
    npm(['install', '--no-audit', '--no-fund', '--prefer-offline', tarball], app);
    const installed = JSON.parse(fs.readFileSync(path.join(app, 'node_modules', '@orbit-tasks', 'sdk', 'package.json'), 'utf8')) as { name: string };
    assert.equal(installed.name, '@orbit-tasks/sdk');
    assert.ok(!fs.existsSync(path.join(app, 'node_modules', 'mysql2')), 'the SDK does not bring server dependencies');

    fs.writeFileSync(path.join(app, 'client.ts'), CLIENT);
    // `process` is declared by the client itself: the package must not need @types/node.
    fs.writeFileSync(path.join(app, 'env.d.ts'), 'declare const process: { env: Record<string, string | undefined> };\n');
    fs.writeFileSync(
      path.join(app, 'tsconfig.json'),
      JSON.stringify({
        compilerOptions: { target: 'ES2022', module: 'NodeNext', moduleResolution: 'NodeNext', lib: ['ES2023', 'DOM'], types: [], strict: true, outDir: 'out' },
        files: ['client.ts', 'env.d.ts'],
      }),
    );
    const typecheck = spawnSync(process.execPath, [TSC, '-p', 'tsconfig.json'], { cwd: app, encoding: 'utf8' });
    assert.equal(typecheck.status, 0, `tsc: ${typecheck.stdout}${typecheck.stderr}`);

    const run = spawnSync(process.execPath, ['out/client.js'], {
      cwd: app,
      encoding: 'utf8',
      env: { ...process.env, ORBIT_URL: server.url, ORBIT_TOKEN: tenant.token },
      timeout: 30_000,
    });
    assert.equal(run.status, 0, `client: ${run.stdout}${run.stderr}`);
    const lines = run.stdout
      .trim()
      .split('\n')
      .map((line) => JSON.parse(line) as Record<string, unknown>);
    assert.deepEqual(lines[0], { missing: 'NOT_FOUND' });
    assert.deepEqual(lines[1], { max_unfinished_tasks: 1_000_000, unfinished: '0', state: 'SUCCEEDED', payload: { hello: 'from a packaged client' } });
  });
});
