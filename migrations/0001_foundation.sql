-- 0001 foundation: tenancy, credentials, application resources, queues, idempotency receipts,
-- audit records and the event feed.
-- Rules for every table: prefix orbit_, BINARY(16) ids, application_id on every row, no foreign
-- keys, a Chinese COMMENT on every table and column. Never edit this file after release; add a
-- new numbered file instead.

CREATE TABLE orbit_applications (
  application_id BINARY(16) NOT NULL COMMENT '应用标识（16 字节）',
  name VARCHAR(128) NOT NULL COMMENT '应用名称，全局唯一',
  enabled TINYINT(1) NOT NULL DEFAULT 1 COMMENT '是否启用；停用后用户操作一律 401，后台恢复仍继续',
  created_at DATETIME(6) NOT NULL COMMENT '创建时间（UTC）',
  updated_at DATETIME(6) NOT NULL COMMENT '最后修改时间（UTC）',
  PRIMARY KEY (application_id),
  UNIQUE KEY uk_orbit_applications_name (name)
) ENGINE=InnoDB DEFAULT CHARSET=utf8mb4 COLLATE=utf8mb4_bin COMMENT='应用：额度的持有者，下辖多个命名空间';

CREATE TABLE orbit_namespaces (
  namespace_id BINARY(16) NOT NULL COMMENT '命名空间标识（16 字节）',
  application_id BINARY(16) NOT NULL COMMENT '所属应用标识',
  name VARCHAR(63) NOT NULL COMMENT '命名空间名称，应用内唯一',
  environment VARCHAR(16) NOT NULL COMMENT '环境：development、staging 或 production',
  enabled TINYINT(1) NOT NULL DEFAULT 1 COMMENT '是否启用；停用后该命名空间的用户操作一律 401',
  created_at DATETIME(6) NOT NULL COMMENT '创建时间（UTC）',
  updated_at DATETIME(6) NOT NULL COMMENT '最后修改时间（UTC）',
  PRIMARY KEY (namespace_id),
  UNIQUE KEY uk_orbit_namespaces_name (application_id, name)
) ENGINE=InnoDB DEFAULT CHARSET=utf8mb4 COLLATE=utf8mb4_bin COMMENT='命名空间：队列、任务、幂等键和审计的隔离单元';

CREATE TABLE orbit_credentials (
  credential_id BINARY(16) NOT NULL COMMENT '凭据标识（16 字节），也是令牌中的公开部分',
  application_id BINARY(16) NOT NULL COMMENT '所属应用标识（由命名空间推导）',
  namespace_id BINARY(16) NOT NULL COMMENT '凭据绑定的命名空间标识',
  secret_sha256 BINARY(32) NOT NULL COMMENT '令牌秘密部分的 SHA-256 摘要；不保存明文',
  actions TEXT NOT NULL COMMENT '授权动作列表（JSON 数组）',
  queue_scope TEXT NOT NULL COMMENT '队列范围（JSON 数组，["*"] 表示全部队列）',
  description VARCHAR(255) NOT NULL DEFAULT '' COMMENT '说明，便于运维识别',
  created_at DATETIME(6) NOT NULL COMMENT '创建时间（UTC）',
  expires_at DATETIME(6) NULL COMMENT '过期时间（UTC）；为空表示不过期',
  revoked_at DATETIME(6) NULL COMMENT '撤销时间（UTC）；非空即已撤销',
  PRIMARY KEY (credential_id),
  KEY ix_orbit_credentials_namespace (namespace_id)
) ENGINE=InnoDB DEFAULT CHARSET=utf8mb4 COLLATE=utf8mb4_bin COMMENT='凭据：绑定命名空间的 Bearer 令牌（仅存摘要）';

