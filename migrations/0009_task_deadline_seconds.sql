-- 0009 a retried task's deadline is as long as the one it was submitted with, however often it is
-- retried (POST /v1/tasks/{task_id}:retry). Until its first retry a task's deadline length is
-- `deadline_at - created_at` (admission writes both, nothing else moves them); a retry counts the
-- deadline from itself, so it keeps the length here for the retries after it. NULL: never retried.
-- Admission does not write it: the submission's INSERT stays as it was.
-- A nullable column added at the end is instant on MariaDB 10.3+ and MySQL 8: no table copy,
-- and a server that cannot do it refuses the statement instead of copying the table.
ALTER TABLE orbit_tasks
  ADD COLUMN deadline_seconds INT UNSIGNED NULL COMMENT '首次被重试时记下的截止时长（秒，即提交时的 deadline_seconds）；为空表示从未重试，时长为 deadline_at - created_at',
  ALGORITHM=INSTANT;
