/**
 * `orbit-admin`: database-level administration (docs/architecture.md#components). It needs
 * database credentials, not an Orbit token: it is how the first credentials come to exist.
 *
 * Exit codes: 0 done (also `--help`, and revoking a credential that was already revoked);
 * 1 the command could not be done (unknown id, database unreachable, version mismatch);
 * 2 wrong arguments or a bad ORBIT_DATABASE_URL (one line on stderr, see args.ts).
 */
import { openSync, writeSync, closeSync, fchmodSync } from 'node:fs';
import { ConfigError, DEFAULT_DATABASE_URL, databaseProblem, databaseUrlFromEnv, redactUrl, databaseChecksFromEnv } from '../config.ts';
import { hexToId, idToHex, isHexId } from '../ids.ts';
import { APPLICATION_ACTIONS, NAMESPACE_ACTIONS, isAction, type Action } from '../domain/actions.ts';
import { OrbitError } from '../errors.ts';
import { sqlToRfc3339 } from '../time.ts';
import { createDatabase, type Database } from '../store/database/database.ts';
import { migrate, MigrationMismatchError } from '../store/database/migrate.ts';
import { credentialCreate, credentialRevoke } from '../store/tenancy/credentials.ts';
import { tenantBootstrap } from '../store/tenancy/bootstrap.ts';
import { ENVIRONMENTS, applicationSetEnabled, namespaceFindById, namespaceSetEnabled, type Environment } from '../store/tenancy/tenancy.ts';
import { UsageError, parseFlags, usageFailure, wantsHelp, type FlagSpecs, type Flags } from './args.ts';
import { VERIFY_USAGE, verifyCommand } from './verify-command.ts';
import { pruneCommand } from './prune-command.ts';
import { PROCESS_IO, type ProgramIo } from './io.ts';

const PROGRAM = 'orbit-admin';

/** What a command gets besides its flags. The database URL is read (and checked) on first use. */
export interface AdminContext {
  /** ORBIT_DATABASE_URL or the default; a bad one is a ConfigError (exit 2). */
  url(): string;
  /** A small pool on that database, opened on first use and closed after the command. */
  db(): Database;
  /** A line of progress on stderr. */
  say(line: string): void;
  /** Where the command prints (its stdout) and the environment its settings come from. */
  io: ProgramIo;
}

/** One command (`migrate`) or subcommand (`credential revoke`). */
export interface AdminCommand {
  /** Its synopsis without the leading `orbit-admin `, lines after the first indented. */
  synopsis: string;
  /** The rest of its `--help`: what it does and its options. */
  help: string;
  flags: FlagSpecs;
  run(flags: Flags, ctx: AdminContext): Promise<void>;
}

/** `application`, `namespace`, `credential`: a word and its subcommands. */
interface CommandGroup {
  subcommands: Record<string, AdminCommand>;
}

/**
 * A command that parses its own arguments and prints its own `--help` (which must do nothing
 * else), and returns its exit code; database errors it throws are reported like the others'.
 */
interface SelfParsingCommand {
  /** Its whole `--help` text; the first line, `usage: orbit-admin …`, goes into the top-level usage. */
  usage: string;
  main(args: string[], ctx: AdminContext): Promise<number>;
}

type Entry = AdminCommand | CommandGroup | SelfParsingCommand;

/** A well-formed command that cannot be done (unknown id, say): the message, exit 1. */
class AdminError extends Error {}

const DATABASE_NOTE = `Database: ORBIT_DATABASE_URL (default ${DEFAULT_DATABASE_URL}); its password is never printed.`;

const NAME = /^[a-z0-9][a-z0-9._-]{0,62}$/;
const APPLICATION_NAME = /^[A-Za-z0-9][A-Za-z0-9._-]{0,127}$/;

function idFlag(flags: Flags, name: string): Buffer {
  const text = flags.required(name);
  if (!isHexId(text)) throw new UsageError(`--${name} must be 32 lowercase hex characters`);
  return hexToId(text);
}

