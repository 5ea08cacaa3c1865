-- Reserves Idempotency-Key ?2 of principal ?1 for a request with fingerprint ?3, locked
-- until now + ?4 ms, where now is ?6 (ms, NULL = database clock). In one statement:
-- inserts it (fence 1), or takes over a row no live request holds, with fence + 1: a
-- `released` row; a row created at or before now - ?5 ms (past its retention, whatever
-- it holds, unless a live request still holds its lock); an `in_progress` row whose lock ended at or before now, when the
-- fingerprint is the same (another fingerprint waits for the retention or a release).
-- A takeover starts the row afresh: in progress, this fingerprint, created now, no stored
-- response. Returns the row it wrote; no row when the key is held (the caller reads it
-- with get.sql).
-- SQLite dialect: the single writer serialises reservations, so the row read next is the
-- one that refused this write; an upsert on a SELECT needs a WHERE clause to parse.
INSERT INTO idem_http_key (principal, key, fingerprint, state, fence, locked_until,
                           created_at)
SELECT ?1, ?2, ?3, 'in_progress', 1, clock.now + ?4, clock.now
FROM (SELECT coalesce(?6, CAST(unixepoch('subsec') * 1000 AS INTEGER)) AS now) AS clock
WHERE true
ON CONFLICT (principal, key) DO UPDATE SET
    fingerprint = excluded.fingerprint,
    state = 'in_progress',
    fence = idem_http_key.fence + 1,
    locked_until = excluded.locked_until,
    status = NULL,
    headers = NULL,
    body = NULL,
    created_at = excluded.created_at
WHERE idem_http_key.state = 'released'
   OR (idem_http_key.created_at <= excluded.created_at - ?5
       AND NOT (idem_http_key.state = 'in_progress'
                AND idem_http_key.locked_until > excluded.created_at))
   OR (idem_http_key.state = 'in_progress'
       AND idem_http_key.locked_until <= excluded.created_at
       AND idem_http_key.fingerprint = excluded.fingerprint)
RETURNING *
