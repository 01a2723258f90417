-- 0006 a schedule whose round fails says why. The schedule loop fires each application's due
-- schedules in a transaction of their own; when one fails (the database refuses its writes, its
-- stored data cannot be read), the loop goes on with the other applications and fires the
-- other schedules of the same application one by one, and the failing schedule records the
-- cause here - shown as `last_error` by the API - and is tried again after a growing pause
-- (`retry_at`), instead of failing silently first in every round.
ALTER TABLE orbit_schedules
  ADD COLUMN last_error VARCHAR(1024) NULL COMMENT '最近一次触发失败的原因；成功触发后清空',
  ADD COLUMN last_error_at DATETIME(6) NULL COMMENT '最近一次触发失败的时间（UTC）',
  ADD COLUMN consecutive_failures INT UNSIGNED NOT NULL DEFAULT 0 COMMENT '连续触发失败的次数；成功触发后归零',
  ADD COLUMN retry_at DATETIME(6) NULL COMMENT '失败后最早再次尝试触发的时间（UTC）；为空表示随时可触发',
  -- The loop fires one application's due schedules at a time: found by application first.
  ADD INDEX ix_orbit_schedules_application_due (application_id, state, next_fire_at);
