/**
 * One UPDATE for many rows, each with its own values: the set-based form of "for each queue /
 * session / permit of the group, UPDATE its row". A group of N tasks over S sessions, Q queues
 * and K keyed permits then costs one statement per table whatever S, Q and K are, instead of
 * one per row - statements are what a transaction pays for while it holds the application row.
 *
 *   UPDATE orbit_queues
 *      SET active_attempts = CASE queue_id WHEN ? THEN active_attempts + ? WHEN ? THEN … ELSE active_attempts END, …
 *    WHERE queue_id IN (?, ?, …)
 *
 * The rows are named by primary key (a range scan of the primary key in ascending order: the
 * rows are locked in lock order, and `LockOrderCheck` sees which rows it names). A single row
 * gets the plain `SET c = … WHERE key = ?` form, so the common case's text is unchanged.
 *
 * Assignments of a single-table UPDATE run left to right and a later one sees the values the
 * earlier ones gave (MariaDB and MySQL alike), as in the one-row form: every row sets the same
 * columns in the same order (`columns`), so each row's expressions read what they would alone.
 */
import { sql, type SQL } from './sql.ts';

/** One row's key (its primary key's values, in `key`'s order) and its new values, one per column of `columns`. */
export interface RowChange {
  key: readonly unknown[];
  values: readonly SQL[];
}

/**
 * `UPDATE table SET …` for every row of `rows`, each with its own values. `table`, `key` and
 * `columns` are constant SQL text (never input). `extra` is appended to every row's WHERE
 * (a condition on the rows, e.g. `AND state = 'OPEN'`). Callers give rows in ascending key order.
 */
export function updateEachRow(params: { table: string; key: readonly string[]; columns: readonly string[]; rows: readonly RowChange[]; extra?: SQL }): SQL {
  const { table, key, columns, rows } = params;
  if (rows.length === 0) throw new Error('updateEachRow: no rows');
  for (const row of rows) {
    if (row.key.length !== key.length || row.values.length !== columns.length) throw new Error(`updateEachRow: a row of ${table} does not match its columns`);
  }
  const extra = params.extra ?? sql``;
  const keyText = key.length === 1 ? (key[0] as string) : `(${key.join(', ')})`;
  const keyValue = (row: RowChange) =>
    key.length === 1
      ? sql`${row.key[0]}`
      : sql`(${sql.join(
          row.key.map((v) => sql`${v}`),
          sql`, `,
        )})`;
  if (rows.length === 1) {
    const row = rows[0] as RowChange;
    const set = sql.join(
      columns.map((c, i) => sql`${sql.raw(c)} = ${row.values[i]}`),
      sql`, `,
    );
    const where = sql.join(
      key.map((k, i) => sql`${sql.raw(k)} = ${row.key[i]}`),
      sql` AND `,
    );
    return sql`UPDATE ${sql.raw(table)} SET ${set} WHERE ${where}${extra}`;
  }
  // A composite key is compared as a row: CASE WHEN (a, b) = (?, ?) THEN …
  const when = (row: RowChange) => (key.length === 1 ? sql`WHEN ${row.key[0]}` : sql`WHEN ${sql.raw(keyText)} = ${keyValue(row)}`);
  const set = sql.join(
    columns.map(
      (c, i) =>
        sql`${sql.raw(c)} = CASE ${key.length === 1 ? sql.raw(`${keyText} `) : sql``}${sql.join(
          rows.map((row) => sql`${when(row)} THEN ${row.values[i]}`),
          sql` `,
        )} ELSE ${sql.raw(c)} END`,
    ),
    sql`, `,
  );
  return sql`UPDATE ${sql.raw(table)} SET ${set} WHERE ${sql.raw(keyText)} IN (${sql.join(rows.map(keyValue), sql`, `)})${extra}`;
}
