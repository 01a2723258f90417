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

export const APPLICATION_ACTIONS = ['application:resources:read', 'application:resources:manage'] as const;

export const ALL_ACTIONS = [...NAMESPACE_ACTIONS, ...APPLICATION_ACTIONS] as const;

export type Action = (typeof ALL_ACTIONS)[number];

export function isAction(value: string): value is Action {
  return (ALL_ACTIONS as readonly string[]).includes(value);
}
