/**
 * A multi-statement round trip taken apart: each statement of the text with its own parameters,
 * sent as a command of its own. What a database layer on a Galera cluster must do (see
 * `DatabaseOptions.singleStatements` and docs/scale-out.md): there, a transaction another node's
 * commit aborts (a "brute-force abort") is rolled back in the middle of a multi-statement command,
 * and MariaDB runs the command's remaining statements outside the transaction - each one
 * committed on its own, the COMMIT at the end a no-op that answers OK. Sent one per command, the
 * first statement after the abort fails with a deadlock error instead, and the transaction is
 * retried whole.
 */
import { splitStatements, unquotedPositions } from './lock-order.ts';

export interface SingleStatement {
  text: string;
  params: unknown[];
}

/**
 * The statements of `text` (split at semicolons outside quotes), each with the parameters of its
 * own placeholders (`?` outside quotes), in order. Throws when the placeholders and parameters do
 * not add up: sending them would bind values to the wrong statements.
 */
export function singleStatements(text: string, params: readonly unknown[]): SingleStatement[] {
  const statements = splitStatements(text);
  const out: SingleStatement[] = [];
  let next = 0;
  for (const statement of statements) {
    const count = unquotedPositions(statement, '?').length;
    out.push({ text: statement, params: params.slice(next, next + count) });
    next += count;
  }
  if (next !== params.length) throw new Error(`single statements: ${params.length} parameters for ${next} placeholders`);
  return out;
}
