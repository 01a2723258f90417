/**
 * The store's `sql` tagged template: a statement and its bound values built together, each value
 * exactly where it appears - ``sql`SELECT … WHERE task_id = ${taskId}` `` - nested templates,
 * `sql.join` for lists and multi-statement round trips, `sql.raw` for constant text.
 *
 * It keeps the API of drizzle-orm's `sql`, which the store used before, and its output (a
 * differential test holds them to the same text and parameters: test/unit/sql-template.test.ts),
 * but puts the text and the parameters together once, as the template is evaluated, where
 * drizzle builds a tree of chunks (checking each one's class on construction) and walks it again
 * when the statement is sent. On the hot paths that walk was a tenth of orbit-server's CPU: a
 * claim group of 16 tasks cost 600 µs to build and compile, 25 µs now (bench/RESULTS.md).
 *
 * A value that is an array becomes a parenthesised list of bound values, as in drizzle; prefer
 * `valueList` (database.ts) for `IN` lists, which says so.
 */

/** A statement (or a part of one): its text with `?` placeholders, and their values in order. */
export class SQL {
  constructor(
    readonly text: string,
    readonly params: readonly unknown[],
  ) {}
}

function append(into: { text: string; params: unknown[] }, value: unknown): void {
  if (value instanceof SQL) {
    into.text += value.text;
    for (const p of value.params) into.params.push(p);
  } else if (Array.isArray(value)) {
    into.text += '(';
    value.forEach((item, i) => {
      if (i > 0) into.text += ', ';
      append(into, item);
    });
    into.text += ')';
  } else {
    into.text += '?';
    into.params.push(value);
  }
}

/** ``sql`… ${value} …` ``: values are bound where they stand; an `SQL` value is inlined with its own. */
function template(strings: TemplateStringsArray, ...values: unknown[]): SQL {
  const out = { text: strings[0] as string, params: [] as unknown[] };
  for (let i = 0; i < values.length; i++) {
    append(out, values[i]);
    out.text += strings[i + 1] as string;
  }
  return new SQL(out.text, out.params);
}

/** `parts` one after another, `separator` between each two. */
function join(parts: readonly SQL[], separator?: SQL): SQL {
  const out = { text: '', params: [] as unknown[] };
  parts.forEach((part, i) => {
    if (i > 0 && separator !== undefined) append(out, separator);
    append(out, part);
  });
  return new SQL(out.text, out.params);
}

/** Constant text, sent as it is (never a value: values are bound). */
function raw(text: string): SQL {
  return new SQL(text, []);
}

export const sql = Object.assign(template, { join, raw });
