-- Intents per state, for the metrics' gauge (read on an interval, never per scrape).
SELECT state, count(*) AS count FROM idem_intent GROUP BY state ORDER BY state
