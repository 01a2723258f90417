/**
 * Runs the real `bin/orbit-admin.mjs` / `bin/orbit-server.mjs` (or a script) to its exit, as a
 * user would, and returns what the user sees. A program that does not exit in time is killed
 * and the test fails: "fails fast" is part of what is tested.
 */
import { spawn } from 'node:child_process';
import { createServer, type Server } from 'node:net';
import { fileURLToPath } from 'node:url';

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
