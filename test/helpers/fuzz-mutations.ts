/**
 * Mutations of valid JSON documents for the fuzz tests: fields dropped, added (also `__proto__`),
 * renamed (wrong case, other names), values replaced by nulls, wrong types, huge and raw number
 * literals (`1e400`), very long and unicode strings (lone surrogates end up as \u escapes); the
 * text written plainly, with every key as \u escapes (the same document), or with one duplicate
 * key at any depth (which the server must name).
 */
import fc from 'fast-check';
import { escapedKey, jsonWithDuplicate, nastyNumber, nastyString, rawNumberLiteral, type Json } from './fuzz-common.ts';

type JsonObject = { [key: string]: Json };

// ---------------------------------------------------------------------------------------------
// Mutations of valid documents (request bodies, worker frames)
// ---------------------------------------------------------------------------------------------

export type Path = Array<string | number>;

/** Every member path in a value (objects and arrays, user data included). */
function memberPaths(value: Json, prefix: Path = []): Path[] {
  if (value === null || typeof value !== 'object') return [];
  const entries: Array<[string | number, Json]> = Array.isArray(value) ? value.map((v, i) => [i, v]) : Object.entries(value);
  return entries.flatMap(([k, v]) => [[...prefix, k], ...memberPaths(v, [...prefix, k])]);
}
/** Paths of every object in a value (the root is []). */
function objectPaths(value: Json, prefix: Path = []): Path[] {
  if (value === null || typeof value !== 'object') return [];
  const children: Array<[string | number, Json]> = Array.isArray(value) ? value.map((v, i) => [i, v]) : Object.entries(value);
  return [...(Array.isArray(value) ? [] : [prefix]), ...children.flatMap(([k, v]) => objectPaths(v, [...prefix, k]))];
}
function getAt(root: Json, path: Path): Json | undefined {
  let node: Json | undefined = root;
  for (const part of path) {
    if (node === null || typeof node !== 'object') return undefined;
    node = (node as Record<string | number, Json>)[part as never];
  }
  return node;
}

/** An own property, also for `__proto__` (plain assignment would set the prototype). */
function put(target: Record<string | number, Json>, key: string, value: Json): void {
  Object.defineProperty(target, key, { value, enumerable: true, writable: true, configurable: true });
}

export type Mutation =
  | { kind: 'drop'; pick: number }
  | { kind: 'set'; pick: number; value: Json; raw?: string }
  | { kind: 'rename'; pick: number; name: string }
  | { kind: 'add'; pick: number; name: string; value: Json };

const SENTINEL = '\u0000raw-number\u0000';

export const wrongValue: fc.Arbitrary<{ value: Json; raw?: string }> = fc.oneof(
  fc.constant({ value: null }),
  nastyNumber.map((value) => ({ value })),
  nastyString(64).map((value) => ({ value })),
  fc.boolean().map((value) => ({ value })),
  fc.jsonValue({ maxDepth: 3 }).map((value) => ({ value: value as Json })),
  fc.constantFrom<Json>([], {}, '', ' ', '1', 'true', 'null', [1], { a: 1 }).map((value) => ({ value })),
  rawNumberLiteral.map((raw) => ({ value: SENTINEL, raw })),
  fc.integer({ min: 1024, max: 300_000 }).map((n) => ({ value: 'é'.repeat(n) })),
);

export const mutation: fc.Arbitrary<Mutation> = fc.oneof(
  fc.nat().map((pick): Mutation => ({ kind: 'drop', pick })),
  fc.tuple(fc.nat(), wrongValue).map(([pick, v]): Mutation => ({ kind: 'set', pick, value: v.value, ...(v.raw === undefined ? {} : { raw: v.raw }) })),
  fc
    .tuple(fc.nat(), fc.oneof(fc.constantFrom('upper', 'first-upper', 'suffix', 'space'), nastyString(16)))
    .map(([pick, name]): Mutation => ({ kind: 'rename', pick, name })),
  fc
    .tuple(
      fc.nat(),
      fc.oneof(fc.constantFrom('payload', 'reason', 'name', 'type', '__proto__', 'constructor', 'expected_revision', 'result'), nastyString(16)),
      fc.jsonValue({ maxDepth: 2 }),
    )
    .map(([pick, name, value]): Mutation => ({ kind: 'add', pick, name, value: value as Json })),
);

