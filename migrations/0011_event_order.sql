-- 0011 event order on a cluster: a counter the event writers bump on the application row.
--
-- An application's events are inserted while its orbit_application_resources row is locked
-- (docs/events.md). On one server that lock orders them: sequence numbers commit in order. On a
-- Galera cluster a row lock is local to its node, and only a row a transaction WRITES is in its
-- certification keys; so every transaction that inserts events also writes the application row -
-- the counters on the hot paths, and this counter on the others (configuration and state changes,
-- which change no usage) - and two nodes' event inserts for one application cannot both commit
-- without one having seen the other (the later one fails certification and is retried whole).
ALTER TABLE orbit_application_resources
  ADD COLUMN event_writes BIGINT UNSIGNED NOT NULL DEFAULT 0 COMMENT '写入事件而不改变用量的事务次数；让集群上同一应用的事件写入互相冲突，从而按序号提交';
