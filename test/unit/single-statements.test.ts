/**
 * How a multi-statement round trip is sent on a Galera cluster (server/store/database/single-statements.ts):
 * no write after another statement of the transaction in one command; START TRANSACTION rides
 * with the first statement and reads with the write before them; each command gets exactly the
 * parameters of its own placeholders; a count that does not add up is refused. And the URL forms
 * of a cluster (several hosts, server/config.ts).
 */
import { describe, test } from 'node:test';
import assert from 'node:assert/strict';
import { singleStatements } from '../../server/store/database/single-statements.ts';
import { checkDatabaseUrl, databaseHostUrls } from '../../server/config.ts';

const commands = (text: string, params: unknown[] = []) => singleStatements(text, params).map((c) => [c.text, c.params, c.statements]);

describe('singleStatements', () => {
  test('a plain statement is one command', () => {
    assert.deepEqual(commands('SELECT ? AS a', [1]), [['SELECT ? AS a', [1], 1]]);
  });

  test('every write starts a command; START TRANSACTION rides with the first statement; reads follow the write before them', () => {
    assert.deepEqual(
      commands(
        'START TRANSACTION;\nUPDATE a SET n = ? WHERE id = ?; SELECT n FROM a WHERE id = ?; SELECT m INTO @m FROM b; INSERT INTO c VALUES (?); COMMIT',
        [1, 2, 3, 4],
      ),
      [
        ['START TRANSACTION;\nUPDATE a SET n = ? WHERE id = ?;\nSELECT n FROM a WHERE id = ?;\nSELECT m INTO @m FROM b', [1, 2, 3], 4],
        ['INSERT INTO c VALUES (?)', [4], 1],
        ['COMMIT', [], 1],
      ],
    );
  });

  test('reads after START TRANSACTION share its command; the write after them does not', () => {
    assert.deepEqual(commands('START TRANSACTION; SELECT 1 FOR UPDATE; SELECT 2; UPDATE t SET x = 1'), [
      ['START TRANSACTION;\nSELECT 1 FOR UPDATE;\nSELECT 2', [], 3],
      ['UPDATE t SET x = 1', [], 1],
    ]);
  });

  test('semicolons and question marks inside quotes are text, not statements or placeholders', () => {
    assert.deepEqual(commands("UPDATE t SET note = 'a;b?' WHERE id = ?; UPDATE t SET `c;?` = ? WHERE id = 2", [7, 8]), [
      ["UPDATE t SET note = 'a;b?' WHERE id = ?", [7], 1],
      ['UPDATE t SET `c;?` = ? WHERE id = 2', [8], 1],
    ]);
  });

  test('semicolons and question marks inside comments are text too, as the server and mysql2 read them', () => {
    assert.deepEqual(commands('UPDATE t SET a = ? /* a; b? */ WHERE id = 1; -- c; d?\nUPDATE t SET b = ? # e; f?\n', [1, 2]), [
      ['UPDATE t SET a = ? /* a; b? */ WHERE id = 1', [1], 1],
      ['-- c; d?\nUPDATE t SET b = ? # e; f?', [2], 1],
    ]);
  });

  test('parameters that do not match the placeholders are refused', () => {
    assert.throws(() => singleStatements('UPDATE t SET a = ?; UPDATE t SET b = ?', [1]), /1 parameters for 2 placeholders/);
    assert.throws(() => singleStatements('SELECT 1', [1]), /1 parameters for 0 placeholders/);
  });
});

describe('database URLs naming several hosts', () => {
  test('each host gets the same user, password, database and options', () => {
    assert.deepEqual(databaseHostUrls('mysql://orbit:pw@db1:3306,db2,10.0.0.3:3307/orbit?ssl=1'), [
      'mysql://orbit:pw@db1:3306/orbit?ssl=1',
      'mysql://orbit:pw@db2/orbit?ssl=1',
      'mysql://orbit:pw@10.0.0.3:3307/orbit?ssl=1',
    ]);
    assert.deepEqual(databaseHostUrls('mysql://root@127.0.0.1:3306/orbit'), ['mysql://root@127.0.0.1:3306/orbit']);
  });

  test('a list with an empty or bad host is refused, naming the variable', () => {
    assert.equal(checkDatabaseUrl('mysql://root@a:1,b:2/orbit'), 'mysql://root@a:1,b:2/orbit');
    for (const bad of ['mysql://root@a:1,/orbit', 'mysql://root@a:1,b:0/orbit', 'mysql://root@a:1,b:x/orbit']) {
      assert.throws(() => checkDatabaseUrl(bad), /ORBIT_DATABASE_URL must be/, bad);
    }
  });
});