function environmentFlag(flags: Flags): Environment {
  const value = flags.required('environment');
  if (!(ENVIRONMENTS as readonly string[]).includes(value)) throw new UsageError(`--environment must be one of ${ENVIRONMENTS.join(', ')}`);
  return value as Environment;
}

/** One line of compact JSON, mode 0600 (also when the file already existed). */
function writeCredentialsFile(path: string, contents: Record<string, unknown>): void {
  const fd = openSync(path, 'w', 0o600);
  try {
    fchmodSync(fd, 0o600);
    writeSync(fd, `${JSON.stringify(contents)}\n`);
  } finally {
    closeSync(fd);
  }
}

const migrateCommand: AdminCommand = {
  synopsis: 'migrate',
  help: `Creates the database if it is missing and applies the pending migrations (migrations/*.sql) in
order. Refuses a database that has a migration this build does not know (run a newer
orbit-admin) or one whose file changed after it was applied.`,
  flags: {},
  async run(_flags, ctx) {
    const result = await migrate(ctx.url(), ctx.say);
    ctx.say(
      result.applied.length === 0
        ? `database is up to date (migration ${result.current})`
        : `applied ${result.applied.length} migration(s); now at ${result.current}`,
    );
  },
};

const bootstrapCommand: AdminCommand = {
  synopsis: `bootstrap (--application NAME | --application-id ID) --namespace NAME
          --environment development|staging|production --queue NAME [--queue NAME…]
          [--resource-access] --output FILE`,
  help: `Creates what is missing of the application, the namespace and the queues (reusing ones of the
same name), then always issues a new credential with every namespace action on those queues,
and writes the credentials file: one line of compact JSON, mode 0600.

  --application NAME       the application by name (created when missing)
  --application-id ID      an existing, enabled application (32 hex characters)
  --namespace NAME         [a-z0-9][a-z0-9._-]{0,62}
  --environment ENV        development, staging or production
  --queue NAME             repeatable; created when missing
  --resource-access        also grant application:resources:read, :manage and :configure
  --output FILE            where to write the credentials`,
  flags: {
    application: { type: 'string' },
    'application-id': { type: 'string' },
    namespace: { type: 'string' },
    environment: { type: 'string' },
    queue: { type: 'string', multiple: true },
    'resource-access': { type: 'boolean' },
    output: { type: 'string' },
  },
  async run(flags, ctx) {
    const application = flags.string('application');
    if ((application === undefined) === (flags.string('application-id') === undefined)) {
      throw new UsageError('give exactly one of --application NAME or --application-id ID');
    }
    if (application !== undefined && !APPLICATION_NAME.test(application)) {
      throw new UsageError('--application must match [A-Za-z0-9][A-Za-z0-9._-]{0,127}');
    }
    const applicationId = application === undefined ? idFlag(flags, 'application-id') : undefined;
    const namespace = flags.required('namespace');
    if (!NAME.test(namespace)) throw new UsageError('--namespace must match [a-z0-9][a-z0-9._-]{0,62}');
    const environment = environmentFlag(flags);
    const queues = flags.requiredStrings('queue');
    for (const queue of queues) if (!NAME.test(queue)) throw new UsageError(`--queue ${queue}: must match [a-z0-9][a-z0-9._-]{0,62}`);
    const output = flags.required('output');
    const resourceAccess = flags.boolean('resource-access');
    const actions: Action[] = [...NAMESPACE_ACTIONS, ...(resourceAccess ? APPLICATION_ACTIONS : [])];

    const result = await tenantBootstrap(ctx.db(), { applicationName: application, applicationId, namespace, environment, queues, actions }, ctx.say);
    writeCredentialsFile(output, {
      application_id: idToHex(result.application.application_id),
      application: result.application.name,
      namespace_id: idToHex(result.namespace.namespace_id),
      namespace: result.namespace.name,
      environment,
      credential_id: idToHex(result.credentialId),
      token: result.token,
      actions,
      queues: [...new Set(queues)],
    });
    ctx.say(`created credential ${idToHex(result.credentialId)}${resourceAccess ? ' with application resource access' : ''}; wrote ${output} (mode 0600)`);
  },
};

