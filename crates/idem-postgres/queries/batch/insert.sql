-- Inserts a batch, open and with no children: $1 on_dead, $2 successor (jsonb, a NewJob),
-- $3 failure_successor (jsonb, NULL = none), $4 key_window_ms, $5 principal, $6 now
-- (timestamptz, NULL = database clock). Returns the row with its counts (all 0), as
-- batch/get.sql does.
INSERT INTO idem_batch (state, on_dead, successor, failure_successor, key_window_ms,
                        principal, created_at)
VALUES ('open', $1, $2, $3, $4, $5, coalesce($6::timestamptz, now()))
RETURNING *, 0::bigint AS total, 0::bigint AS completed, 0::bigint AS dead,
          0::bigint AS cancelled
