-- 0005 the reason of a cancel intent. `:cancel` of a RUNNING task only records the intent and
-- tells the worker; the task ends CANCELLED when the worker answers, possibly in another
-- process much later, and its `error` then names the reason given to `:cancel` - so the reason
-- is kept with the intent, on the task row the result's transaction locks anyway.
ALTER TABLE orbit_tasks
  ADD COLUMN cancel_reason VARCHAR(1024) NULL COMMENT '运行中取消意图的原因（最近一次 :cancel 的 reason）；任务因此取消时写入 error';
