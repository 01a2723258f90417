// Bundles orbit-server's sources into one file, `.local/orbit-server.mjs`, for the server
// processes the tests start (test/helpers/server-process.ts): the same code as
// bin/orbit-server.mjs runs, without loading TypeScript through tsx in every process (~0.9 s of
// CPU each, and the suite starts dozens). Dependencies stay in node_modules. It sits at the
// root's depth, so server/paths.ts finds the specs and migrations from it. Run by `npm test`
// before the integration tier; the bin programs never use it.
import path from 'node:path';
import { fileURLToPath } from 'node:url';
import { build } from 'esbuild';

const root = path.resolve(path.dirname(fileURLToPath(import.meta.url)), '..');
export const SERVER_BUNDLE = path.join(root, '.local', 'orbit-server.mjs');

await build({
  stdin: {
    contents: "import { main } from './server/main.ts';\nprocess.exitCode = await main(process.argv.slice(2));\n",
    resolveDir: root,
    sourcefile: 'orbit-server-bundle.ts',
    loader: 'ts',
  },
  bundle: true,
  platform: 'node',
  format: 'esm',
  target: 'node20',
  packages: 'external',
  sourcemap: true,
  outfile: SERVER_BUNDLE,
  logLevel: 'warning',
});
