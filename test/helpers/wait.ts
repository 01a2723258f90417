/**
 * How long `waitFor` waits by default: generous, for a loaded two-core machine running server
 * processes beside the tests (a condition that comes fast costs nothing more).
 */
export const DEFAULT_WAIT_MS = 30_000;

/** Polls `probe` until it returns a truthy value (returned), or fails after `timeoutMs`. */
export async function waitFor<T>(probe: () => Promise<T | null | undefined | false>, timeoutMs = DEFAULT_WAIT_MS): Promise<T> {
  const deadline = Date.now() + timeoutMs;
  for (;;) {
    const value = await probe();
    if (value) return value;
    if (Date.now() > deadline) throw new Error(`condition not reached within ${timeoutMs} ms`);
    await new Promise((r) => setTimeout(r, 50));
  }
}
