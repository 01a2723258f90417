-- 0003 schedules: cron and interval triggers that make tasks through the same admission as a
-- direct submission, and the identity of a task made by a schedule (schedule, trigger point).

CREATE TABLE orbit_schedules (
  schedule_id BINARY(16) NOT NULL COMMENT '计划标识（16 字节）',
  application_id BINARY(16) NOT NULL COMMENT '所属应用标识',
  namespace_id BINARY(16) NOT NULL COMMENT '所属命名空间标识',
  queue_id BINARY(16) NOT NULL COMMENT '生成任务的目标队列标识',
  name VARCHAR(128) NOT NULL COMMENT '计划名称，队列内唯一',
  cron_expression VARCHAR(200) NULL COMMENT 'Cron 表达式（5 段，或带秒的 6 段）；与 interval_seconds 二选一',
  interval_seconds INT UNSIGNED NULL COMMENT '固定间隔（秒，1–31536000）；与 cron_expression 二选一',
  timezone VARCHAR(64) NOT NULL COMMENT '计算 Cron 触发点所用的 IANA 时区',
  payload MEDIUMTEXT NOT NULL COMMENT '生成任务的载荷（JSON 对象，最多 256 KiB）',
  priority TINYINT UNSIGNED NOT NULL COMMENT '生成任务的优先级 0–9',
  resource_key VARCHAR(128) NULL COMMENT '生成任务的资源键',
  max_attempts SMALLINT UNSIGNED NOT NULL COMMENT '生成任务的最多尝试次数',
  deadline_seconds INT UNSIGNED NOT NULL COMMENT '生成任务的总截止时长（秒，自受理起）',
  on_unknown_outcome VARCHAR(8) NOT NULL COMMENT '生成任务结果未知时：retry 或 review',
  misfire_policy VARCHAR(16) NOT NULL COMMENT '错过策略（创建后不可改）：skip、fire_once、fire_all',
  misfire_window_seconds INT UNSIGNED NOT NULL COMMENT '触发点超过该时长仍未处理即为错过（秒）',
  state VARCHAR(16) NOT NULL COMMENT '状态：ACTIVE 或 PAUSED',
  start_at DATETIME(6) NULL COMMENT '最早触发时间（UTC）；为空则自创建起',
  next_fire_at DATETIME(6) NULL COMMENT '第一个尚未处理的触发点（UTC）；为空表示不再有触发点',
  last_fire_at DATETIME(6) NULL COMMENT '最近一次生成任务的触发点（UTC）',
  deferred_through DATETIME(6) NULL COMMENT '已计入 deferred_full 的最晚触发点（每个触发点只计一次）',
  fired BIGINT UNSIGNED NOT NULL DEFAULT 0 COMMENT '已生成任务的触发点数',
  skipped_misfire BIGINT UNSIGNED NOT NULL DEFAULT 0 COMMENT '按错过策略放弃的触发点数',
  deferred_full BIGINT UNSIGNED NOT NULL DEFAULT 0 COMMENT '因额度已满至少等待过一轮的触发点数（不算错过）',
  created_at DATETIME(6) NOT NULL COMMENT '创建时间（UTC）',
  updated_at DATETIME(6) NOT NULL COMMENT '最后修改时间（UTC）',
  PRIMARY KEY (schedule_id),
  UNIQUE KEY uk_orbit_schedules_name (queue_id, name),
  KEY ix_orbit_schedules_due (state, next_fire_at)
) ENGINE=InnoDB DEFAULT CHARSET=utf8mb4 COLLATE=utf8mb4_bin COMMENT='计划：按 Cron 或固定间隔生成任务，与直接提交同样受应用和队列积压上限约束';

-- A trigger point's task identity: (schedule, fire time) can make at most one task, whatever
-- happens between processes, crashes and retries. Tasks submitted directly have NULLs here,
-- which a unique key does not compare.
ALTER TABLE orbit_tasks
  ADD COLUMN schedule_id BINARY(16) NULL COMMENT '生成它的计划标识（直接提交为空）',
  ADD COLUMN scheduled_for DATETIME(6) NULL COMMENT '生成它的触发点（UTC；直接提交为空）',
  ADD UNIQUE KEY uk_orbit_tasks_trigger_point (schedule_id, scheduled_for);
