-- Holds the leadership row of ($1 name, $2 holder, $3 fence) until the transaction
-- ends, when that leadership is current at now ($4 timestamptz, NULL = the database
-- clock); nothing when it was lost.
-- PostgreSQL dialect: FOR SHARE makes an election (an UPDATE of the row) wait until
-- this transaction ends, and a check that waited for an election tests its predicates
-- again on the elected row, which no longer matches. The same statement sets this
-- transaction's idle_in_transaction_session_timeout to what is left of the leadership
-- (at least 1 s, at most PostgreSQL's limit of 2^31 - 1 ms): a leader that stalls
-- inside it (a paused process) loses its session, which releases the row, so elections
-- wait at most that long.
SELECT l.fence,
       set_config('idle_in_transaction_session_timeout',
                  least(2147483647,
                        greatest(1000, ceil(extract(epoch FROM l.expires_at
                                            - coalesce($4::timestamptz, now())) * 1000)))::bigint::text,
                  true) AS idle_timeout
FROM idem_leader AS l
WHERE l.name = $1 AND l.holder = $2 AND l.fence = $3
  AND l.expires_at > coalesce($4::timestamptz, now())
FOR SHARE