CREATE TABLE orbit_application_resources (
  application_id BINARY(16) NOT NULL COMMENT '应用标识，每个应用一行',
  revision BIGINT UNSIGNED NOT NULL DEFAULT 1 COMMENT '配置版本，仅配置变更时加一',
  max_unfinished_tasks INT UNSIGNED NOT NULL DEFAULT 1000000 COMMENT '未终结任务上限（1–100000000）',
  max_concurrency INT UNSIGNED NOT NULL DEFAULT 10000 COMMENT '活跃尝试（并发）上限（1–1000000）',
  rate_per_second INT UNSIGNED NOT NULL DEFAULT 100000 COMMENT '每秒开始次数上限（1–10000000）',
  unfinished_tasks BIGINT UNSIGNED NOT NULL DEFAULT 0 COMMENT '用量：WAITING、LEASED、RUNNING、NEEDS_REVIEW 任务数',
  active_attempts BIGINT UNSIGNED NOT NULL DEFAULT 0 COMMENT '用量：已预占或运行中的尝试数',
  pending_starts BIGINT UNSIGNED NOT NULL DEFAULT 0 COMMENT '用量：已预占但尚未开始的尝试数（活跃尝试的子集）',
  window_started_at DATETIME(6) NULL COMMENT '当前一秒开始窗口的起点（数据库时间）；为空表示尚无窗口',
  window_starts INT UNSIGNED NOT NULL DEFAULT 0 COMMENT '当前开始窗口内已授权的开始次数',
  updated_at DATETIME(6) NOT NULL COMMENT '最后修改时间（UTC）',
  PRIMARY KEY (application_id)
) ENGINE=InnoDB DEFAULT CHARSET=utf8mb4 COLLATE=utf8mb4_bin COMMENT='应用级共享额度：三个上限、配置版本与实时用量（与身份表分开，认证只取共享锁）';

CREATE TABLE orbit_queues (
  queue_id BINARY(16) NOT NULL COMMENT '队列标识（16 字节）',
  application_id BINARY(16) NOT NULL COMMENT '所属应用标识',
  namespace_id BINARY(16) NOT NULL COMMENT '所属命名空间标识',
  name VARCHAR(63) NOT NULL COMMENT '队列名称，命名空间内唯一',
  revision BIGINT UNSIGNED NOT NULL DEFAULT 1 COMMENT '配置版本，仅配置变更时加一',
  max_unfinished_tasks INT UNSIGNED NOT NULL DEFAULT 100000 COMMENT '未终结任务上限',
  max_concurrency INT UNSIGNED NOT NULL DEFAULT 1000 COMMENT '活跃尝试（并发）上限',
  rate_per_second INT UNSIGNED NOT NULL DEFAULT 10000 COMMENT '每秒开始次数上限',
  key_concurrency SMALLINT UNSIGNED NOT NULL DEFAULT 1 COMMENT '同一资源键同时预占或运行的尝试上限（1–1000）',
  paused TINYINT(1) NOT NULL DEFAULT 0 COMMENT '是否暂停领取；暂停时仍受理提交',
  unfinished_tasks BIGINT UNSIGNED NOT NULL DEFAULT 0 COMMENT '用量：未终结任务数',
  active_attempts BIGINT UNSIGNED NOT NULL DEFAULT 0 COMMENT '用量：已预占或运行中的尝试数',
  pending_starts BIGINT UNSIGNED NOT NULL DEFAULT 0 COMMENT '用量：已预占但尚未开始的尝试数',
  window_started_at DATETIME(6) NULL COMMENT '当前一秒开始窗口的起点（数据库时间）',
  window_starts INT UNSIGNED NOT NULL DEFAULT 0 COMMENT '当前开始窗口内已授权的开始次数',
  created_at DATETIME(6) NOT NULL COMMENT '创建时间（UTC）',
  updated_at DATETIME(6) NOT NULL COMMENT '最后修改时间（UTC）',
  PRIMARY KEY (queue_id),
  UNIQUE KEY uk_orbit_queues_name (namespace_id, name)
) ENGINE=InnoDB DEFAULT CHARSET=utf8mb4 COLLATE=utf8mb4_bin COMMENT='队列：配置、暂停标志与队列级用量计数';

