-- 0004 subscriptions: durable cursors over the event feed, and the queue an event is about
-- (so a credential's queue scope can filter task lifecycle events).

ALTER TABLE orbit_events
  ADD COLUMN queue_name VARCHAR(63) NULL COMMENT '事件涉及的队列名称（任务生命周期与队列事件；其他为空），用于按凭据队列范围过滤';

CREATE TABLE orbit_subscriptions (
  subscription_id BINARY(16) NOT NULL COMMENT '订阅标识（16 字节）',
  application_id BINARY(16) NOT NULL COMMENT '所属应用标识',
  namespace_id BINARY(16) NOT NULL COMMENT '所属命名空间标识',
  name VARCHAR(128) NOT NULL COMMENT '订阅名称，命名空间内唯一',
  types TEXT NULL COMMENT '只投递这些事件类型（JSON 数组）；为空则全部',
  queues TEXT NULL COMMENT '只投递涉及这些队列的事件（JSON 数组）；为空则不按队列过滤',
  state VARCHAR(16) NOT NULL COMMENT '状态：ACTIVE 或 PAUSED',
  acked_sequence BIGINT UNSIGNED NOT NULL DEFAULT 0 COMMENT '已确认的事件序号；读取从其后开始（至少一次投递）',
  acked_at DATETIME(6) NULL COMMENT '最近一次确认的时间（UTC）',
  created_at DATETIME(6) NOT NULL COMMENT '创建时间（UTC）',
  updated_at DATETIME(6) NOT NULL COMMENT '最后修改时间（UTC）',
  PRIMARY KEY (subscription_id),
  UNIQUE KEY uk_orbit_subscriptions_name (namespace_id, name)
) ENGINE=InnoDB DEFAULT CHARSET=utf8mb4 COLLATE=utf8mb4_bin COMMENT='订阅：事件流上的持久游标，读取后确认推进';
