import type { Principal } from '../domain/principal.ts';
import type { OperationId } from '../generated/routes.ts';

/** Hono's per-request variables. */
export interface AppEnv {
  Variables: {
    requestId: string;
    /** Set once the request is authenticated. */
    principal?: Principal;
    /** The operation the request was routed to (operations.ts); unset for a path or method that matches none. */
    operation?: OperationId;
  };
}
