/**
 * `orbit-admin`: database-level administration (DESIGN.md §11). It needs database credentials,
 * not an Orbit token: it is how the first credentials come to exist.
 */
import { openSync, writeSync, closeSync, fchmodSync } from 'node:fs';
import { parseArgs } from 'node:util';
import { databaseUrlFromEnv } from '../config.ts';
import { hexToId, idToHex, isHexId } from '../ids.ts';
import { APPLICATION_ACTIONS, NAMESPACE_ACTIONS, isAction, type Action } from '../domain/actions.ts';
import { OrbitError } from '../errors.ts';
import { createDatabase, type Database } from '../store/database.ts';
import { migrate } from '../store/migrate.ts';
import { credentialCreate, credentialRevoke } from '../store/credentials.ts';
import { tenantBootstrap } from '../store/bootstrap.ts';
import { applicationSetEnabled, assertEnvironment, namespaceFindById, namespaceSetEnabled } from '../store/tenancy.ts';
import { verifyCommand } from './verify-command.ts';

const USAGE = `usage:
  orbit-admin migrate
  orbit-admin bootstrap (--application NAME | --application-id ID) --namespace NAME
                        --environment development|staging|production --queue NAME [--queue NAME…]
                        [--resource-access] --output FILE
  orbit-admin application enable|disable --application-id ID
  orbit-admin namespace enable|disable --namespace-id ID
  orbit-admin credential create --namespace-id ID [--action ACTION…] [--queue NAME…|--queue '*']
                                [--resource-access] [--expires-at RFC3339] [--description TEXT] --output FILE
  orbit-admin credential revoke --credential-id ID
  orbit-admin verify [--repair] [--application-id ID]

Database: ORBIT_DATABASE_URL (default mysql://root@127.0.0.1:3306/orbit).`;

/** Wrong flags: the message and the usage, exit 2. */
class UsageError extends Error {}
/** A well-formed command that cannot be done (unknown id, say): the message, exit 1. */
class AdminError extends Error {}

const NAME = /^[a-z0-9][a-z0-9._-]{0,62}$/;
const APPLICATION_NAME = /^[A-Za-z0-9][A-Za-z0-9._-]{0,127}$/;

function need<T>(value: T | undefined, flag: string): T {
  if (value === undefined || value === '') throw new UsageError(`${flag} is required`);
  return value;
}

