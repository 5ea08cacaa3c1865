-- Who leads ?1.
SELECT name, holder, fence, elected_at, expires_at
FROM idem_leader
WHERE name = ?1
