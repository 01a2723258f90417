-- Keyspace orbit_lookup (unsharded): the tables behind the consistent_lookup_unique vindexes of
-- deploy/vitess/vschema.json. One row per id: the id and the keyspace id of its application's shard.
-- vtgate writes them in the same transaction as the owner table's row (docs/scale-out.md).

CREATE TABLE orbit_applications_name_lookup (
  name VARCHAR(128) CHARACTER SET utf8mb4 COLLATE utf8mb4_bin NOT NULL,
  keyspace_id VARBINARY(128) NOT NULL,
  PRIMARY KEY (name)
) ENGINE=InnoDB DEFAULT CHARSET=utf8mb4 COLLATE=utf8mb4_bin;

CREATE TABLE orbit_namespaces_namespace_id_lookup (
  namespace_id BINARY(16) NOT NULL,
  keyspace_id VARBINARY(128) NOT NULL,
  PRIMARY KEY (namespace_id)
) ENGINE=InnoDB DEFAULT CHARSET=utf8mb4 COLLATE=utf8mb4_bin;

CREATE TABLE orbit_credentials_credential_id_lookup (
  credential_id BINARY(16) NOT NULL,
  keyspace_id VARBINARY(128) NOT NULL,
  PRIMARY KEY (credential_id)
) ENGINE=InnoDB DEFAULT CHARSET=utf8mb4 COLLATE=utf8mb4_bin;

CREATE TABLE orbit_queues_queue_id_lookup (
  queue_id BINARY(16) NOT NULL,
  keyspace_id VARBINARY(128) NOT NULL,
  PRIMARY KEY (queue_id)
) ENGINE=InnoDB DEFAULT CHARSET=utf8mb4 COLLATE=utf8mb4_bin;

CREATE TABLE orbit_tasks_task_id_lookup (
  task_id BINARY(16) NOT NULL,
  keyspace_id VARBINARY(128) NOT NULL,
  PRIMARY KEY (task_id)
) ENGINE=InnoDB DEFAULT CHARSET=utf8mb4 COLLATE=utf8mb4_bin;

CREATE TABLE orbit_attempts_attempt_id_lookup (
  attempt_id BINARY(16) NOT NULL,
  keyspace_id VARBINARY(128) NOT NULL,
  PRIMARY KEY (attempt_id)
) ENGINE=InnoDB DEFAULT CHARSET=utf8mb4 COLLATE=utf8mb4_bin;

CREATE TABLE orbit_worker_sessions_session_id_lookup (
  session_id BINARY(16) NOT NULL,
  keyspace_id VARBINARY(128) NOT NULL,
  PRIMARY KEY (session_id)
) ENGINE=InnoDB DEFAULT CHARSET=utf8mb4 COLLATE=utf8mb4_bin;

CREATE TABLE orbit_schedules_schedule_id_lookup (
  schedule_id BINARY(16) NOT NULL,
  keyspace_id VARBINARY(128) NOT NULL,
  PRIMARY KEY (schedule_id)
) ENGINE=InnoDB DEFAULT CHARSET=utf8mb4 COLLATE=utf8mb4_bin;

CREATE TABLE orbit_subscriptions_subscription_id_lookup (
  subscription_id BINARY(16) NOT NULL,
  keyspace_id VARBINARY(128) NOT NULL,
  PRIMARY KEY (subscription_id)
) ENGINE=InnoDB DEFAULT CHARSET=utf8mb4 COLLATE=utf8mb4_bin;
