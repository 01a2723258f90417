// Shared start of the `bin` programs: they run the TypeScript sources through tsx (a runtime
// dependency), so a checkout works right after `npm ci` without a build step.
import { register } from 'tsx/esm/api';

/**
 * Without ORBIT_DATABASE_URL, use the same database `npm start` and `npm test` use: MariaDB at
 * 127.0.0.1:3306 when it answers, else the private one under .local/mariadb (started if needed).
 * Then load `module` (relative to this folder) and hand it to `run`, whose number is the exit code.
 */
export async function launch(name, module, run) {
  if (!process.env.ORBIT_DATABASE_URL) {
    const { ensureDatabase } = await import('../scripts/local-db.mjs');
    try {
      const { url } = await ensureDatabase({ log: (line) => process.stderr.write(`orbit: ${line}\n`) });
      process.env.ORBIT_DATABASE_URL = `${url}/orbit`;
    } catch (error) {
      process.stderr.write(`${name}: ${error.message}\n`);
      process.exit(1);
    }
  }
  register();
  process.exitCode = await run(await import(new URL(module, import.meta.url).href));
}
