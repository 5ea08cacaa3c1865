-- The oldest job that awaited intent ?1 (`awaited_intent`), whatever its state: a job of
-- the same logical request, through which reconciliation looks the call up when the
-- intent's own job is gone.
SELECT * FROM idem_job WHERE awaited_intent = ?1 ORDER BY id LIMIT 1
