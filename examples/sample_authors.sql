-- examples/sample_authors.sql -- the high-follower authors of `make demo`
-- (examples/demo.sh loads it once, after sql/authors.sql and
-- examples/sample_data.sql): their own posts in author_post, which the demo
-- service merges into every timeline (--merge-authors 2001,2002,2003;
-- GET /users/{uid}/timeline) instead of fanning them out.
--
--   author 2001   5,000 posts, one every 2 minutes going back from
--                 2025-01-01 00:00 UTC, 30 s off the minute; and 208 more,
--                 posts it made before it was merged and fanned out then:
--                 the same (score, id) is in user 1's feed too (the first of
--                 user 1's items of each hour before 2025-01-01 00:00), and
--                 comes once in user 1's timeline
--   author 2002   1,200 posts, one every 10 minutes, 15 s off the minute
--   author 2003   300 posts, one an hour, 45 s off the minute
--
-- Ids are snowflakes of the post's time like user 1's, with sequence
-- numbers of their own (9, 10, 11), so no id is another's. The table
-- feedcache_demo_authors records that the load happened.
\set ON_ERROR_STOP on
BEGIN;

DELETE FROM author_post WHERE author IN (2001, 2002, 2003);

INSERT INTO author_post (author, score, id)
SELECT a.author, t, ((t - 1288834974657) << 22) | a.seq
  FROM (VALUES (2001, 5000, 120000, 30000, 9), (2002, 1200, 600000, 15000, 10),
               (2003, 300, 3600000, 45000, 11)) AS a(author, posts, every, off, seq),
       LATERAL (SELECT 1735689600000 - a.off - g * a.every AS t
                  FROM generate_series(0, a.posts - 1) AS g) AS s;

INSERT INTO author_post (author, score, id)
SELECT 2001, score, id FROM feed_entry
 WHERE uid = 1 AND score % 3600000 = 0 AND score < 1735689600000 AND id & 7 = 0
    ON CONFLICT DO NOTHING;

CREATE TABLE IF NOT EXISTS feedcache_demo_authors (loaded_at timestamptz NOT NULL, rows bigint NOT NULL);
DELETE FROM feedcache_demo_authors;
INSERT INTO feedcache_demo_authors SELECT now(), count(*) FROM author_post
 WHERE author IN (2001, 2002, 2003);

COMMIT;
ANALYZE author_post;
