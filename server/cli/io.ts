/**
 * What `orbit-server` and `orbit-admin` print to and read from: the process's stdout, stderr and
 * environment unless a caller (a test running a program in process) gives its own. Everything a
 * program says goes through one of these, so that such a caller sees exactly what the spawned
 * program would print. (orbit-server's JSON logs, once it starts, go to the process's stdout.)
 */
export interface ProgramIo {
  stdout(text: string): void;
  stderr(text: string): void;
  /** The environment the settings come from; undefined: this process's (server/config.ts reads it). */
  env?: NodeJS.ProcessEnv;
}

/** The process's own stdout, stderr and environment. */
export const PROCESS_IO: ProgramIo = {
  stdout: (text) => void process.stdout.write(text),
  stderr: (text) => void process.stderr.write(text),
};
