/**
 * Runs the real `bin/orbit-admin.mjs` / `bin/orbit-server.mjs` (or a script) to its exit, as a
 * user would, and returns what the user sees. A program that does not exit in time is killed
 * and the test fails: "fails fast" is part of what is tested.
 *
 * Or runs the same `main` in this process (`adminInProcess`, `serverArgsInProcess`), with the
 * environment the spawned program would get, and returns what it would print: a spawn costs
 * about a second of CPU (tsx loads the sources), a call almost nothing. test/integration/cli.test.ts
 * checks that both print the same.
 */
import { spawn } from 'node:child_process';
import { createServer, type Server } from 'node:net';
import { fileURLToPath } from 'node:url';
import type { ProgramIo } from '../../server/cli/io.ts';

export const ROOT = fileURLToPath(new URL('../..', import.meta.url));
export const ORBIT_ADMIN = fileURLToPath(new URL('../../bin/orbit-admin.mjs', import.meta.url));
export const ORBIT_SERVER = fileURLToPath(new URL('../../bin/orbit-server.mjs', import.meta.url));

export interface ProgramResult {
  code: number | null;
  stdout: string;
  stderr: string;
  /** Milliseconds from spawn to exit. */
  ms: number;
}

/** Every ORBIT_* variable of this process removed, then `env` on top (undefined: left unset). */
export function cleanEnv(env: Record<string, string | undefined> = {}): NodeJS.ProcessEnv {
  const base: NodeJS.ProcessEnv = {};
  for (const [key, value] of Object.entries(process.env)) if (!key.startsWith('ORBIT_')) base[key] = value;
  for (const [key, value] of Object.entries(env)) {
    if (value === undefined) delete base[key];
    else base[key] = value;
  }
  return base;
}

export function runProgram(
  file: string,
  args: string[],
  options: { env?: Record<string, string | undefined>; timeoutMs?: number } = {},
): Promise<ProgramResult> {
  const started = Date.now();
  const child = spawn(process.execPath, [file, ...args], { cwd: ROOT, env: cleanEnv(options.env), stdio: ['ignore', 'pipe', 'pipe'] });
  let stdout = '';
  let stderr = '';
  child.stdout.on('data', (chunk: Buffer) => (stdout += chunk.toString()));
  child.stderr.on('data', (chunk: Buffer) => (stderr += chunk.toString()));
  const timeoutMs = options.timeoutMs ?? 30_000;
  return new Promise((resolve, reject) => {
    const timer = setTimeout(() => {
      child.kill('SIGKILL');
      reject(new Error(`${file} ${args.join(' ')} did not exit within ${timeoutMs} ms\nstdout: ${stdout}\nstderr: ${stderr}`));
    }, timeoutMs);
    child.once('error', reject);
    child.once('close', (code) => {
      clearTimeout(timer);
      resolve({ code, stdout, stderr, ms: Date.now() - started });
    });
  });
}

export function admin(args: string[], env?: Record<string, string | undefined>, timeoutMs?: number): Promise<ProgramResult> {
  return runProgram(ORBIT_ADMIN, args, { env, timeoutMs });
}

export function server(args: string[], env?: Record<string, string | undefined>, timeoutMs?: number): Promise<ProgramResult> {
  return runProgram(ORBIT_SERVER, args, { env, timeoutMs });
}

/** What a program run in process printed, and its exit code. */
export interface InProcessResult {
  code: number;
  stdout: string;
  stderr: string;
}

function capture(env: Record<string, string | undefined> | undefined): { io: ProgramIo; printed: { stdout: string; stderr: string } } {
  const printed = { stdout: '', stderr: '' };
  const io: ProgramIo = { stdout: (text) => void (printed.stdout += text), stderr: (text) => void (printed.stderr += text), env: cleanEnv(env) };
  return { io, printed };
}

/** The sockets and listeners this process has open (what a call that started something would leave). */
function openSockets(): number {
  return process.getActiveResourcesInfo().filter((name) => name.startsWith('TCP') || name.startsWith('Pipe')).length;
}

/**
 * `orbit-admin args` run in this process, with the environment `admin(args, env)` would give it.
 * A command that gets as far as the database opens a pool and closes it before returning, as
 * the program does.
 */
export async function adminInProcess(args: string[], env?: Record<string, string | undefined>): Promise<InProcessResult> {
  // Imported on first use: a test that only spawns the programs does not load the server here.
  const { main } = await import('../../server/cli/orbit-admin.ts');
  const { io, printed } = capture(env);
  const code = await main(args, io);
  return { code, ...printed };
}

/**
 * The environment of an orbit-admin command a test runs on its database: ORBIT_DATABASE_URL, and
 * the lock-order and shard-routing checks as this process has them (`npm test` sets both), so that
 * the command's statements are checked like the test's own. For `admin()` or `adminInProcess()`.
 */
export function adminEnv(databaseUrl: string): Record<string, string | undefined> {
  return {
    ORBIT_DATABASE_URL: databaseUrl,
    ORBIT_CHECK_LOCK_ORDER: process.env.ORBIT_CHECK_LOCK_ORDER,
    ORBIT_CHECK_SHARD_ROUTING: process.env.ORBIT_CHECK_SHARD_ROUTING,
    ORBIT_SINGLE_STATEMENTS: process.env.ORBIT_SINGLE_STATEMENTS,
  };
}

/**
 * `orbit-server args` run in this process, only as far as it goes before starting anything:
 * `--help`, wrong arguments, a bad environment variable. Arguments and an environment it would
 * start with are an error here (spawn it with `server()`); and it is checked that nothing was
 * left listening or connected.
 */
export async function serverArgsInProcess(args: string[], env?: Record<string, string | undefined>): Promise<InProcessResult> {
  const { invocation } = await import('../../server/main.ts');
  const { io, printed } = capture(env);
  const before = openSockets();
  const decided = invocation(args, io);
  if (!('exitCode' in decided)) throw new Error(`orbit-server ${args.join(' ')} would start a server: run it with server(), not in process`);
  const after = openSockets();
  if (after > before) throw new Error(`orbit-server ${args.join(' ')} left ${after - before} socket(s) open`);
  return { code: decided.exitCode, ...printed };
}

/** A TCP port on 127.0.0.1 that nothing listens on (bound, then released). */
export async function unusedPort(): Promise<number> {
  const probe = createServer();
  await new Promise<void>((resolve) => probe.listen(0, '127.0.0.1', resolve));
  const { port } = probe.address() as { port: number };
  await new Promise<void>((resolve) => probe.close(() => resolve()));
  return port;
}

/** A listener on 127.0.0.1 holding a port, so that another process cannot listen on it. */
export async function occupiedPort(): Promise<{ port: number; server: Server; close(): Promise<void> }> {
  const holder = createServer();
  await new Promise<void>((resolve) => holder.listen(0, '127.0.0.1', resolve));
  const { port } = holder.address() as { port: number };
  return { port, server: holder, close: () => new Promise<void>((resolve) => holder.close(() => resolve())) };
}

/** The lines of a program's stderr (without the empty one after the last newline). */
export function lines(text: string): string[] {
  return text.split('\n').filter((line, i, all) => line !== '' || i < all.length - 1);
}
