/**
 * Every shell block of README.md and docs/*.md, run as written against a real server process,
 * so that no curl in the documentation can go stale: a renamed path or field, a new required
 * field, a changed code - the block fails here.
 *
 * - The README first (its tour makes the credentials, queues and tasks the pages build on), then
 *   each page in its own bash, with the variables the README's setup block (marked
 *   `<!-- docs: setup -->`) exported - as a reader who landed on a page after the tour would.
 * - Blocks run with `bash -euo pipefail`, with `.local` and `http://127.0.0.1:8080` pointed at
 *   this test's own; `curl` answers a 4xx or 5xx with a failure (exit 22), except in a block
 *   marked `<!-- expect-error -->`, where only 5xx fails.
 * - A block marked `<!-- not run: why -->` is skipped (it installs into another project, runs
 *   until Ctrl-C); a block with a curl in it may not be marked so. The README's scenario blocks
 *   and the workers page's worker block run in readme-scenario.test.ts, which checks their output.
 */
import { after, before, describe, test } from 'node:test';
import assert from 'node:assert/strict';
import { execFile } from 'node:child_process';
import { mkdtempSync, readdirSync, readFileSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { freshDatabase, type TestDatabase } from '../helpers/database.ts';
import { assertCountersMatchRecount } from '../helpers/recount.ts';
import { startServerProcess, type ServerProcess } from '../helpers/server-process.ts';

const ROOT = fileURLToPath(new URL('../..', import.meta.url));

interface Block {
  file: string;
  line: number;
  code: string;
  /** The HTML comment on the line before the fence, if any. */
  marker: string | null;
}

/** The fenced `sh`/`bash` blocks of a markdown file, with the marker comment right above each. */
export function shellBlocks(file: string): Block[] {
  const text = readFileSync(join(ROOT, file), 'utf8');
  const blocks: Block[] = [];
  const fence = /^(?:(<!--[^\n]*-->)\n)?```(sh|bash|shell)\n([\s\S]*?)^```$/gm;
  for (const m of text.matchAll(fence)) {
    blocks.push({ file, line: text.slice(0, m.index).split('\n').length, code: m[3] as string, marker: m[1] ?? null });
  }
  return blocks;
}

const DOC_FILES = [
  'README.md',
  ...readdirSync(join(ROOT, 'docs'))
    .filter((f) => f.endsWith('.md'))
    .sort()
    .map((f) => `docs/${f}`),
];

/** `curl` that fails on an error answer (the docs show plain curl; this is the test's strictness). */
const CURL_WRAPPER = `
curl() {
  local out status
  out=$(command curl -sS -w '\\n%{http_code}' "$@") || return $?
  status=\${out##*$'\\n'}
  printf '%s\\n' "\${out%$'\\n'*}"
  if [ "$status" -ge 500 ] || { [ "$status" -ge 400 ] && [ -z "\${ORBIT_DOCS_EXPECT_ERROR:-}" ]; }; then
    echo "curl answered HTTP $status: $*" >&2
    return 22
  fi
}
`;

/** Not run at all (marked so, with why): such a block may have no curl in it. */
const notRun = (b: Block) => b.marker !== null && b.marker.startsWith('<!-- not run:');
/** Run by readme-scenario.test.ts, which checks their output: the README's two scenarios (the shared budget, the floor), the workers page's worker block. */
const runElsewhere = (b: Block) => b.marker !== null && /^<!-- (scenario:|floors-scenario:|worker-scenario:)/.test(b.marker);
const skipped = (b: Block) => notRun(b) || runElsewhere(b);
const isSetup = (b: Block) => b.marker === '<!-- docs: setup -->';

describe('every shell block of the README and docs/ runs as written', () => {
  let t: TestDatabase;
  let server: ServerProcess;
  let dir: string;

  before(async () => {
    t = await freshDatabase('docs_commands');
    // A short lease, so that the review example (a worker killed mid-task) waits 2 s, not 30.
    server = await startServerProcess(t.url, { ORBIT_LEASE_SECONDS: '2', ORBIT_RECOVERY_INTERVAL_MS: '100' });
    dir = mkdtempSync(join(tmpdir(), 'orbit-docs-'));
  });
  after(async () => {
    await server.stop();
    await assertCountersMatchRecount(t.db);
    await t.drop();
    rmSync(dir, { recursive: true, force: true });
  });

  /** The blocks' `.local/` (a path, not a host name ending in .local) and address, this test's own. */
  const local = (code: string) => code.replace(/(^|[\s"'=(])\.local\b/g, `$1${join(dir, '.local')}`).replaceAll('http://127.0.0.1:8080', server.url);
  const script = (blocks: Block[]) =>
    [
      CURL_WRAPPER,
      ...blocks.map((b) =>
        [
          `echo ${JSON.stringify(`--- ${b.file}:${b.line}`)} >&2`,
          b.marker === '<!-- expect-error -->' ? 'export ORBIT_DOCS_EXPECT_ERROR=1' : 'unset ORBIT_DOCS_EXPECT_ERROR',
          local(b.code),
        ].join('\n'),
      ),
    ].join('\n');
  /** What the README's blocks exported (`export -p`, the ORBIT_* variables): where each page starts. */
  let exported = '';
  function run(blocks: Block[], options: { before?: string; after?: string } = {}): Promise<{ stdout: string; stderr: string }> {
    return new Promise((resolve, reject) => {
      execFile(
        'bash',
        ['-euo', 'pipefail', '-c', [options.before ?? '', script(blocks), options.after ?? ''].join('\n')],
        { cwd: ROOT, env: { ...process.env, ORBIT_DATABASE_URL: t.url }, timeout: 180_000, maxBuffer: 64 * 1024 * 1024 },
        (error, stdout, stderr) =>
          error ? reject(new Error(`exit ${error.code}; the end of its stderr:\n${stderr.slice(-3000)}`)) : resolve({ stdout, stderr }),
      );
    });
  }

  test('no block with a curl in it is marked not run, and the README has one setup block', () => {
    for (const file of DOC_FILES) {
      for (const b of shellBlocks(file)) assert.ok(!(notRun(b) && /\bcurl\b/.test(b.code)), `${file}:${b.line}: a block with curl must run`);
    }
    assert.equal(shellBlocks('README.md').filter(isSetup).length, 1);
  });

  for (const file of DOC_FILES) {
    const blocks = shellBlocks(file).filter((b) => !skipped(b));
    if (blocks.length === 0) continue;
    test(`${file}: ${blocks.length} block(s)`, async () => {
      const readme = file === 'README.md';
      const marker = '--- exported after the README ---';
      const { stdout, stderr } = await run(blocks, readme ? { after: `echo ${JSON.stringify(marker)}; export -p | grep ' ORBIT_'` } : { before: exported });
      if (readme) {
        exported = stdout.slice(stdout.lastIndexOf(marker) + marker.length);
        assert.match(exported, /declare -x ORBIT_TOKEN=/, 'the README setup exports the token the pages use');
      } else assert.notEqual(exported, '', 'the README ran first');
      assert.doesNotMatch(stdout, /"code":"INTERNAL"/, stderr);
    });
  }

  // After the blocks: what they sent is in the server's log.
  test('the access log has one line per answer: method, route, status, duration and request id', () => {
    const lines = server.logs.filter((l) => l.msg === 'request');
    const submit = lines.find((l) => l.route === '/v1/queues/{queue}/tasks' && l.method === 'POST');
    assert.ok(submit, 'a submit was logged by its route template, not its path');
    assert.deepEqual(
      Object.keys(submit)
        .filter((k) => ['request_id', 'method', 'route', 'operation', 'status', 'duration_ms'].includes(k))
        .sort(),
      ['duration_ms', 'method', 'operation', 'request_id', 'route', 'status'],
    );
    assert.match(String(submit.request_id), /^[0-9a-f]{32}$/);
    assert.ok(
      lines.some((l) => l.status === 404),
      'refusals are logged too',
    );
  });
});
