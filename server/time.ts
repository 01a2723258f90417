/**
 * Time. MySQL keeps `DATETIME(6)` in UTC (every connection sets `time_zone = '+00:00'`); the API
 * shows RFC 3339 UTC with milliseconds. Anything that decides a limit (rate windows, leases,
 * claimability, expiry) compares with `NOW(6)` inside SQL, i.e. in database time.
 */

/** `2026-11-30 12:34:56.789000` (as mysql2 returns DATETIME with `dateStrings`) → `2026-11-30T12:34:56.789Z`. */
export function sqlToRfc3339(value: string): string {
  const fraction = (value.slice(20, 23) + '000').slice(0, 3);
  return `${value.slice(0, 10)}T${value.slice(11, 19)}.${fraction}Z`;
}

/** Epoch milliseconds → the `DATETIME(6)` literal MySQL expects. */
export function millisToSql(ms: number): string {
  return new Date(ms).toISOString().replace('T', ' ').replace('Z', '000');
}

export function sqlToMillis(value: string): number {
  return Date.parse(`${value.replace(' ', 'T').slice(0, 23)}Z`);
}
