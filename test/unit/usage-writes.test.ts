/**
 * One writer of usage: the counters, start windows and permit holders are written by
 * server/store/quotas/usage-writes.ts only (the repair of usage-recount.ts, which writes recounts, aside).
 * A scan of every server source file's SQL text and `updateEachRow` column lists.
 */
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { readFileSync, readdirSync } from 'node:fs';
import { join, relative } from 'node:path';
import { fileURLToPath } from 'node:url';

const ROOT = fileURLToPath(new URL('../..', import.meta.url));
const WRITER = 'server/store/quotas/usage-writes.ts';
const REPAIR = 'server/store/quotas/usage-recount.ts';
const USAGE_COLUMNS = [
  'unfinished_tasks',
  'active_attempts',
  'pending_starts',
  'window_started_at',
  'window_starts',
  'holders',
  'idle_reserved_unfinished_tasks',
  'idle_reserved_concurrency',
  'window_reserved_starts',
];

function sourceFiles(dir: string): string[] {
  return readdirSync(dir, { withFileTypes: true }).flatMap((entry) => {
    const full = join(dir, entry.name);
    if (entry.isDirectory()) return entry.name === 'generated' ? [] : sourceFiles(full);
    return entry.name.endsWith('.ts') ? [relative(ROOT, full)] : [];
  });
}

/** The literal text of every template literal in `source` (expressions left out, nested templates included). */
export function templateTexts(source: string): string[] {
  const texts: string[] = [];
  let i = 0;
  const skipString = (quote: string) => {
    for (i++; i < source.length && source[i] !== quote; i++) if (source[i] === '\\') i++;
    i++;
  };
  const readTemplate = () => {
    // at the opening backtick
    let text = '';
    for (i++; i < source.length; ) {
      const ch = source[i] as string;
      if (ch === '\\') {
        text += source.slice(i, i + 2);
        i += 2;
      } else if (ch === '`') {
        i++;
        break;
      } else if (ch === '$' && source[i + 1] === '{') {
        text += '?';
        i += 2;
        skipExpression();
      } else {
        text += ch;
        i++;
      }
    }
    texts.push(text);
  };
  const skipExpression = () => {
    let depth = 1;
    while (i < source.length && depth > 0) {
      const ch = source[i] as string;
      if (ch === '`') readTemplate();
      else if (ch === "'" || ch === '"') skipString(ch);
      else {
        if (ch === '{') depth++;
        else if (ch === '}') depth--;
        i++;
      }
    }
  };
  while (i < source.length) {
    const ch = source[i] as string;
    if (ch === '/' && source[i + 1] === '/') i = source.indexOf('\n', i) === -1 ? source.length : source.indexOf('\n', i);
    else if (ch === '/' && source[i + 1] === '*') i = source.indexOf('*/', i) + 2;
    else if (ch === "'" || ch === '"') skipString(ch);
    else if (ch === '`') readTemplate();
    else i++;
  }
  return texts;
}

const ASSIGNMENT = new RegExp(`\\b(${USAGE_COLUMNS.join('|')})\\s*=(?!=)`, 'i');
const PERMIT_INSERT = /\bINSERT\b[^;]*\bINTO\s+orbit_key_permits\b/i;
/** An array of column names only (what updateEachRow's `columns` takes). */
const COLUMN_LIST = /\[\s*'[a-z_]+'(?:\s*,\s*'[a-z_]+')*\s*,?\s*\]/g;

/** Where a file writes a usage column: SQL that assigns one, inserts a permit, or an updateEachRow column list naming one. */
function usageWrites(source: string): string[] {
  const found: string[] = [];
  for (const text of templateTexts(source)) {
    // Only statements that write: SET … / ON DUPLICATE KEY UPDATE … (a WHERE comparison is a read).
    const setPart = /\b(SET|UPDATE)\b([\s\S]*?)(\bWHERE\b|$)/i.exec(text)?.[2] ?? '';
    const assigned = ASSIGNMENT.exec(setPart);
    if (/\bSET\b|\bON DUPLICATE KEY UPDATE\b/i.test(text) && assigned) found.push(`assigns ${assigned[1]}: ${text.trim().slice(0, 80)}`);
    if (PERMIT_INSERT.test(text)) found.push(`inserts permits: ${text.trim().slice(0, 80)}`);
  }
  for (const list of source.match(COLUMN_LIST) ?? []) {
    const named = USAGE_COLUMNS.filter((c) => list.includes(`'${c}'`));
    if (named.length > 0) found.push(`a column list names ${named.join(', ')}`);
  }
  return found;
}

test('the scan finds each kind of usage write (so that finding none elsewhere means something)', () => {
  // biome-ignore lint/suspicious/noTemplateCurlyInString: source text for the scan
  assert.deepEqual(usageWrites('const s = sql`UPDATE orbit_queues SET active_attempts = active_attempts + ${n} WHERE queue_id = ${q}`;').length, 1);
  assert.deepEqual(usageWrites("updateEachRow({ table: 'orbit_queues', key: ['queue_id'], columns: ['pending_starts'], rows });").length, 1);
  assert.deepEqual(usageWrites("const COLUMNS = ['state', 'window_starts'] as const;").length, 1);
  assert.deepEqual(usageWrites("type Row = Pick<QueueRow, 'queue_id' | 'active_attempts'>;"), []);
  // biome-ignore lint/suspicious/noTemplateCurlyInString: source text for the scan
  assert.deepEqual(usageWrites('sql`INSERT IGNORE INTO orbit_key_permits (queue_id) VALUES ${v}`').length, 1);
  assert.deepEqual(usageWrites('sql`SELECT holders FROM orbit_key_permits WHERE holders = 0`'), []);
  assert.deepEqual(usageWrites('// UPDATE orbit_queues SET active_attempts = 1\nconst x = 1;'), []);
  assert.ok(usageWrites(readFileSync(join(ROOT, WRITER), 'utf8')).length > 0, 'the writer itself is found writing');
});

test('usage columns are written by server/store/quotas/usage-writes.ts only (verify’s repair aside)', () => {
  const offenders = sourceFiles(join(ROOT, 'server'))
    .filter((file) => file !== WRITER && file !== REPAIR)
    .flatMap((file) => usageWrites(readFileSync(join(ROOT, file), 'utf8')).map((what) => `${file}: ${what}`));
  assert.deepEqual(offenders, []);
});
