-- load.sql -- the benchmark's data set: 1,000,000 rows for 1,000 users in
-- feed_entry, with its (uid, score DESC, id DESC) index (sql/schema.sql).
--   uid 1       100,000 rows (the big feed)
--   uid 2         1,000 rows (the 1,000-item feed)
--   uid 3        10,000 rows sharing one score (a tie group)
--   uid 4..1000 889,000 rows, 891 or 892 each
-- Ids are even (2 * row number), so an odd id is a cursor whose item is gone.
-- Scores are millisecond times spread over ~3 years, in no particular order.
\timing off
TRUNCATE feed_entry;
INSERT INTO feed_entry (uid, score, id)
SELECT CASE WHEN g <= 100000 THEN 1
            WHEN g <= 101000 THEN 2
            WHEN g <= 111000 THEN 3
            ELSE 4 + g % 997 END,
       CASE WHEN g > 101000 AND g <= 111000 THEN 1700000000000
            ELSE 1700000000000 + (g * 2654435761) % 100000000000 END,
       2 * g
FROM generate_series(1, 1000000) AS g;
VACUUM ANALYZE feed_entry;
