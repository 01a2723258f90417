/**
 * Command-line arguments of `orbit-server` and `orbit-admin`, the same way for both: `--help`
 * (or `-h`) anywhere before `--` asks for the command's usage and nothing else; anything the
 * command does not know is a UsageError, reported as
 *
 *   <program>: <problem> (see <program> [command] --help)
 *
 * on stderr with exit code 2 (see `usageFailure`).
 */
import { parseArgs } from 'node:util';
import { PROCESS_IO, type ProgramIo } from './io.ts';

export type FlagSpecs = Record<string, { type: 'string' | 'boolean'; multiple?: boolean }>;

/** Wrong or missing arguments: exit 2. The message is the problem alone, without the program. */
export class UsageError extends Error {}

export interface Flags {
  /** The value of a string flag given once, or undefined. */
  string(name: string): string | undefined;
  /** The values of a repeatable string flag, or undefined when it was not given. */
  strings(name: string): string[] | undefined;
  /** Whether a boolean flag was given. */
  boolean(name: string): boolean;
  /** The value of a string flag that must be there. */
  required(name: string): string;
  /** The values of a repeatable string flag that must be there at least once. */
  requiredStrings(name: string): string[];
}

/** Whether the arguments ask for help (`--help` or `-h` before any `--`). */
export function wantsHelp(args: readonly string[]): boolean {
  for (const arg of args) {
    if (arg === '--') return false;
    if (arg === '--help' || arg === '-h') return true;
  }
  return false;
}

/**
 * The flags of one command, strictly: unknown options, positional arguments, a string flag
 * without a value, a value on a boolean flag, and a single-valued flag given twice are errors.
 */
export function parseFlags(args: readonly string[], specs: FlagSpecs): Flags {
  const { tokens } = parseArgs({ args: [...args], options: specs, strict: false, allowPositionals: true, tokens: true });
  const values = new Map<string, string[] | true>();
  for (const token of tokens) {
    if (token.kind === 'option-terminator') continue;
    if (token.kind === 'positional') throw new UsageError(`unexpected argument '${token.value}'`);
    const spec = Object.hasOwn(specs, token.name) && token.rawName.startsWith('--') ? specs[token.name] : undefined;
    if (!spec) throw new UsageError(`unknown option '${token.rawName}'`);
    if (spec.type === 'boolean') {
      if (token.value !== undefined) throw new UsageError(`option '${token.rawName}' takes no value`);
      values.set(token.name, true);
      continue;
    }
    // `--output --queue x`: a value that looks like an option is a forgotten value (write --output=-x for one).
    if (token.value === undefined || (!token.inlineValue && token.value.startsWith('-'))) {
      throw new UsageError(`option '${token.rawName}' needs a value`);
    }
    const previous = values.get(token.name);
    if (previous !== undefined && !spec.multiple) throw new UsageError(`option '${token.rawName}' is given more than once`);
    values.set(token.name, [...(previous === true || previous === undefined ? [] : previous), token.value]);
  }
  const list = (name: string): string[] | undefined => {
    const value = values.get(name);
    return value === undefined || value === true ? undefined : value;
  };
  return {
    string: (name) => list(name)?.[0],
    strings: list,
    boolean: (name) => values.get(name) === true,
    required(name) {
      const value = list(name)?.[0];
      if (value === undefined || value === '') throw new UsageError(`--${name} is required`);
      return value;
    },
    requiredStrings(name) {
      const value = list(name);
      if (value === undefined) throw new UsageError(`--${name} is required`);
      return value;
    },
  };
}

/** Writes the one line for a UsageError and returns exit code 2. `command` is e.g. `credential create` (or ''). */
export function usageFailure(program: string, command: string, error: UsageError, io: ProgramIo = PROCESS_IO): number {
  io.stderr(`${program}: ${error.message} (see ${[program, command, '--help'].filter(Boolean).join(' ')})\n`);
  return 2;
}
