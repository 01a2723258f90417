/** What a task's error says after each transition (server/domain/task-errors.ts) and where a resolve goes. */
import { test } from 'node:test';
import assert from 'node:assert/strict';
import {
  CANCELLED_BY_WORKER,
  cancelledError,
  deadlineExceededError,
  errorAfterResolve,
  errorAfterResult,
  errorAfterUnstartedReservation,
} from '../../server/domain/task-errors.ts';
import { afterResolve } from '../../server/domain/task-transitions.ts';

test("after the worker's result: none for a success, the cancel's reason for a cancellation, the worker's error for a failure", () => {
  assert.equal(errorAfterResult('SUCCEEDED', { message: 'ignored' }, 'reason'), null);
  assert.deepEqual(errorAfterResult('CANCELLED', { message: 'cancelled', name: 'Error' }, 'the customer withdrew'), {
    code: 'CANCELLED',
    message: 'the customer withdrew',
  });
  assert.deepEqual(errorAfterResult('CANCELLED', undefined, null), { code: 'CANCELLED', message: CANCELLED_BY_WORKER });
  assert.deepEqual(errorAfterResult('FAILED', { message: 'boom' }, null), { message: 'boom' });
  assert.deepEqual(errorAfterResult('WAITING', { message: 'boom' }, null), { message: 'boom' });
  assert.equal(errorAfterResult('FAILED', undefined, null), null);
  assert.deepEqual(cancelledError('x'), { code: 'CANCELLED', message: 'x' });
});

test('an unstarted reservation keeps the error unless the deadline passed', () => {
  assert.equal(errorAfterUnstartedReservation('WAITING'), undefined);
  assert.deepEqual(errorAfterUnstartedReservation('EXPIRED'), deadlineExceededError());
});

test('a resolve: SUCCEEDED and WAITING clear it, FAILED sets the given error or the reason', () => {
  assert.deepEqual(
    (['succeeded', 'failed', 'retry'] as const).map((o) => afterResolve(o).state),
    ['SUCCEEDED', 'FAILED', 'WAITING'],
  );
  assert.equal(errorAfterResolve('succeeded', 'ok', { ignored: true }), null);
  assert.equal(errorAfterResolve('retry', 'again', undefined), null);
  assert.deepEqual(errorAfterResolve('failed', 'declined', { code: 'CARD_DECLINED' }), { code: 'CARD_DECLINED' });
  assert.deepEqual(errorAfterResolve('failed', 'no longer wanted', undefined), { code: 'RESOLVED_FAILED', message: 'no longer wanted' });
});