function idFlag(value: string | undefined, flag: string): Buffer {
  const text = need(value, flag);
  if (!isHexId(text)) throw new UsageError(`${flag} must be 32 lowercase hex characters`);
  return hexToId(text);
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

function say(line: string): void {
  process.stderr.write(`${line}\n`);
}

async function bootstrap(db: Database, args: string[]): Promise<void> {
  const { values } = parseArgs({
    args,
    options: {
      application: { type: 'string' },
      'application-id': { type: 'string' },
      namespace: { type: 'string' },
      environment: { type: 'string' },
      queue: { type: 'string', multiple: true },
      'resource-access': { type: 'boolean', default: false },
      output: { type: 'string' },
    },
    strict: true,
    allowPositionals: false,
  });
  if ((values.application === undefined) === (values['application-id'] === undefined)) {
    throw new UsageError('give exactly one of --application NAME or --application-id ID');
  }
  if (values.application !== undefined && !APPLICATION_NAME.test(values.application)) {
    throw new UsageError('--application must match [A-Za-z0-9][A-Za-z0-9._-]{0,127}');
  }
  const namespace = need(values.namespace, '--namespace');
  if (!NAME.test(namespace)) throw new UsageError('--namespace must match [a-z0-9][a-z0-9._-]{0,62}');
  const environment = assertEnvironment(need(values.environment, '--environment'));
  const queues = need(values.queue, '--queue');
  for (const queue of queues) if (!NAME.test(queue)) throw new UsageError(`--queue ${queue}: must match [a-z0-9][a-z0-9._-]{0,62}`);
  const output = need(values.output, '--output');
  const actions: Action[] = [...NAMESPACE_ACTIONS, ...(values['resource-access'] ? APPLICATION_ACTIONS : [])];
  const applicationIdFlag = values['application-id'] === undefined ? undefined : idFlag(values['application-id'], '--application-id');

  const result = await tenantBootstrap(
    db,
    { applicationName: values.application, applicationId: applicationIdFlag, namespace, environment, queues, actions },
    say,
  );
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
  say(`created credential ${idToHex(result.credentialId)}${values['resource-access'] ? ' with application resource access' : ''}; wrote ${output} (mode 0600)`);
}

async function credentialCommand(db: Database, verb: string | undefined, args: string[]): Promise<void> {
  if (verb === 'revoke') {
    const { values } = parseArgs({ args, options: { 'credential-id': { type: 'string' } }, strict: true });
    const id = idFlag(values['credential-id'], '--credential-id');
    if (!(await credentialRevoke(db, id))) throw new AdminError(`credential ${idToHex(id)} does not exist`);
    say(`revoked credential ${idToHex(id)}`);
    return;
  }
  if (verb !== 'create') throw new UsageError('credential create|revoke');
  const { values } = parseArgs({
    args,
    options: {
      'namespace-id': { type: 'string' },
      action: { type: 'string', multiple: true },
      queue: { type: 'string', multiple: true },
      'resource-access': { type: 'boolean', default: false },
      'expires-at': { type: 'string' },
      description: { type: 'string' },
      output: { type: 'string' },
    },
    strict: true,
  });
  const namespaceId = idFlag(values['namespace-id'], '--namespace-id');
  const output = need(values.output, '--output');
  const requested = values.action ?? [...NAMESPACE_ACTIONS];
  for (const action of requested) if (!isAction(action)) throw new UsageError(`unknown action ${action}`);
  if (!values['resource-access'] && requested.some((a) => (APPLICATION_ACTIONS as readonly string[]).includes(a))) {
    throw new UsageError('application actions are granted only with --resource-access');
  }
  const actions = [...new Set([...(requested as Action[]), ...(values['resource-access'] ? APPLICATION_ACTIONS : [])])];
  const queues = values.queue ?? ['*'];
  for (const queue of queues) if (queue !== '*' && !NAME.test(queue)) throw new UsageError(`--queue ${queue}: must match [a-z0-9][a-z0-9._-]{0,62} or be *`);
  let expiresAt: string | null = null;
  if (values['expires-at'] !== undefined) {
    const ms = Date.parse(values['expires-at']);
    if (Number.isNaN(ms)) throw new UsageError('--expires-at must be an RFC 3339 time');
    expiresAt = new Date(ms).toISOString().replace('T', ' ').replace('Z', '');
  }
  const ns = await namespaceFindById(db, namespaceId);
  if (!ns) throw new AdminError(`namespace ${idToHex(namespaceId)} does not exist`);
  const credential = await credentialCreate(db, {
    applicationId: ns.application_id,
    namespaceId,
    actions,
    queues,
    description: values.description ?? 'orbit-admin credential create',
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
  say(`created credential ${idToHex(credential.credentialId)}; wrote ${output} (mode 0600)`);
}

async function toggle(db: Database, kind: 'application' | 'namespace', verb: string | undefined, args: string[]): Promise<void> {
  if (verb !== 'enable' && verb !== 'disable') throw new UsageError(`${kind} enable|disable`);
  const flag = `${kind}-id`;
  const { values } = parseArgs({ args, options: { [flag]: { type: 'string' } }, strict: true });
  const id = idFlag(values[flag] as string | undefined, `--${flag}`);
  const ok = kind === 'application' ? await applicationSetEnabled(db, id, verb === 'enable') : await namespaceSetEnabled(db, id, verb === 'enable');
  if (!ok) throw new AdminError(`${kind} ${idToHex(id)} does not exist`);
  say(`${kind} ${idToHex(id)} ${verb}d`);
}

export async function main(argv: string[]): Promise<number> {
  const [command, ...rest] = argv;
  const url = databaseUrlFromEnv();
  try {
    if (command === 'migrate') {
      const result = await migrate(url, say);
      say(result.applied.length === 0 ? `database is up to date (migration ${result.current})` : `applied ${result.applied.length} migration(s)`);
      return 0;
    }
    if (command === undefined || command === 'help' || command === '--help' || command === '-h') {
      process.stdout.write(`${USAGE}\n`);
      return command === undefined ? 2 : 0;
    }
    // Parses its own flags (--help included) and returns its own exit code (1: differences found).
    if (command === 'verify') return await verifyCommand(rest, () => url);
    const db = createDatabase({ url, connectionLimit: 2 });
    try {
      if (command === 'bootstrap') await bootstrap(db, rest);
      else if (command === 'credential') await credentialCommand(db, rest[0], rest.slice(1));
      else if (command === 'application' || command === 'namespace') await toggle(db, command, rest[0], rest.slice(1));
      else throw new UsageError(`unknown command ${command}`);
    } finally {
      await db.close();
    }
    return 0;
  } catch (error) {
    if (error instanceof UsageError || (error as { code?: string }).code?.startsWith('ERR_PARSE_ARGS')) {
      say(`orbit-admin: ${(error as Error).message}\n\n${USAGE}`);
      return 2;
    }
    if (error instanceof OrbitError || error instanceof AdminError) {
      say(`orbit-admin: ${error.message}`);
      return 1;
    }
    const code = (error as { code?: string }).code;
    if (code === 'ECONNREFUSED' || code === 'ER_ACCESS_DENIED_ERROR' || code === 'ER_BAD_DB_ERROR') {
      say(`orbit-admin: cannot use the database at ${url}: ${(error as Error).message}${code === 'ER_BAD_DB_ERROR' ? ' (run `orbit-admin migrate` first)' : ''}`);
      return 1;
    }
    if ((error as { errno?: number }).errno === 1146) {
      say(`orbit-admin: the database at ${url} has no Orbit schema; run \`orbit-admin migrate\` first`);
      return 1;
    }
    say(`orbit-admin: ${(error as Error).stack ?? String(error)}`);
    return 1;
  }
}
