// `npm run lint` (also run by `npm test`): the code and the two specs.
//   1. Biome (biome.json): formatting and lint rules of the TypeScript and scripts;
//   2. Redocly (redocly.yaml, .redocly.lint-ignore.yaml): openapi.yaml against its recommended rules;
//   3. @asyncapi/parser: asyncapi.yaml parses and validates (errors and warnings fail).
// `npm run lint -- --write` lets Biome fix what it safely can first.
import { spawnSync } from 'node:child_process';
import fs from 'node:fs';
import path from 'node:path';
import { createRequire } from 'node:module';
import { fileURLToPath } from 'node:url';

const root = path.resolve(path.dirname(fileURLToPath(import.meta.url)), '..');
const require = createRequire(import.meta.url);
let failed = false;
const say = (line) => console.error(`orbit lint: ${line}`);

// 1. Biome.
const biome = require.resolve('@biomejs/biome/bin/biome');
const write = process.argv.includes('--write');
const checked = spawnSync(process.execPath, [biome, 'check', ...(write ? ['--write'] : []), '--no-errors-on-unmatched', '.'], { cwd: root, stdio: 'inherit' });
if (checked.status !== 0) {
  failed = true;
  say('Biome found problems (`npm run lint -- --write` fixes formatting)');
}

// 2. openapi.yaml.
const { lint, loadConfig } = await import('@redocly/openapi-core');
const config = await loadConfig({ configPath: path.join(root, 'redocly.yaml') });
const problems = (await lint({ ref: path.join(root, 'openapi.yaml'), config })).filter((p) => !p.ignored);
for (const p of problems) say(`openapi.yaml ${p.severity} ${p.ruleId}: ${p.message} (${p.location?.[0]?.pointer ?? ''})`);
if (problems.length > 0) failed = true;
else say('openapi.yaml: no problems (Redocly recommended rules)');

// 3. asyncapi.yaml.
const { Parser } = await import('@asyncapi/parser');
const { document, diagnostics } = await new Parser().parse(fs.readFileSync(path.join(root, 'asyncapi.yaml'), 'utf8'));
const serious = diagnostics.filter((d) => d.severity <= 1); // 0 error, 1 warning (2 information, 3 hint)
for (const d of diagnostics)
  say(`asyncapi.yaml ${['error', 'warning', 'information', 'hint'][d.severity]} ${d.code}: ${d.message} (${(d.path ?? []).join('.')})`);
if (!document || serious.length > 0) failed = true;
else say('asyncapi.yaml: valid (@asyncapi/parser)');

process.exit(failed ? 1 : 0);
