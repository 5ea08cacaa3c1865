-- Who leads $1, judged at now ($2 timestamptz, NULL = the database clock).
SELECT name, holder, fence, elected_at, expires_at, coalesce($2::timestamptz, now()) AS now
FROM idem_leader
WHERE name = $1
