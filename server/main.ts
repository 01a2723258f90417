/** `orbit-server`: reads the environment, starts one server process, stops cleanly on SIGINT/SIGTERM. */
import { loadConfig } from './config.ts';
import { createLogger } from './log.ts';
import { startServer } from './server.ts';

export async function main(): Promise<number> {
  let config;
  try {
    config = loadConfig();
  } catch (error) {
    process.stderr.write(`orbit-server: ${(error as Error).message}\n`);
    return 2;
  }
  const log = createLogger(config.logLevel);
  let running;
  try {
    running = await startServer(config, { log });
  } catch (error) {
    log.fatal({ err: error }, (error as Error).message);
    return 1;
  }
  await new Promise<void>((resolve) => {
    const stop = (signal: string) => {
      log.info({ signal }, 'shutting down');
      resolve();
    };
    process.once('SIGINT', stop);
    process.once('SIGTERM', stop);
  });
  await running.close();
  return 0;
}
