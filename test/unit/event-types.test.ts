/**
 * Every event type the server writes is named wherever the event types are listed - the
 * `Event.type` description of openapi.yaml, the feed's table in docs/events.md, the events
 * paragraph of docs/storage.md, and (the task lifecycle ones) the quick start of docs/events.md - and none of those
 * names a type the server does not write.
 *
 * The types the server writes are the string literals of server/ that look like one
 * (`task.succeeded`, `schedule.paused`, …), except audit actions (`action: 'task.cancel'`,
 * `REPAIR_ACTION`), which name changes in the audit records, not events.
 */
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { readdirSync, readFileSync } from 'node:fs';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { parse } from 'yaml';

const ROOT = fileURLToPath(new URL('../..', import.meta.url));
const TYPE = /(?:task|queue|schedule|subscription|application|namespace)\.[a-z_]+(?:\.[a-z_]+)*/;

function sources(dir: string, out: string[] = []): string[] {
  for (const entry of readdirSync(dir, { withFileTypes: true })) {
    const full = join(dir, entry.name);
    if (entry.isDirectory() && entry.name !== 'generated') sources(full, out);
    else if (entry.isFile() && entry.name.endsWith('.ts')) out.push(full);
  }
  return out;
}

function writtenTypes(): Set<string> {
  const found = new Set<string>();
  for (const file of sources(join(ROOT, 'server'))) {
    const text = readFileSync(file, 'utf8');
    for (const m of text.matchAll(new RegExp(`'(${TYPE.source})'`, 'g'))) {
      const before = text.slice(Math.max(0, (m.index ?? 0) - 40), m.index);
      if (/(?:action:|_ACTION =)\s*$/.test(before)) continue;
      found.add(m[1] as string);
    }
  }
  return found;
}

/** The backquoted event types of a text, `schedule.created|paused|resumed` counting as three. */
function namedTypes(text: string): Set<string> {
  const out = new Set<string>();
  for (const m of text.matchAll(new RegExp(`\`(${TYPE.source}(?:\\|[a-z_]+)*)\``, 'g'))) {
    const [first, ...more] = (m[1] as string).split('|');
    out.add(first as string);
    const stem = (first as string).slice(0, (first as string).lastIndexOf('.') + 1);
    for (const last of more) out.add(`${stem}${last}`);
  }
  return out;
}

/** The part of `text` from `start` to the next line starting with `end` (or its end). */
function section(text: string, start: string, end: RegExp): string {
  const from = text.indexOf(start);
  assert.ok(from >= 0, `"${start}" not found`);
  const rest = text.slice(from + start.length);
  const stop = rest.search(end);
  return stop === -1 ? rest : rest.slice(0, stop);
}

test('every event type the server writes is listed in openapi.yaml, docs/events.md and docs/storage.md', () => {
  const written = writtenTypes();
  for (const type of ['task.submitted', 'task.cancel_requested', 'task.resolved', 'queue.created', 'subscription.paused']) {
    assert.ok(written.has(type), `the scan finds ${type} in server/ (the scan itself works)`);
  }
  const read = (path: string) => readFileSync(join(ROOT, path), 'utf8');
  const openapi = parse(read('openapi.yaml')) as { components: { schemas: { Event: { properties: { type: { description: string } } } } } };
  const places: Array<[string, Set<string>, (type: string) => boolean]> = [
    ['openapi.yaml Event.type', namedTypes(openapi.components.schemas.Event.properties.type.description), () => true],
    ['docs/events.md, "The event feed"', namedTypes(section(read('docs/events.md'), '## The event feed', /\n## /)), () => true],
    ['docs/storage.md, "Events"', namedTypes(section(read('docs/storage.md'), '**Events**', /\n\n/)), () => true],
    // The quick start of docs/events.md lists the task lifecycle (management events are named where each is described).
    [
      'docs/events.md, quick start',
      namedTypes(section(read('docs/events.md'), 'Every transition of a task is an event', /\n\n/)),
      (type) => type.startsWith('task.'),
    ],
  ];
  for (const [where, named, applies] of places) {
    const expected = [...written].filter(applies).sort();
    assert.deepEqual([...named].filter(applies).sort(), expected, `${where} must name exactly the event types the server writes`);
  }
});
