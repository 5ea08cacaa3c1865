-- Intent $1.
SELECT * FROM idem_intent WHERE key = $1
