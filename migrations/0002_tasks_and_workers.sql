-- 0002 tasks, attempts, worker sessions and keyed permits.
-- Usage counters live on orbit_application_resources and orbit_queues (0001); every counter can
-- be recounted from orbit_tasks and orbit_attempts, and the tests do exactly that.

CREATE TABLE orbit_tasks (
  task_id BINARY(16) NOT NULL COMMENT '任务标识（16 字节，前 6 字节为毫秒时间，按创建顺序递增）',
  application_id BINARY(16) NOT NULL COMMENT '所属应用标识',
  namespace_id BINARY(16) NOT NULL COMMENT '所属命名空间标识',
  queue_id BINARY(16) NOT NULL COMMENT '所属队列标识',
  state VARCHAR(16) NOT NULL COMMENT '状态：WAITING、LEASED、RUNNING、NEEDS_REVIEW（未终结）；SUCCEEDED、FAILED、CANCELLED、EXPIRED（终结）',
  priority TINYINT UNSIGNED NOT NULL COMMENT '优先级 0–9，越大越先领取',
  resource_key VARCHAR(128) NULL COMMENT '资源键；同键同时预占或运行的尝试数受队列 key_concurrency 限制',
  payload MEDIUMTEXT NOT NULL COMMENT '任务载荷（JSON 对象，最多 256 KiB），原样返回',
  attempts SMALLINT UNSIGNED NOT NULL DEFAULT 0 COMMENT '已开始的尝试次数（未开始即释放或过期的预占不计）',
  max_attempts SMALLINT UNSIGNED NOT NULL COMMENT '最多尝试次数（1–100）',
  on_unknown_outcome VARCHAR(8) NOT NULL COMMENT '结果未知（运行中租约过期）时：retry 重试或 review 待核查',
  cancel_requested TINYINT(1) NOT NULL DEFAULT 0 COMMENT '运行中取消意图；已通知 Worker，等待权威结果或到期恢复',
  current_attempt_id BINARY(16) NULL COMMENT '当前预占或运行中的尝试标识',
  idempotency_key VARCHAR(128) CHARACTER SET ascii COLLATE ascii_bin NOT NULL COMMENT '提交时的幂等键（提交身份）',
  created_at DATETIME(6) NOT NULL COMMENT '受理时间（UTC）',
  available_at DATETIME(6) NOT NULL COMMENT '最早可领取时间（延迟或重试退避后）',
  deadline_at DATETIME(6) NOT NULL COMMENT '总截止时间（受理时间 + deadline_seconds）',
  finished_at DATETIME(6) NULL COMMENT '进入终结状态的时间',
  result MEDIUMTEXT NULL COMMENT '成功结果（JSON，用户数据）',
  error MEDIUMTEXT NULL COMMENT '失败或取消说明（JSON，用户数据）',
  updated_at DATETIME(6) NOT NULL COMMENT '最后修改时间（UTC）',
  PRIMARY KEY (task_id),
  KEY ix_orbit_tasks_claim (queue_id, state, priority DESC, available_at, task_id),
  KEY ix_orbit_tasks_queue (queue_id, task_id),
  KEY ix_orbit_tasks_deadline (state, deadline_at)
) ENGINE=InnoDB DEFAULT CHARSET=utf8mb4 COLLATE=utf8mb4_bin COMMENT='任务：提交的工作单元及其状态';

