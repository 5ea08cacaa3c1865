-- How many of batch $1's children are in each state.
SELECT state, count(*) AS n FROM idem_job WHERE batch_id = $1 GROUP BY state ORDER BY state
