-- Deletes jobs $1 (bigint[]) inserted in this transaction whose enqueue key was held.
DELETE FROM idem_job WHERE id = ANY($1::bigint[])
