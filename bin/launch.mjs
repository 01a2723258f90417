// Shared start of the `bin` programs: they run the TypeScript sources through tsx (a runtime
// dependency), so a checkout works right after `npm ci` without a build step.
//
// They use ORBIT_DATABASE_URL or its documented default and never start a database of their
// own: only `npm start` and `npm test` (scripts/) bring up the private MariaDB of a checkout.
import { register } from 'tsx/esm/api';

/** Loads `module` (relative to this folder) and hands it to `run`, whose number is the exit code. */
export async function launch(module, run) {
  register();
  process.exitCode = await run(await import(new URL(module, import.meta.url).href));
}
