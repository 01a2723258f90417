/** Structured JSON logs (pino): one line per event, with the request id where there is one. */
import { pino, type Logger } from 'pino';

export type { Logger };

export function createLogger(level: string = 'info'): Logger {
  return pino({ level, base: { service: 'orbit-server', pid: process.pid }, timestamp: pino.stdTimeFunctions.isoTime });
}

/** For tests and tools that want no output. */
export function silentLogger(): Logger {
  return pino({ level: 'silent' });
}
