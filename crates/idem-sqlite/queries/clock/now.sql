-- The database clock in milliseconds since the Unix epoch.
SELECT CAST(unixepoch('subsec') * 1000 AS INTEGER) AS now
