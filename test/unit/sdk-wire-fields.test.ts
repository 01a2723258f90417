/**
 * The SDK converts every usage count of every answer, and nothing else. Read from openapi.yaml
 * here, on its own (not through codegen): every operation the SDK has a method for (every one
 * without `x-orbit-raw`), its 200 answer's `data` schema, and in it every property whose schema
 * is the Counter schema - a uint64 decimal string the SDK returns as a number.
 *
 * For each operation a sample answer is built from its schema: every property (optional ones
 * too) and two items of every array; a distinct small decimal string at each count; every
 * other string a uint64 too large for a JS number ('18446744073709551615' - revisions and
 * sequences look like that, and converting one would throw); free JSON (payload, result,
 * details, data) with count names and decimal strings inside. The SDK, answered with it by a
 * fake fetch, must return it with numbers at the counts and everything else as it was; a count
 * above Number.MAX_SAFE_INTEGER at each position must be the INTERNAL OrbitError naming it.
 */
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { readFileSync } from 'node:fs';
import { parse } from 'yaml';
import { createOrbitClient, isOrbitError } from '../../sdk/index.ts';
import { COUNT_FIELDS } from '../../sdk/generated/operations.ts';

type Schema = Record<string, unknown>;
type Parameter = { name: string; in: string };
type Operation = {
  operationId: string;
  parameters?: Array<Parameter | { $ref: string }>;
  requestBody?: unknown;
  responses: Record<string, { $ref?: string; content?: Record<string, { schema: Schema }> }>;
  'x-orbit-raw'?: boolean;
};

const spec = parse(readFileSync(new URL('../../openapi.yaml', import.meta.url), 'utf8')) as {
  paths: Record<string, Record<string, Operation>>;
  components: { schemas: Record<string, Schema>; parameters: Record<string, Parameter> };
};
const COUNTER = '#/components/schemas/Counter';
const NOT_A_COUNT = '18446744073709551615';
const TOO_LARGE = '9007199254740993';

function resolve<T>(node: T | { $ref: string }): T {
  if (typeof node !== 'object' || node === null || !('$ref' in node)) return node as T;
  let at: unknown = spec;
  for (const key of node.$ref.slice(2).split('/')) at = (at as Record<string, unknown>)[key];
  assert.ok(at !== undefined, `unresolved ${node.$ref}`);
  return at as T;
}

/** Where a count is in `data`, and its property name. */
interface Position {
  path: Array<string | number>;
  field: string;
}

/** Free JSON, as a user might send it: count names and decimal strings the SDK must leave alone. */
const freeJson = () => ({ unfinished_tasks: '5', fired: '6', nested: [{ active_attempts: '7', revision: NOT_A_COUNT }] });

/** A sample value of `schema` as it comes over the wire, and what the SDK must return for it. */
function sample(schema: Schema, path: Array<string | number>, positions: Position[], next: { n: number }): { wire: unknown; sdk: unknown } {
  if (schema.$ref === COUNTER) {
    next.n += 1;
    positions.push({ path, field: String(path.at(-1)) });
    return { wire: String(1000 + next.n), sdk: 1000 + next.n };
  }
  if (typeof schema.$ref === 'string') return sample(resolve<Schema>(schema as { $ref: string }), path, positions, next);
  if (Array.isArray(schema.allOf)) {
    // An allOf of objects is one object with the properties of all; otherwise its first member says.
    const parts = (schema.allOf as Schema[]).map((member) => sample(member, path, positions, next));
    const objects = parts.every((p) => typeof p.wire === 'object' && p.wire !== null && !Array.isArray(p.wire));
    if (!objects) return parts[0]!;
    return { wire: Object.assign({}, ...parts.map((p) => p.wire)), sdk: Object.assign({}, ...parts.map((p) => p.sdk)) };
  }
  for (const keyword of ['oneOf', 'anyOf'] as const) {
    if (Array.isArray(schema[keyword])) return sample((schema[keyword] as Schema[])[0]!, path, positions, next);
  }
  if (schema.const !== undefined) return { wire: schema.const, sdk: schema.const };
  if (Array.isArray(schema.enum)) return { wire: schema.enum[0], sdk: schema.enum[0] };
  const type = Array.isArray(schema.type) ? (schema.type as string[]).find((t) => t !== 'null') : schema.type;
  if (type === 'array') {
    const items = [0, 1].map((i) => sample(schema.items as Schema, [...path, i], positions, next));
    return { wire: items.map((i) => i.wire), sdk: items.map((i) => i.sdk) };
  }
  if (schema.properties !== undefined) {
    const wire: Record<string, unknown> = {};
    const sdk: Record<string, unknown> = {};
    for (const [name, property] of Object.entries(schema.properties as Record<string, Schema>)) {
      const s = sample(property, [...path, name], positions, next);
      wire[name] = s.wire;
      sdk[name] = s.sdk;
    }
    return { wire, sdk };
  }
  if (type === 'object' || type === undefined) return { wire: freeJson(), sdk: freeJson() };
  if (type === 'string') return { wire: NOT_A_COUNT, sdk: NOT_A_COUNT };
  if (type === 'integer' || type === 'number') return { wire: 7, sdk: 7 };
  if (type === 'boolean') return { wire: true, sdk: true };
  assert.fail(`${path.join('.')}: no sample for type ${String(type)}`);
}

