-- Job counts per queue and state.
SELECT queue, state, count(*) AS count FROM idem_job GROUP BY queue, state ORDER BY queue, state
