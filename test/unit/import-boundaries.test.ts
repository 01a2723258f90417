/**
 * The layers of the code (docs/architecture.md, "Layers of the code"), checked on the source.
 * Every .ts/.js file under server/ and sdk/ is parsed with the TypeScript parser (not a regex:
 * comments and strings that look like imports do not count); its static imports, `export …
 * from`, dynamic `import()`, `import('…')` types and `require()` are resolved, and these rules
 * hold:
 *
 * - server/domain/ imports nothing from server/store/, server/http/ or server/worker/ (pure rules);
 * - server/worker/ and server/http/ do not import each other;
 * - what they share (input parsing in server/input/, failures.ts, errors.ts, …: anything in
 *   server/ outside http/ and worker/ except the entry points that wire both) imports neither,
 *   so a shared module is never a back door from one to the other;
 * - nothing under server/ imports sdk/, and nothing under sdk/ imports server/ (each has its
 *   own generated copy of the contract types; the SDK is to become a package of its own);
 * - only server/store/ imports mysql2;
 * - every relative import names a file that exists, and every dynamic import names a literal
 *   module (anything else could not be checked).
 */
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { readdirSync, readFileSync, existsSync } from 'node:fs';
import { dirname, join, relative, resolve, sep } from 'node:path';
import { fileURLToPath } from 'node:url';
import ts from 'typescript';

const ROOT = fileURLToPath(new URL('../..', import.meta.url));

/** Where server/ wires HTTP and the worker gateway together; they alone may import both. */
const ENTRY_POINTS = new Set(['server/main.ts', 'server/server.ts', 'server/deps.ts']);
/** Where worker and HTTP share what they have in common (named in the messages). */
const NEUTRAL_HINT = 'server/input/, server/failures.ts, server/errors.ts';

interface ImportRef {
  /** As written; null for a dynamic import whose module is not a literal. */
  specifier: string | null;
  line: number;
}

/** The module specifiers one file imports, in source order. */
function importSpecifiers(fileName: string, text: string): ImportRef[] {
  const kind = /\.[cm]?js$/.test(fileName) ? ts.ScriptKind.JS : ts.ScriptKind.TS;
  const source = ts.createSourceFile(fileName, text, ts.ScriptTarget.Latest, true, kind);
  const found: ImportRef[] = [];
  const add = (node: ts.Node, specifier: string | null) => {
    found.push({ specifier, line: source.getLineAndCharacterOfPosition(node.getStart(source)).line + 1 });
  };
  const literal = (node: ts.Node | undefined): string | null =>
    node !== undefined && (ts.isStringLiteral(node) || ts.isNoSubstitutionTemplateLiteral(node)) ? node.text : null;
  const visit = (node: ts.Node): void => {
    if ((ts.isImportDeclaration(node) || ts.isExportDeclaration(node)) && node.moduleSpecifier) {
      add(node, literal(node.moduleSpecifier));
    } else if (ts.isImportEqualsDeclaration(node) && ts.isExternalModuleReference(node.moduleReference)) {
      add(node, literal(node.moduleReference.expression));
    } else if (ts.isCallExpression(node) && node.expression.kind === ts.SyntaxKind.ImportKeyword) {
      add(node, literal(node.arguments[0]));
    } else if (ts.isCallExpression(node) && ts.isIdentifier(node.expression) && node.expression.text === 'require' && node.arguments.length === 1) {
      add(node, literal(node.arguments[0]));
    } else if (ts.isImportTypeNode(node) && ts.isLiteralTypeNode(node.argument)) {
      add(node, literal(node.argument.literal));
    }
    ts.forEachChild(node, visit);
  };
  visit(source);
  return found;
}

interface Edge {
  /** Root-relative, with `/`. */
  from: string;
  line: number;
  specifier: string | null;
  /** A root-relative path for a relative import; null for a package (or an uncheckable import). */
  to: string | null;
  /** The package name for a bare import (`mysql2/promise` → `mysql2`, `node:fs` → `node:fs`). */
  pkg: string | null;
}

function posix(path: string): string {
  return path.split(sep).join('/');
}

function resolveEdge(from: string, ref: ImportRef): Edge {
  const { specifier, line } = ref;
  if (specifier === null) return { from, line, specifier, to: null, pkg: null };
  if (specifier.startsWith('.') || specifier.startsWith('/')) {
    return { from, line, specifier, to: posix(relative(ROOT, resolve(ROOT, dirname(from), specifier))), pkg: null };
  }
  const parts = specifier.split('/');
  const pkg = specifier.startsWith('@') ? parts.slice(0, 2).join('/') : (parts[0] as string);
  return { from, line, specifier, to: null, pkg };
}

