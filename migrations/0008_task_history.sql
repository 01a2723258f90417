-- 0008 what happened to a task: the console and the API list a queue's tasks in one state
-- newest first (GET /v1/tasks?queue=&state=, GET /v1/queues/{queue}/tasks?state=), and a task's
-- own events (GET /v1/tasks/{task_id}/events), each as one range of an index:
-- - tasks by (queue, state, task id): a page of FAILED tasks among millions of SUCCEEDED ones
--   reads only the page; without a queue, one such range per queue of the credential's scope;
-- - events by (namespace, subject, sequence): a task's events without reading the namespace's feed.
-- Both are built with ALGORITHM=INPLACE, LOCK=NONE: the tables take reads and writes meanwhile,
-- and a server that cannot do that refuses the statement instead of locking the table.
ALTER TABLE orbit_tasks
  ADD INDEX ix_orbit_tasks_queue_state (queue_id, state, task_id),
  ALGORITHM=INPLACE, LOCK=NONE;

ALTER TABLE orbit_events
  ADD INDEX ix_orbit_events_subject (namespace_id, subject, sequence),
  ALGORITHM=INPLACE, LOCK=NONE;
