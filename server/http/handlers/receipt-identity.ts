/** The idempotency identity of a mutating request: (namespace, key) plus a hash of what it asks. */
import type { Principal } from '../../domain/principal.ts';
import { requestHash } from '../../domain/request-hash.ts';
import type { ReceiptIdentity } from '../../store/records/receipts.ts';

export function receiptIdentity(principal: Principal, key: string, operation: string, target: Record<string, string>, body: unknown): ReceiptIdentity {
  return {
    applicationId: principal.applicationId,
    namespaceId: principal.namespaceId,
    credentialId: principal.credentialId,
    key,
    operation,
    requestSha256: requestHash(operation, target, body),
  };
}