CREATE TABLE orbit_attempts (
  attempt_id BINARY(16) NOT NULL COMMENT '尝试标识（16 字节）',
  application_id BINARY(16) NOT NULL COMMENT '所属应用标识',
  namespace_id BINARY(16) NOT NULL COMMENT '所属命名空间标识',
  queue_id BINARY(16) NOT NULL COMMENT '所属队列标识',
  task_id BINARY(16) NOT NULL COMMENT '所属任务标识',
  session_id BINARY(16) NOT NULL COMMENT '领取它的 Worker 会话标识',
  attempt_number SMALLINT UNSIGNED NOT NULL COMMENT '开始后即为第几次尝试（预占时为预计序号）',
  state VARCHAR(16) NOT NULL COMMENT '状态：RESERVED（已预占未开始）、RUNNING；RELEASED、EXPIRED、SUCCEEDED、FAILED、CANCELLED（已释放）',
  resource_key VARCHAR(128) NULL COMMENT '任务的资源键副本，释放许可时使用',
  claimed_at DATETIME(6) NOT NULL COMMENT '预占时间（数据库时间）',
  started_at DATETIME(6) NULL COMMENT '开始时间（数据库时间）',
  lease_expires_at DATETIME(6) NOT NULL COMMENT '租约到期时间（数据库时间）；不超过任务截止时间',
  deadline_at DATETIME(6) NOT NULL COMMENT '任务总截止时间的副本；续租不得超过它',
  finished_at DATETIME(6) NULL COMMENT '释放时间（结果、释放或到期恢复）',
  cancel_notified TINYINT(1) NOT NULL DEFAULT 0 COMMENT '是否已向 Worker 发送 cancel_requested',
  PRIMARY KEY (attempt_id),
  KEY ix_orbit_attempts_lease (state, lease_expires_at),
  KEY ix_orbit_attempts_session (session_id, state),
  KEY ix_orbit_attempts_task (task_id)
) ENGINE=InnoDB DEFAULT CHARSET=utf8mb4 COLLATE=utf8mb4_bin COMMENT='尝试：一次预占及其执行；活跃尝试计入并发，未开始的计入待开始';

CREATE TABLE orbit_worker_sessions (
  session_id BINARY(16) NOT NULL COMMENT 'Worker 会话标识（16 字节）',
  application_id BINARY(16) NOT NULL COMMENT '所属应用标识',
  namespace_id BINARY(16) NOT NULL COMMENT '所属命名空间标识',
  credential_id BINARY(16) NOT NULL COMMENT '建立会话的凭据标识',
  node_id VARCHAR(128) NOT NULL COMMENT 'Worker 节点标识（hello 帧提供）',
  queues TEXT NOT NULL COMMENT '会话消费的队列名（JSON 数组）',
  capacity INT UNSIGNED NOT NULL COMMENT '会话最多同时持有的活跃尝试数',
  state VARCHAR(16) NOT NULL COMMENT '状态：OPEN 或 CLOSED',
  waiting_since DATETIME(6) NULL COMMENT '最近一次领取未得满足的时间；用于节点公平份额',
  connected_at DATETIME(6) NOT NULL COMMENT '建立时间（UTC）',
  last_seen_at DATETIME(6) NOT NULL COMMENT '最近一次收到帧的时间（UTC）',
  closed_at DATETIME(6) NULL COMMENT '关闭时间（UTC）',
  PRIMARY KEY (session_id),
  KEY ix_orbit_worker_sessions_waiting (application_id, state, waiting_since),
  KEY ix_orbit_worker_sessions_liveness (state, last_seen_at)
) ENGINE=InnoDB DEFAULT CHARSET=utf8mb4 COLLATE=utf8mb4_bin COMMENT='Worker 会话：容量与公平领取的依据';

CREATE TABLE orbit_key_permits (
  queue_id BINARY(16) NOT NULL COMMENT '队列标识',
  resource_key VARCHAR(128) NOT NULL COMMENT '资源键',
  application_id BINARY(16) NOT NULL COMMENT '所属应用标识',
  holders INT UNSIGNED NOT NULL DEFAULT 0 COMMENT '当前持有许可（预占或运行）的尝试数',
  updated_at DATETIME(6) NOT NULL COMMENT '最后修改时间（UTC）',
  PRIMARY KEY (queue_id, resource_key)
) ENGINE=InnoDB DEFAULT CHARSET=utf8mb4 COLLATE=utf8mb4_bin COMMENT='资源键许可：每个（队列，资源键）一行，锁顺序中最后获取';
