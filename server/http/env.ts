import type { Principal } from '../domain/principal.ts';

/** Hono's per-request variables. */
export interface AppEnv {
  Variables: {
    requestId: string;
    /** Set once the request is authenticated. */
    principal?: Principal;
  };
}
