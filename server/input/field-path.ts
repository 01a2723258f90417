/**
 * How Orbit names a place inside a JSON document in `details.field`: `payload.items[2].id`.
 * A key that is not a plain name (empty, spaces, dots, brackets, non-ASCII…) is written as a
 * quoted index, `payload["a b"]`, so every field name is non-empty and says exactly where.
 */
const PLAIN_KEY = /^[A-Za-z_][A-Za-z0-9_-]*$/;

export function fieldPath(segments: ReadonlyArray<string | number>): string {
  let path = '';
  for (const segment of segments) {
    if (typeof segment === 'number') path += `[${segment}]`;
    else if (PLAIN_KEY.test(segment)) path += path === '' ? segment : `.${segment}`;
    else path += `[${JSON.stringify(segment)}]`;
  }
  return path;
}

/** A path inside the document named by `location` (`body`, `frame`): the root itself, or a path that starts with an index, gets the location's name in front. */
export function fieldAt(location: string, path: string): string {
  return path === '' || path.startsWith('[') ? `${location}${path}` : path;
}