function toggleCommand(kind: 'application' | 'namespace', verb: 'enable' | 'disable'): AdminCommand {
  const flag = `${kind}-id`;
  return {
    synopsis: `${kind} ${verb} --${flag} ID`,
    help:
      verb === 'disable'
        ? `Disables the ${kind}: ${kind === 'application' ? 'every namespace of it answers' : 'it answers'} 401 to every user operation; recovery keeps running for it.

  --${flag} ID   32 hex characters`
        : `Enables the ${kind} again.

  --${flag} ID   32 hex characters`,
    flags: { [flag]: { type: 'string' } },
    async run(flags, ctx) {
      const id = idFlag(flags, flag);
      const db = ctx.db();
      const ok = kind === 'application' ? await applicationSetEnabled(db, id, verb === 'enable') : await namespaceSetEnabled(db, id, verb === 'enable');
      if (!ok) throw new AdminError(`${kind} ${idToHex(id)} does not exist`);
      ctx.say(`${kind} ${idToHex(id)} ${verb}d`);
    },
  };
}

const credentialCreateCommand: AdminCommand = {
  synopsis: `credential create --namespace-id ID [--action ACTION…] [--queue NAME…|--queue '*']
          [--resource-access] [--expires-at RFC3339] [--description TEXT] --output FILE`,
  help: `Issues another credential for an existing namespace and writes its credentials file (one line
of compact JSON, mode 0600).

  --namespace-id ID        32 hex characters
  --action ACTION          repeatable; default: every namespace action
  --queue NAME             repeatable; default '*' (every queue)
  --resource-access        also grant application:resources:read, :manage and :configure
  --expires-at RFC3339     when it stops working (default: never)
  --description TEXT       kept with the credential
  --output FILE            where to write the credentials`,
  flags: {
    'namespace-id': { type: 'string' },
    action: { type: 'string', multiple: true },
    queue: { type: 'string', multiple: true },
    'resource-access': { type: 'boolean' },
    'expires-at': { type: 'string' },
    description: { type: 'string' },
    output: { type: 'string' },
  },
  async run(flags, ctx) {
    const namespaceId = idFlag(flags, 'namespace-id');
    const output = flags.required('output');
    const resourceAccess = flags.boolean('resource-access');
    const requested = flags.strings('action') ?? [...NAMESPACE_ACTIONS];
    for (const action of requested) if (!isAction(action)) throw new UsageError(`--action ${action}: unknown action`);
    if (!resourceAccess && requested.some((a) => (APPLICATION_ACTIONS as readonly string[]).includes(a))) {
      throw new UsageError('application actions are granted only with --resource-access');
    }
    const actions = [...new Set([...(requested as Action[]), ...(resourceAccess ? APPLICATION_ACTIONS : [])])];
    const queues = flags.strings('queue') ?? ['*'];
    for (const queue of queues) if (queue !== '*' && !NAME.test(queue)) throw new UsageError(`--queue ${queue}: must match [a-z0-9][a-z0-9._-]{0,62} or be *`);
    let expiresAt: string | null = null;
    const expiresFlag = flags.string('expires-at');
    if (expiresFlag !== undefined) {
      const ms = Date.parse(expiresFlag);
      if (Number.isNaN(ms)) throw new UsageError('--expires-at must be an RFC 3339 time');
      expiresAt = new Date(ms).toISOString().replace('T', ' ').replace('Z', '');
    }
    const db = ctx.db();
    const ns = await namespaceFindById(db, namespaceId);
    if (!ns) throw new AdminError(`namespace ${idToHex(namespaceId)} does not exist`);
    const credential = await credentialCreate(db, {
      applicationId: ns.application_id,
      namespaceId,
      actions,
      queues,
      description: flags.string('description') ?? 'orbit-admin credential create',
      expiresAt,
    });
    writeCredentialsFile(output, {
      application_id: idToHex(ns.application_id),
      namespace_id: idToHex(namespaceId),
      namespace: ns.name,
      environment: ns.environment,
      credential_id: idToHex(credential.credentialId),
      token: credential.token,
      actions,
      queues,
    });
    ctx.say(`created credential ${idToHex(credential.credentialId)}; wrote ${output} (mode 0600)`);
  },
};