const under = (path: string | null, dir: string) => path !== null && path.startsWith(`${dir}/`);

/** The layer rules, one message per broken edge. */
// A module that is only types exists as its declarations (sdk/dist/generated/openapi.d.ts for './generated/openapi.js').
const fileOrDeclarations = (p: string) => existsSync(join(ROOT, p)) || existsSync(join(ROOT, p.replace(/\.(c|m)?js$/, '.d.$1ts')));

function violations(edges: readonly Edge[], exists: (path: string) => boolean = fileOrDeclarations): string[] {
  const problems: string[] = [];
  for (const edge of edges) {
    const { from, to } = edge;
    const where = `${from}:${edge.line} imports ${edge.specifier === null ? 'a computed module' : `'${edge.specifier}'`}${to !== null && to !== edge.specifier ? ` (${to})` : ''}`;
    const broken = (rule: string) => problems.push(`${where}: ${rule}`);
    if (edge.specifier === null) {
      broken('a dynamic import must name its module literally, or the layers cannot be checked');
      continue;
    }
    if (to !== null && !exists(to)) broken('no such file');
    if (under(from, 'server/domain') && ['server/store', 'server/http', 'server/worker'].some((dir) => under(to, dir))) {
      broken(
        'server/domain holds pure rules and imports nothing from server/store, server/http or server/worker (move the pure part into domain, or the impure part out)',
      );
    }
    if (under(from, 'server/worker') && under(to, 'server/http')) {
      broken(`server/worker must not import server/http; share through ${NEUTRAL_HINT}`);
    }
    if (under(from, 'server/http') && under(to, 'server/worker')) {
      broken(`server/http must not import server/worker; share through ${NEUTRAL_HINT} (the app sees workers only as AppDeps.workers)`);
    }
    if (
      under(from, 'server') &&
      !under(from, 'server/http') &&
      !under(from, 'server/worker') &&
      !ENTRY_POINTS.has(from) &&
      (under(to, 'server/http') || under(to, 'server/worker'))
    ) {
      broken(`what server/http and server/worker share must depend on neither (only ${[...ENTRY_POINTS].join(', ')} wire them together)`);
    }
    if (under(from, 'server') && under(to, 'sdk')) {
      broken('nothing under server/ imports sdk/ (the contract types are generated into server/generated/ too)');
    }
    if (under(from, 'sdk') && under(to, 'server')) {
      broken('nothing under sdk/ imports server/ (the SDK has its own generated types and validators)');
    }
    if (edge.pkg === 'mysql2' && !under(from, 'server/store')) {
      broken('only server/store talks to MySQL: use the store (server/store/database/database.ts) instead of mysql2');
    }
  }
  return problems;
}

function sourceFiles(dir: string, out: string[] = []): string[] {
  for (const entry of readdirSync(join(ROOT, dir), { withFileTypes: true })) {
    if (entry.name === 'node_modules' || entry.name.startsWith('.')) continue;
    const path = `${dir}/${entry.name}`;
    if (entry.isDirectory()) sourceFiles(path, out);
    else if (entry.isFile() && /\.(ts|mts|cts|js|mjs|cjs)$/.test(entry.name)) out.push(path);
  }
  return out;
}

function projectEdges(): { files: string[]; edges: Edge[] } {
  const files = [...sourceFiles('server'), ...sourceFiles('sdk')].sort();
  const edges = files.flatMap((file) => importSpecifiers(file, readFileSync(join(ROOT, file), 'utf8')).map((ref) => resolveEdge(file, ref)));
  return { files, edges };
}

