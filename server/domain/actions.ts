/**
 * Credential actions (docs/http-api.md#operations). The two application actions are granted only
 * explicitly (`--resource-access`): no other action, no `queues: ["*"]` and no existing credential
 * implies them.
 */
export const NAMESPACE_ACTIONS = [
  'queues:read',
  'queues:manage',
  'tasks:submit',
  'tasks:read',
  'tasks:cancel',
  'tasks:review',
  'schedules:manage',
  'subscriptions:manage',
  'workers:consume',
  'audit:read',
  'events:read',
] as const;

/**
 * `application:resources:configure` is the action of the retention policy's configure (and of
 * the application-level configures added after the limits'); `application:resources:manage`,
 * the action of the limits' configure, includes it (`effectiveActions`).
 */
export const APPLICATION_ACTIONS = ['application:resources:read', 'application:resources:manage', 'application:resources:configure'] as const;

export const ALL_ACTIONS = [...NAMESPACE_ACTIONS, ...APPLICATION_ACTIONS] as const;

export type Action = (typeof ALL_ACTIONS)[number];

export function isAction(value: string): value is Action {
  return (ALL_ACTIONS as readonly string[]).includes(value);
}

/** The actions a credential's stored list grants: `application:resources:manage` includes `application:resources:configure`. */
export function effectiveActions(stored: readonly string[]): Action[] {
  const actions = stored.filter(isAction);
  if (actions.includes('application:resources:manage') && !actions.includes('application:resources:configure')) actions.push('application:resources:configure');
  return actions;
}
