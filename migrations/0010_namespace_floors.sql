-- 0010 namespace floors: a namespace's guaranteed share of its application's three limits.
--
-- orbit_namespace_resources holds one row per namespace (created with the namespace; the rows of
-- existing namespaces are filled here from a recount): its reservations (0: none) and its usage,
-- counted in the same transactions as the application's and the queues' usage. Its start window
-- is the application's: `window_started_at` names the application window its `window_starts`
-- were granted in, so a namespace's starts "this second" are those of the application's
-- current window and nothing else.
--
-- The application row carries what admission and claims need without reading other
-- namespaces' rows: the sums of the reservations (`reserved_*`, kept by configure) and the
-- idle part of them - for each namespace max(0, reserved - usage), summed (`idle_reserved_*`),
-- and for the rate the used part in the current window, sum of min(starts, reserved)
-- (`window_reserved_starts`, back to 0 with every new window). docs/quotas-and-locking.md#floors.
CREATE TABLE orbit_namespace_resources (
  namespace_id BINARY(16) NOT NULL COMMENT '命名空间标识（每个命名空间一行）',
  application_id BINARY(16) NOT NULL COMMENT '所属应用标识',
  revision BIGINT UNSIGNED NOT NULL DEFAULT 1 COMMENT '保底配置版本；每次配置加一，用于比较并设置',
  reserved_unfinished_tasks INT UNSIGNED NOT NULL DEFAULT 0 COMMENT '保底：未终结任务数（0 表示不保底）',
  reserved_concurrency INT UNSIGNED NOT NULL DEFAULT 0 COMMENT '保底：活跃尝试数',
  reserved_rate_per_second INT UNSIGNED NOT NULL DEFAULT 0 COMMENT '保底：每秒开始次数',
  unfinished_tasks BIGINT UNSIGNED NOT NULL DEFAULT 0 COMMENT '用量：本命名空间的 WAITING、LEASED、RUNNING、NEEDS_REVIEW 任务数',
  active_attempts BIGINT UNSIGNED NOT NULL DEFAULT 0 COMMENT '用量：本命名空间已预占或运行中的尝试数',
  pending_starts BIGINT UNSIGNED NOT NULL DEFAULT 0 COMMENT '用量：本命名空间已预占但尚未开始的尝试数',
  window_started_at DATETIME(6) NULL COMMENT 'window_starts 所属的应用开始窗口的起点；与应用当前窗口不同即为 0',
  window_starts INT UNSIGNED NOT NULL DEFAULT 0 COMMENT '本命名空间在该应用窗口内已授权的开始次数',
  updated_at DATETIME(6) NOT NULL COMMENT '最后修改时间（UTC）',
  PRIMARY KEY (namespace_id),
  KEY ix_orbit_namespace_resources_application (application_id, namespace_id)
) ENGINE=InnoDB DEFAULT CHARSET=utf8mb4 COLLATE=utf8mb4_bin COMMENT='命名空间级额度：应用共享额度内的保底与本命名空间的实时用量';

-- Columns added at the end with defaults: instant on MariaDB 10.3+ and MySQL 8.
ALTER TABLE orbit_application_resources
  ADD COLUMN reserved_unfinished_tasks BIGINT UNSIGNED NOT NULL DEFAULT 0 COMMENT '各命名空间未终结任务保底之和（不超过 max_unfinished_tasks）',
  ADD COLUMN reserved_concurrency BIGINT UNSIGNED NOT NULL DEFAULT 0 COMMENT '各命名空间并发保底之和（不超过 max_concurrency）',
  ADD COLUMN reserved_rate_per_second BIGINT UNSIGNED NOT NULL DEFAULT 0 COMMENT '各命名空间每秒开始保底之和（不超过 rate_per_second）',
  ADD COLUMN idle_reserved_unfinished_tasks BIGINT UNSIGNED NOT NULL DEFAULT 0 COMMENT '各命名空间未用的未终结任务保底之和：Σ max(0, 保底 - 用量)',
  ADD COLUMN idle_reserved_concurrency BIGINT UNSIGNED NOT NULL DEFAULT 0 COMMENT '各命名空间未用的并发保底之和：Σ max(0, 保底 - 活跃尝试)',
  ADD COLUMN window_reserved_starts BIGINT UNSIGNED NOT NULL DEFAULT 0 COMMENT '当前开始窗口内已用的开始保底之和：Σ min(本窗口开始次数, 保底)',
  ALGORITHM=INSTANT;

-- Existing namespaces: their usage is the sum of their queues' counters (equal to a recount, as
-- every counter is). Servers of the build before this one do not keep these counters: stop them
-- before migrating, or run `orbit-admin verify --repair` once they are gone.
INSERT INTO orbit_namespace_resources (namespace_id, application_id, unfinished_tasks, active_attempts, pending_starts, updated_at)
SELECT n.namespace_id, n.application_id,
       COALESCE(SUM(q.unfinished_tasks), 0), COALESCE(SUM(q.active_attempts), 0), COALESCE(SUM(q.pending_starts), 0), NOW(6)
  FROM orbit_namespaces n LEFT JOIN orbit_queues q ON q.namespace_id = n.namespace_id
 GROUP BY n.namespace_id, n.application_id;
