/**
 * `npm run codegen` writes every generated file; `npm run codegen:check` (and a test) fails
 * when a committed generated file differs from what the specs produce now.
 */
import { mkdirSync, readFileSync, writeFileSync, existsSync } from 'node:fs';
import { dirname, resolve } from 'node:path';
import { fileURLToPath } from 'node:url';
import { generateOpenApi } from './openapi.ts';
import { generateAsyncApi } from './asyncapi.ts';

export async function generateAll(root: string): Promise<Record<string, string>> {
  return { ...(await generateOpenApi(root)), ...generateAsyncApi(root) };
}

/** The generated files that differ from what is on disk (missing files included). */
export async function staleFiles(root: string): Promise<string[]> {
  const files = await generateAll(root);
  return Object.entries(files)
    .filter(([path, contents]) => !existsSync(resolve(root, path)) || readFileSync(resolve(root, path), 'utf8') !== contents)
    .map(([path]) => path);
}

async function main(): Promise<void> {
  const root = resolve(dirname(fileURLToPath(import.meta.url)), '..');
  if (process.argv.includes('--check')) {
    const stale = await staleFiles(root);
    if (stale.length > 0) {
      console.error(`generated code is stale; run \`npm run codegen\`:\n${stale.map((p) => `  ${p}`).join('\n')}`);
      process.exit(1);
    }
    console.log('generated code is fresh');
    return;
  }
  const files = await generateAll(root);
  for (const [path, contents] of Object.entries(files)) {
    mkdirSync(dirname(resolve(root, path)), { recursive: true });
    writeFileSync(resolve(root, path), contents);
    console.log(`wrote ${path}`);
  }
}

if (process.argv[1] && resolve(process.argv[1]) === fileURLToPath(import.meta.url)) {
  await main();
}
