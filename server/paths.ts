/**
 * Where a checkout's files are: the repository root and what the server reads from it (the
 * specs, migrations, the console bundle). One module at the root's depth, so that the same
 * sources bundled into one file beside it (`.local/orbit-server.mjs`, what the tests' server
 * processes run; scripts/bundle-server.mjs) still find them.
 */
import { fileURLToPath } from 'node:url';
import { join } from 'node:path';

export const ROOT = fileURLToPath(new URL('..', import.meta.url));
export const OPENAPI_PATH = join(ROOT, 'openapi.yaml');
export const ASYNCAPI_PATH = join(ROOT, 'asyncapi.yaml');
export const MIGRATIONS_DIR = join(ROOT, 'migrations/');
export const CONSOLE_DIR = join(ROOT, 'console/');