test('the parser finds every kind of import, and nothing in comments or strings', () => {
  const text = [
    `import a from './a.ts';`,
    `import type { B } from "../b.ts";`,
    `import './side-effect.ts';`,
    `import {`,
    `  c1,`,
    `  c2,`,
    `} from './multi-line.ts';`,
    `export { c } from './c.ts';`,
    `export * from './d.ts';`,
    `export * as e from './e.ts';`,
    `export const notAnImport = 1;`,
    'const f = await import(`./f.ts`);',
    `type G = import('./g.ts').G;`,
    `const h = require('mysql2/promise');`,
    `const computed = await import(name);`,
    `// import x from './comment.ts';`,
    `/* export * from './block-comment.ts'; */`,
    `const s = "import y from './string.ts'";`,
  ].join('\n');
  assert.deepEqual(importSpecifiers('sample.ts', text), [
    { specifier: './a.ts', line: 1 },
    { specifier: '../b.ts', line: 2 },
    { specifier: './side-effect.ts', line: 3 },
    { specifier: './multi-line.ts', line: 4 },
    { specifier: './c.ts', line: 8 },
    { specifier: './d.ts', line: 9 },
    { specifier: './e.ts', line: 10 },
    { specifier: './f.ts', line: 12 },
    { specifier: './g.ts', line: 13 },
    { specifier: 'mysql2/promise', line: 14 },
    { specifier: null, line: 15 },
  ]);
});

test('each rule fires on the edge it forbids, and not on the allowed ones', () => {
  const edge = (from: string, specifier: string | null) => resolveEdge(from, { specifier, line: 1 });
  const exists = () => true;
  const broken = (from: string, specifier: string | null) => violations([edge(from, specifier)], exists);
  assert.match(broken('server/domain/x.ts', '../store/tasks/tasks.ts')[0] ?? '', /server\/domain holds pure rules/);
  assert.match(broken('server/domain/x.ts', '../http/envelope.ts')[0] ?? '', /server\/domain holds pure rules/);
  assert.match(broken('server/domain/x.ts', '../worker/frames.ts')[0] ?? '', /server\/domain holds pure rules/);
  assert.match(broken('server/worker/session.ts', '../http/envelope.ts')[0] ?? '', /server\/worker must not import server\/http/);
  assert.match(broken('server/http/handlers/workers.ts', '../../worker/gateway.ts')[0] ?? '', /server\/http must not import server\/worker/);
  assert.match(broken('server/input/strict-json.ts', '../http/field-path.ts')[0] ?? '', /share must depend on neither/);
  assert.match(broken('server/failures.ts', './worker/frames.ts')[0] ?? '', /share must depend on neither/);
  assert.match(broken('server/errors.ts', '../sdk/generated/openapi.ts')[0] ?? '', /nothing under server\/ imports sdk\//);
  assert.match(broken('sdk/worker.ts', '../server/input/strict-json.ts')[0] ?? '', /nothing under sdk\/ imports server\//);
  assert.match(broken('server/http/app.ts', 'mysql2/promise')[0] ?? '', /only server\/store talks to MySQL/);
  assert.match(broken('sdk/index.ts', 'mysql2')[0] ?? '', /only server\/store talks to MySQL/);
  assert.match(broken('server/loops/recovery.ts', null)[0] ?? '', /must name its module literally/);
  assert.match(violations([edge('server/http/app.ts', './nowhere.ts')], () => false)[0] ?? '', /no such file/);
  for (const [from, specifier] of [
    ['server/worker/frames.ts', '../input/strict-json.ts'],
    ['server/http/operations.ts', '../input/strict-json.ts'],
    ['server/worker/session.ts', '../failures.ts'],
    ['server/domain/task-transitions.ts', '../generated/openapi.ts'],
    ['server/server.ts', './worker/gateway.ts'],
    ['server/deps.ts', './http/deps.ts'],
    ['server/store/database/database.ts', 'mysql2/promise'],
    ['server/store/quotas/usage-recount.ts', 'mysql2'],
    ['sdk/worker.ts', './generated/frames.ts'],
  ] as const) {
    assert.deepEqual(broken(from, specifier), [], `${from} → ${specifier} is allowed`);
  }
});

test('server/ and sdk/ keep their layers (docs/architecture.md)', () => {
  const { files, edges } = projectEdges();
  // A moved folder must not turn this test into one that checks nothing.
  for (const dir of ['server/domain', 'server/store', 'server/http', 'server/worker', 'server/input', 'server/generated', 'sdk']) {
    assert.ok(
      files.some((file) => under(file, dir)),
      `no source files found under ${dir}/`,
    );
  }
  assert.ok(
    edges.some((e) => under(e.from, 'server/worker') && under(e.to, 'server/input')),
    'expected server/worker to import server/input (is the parser reading the files?)',
  );
  const problems = violations(edges);
  assert.equal(problems.length, 0, `${problems.length} import(s) break the layers of the code:\n${problems.map((p) => `  - ${p}`).join('\n')}\n`);
});