function setAt(value: unknown, path: Array<string | number>, to: unknown): unknown {
  const copy = structuredClone(value);
  let at = copy as Record<string | number, unknown>;
  for (const key of path.slice(0, -1)) at = at[key] as Record<string | number, unknown>;
  at[path.at(-1)!] = to;
  return copy;
}

/** Every operation the SDK has a method for, with its 200 `data` schema. */
function operations() {
  const out: Array<{ name: string; input: Record<string, unknown>; data: Schema }> = [];
  for (const methods of Object.values(spec.paths)) {
    for (const op of Object.values(methods)) {
      if (typeof op !== 'object' || op === null || typeof op.operationId !== 'string' || op['x-orbit-raw']) continue;
      const ok = resolve(op.responses['200']!);
      const envelope = resolve<Schema>(ok.content!['application/json']!.schema);
      const data = (envelope.properties as Record<string, Schema>).data;
      assert.ok(data, `${op.operationId}: the 200 answer has data`);
      const input: Record<string, unknown> = {};
      for (const p of (op.parameters ?? []).map((x) => resolve<Parameter>(x))) {
        if (p.in === 'path') input[p.name] = `v-${p.name}`;
        else if (p.in === 'header' && p.name === 'Idempotency-Key') input.idempotency_key = `key-${op.operationId}`;
      }
      if (op.requestBody) input.reason = 'r';
      out.push({ name: op.operationId, input, data });
    }
  }
  return out;
}

test('the SDK converts every count of every 200 answer in openapi.yaml to a number, and nothing else', async () => {
  const ops = operations();
  const countNames = new Set<string>();
  let positionsSeen = 0;
  let answer: unknown;
  const fetch = async () => Response.json({ request_id: 'f'.repeat(32), data: answer }, { headers: { 'x-request-id': 'f'.repeat(32) } });
  const client = createOrbitClient({ baseUrl: 'http://orbit.test', token: 'orbit_test', fetch }) as unknown as Record<
    string,
    (input: Record<string, unknown>) => Promise<unknown>
  >;

  for (const { name, input, data } of ops) {
    const positions: Position[] = [];
    const { wire, sdk } = sample(data, [], positions, { n: 0 });
    for (const p of positions) countNames.add(p.field);
    positionsSeen += positions.length;
    const method = client[name];
    assert.equal(typeof method, 'function', `the client has ${name}`);

    answer = wire;
    assert.deepEqual(
      await method!.call(client, input),
      sdk,
      `${name}: numbers at ${positions.map((p) => p.path.join('.')).join(', ') || 'no count'}, the rest as sent`,
    );

    for (const position of positions) {
      answer = setAt(wire, position.path, TOO_LARGE);
      await assert.rejects(
        method!.call(client, input),
        (e: unknown) =>
          isOrbitError(e) &&
          e.code === 'INTERNAL' &&
          e.status === 200 &&
          e.details?.field === position.field &&
          e.details?.value === TOO_LARGE &&
          /MAX_SAFE_INTEGER/.test(e.message),
        `${name}: ${position.path.join('.')} above Number.MAX_SAFE_INTEGER`,
      );
    }
  }
  assert.ok(ops.length >= 32, `the SDK's operations: ${ops.map((o) => o.name).join(', ')}`);
  assert.ok(positionsSeen > 0, 'openapi.yaml has counts in its answers');
  // CountField (which FromWire<T> types as number) names exactly the counts of the answers.
  assert.deepEqual([...COUNT_FIELDS].sort(), [...countNames].sort());
});
