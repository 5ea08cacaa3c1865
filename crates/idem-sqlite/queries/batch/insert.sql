-- Inserts a batch, open and with no children: ?1 on_dead, ?2 successor (JSON text, a
-- NewJob), ?3 failure_successor (JSON text, NULL = none), ?4 key_window_ms, ?5 principal,
-- ?6 now (ms, NULL = database clock). Returns the row with its counts (all 0), as
-- batch/get.sql does.
INSERT INTO idem_batch (state, on_dead, successor, failure_successor, key_window_ms,
                        principal, created_at)
VALUES ('open', ?1, json(?2), json(?3), ?4, ?5,
        coalesce(?6, CAST(unixepoch('subsec') * 1000 AS INTEGER)))
RETURNING *, 0 AS total, 0 AS completed, 0 AS dead, 0 AS cancelled
