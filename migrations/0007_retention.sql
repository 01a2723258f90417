-- 0007 retention: finished history is pruned by a policy per application.
--
-- orbit_retention_policies holds one policy row per application (created with the application;
-- the rows of existing applications get the defaults here) and the pruning loop's turn: which
-- application is due next (`next_prune_at`, so that every process takes a different one with
-- SKIP LOCKED and every application has its turn). The pruning loop never takes an application
-- or queue row; this row is its own.
--
-- The indexes let each prune batch find its rows as one range of an index, oldest first, and
-- delete them by primary key: finished tasks by (application, finished_at); receipts and
-- audit records by (application, created_at); events by (namespace, occurred_at), the feed
-- being read and held per namespace; closed sessions by (application, closed_at). Each is added with
-- ALGORITHM=INPLACE, LOCK=NONE: InnoDB builds it while the table takes reads and writes, and a
-- server that could not do that refuses the statement instead of locking the table
-- (docs/operations.md#retention gives the build time measured on 10 million rows).
CREATE TABLE orbit_retention_policies (
  application_id BINARY(16) NOT NULL COMMENT '所属应用标识（每个应用一行）',
  revision BIGINT UNSIGNED NOT NULL DEFAULT 1 COMMENT '保留策略版本；每次配置加一，用于比较并设置',
  finished_task_retention_seconds BIGINT UNSIGNED NULL DEFAULT 604800 COMMENT '已终结任务及其尝试的保留秒数；为空表示永久保留',
  event_retention_seconds BIGINT UNSIGNED NULL DEFAULT 604800 COMMENT '事件的保留秒数；为空表示永久保留',
  receipt_retention_seconds BIGINT UNSIGNED NULL DEFAULT 604800 COMMENT '幂等回执的保留秒数（即幂等窗口）；为空表示永久保留',
  audit_retention_seconds BIGINT UNSIGNED NULL DEFAULT 31536000 COMMENT '审计记录的保留秒数；为空表示永久保留',
  subscription_max_lag_seconds BIGINT UNSIGNED NULL DEFAULT 2592000 COMMENT '活跃订阅未确认的事件最多再保留的秒数（自发生起）；为空表示一直保留到确认',
  next_prune_at DATETIME(6) NOT NULL COMMENT '清理循环下一次处理该应用的时间（数据库时间）',
  updated_at DATETIME(6) NOT NULL COMMENT '最后修改时间（UTC）',
  PRIMARY KEY (application_id),
  KEY ix_orbit_retention_policies_due (next_prune_at)
) ENGINE=InnoDB DEFAULT CHARSET=utf8mb4 COLLATE=utf8mb4_bin COMMENT='保留策略：每个应用的历史数据保留期限，以及清理循环的轮转位置';

-- Existing applications keep everything (every duration NULL: forever) until an operator sets a
-- policy: an upgrade never deletes history by itself. New applications get the defaults.
INSERT INTO orbit_retention_policies (application_id, finished_task_retention_seconds, event_retention_seconds, receipt_retention_seconds,
                                      audit_retention_seconds, subscription_max_lag_seconds, next_prune_at, updated_at)
  SELECT application_id, NULL, NULL, NULL, NULL, NULL, NOW(6), NOW(6) FROM orbit_application_resources;

-- A subscription is told, not silently skipped, when events after its position were pruned:
-- the highest sequence of its namespace pruned while it had not acknowledged it.
ALTER TABLE orbit_subscriptions
  ADD COLUMN pruned_through BIGINT UNSIGNED NOT NULL DEFAULT 0 COMMENT '本订阅尚未确认时被清理的最高事件序号；确认位置低于它时读取报错并给出最早保留序号';

ALTER TABLE orbit_tasks ADD INDEX ix_orbit_tasks_finished (application_id, finished_at), ALGORITHM=INPLACE, LOCK=NONE;
ALTER TABLE orbit_idempotency_receipts ADD INDEX ix_orbit_idempotency_receipts_created (application_id, created_at), ALGORITHM=INPLACE, LOCK=NONE;
ALTER TABLE orbit_audit_events ADD INDEX ix_orbit_audit_events_created (application_id, created_at), ALGORITHM=INPLACE, LOCK=NONE;
ALTER TABLE orbit_events ADD INDEX ix_orbit_events_occurred (namespace_id, occurred_at), ALGORITHM=INPLACE, LOCK=NONE;
ALTER TABLE orbit_worker_sessions ADD INDEX ix_orbit_worker_sessions_closed (application_id, closed_at), ALGORITHM=INPLACE, LOCK=NONE;
