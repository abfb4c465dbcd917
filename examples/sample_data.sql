-- examples/sample_data.sql -- the data set of `make demo` (examples/demo.sh
-- loads it once into the demo's own PostgreSQL, in .demo/).
--
--   user 1          100,000 items: one every 7.5 s going back from
--                   2025-01-01 00:00 UTC, 8 per minute sharing a score (the
--                   minute, in unix ms); ids are Twitter-style snowflakes
--                   ((ms - 1288834974657) << 22 | sequence), above 2^53
--   users 2..899    1 to 200 items each, 3 per hour sharing a score
--   users 900..999  no items
--   user 1000       1 item
--
-- About 190,000 rows, in one transaction; a few seconds. The table
-- feedcache_demo records that the load happened.
\set ON_ERROR_STOP on
BEGIN;

DELETE FROM feed_entry WHERE uid BETWEEN 1 AND 1000;

INSERT INTO feed_entry (uid, score, id)
SELECT 1, t, ((t - 1288834974657) << 22) | seq
  FROM (SELECT 1735689600000 - (g / 8) * 60000 AS t, g % 8 AS seq
          FROM generate_series(0, 99999) AS g) AS s;

INSERT INTO feed_entry (uid, score, id)
SELECT u, 1735689600000 - (k / 3) * 3600000, u * 1000 + k
  FROM generate_series(2, 899) AS u,
       LATERAL generate_series(1, 1 + (u * 37) % 200) AS k;

INSERT INTO feed_entry (uid, score, id) VALUES (1000, 1735689600000, 1000001);

CREATE TABLE IF NOT EXISTS feedcache_demo (loaded_at timestamptz NOT NULL, rows bigint NOT NULL);
DELETE FROM feedcache_demo;
INSERT INTO feedcache_demo SELECT now(), count(*) FROM feed_entry WHERE uid BETWEEN 1 AND 1000;

COMMIT;
ANALYZE feed_entry;