/** Applies mutations to a copy; returns the value and the raw literals to splice into the text. */
export function mutate(base: JsonObject, mutations: Mutation[]): { value: Json; raws: string[] } {
  const root = structuredClone(base) as Json;
  const raws: string[] = [];
  for (const m of mutations) {
    if (m.kind === 'add') {
      const objects = objectPaths(root);
      const target = getAt(root, objects[m.pick % objects.length] as Path) as JsonObject;
      put(target, m.name, m.value);
      continue;
    }
    const paths = memberPaths(root);
    if (paths.length === 0) continue;
    const path = paths[m.pick % paths.length] as Path;
    const parent = getAt(root, path.slice(0, -1)) as Record<string | number, Json>;
    const last = path.at(-1) as string | number;
    if (m.kind === 'drop') {
      if (Array.isArray(parent)) parent.splice(last as number, 1);
      else delete parent[last];
    } else if (m.kind === 'set') {
      parent[last] = m.value;
      if (m.raw !== undefined) raws.push(m.raw);
    } else if (typeof last === 'string') {
      const name =
        m.name === 'upper'
          ? last.toUpperCase()
          : m.name === 'first-upper'
            ? last.charAt(0).toUpperCase() + last.slice(1)
            : m.name === 'suffix'
              ? `${last}_`
              : m.name === 'space'
                ? ` ${last}`
                : m.name;
      const entries = Object.entries(parent).map(([k, v]): [string, Json] => [k === last ? name : k, v]);
      for (const k of Object.keys(parent)) delete parent[k];
      for (const [k, v] of entries) put(parent, k, v);
    }
  }
  return { value: root, raws };
}

/** JSON text with every key written with \u escapes (the same document). */
export function withEscapedKeys(value: Json): string {
  if (value === null || typeof value !== 'object') return JSON.stringify(value);
  if (Array.isArray(value)) return `[${value.map(withEscapedKeys).join(',')}]`;
  return `{${Object.entries(value)
    .map(([k, v]) => `${escapedKey(k)}:${withEscapedKeys(v)}`)
    .join(',')}}`;
}

/** A number literal that JSON.parse turns into ±Infinity, or into 0 although it is not zero. */
export function isUnrepresentable(literal: string): boolean {
  const n = Number(literal);
  if (!Number.isFinite(n)) return true;
  const mantissa = literal.replace(/^-/, '').split(/[eE]/)[0] as string;
  return n === 0 && /[1-9]/.test(mantissa);
}

/**
 * Writes the raw number literals of `mutate` into the JSON text of its value, one per
 * placeholder still in it (a later mutation may have dropped one); `unrepresentable` says
 * whether one that is in the text cannot be kept by JSON.parse (see `isUnrepresentable`).
 */
export function spliceRaws(text: string, raws: readonly string[]): { text: string; unrepresentable: boolean } {
  const placeholder = JSON.stringify(SENTINEL);
  let unrepresentable = false;
  for (const raw of raws) {
    if (!text.includes(placeholder)) break;
    text = text.replace(placeholder, raw);
    if (isUnrepresentable(raw)) unrepresentable = true;
  }
  return { text, unrepresentable };
}

export interface MutatedDocument {
  /** Which valid document it started from (an operation id, a frame type). */
  base: string;
  text: string;
  /** Where the duplicate key is, when the text has one (its spellings: `fieldNames`). */
  duplicate: Path | null;
  /**
   * The text holds a number literal JSON.parse cannot keep: ±Infinity (`1e400`) or 0 for a
   * non-zero number (`1e-400`). The spec does not say, so refusing it (naming where) is as
   * right as the verdict on the parsed value.
   */
  unrepresentable: boolean;
  label: string;
}

/** Mutated versions of the given valid documents, as JSON text. */
export function mutatedDocument(valid: Record<string, JsonObject>, maxMutations = 3): fc.Arbitrary<MutatedDocument> {
  return fc
    .record({
      base: fc.constantFrom(...Object.keys(valid)),
      mutations: fc.array(mutation, { minLength: 0, maxLength: maxMutations }),
      writing: fc.constantFrom('plain', 'plain', 'escaped-keys', 'duplicate', 'duplicate-escaped'),
      pick: fc.nat(),
    })
    .map(({ base, mutations, writing, pick }): MutatedDocument => {
      const { value, raws } = mutate(valid[base] as JsonObject, mutations);
      let text: string;
      let duplicate: Path | null = null;
      if (writing.startsWith('duplicate')) {
        const objects = objectPaths(value).filter((p) => Object.keys(getAt(value, p) as JsonObject).length > 0);
        if (objects.length > 0) {
          const path = objects[pick % objects.length] as Path;
          const keys = Object.keys(getAt(value, path) as JsonObject);
          const key = keys[pick % keys.length] as string;
          text = jsonWithDuplicate(value, path, key, writing === 'duplicate-escaped');
          duplicate = [...path, key];
        } else text = JSON.stringify(value);
      } else text = writing === 'escaped-keys' ? withEscapedKeys(value) : JSON.stringify(value);
      const spliced = spliceRaws(text, raws);
      return {
        base,
        text: spliced.text,
        duplicate,
        unrepresentable: spliced.unrepresentable,
        label: `${base} ${writing} ${mutations.map((m) => m.kind).join('+') || 'unchanged'}`,
      };
    });
}
