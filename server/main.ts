/**
 * `orbit-server`: reads the environment, starts one server process, stops cleanly on SIGINT/SIGTERM.
 *
 * Exit codes: 0 stopped by a signal (or `--help`); 1 could not start (database unreachable,
 * migrations pending or from a newer build, address in use); 2 wrong arguments or a bad
 * environment variable. A failure to start is one line on stderr, `orbit-server: …`.
 */
import { ConfigError, SETTINGS, loadConfig, redactUrl, type ServerConfig } from './config.ts';
import { createLogger } from './log.ts';
import { StartupError, startServer } from './server.ts';
import { UsageError, parseFlags, usageFailure, wantsHelp } from './cli/args.ts';
import { PROCESS_IO, type ProgramIo } from './cli/io.ts';

const PROGRAM = 'orbit-server';

function wrap(text: string, indent: string, width = 96): string {
  const lines: string[] = [];
  let line = '';
  for (const word of text.split(' ')) {
    if (line && indent.length + line.length + 1 + word.length > width) {
      lines.push(indent + line);
      line = word;
    } else line = line ? `${line} ${word}` : word;
  }
  return [...lines, indent + line].join('\n');
}

export function usage(): string {
  const settings = SETTINGS.map((s) => `  ${s.name}: ${s.range}; default ${s.default}\n${wrap(s.meaning, '      ')}`).join('\n');
  return `usage: ${PROGRAM} [--help]

The Orbit HTTP and WebSocket server with its background loops. It takes no arguments; it is
configured by the environment and refuses to start while migrations are pending (run
\`orbit-admin migrate\`) or when the database has migrations of a newer build. Stops cleanly on
SIGINT or SIGTERM. Logs are JSON lines on stdout; a failure to start is one line on stderr.

Environment (an empty variable counts as unset):
${settings}

Exit codes: 0 stopped by a signal, 1 could not start, 2 wrong arguments or environment.
`;
}

function fail(io: ProgramIo, message: string, code: number): number {
  io.stderr(`${PROGRAM}: ${message}\n`);
  return code;
}

/**
 * Everything orbit-server decides before it starts anything (no socket, no database
 * connection): `--help` (printed, exit 0), wrong arguments or a bad environment variable
 * (its line printed, exit 2) - or, when the arguments and environment are good, the settings
 * to start with.
 */
export function invocation(argv: string[], io: ProgramIo = PROCESS_IO): { exitCode: number } | { config: ServerConfig } {
  if (wantsHelp(argv)) {
    io.stdout(usage());
    return { exitCode: 0 };
  }
  try {
    parseFlags(argv, {});
    return { config: loadConfig(io.env) };
  } catch (error) {
    if (error instanceof UsageError) return { exitCode: usageFailure(PROGRAM, '', error, io) };
    if (error instanceof ConfigError) return { exitCode: fail(io, error.message, 2) };
    throw error;
  }
}

/** Runs `orbit-server argv` until a signal stops it and returns its exit code; `io`: where its own lines go and the environment it reads. */
export async function main(argv: string[] = [], io: ProgramIo = PROCESS_IO): Promise<number> {
  const decided = invocation(argv, io);
  if ('exitCode' in decided) return decided.exitCode;
  const { config } = decided;
  const log = createLogger(config.logLevel);
  log.info(
    {
      database: redactUrl(config.databaseUrl),
      listen: `${config.listenHost.includes(':') ? `[${config.listenHost}]` : config.listenHost}:${config.listenPort}`,
    },
    'starting',
  );
  let running: Awaited<ReturnType<typeof startServer>>;
  try {
    running = await startServer(config, { log });
  } catch (error) {
    if (error instanceof StartupError) {
      log.fatal(error.message);
      return fail(io, error.message, 1);
    }
    log.fatal({ err: error }, (error as Error).message);
    return fail(io, (error as Error).stack ?? String(error), 1);
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