const credentialRevokeCommand: AdminCommand = {
  synopsis: 'credential revoke --credential-id ID',
  help: `Revokes a credential (the row is kept): writes with it stop at once, reads within
ORBIT_AUTH_CACHE_MS. A credential that was already revoked stays as it is; that is said, and
the exit code is 0. An unknown id is exit code 1.

  --credential-id ID   32 hex characters`,
  flags: { 'credential-id': { type: 'string' } },
  async run(flags, ctx) {
    const id = idFlag(flags, 'credential-id');
    const result = await credentialRevoke(ctx.db(), id);
    if (!result) throw new AdminError(`credential ${idToHex(id)} does not exist`);
    const at = sqlToRfc3339(result.revokedAt);
    ctx.say(result.alreadyRevoked ? `credential ${idToHex(id)} was already revoked at ${at}` : `revoked credential ${idToHex(id)} at ${at}`);
  },
};

/**
 * Every command. Another command is one more line here, its code in a file of its own (an
 * AdminCommand, or a SelfParsingCommand like verify); its synopsis then appears in
 * `orbit-admin --help`.
 */
const COMMANDS: Record<string, Entry> = {
  migrate: migrateCommand,
  bootstrap: bootstrapCommand,
  application: { subcommands: { enable: toggleCommand('application', 'enable'), disable: toggleCommand('application', 'disable') } },
  namespace: { subcommands: { enable: toggleCommand('namespace', 'enable'), disable: toggleCommand('namespace', 'disable') } },
  credential: { subcommands: { create: credentialCreateCommand, revoke: credentialRevokeCommand } },
  verify: { usage: VERIFY_USAGE, main: (args, ctx) => verifyCommand(args, ctx.url, ctx.io) },
  prune: pruneCommand,
};

function isGroup(entry: Entry): entry is CommandGroup {
  return 'subcommands' in entry;
}

function isSelfParsing(entry: Entry): entry is SelfParsingCommand {
  return 'main' in entry;
}

function synopsisOf(entry: AdminCommand | SelfParsingCommand): string {
  if (!isSelfParsing(entry)) return entry.synopsis;
  return (entry.usage.split('\n')[0] ?? '').replace(/^usage:\s*/, '').replace(new RegExp(`^${PROGRAM}\\s+`), '');
}

function synopses(commands: Array<AdminCommand | SelfParsingCommand>): string {
  const continued = `\n${' '.repeat('usage: '.length + PROGRAM.length + 3)}`;
  return commands.map((command, i) => `${i === 0 ? 'usage: ' : '       '}${PROGRAM} ${synopsisOf(command).replace(/\n\s*/g, continued)}`).join('\n');
}

function allCommands(): Array<AdminCommand | SelfParsingCommand> {
  return Object.values(COMMANDS).flatMap((entry) => (isGroup(entry) ? Object.values(entry.subcommands) : [entry]));
}

function topUsage(): string {
  return `${synopses(allCommands())}
       ${PROGRAM} help [COMMAND]      (or COMMAND --help: the usage of one command)

${DATABASE_NOTE}
Exit codes: 0 done, 1 could not be done, 2 wrong arguments.
`;
}

function commandUsage(command: AdminCommand): string {
  return `${synopses([command])}\n\n${command.help}\n\n${DATABASE_NOTE}\n`;
}

function groupUsage(group: CommandGroup): string {
  return `${synopses(Object.values(group.subcommands))}\n\n${DATABASE_NOTE}\n`;
}

