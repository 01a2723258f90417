/**
 * A multi-statement round trip taken apart for a Galera cluster (see
 * `DatabaseOptions.singleStatements` and docs/scale-out.md). There, a transaction that another
 * node's commit aborts (a "brute-force abort") is rolled back in the middle of a multi-statement
 * command, and MariaDB runs the command's remaining statements outside the transaction - each
 * write committed on its own, the COMMIT at the end a no-op that answers OK. A command of its
 * own, a statement after the abort fails with a deadlock error instead, and the transaction is
 * retried whole.
 *
 * So a write (anything but a SELECT, COMMIT included) is never sent after another statement of
 * the transaction in one command: it starts a command, which may begin with START TRANSACTION
 * (nothing before it can be aborted) and go on with reads (a read after the abort reads outside
 * the transaction, harmlessly: the command after it fails, and its result is never used).
 */
import { splitStatements, unquotedPositions } from './lock-order.ts';

export interface SingleStatement {
  /** One statement, or a write followed by reads, or START TRANSACTION and those (joined by `;\n`). */
  text: string;
  params: unknown[];
  /** How many statements the command holds (mysql2 answers a command of several with a list). */
  statements: number;
}

function isRead(statement: string): boolean {
  return /^\(?\s*SELECT\b/i.test(statement);
}

/**
 * The commands to send for `text` (its statements split at semicolons outside quotes), each with
 * the parameters of its own placeholders (`?` outside quotes), in order. Throws when the
 * placeholders and parameters do not add up: sending them would bind values to the wrong
 * statements.
 */
export function singleStatements(text: string, params: readonly unknown[]): SingleStatement[] {
  const out: SingleStatement[] = [];
  let next = 0;
  let current: { texts: string[]; params: unknown[]; begins: boolean } | null = null;
  for (const statement of splitStatements(text)) {
    const count = unquotedPositions(statement, '?').length;
    const own = params.slice(next, next + count);
    next += count;
    const joins = current !== null && (isRead(statement) || (current.begins && current.texts.length === 1));
    if (current !== null && joins) {
      current.texts.push(statement);
      current.params.push(...own);
      continue;
    }
    if (current) out.push({ text: current.texts.join(';\n'), params: current.params, statements: current.texts.length });
    current = { texts: [statement], params: [...own], begins: /^START\s+TRANSACTION$/i.test(statement) };
  }
  if (current) out.push({ text: current.texts.join(';\n'), params: current.params, statements: current.texts.length });
  if (next !== params.length) throw new Error(`single statements: ${params.length} parameters for ${next} placeholders`);
  return out;
}
