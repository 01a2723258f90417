import { test } from 'node:test';
import assert from 'node:assert/strict';
import { fileURLToPath } from 'node:url';
import { staleFiles } from '../../codegen/main.ts';

test('generated code matches openapi.yaml and asyncapi.yaml (run `npm run codegen` when this fails)', async () => {
  const root = fileURLToPath(new URL('../..', import.meta.url));
  assert.deepEqual(await staleFiles(root), []);
});
