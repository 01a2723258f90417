// Runs the given test files in this one process (the unit tier): each `node --test` file
// otherwise pays for a process of its own and for loading TypeScript again, which is most of
// what the unit tier would cost. The files register their tests with node:test on import;
// the runner runs them when the imports are done. Used by scripts/test.mjs; a unit test must
// therefore leave nothing behind it (timers mocked, environment changed, listeners open).
import path from 'node:path';
import { pathToFileURL } from 'node:url';

for (const file of process.argv.slice(2)) await import(pathToFileURL(path.resolve(file)).href);