/** `words` (e.g. ['credential', 'create']) → what they name, its name, and the arguments after it. */
function resolve(argv: string[]): { entry: Entry | null; name: string; rest: string[] } {
  const [first, second] = argv;
  if (first === undefined || first.startsWith('-')) return { entry: null, name: '', rest: argv };
  const top = Object.hasOwn(COMMANDS, first) ? COMMANDS[first] : undefined;
  if (!top) throw new UsageError(`unknown command '${first}'`);
  if (!isGroup(top)) return { entry: top, name: first, rest: argv.slice(1) };
  if (second === undefined || second.startsWith('-')) return { entry: top, name: first, rest: argv.slice(1) };
  const sub = Object.hasOwn(top.subcommands, second) ? top.subcommands[second] : undefined;
  if (!sub) throw new UsageErrorIn(first, `unknown command '${first} ${second}'`);
  return { entry: sub, name: `${first} ${second}`, rest: argv.slice(2) };
}

/** A UsageError whose `--help` hint names a command other than the one being parsed. */
class UsageErrorIn extends UsageError {
  constructor(
    readonly command: string,
    message: string,
  ) {
    super(message);
  }
}

function usageOf(entry: Entry | null): string {
  if (entry === null) return topUsage();
  if (isSelfParsing(entry)) return entry.usage.endsWith('\n') ? entry.usage : `${entry.usage}\n`;
  return isGroup(entry) ? groupUsage(entry) : commandUsage(entry);
}

function subcommandList(group: CommandGroup): string {
  const names = Object.keys(group.subcommands);
  return names.length === 2 ? names.join(' or ') : names.join(', ');
}

/** Runs `orbit-admin argv` and returns its exit code; `io`: where it prints and the environment it reads. */
export async function main(argv: string[], io: ProgramIo = PROCESS_IO): Promise<number> {
  if (argv.length === 0) {
    io.stderr(topUsage());
    return 2;
  }
  let name = '';
  const opened: { url: string | null; pool: Database | null } = { url: null, pool: null };
  const say = (line: string) => io.stderr(`${line}\n`);
  const ctx: AdminContext = {
    url() {
      if (opened.url === null) {
        opened.url = databaseUrlFromEnv(io.env);
        say(`using database ${redactUrl(opened.url)}`);
      }
      return opened.url;
    },
    db() {
      // No statement timeout: an operator's command waits for the database rather than give up.
      opened.pool ??= createDatabase({ url: ctx.url(), connectionLimit: 2, timeoutMs: 0, ...databaseChecksFromEnv(io.env) });
      return opened.pool;
    },
    say,
    io,
  };
  try {
    // `help [COMMAND…]` is `COMMAND… --help`.
    const helpWord = argv[0] === 'help';
    const { entry, name: resolved, rest } = resolve(helpWord ? argv.slice(1) : argv);
    name = resolved;
    if (helpWord) {
      parseFlags(rest, {});
      io.stdout(usageOf(entry));
      return 0;
    }
    // It prints its own --help.
    if (entry !== null && isSelfParsing(entry)) return await entry.main(rest, ctx);
    if (wantsHelp(rest)) {
      io.stdout(usageOf(entry));
      return 0;
    }
    if (entry === null || isGroup(entry)) {
      parseFlags(rest, {});
      if (entry === null) throw new UsageError('no command given');
      throw new UsageError(`${name} needs a subcommand: ${subcommandList(entry)}`);
    }
    await entry.run(parseFlags(rest, entry.flags), ctx);
    return 0;
  } catch (error) {
    if (error instanceof UsageError) return usageFailure(PROGRAM, error instanceof UsageErrorIn ? error.command : name, error, io);
    if (error instanceof ConfigError) {
      say(`${PROGRAM}: ${error.message}`);
      return 2;
    }
    if (error instanceof OrbitError || error instanceof AdminError || error instanceof MigrationMismatchError) {
      say(`${PROGRAM}: ${error.message}`);
      return 1;
    }
    const problem = opened.url === null ? null : databaseProblem(error, opened.url);
    say(`${PROGRAM}: ${problem ?? (error as Error).stack ?? String(error)}`);
    return 1;
  } finally {
    await opened.pool?.close().catch(() => {});
  }
}
