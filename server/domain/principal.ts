/** Who is calling: derived from the bearer credential, never from the URL or the body. */
import type { IdBytes } from '../ids.ts';
import type { Action } from './actions.ts';

export interface Principal {
  credentialId: IdBytes;
  applicationId: IdBytes;
  namespaceId: IdBytes;
  namespace: string;
  actions: ReadonlySet<Action>;
  /** `'*'` or the queue names this credential may touch; others answer 404. */
  queues: '*' | ReadonlySet<string>;
}

export function canAccessQueue(principal: Principal, queue: string): boolean {
  return principal.queues === '*' || principal.queues.has(queue);
}
