/** Hono's per-request variables. */
export interface AppEnv {
  Variables: {
    requestId: string;
  };
}
