-- Reserves intent ?1 (fingerprint ?2, unkeyed ?3) for job ?5 under job fence ?6 with a
-- lease of ?4 ms, at ?7 (ms, NULL = database clock). In one statement: inserts it
-- (fence 1, attempt 1), takes a `released` row, or takes over an `in_progress` row whose
-- lease ended before now, when the fingerprint matches: attempt + 1 and fence + 1 with a
-- new lease, or, for an unkeyed intent whose lease ended, `unknown` with fence + 1 and no
-- lease (the earlier holder may have sent the call). Returns the row it wrote;
-- no row when the claim is not current or the key is held (the caller tells them
-- apart).
-- SQLite dialect: the single writer serialises begins, so the claim checked here stays
-- current until the transaction ends; an upsert on a SELECT needs its WHERE clause.
INSERT INTO idem_intent (key, state, fingerprint, unkeyed, fence, attempt, lease_expires_at,
                         job_id, job_fence, created_at, updated_at)
SELECT ?1, 'in_progress', ?2, ?3, 1, 1, clock.now + ?4, j.id, j.fence, clock.now, clock.now
FROM idem_job AS j,
     (SELECT coalesce(?7, CAST(unixepoch('subsec') * 1000 AS INTEGER)) AS now) AS clock
WHERE j.id = ?5 AND j.fence = ?6 AND j.state = 'running'
ON CONFLICT (key) DO UPDATE SET
    state = CASE WHEN idem_intent.state = 'in_progress' AND idem_intent.unkeyed
                 THEN 'unknown' ELSE 'in_progress' END,
    fence = idem_intent.fence + 1,
    attempt = idem_intent.attempt
              + CASE WHEN idem_intent.state = 'in_progress' AND idem_intent.unkeyed
                     THEN 0 ELSE 1 END,
    lease_expires_at = CASE WHEN idem_intent.state = 'in_progress' AND idem_intent.unkeyed
                            THEN NULL ELSE excluded.lease_expires_at END,
    job_id = excluded.job_id,
    job_fence = excluded.job_fence,
    error = CASE WHEN idem_intent.state = 'in_progress' AND idem_intent.unkeyed
                 THEN 'the holder''s lease ended before it recorded an outcome; the call '
                      || 'may have been sent, so it is reconciled instead of sent again'
                 ELSE NULL END,
    updated_at = excluded.updated_at
WHERE idem_intent.fingerprint = excluded.fingerprint
  AND (idem_intent.state = 'released'
       OR (idem_intent.state = 'in_progress'
           AND idem_intent.lease_expires_at < excluded.updated_at))
RETURNING *