CREATE TABLE orbit_idempotency_receipts (
  namespace_id BINARY(16) NOT NULL COMMENT '命名空间标识；幂等键空间按命名空间隔离',
  idempotency_key VARCHAR(128) CHARACTER SET ascii COLLATE ascii_bin NOT NULL COMMENT '幂等键（1–128 个可打印非空白 ASCII 字符）',
  application_id BINARY(16) NOT NULL COMMENT '所属应用标识',
  operation VARCHAR(64) NOT NULL COMMENT '产生回执的操作名（operationId）',
  request_sha256 BINARY(32) NOT NULL COMMENT '请求内容（操作、路径参数、规范化请求体）的 SHA-256，用于识别同键不同内容',
  resource_id BINARY(16) NULL COMMENT '操作所作用资源的标识（任务、队列或应用）',
  response MEDIUMTEXT NOT NULL COMMENT '原成功响应快照（JSON）；重放时原样返回并标记 deduplicated',
  created_at DATETIME(6) NOT NULL COMMENT '受理时间（UTC）',
  PRIMARY KEY (namespace_id, idempotency_key)
) ENGINE=InnoDB DEFAULT CHARSET=utf8mb4 COLLATE=utf8mb4_bin COMMENT='幂等回执：仅成功操作留下回执，失败请求不留痕迹';

CREATE TABLE orbit_audit_events (
  sequence BIGINT UNSIGNED NOT NULL AUTO_INCREMENT COMMENT '全局递增序号，用于稳定排序和分页',
  audit_id BINARY(16) NOT NULL COMMENT '审计记录标识（16 字节）',
  application_id BINARY(16) NOT NULL COMMENT '所属应用标识（明确保存）',
  namespace_id BINARY(16) NOT NULL COMMENT '发起凭据所在的命名空间标识',
  credential_id BINARY(16) NOT NULL COMMENT '发起操作的凭据标识',
  action VARCHAR(64) NOT NULL COMMENT '管理动作，如 application.resources.configure',
  resource_type VARCHAR(32) NOT NULL COMMENT '资源类型：application_resources、queue 或 task',
  resource VARCHAR(128) NOT NULL COMMENT '资源：应用标识、队列名或任务标识',
  reason VARCHAR(1024) NOT NULL COMMENT '操作原因（最多 1024 个 Unicode 字符）',
  request_id BINARY(16) NOT NULL COMMENT '请求标识（与响应的 request_id 相同）',
  idempotency_key VARCHAR(128) CHARACTER SET ascii COLLATE ascii_bin NOT NULL COMMENT '操作使用的幂等键',
  before_state TEXT NULL COMMENT '变更前配置（JSON）；创建时为空',
  after_state TEXT NULL COMMENT '变更后配置（JSON）',
  created_at DATETIME(6) NOT NULL COMMENT '记录时间（UTC）',
  PRIMARY KEY (sequence),
  UNIQUE KEY uk_orbit_audit_events_id (audit_id),
  KEY ix_orbit_audit_events_namespace (namespace_id, sequence)
) ENGINE=InnoDB DEFAULT CHARSET=utf8mb4 COLLATE=utf8mb4_bin COMMENT='管理审计记录：写在发起凭据的命名空间，与配置变更同事务提交';

CREATE TABLE orbit_events (
  sequence BIGINT UNSIGNED NOT NULL AUTO_INCREMENT COMMENT '事件序号；同一应用的事件在应用额度行锁下写入，提交顺序与序号一致',
  event_id BINARY(16) NOT NULL COMMENT '事件标识（16 字节）',
  application_id BINARY(16) NOT NULL COMMENT '所属应用标识',
  namespace_id BINARY(16) NOT NULL COMMENT '事件所属命名空间标识',
  type VARCHAR(64) NOT NULL COMMENT '事件类型，如 application.resources.configured',
  subject VARCHAR(128) NOT NULL COMMENT '事件主体：应用标识、队列名或任务标识',
  data MEDIUMTEXT NOT NULL COMMENT '事件内容（JSON 对象）',
  occurred_at DATETIME(6) NOT NULL COMMENT '发生时间（UTC）',
  PRIMARY KEY (sequence),
  UNIQUE KEY uk_orbit_events_id (event_id),
  KEY ix_orbit_events_namespace (namespace_id, sequence)
) ENGINE=InnoDB DEFAULT CHARSET=utf8mb4 COLLATE=utf8mb4_bin COMMENT='有序事件流：GET /v1/events?after= 按序号读取';
