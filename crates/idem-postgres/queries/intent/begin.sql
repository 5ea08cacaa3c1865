-- Reserves intent $1 (fingerprint $2, unkeyed $3) for job $5 under job fence $6 with a
-- lease of $4 ms, at $7 (timestamptz, NULL = database clock). In one statement: inserts
-- it (fence 1, attempt 1), takes a `released` row, or takes over an `in_progress` row
-- whose lease ended before now, when the fingerprint matches: attempt + 1 and fence + 1
-- with a new lease, or, for an unkeyed intent whose lease ended, `unknown` with fence + 1
-- and no lease (the earlier holder may have sent the call). Returns the row it wrote;
-- no row when the claim is not current or the key is held (the caller tells them
-- apart). The job row is locked FOR SHARE, which
-- conflicts with the rescue's and claim's updates: a claim that is current here stays
-- current until this transaction ends, and one rescued meanwhile is re-checked against
-- the committed row and refused. The takeover's predicates stand on the DO UPDATE's
-- WHERE, which a statement that waited on the row re-checks against its latest version.
WITH job AS (
    SELECT id, fence FROM idem_job
    WHERE id = $5 AND fence = $6 AND state = 'running'
    FOR SHARE
), clock AS (
    SELECT coalesce($7::timestamptz, now()) AS now
)
INSERT INTO idem_intent (key, state, fingerprint, unkeyed, fence, attempt, lease_expires_at,
                         job_id, job_fence, created_at, updated_at)
SELECT $1, 'in_progress', $2, $3, 1, 1, clock.now + $4 * interval '1 millisecond',
       job.id, job.fence, clock.now, clock.now
FROM job, clock
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
                      'may have been sent, so it is reconciled instead of sent again'
                 ELSE NULL END,
    updated_at = excluded.updated_at
WHERE idem_intent.fingerprint = excluded.fingerprint
  AND (idem_intent.state = 'released'
       OR (idem_intent.state = 'in_progress'
           AND idem_intent.lease_expires_at < excluded.updated_at))
RETURNING *
