-- 0015_state_checks: nothing to change on PostgreSQL. SQLite's twin rewrites the job
-- table's state CHECK, the attempt table's outcome CHECK and the claim index's predicate
-- as comparisons, because SQLite builds a temporary b-tree for each evaluation of an IN
-- list; PostgreSQL's IN lists cost no such thing.
SELECT 1;
