-- examples/sample_item_authors.sql -- the authors of the demo's feed rows
-- (examples/demo.sh loads it after examples/mutes.sql, sample_data.sql and
-- sample_authors.sql; it fills only rows without an author, so loading it
-- again changes nothing):
--
--   user 1        the 208 rows that are also author 2001's posts (fanned
--                 out before 2001 was merged): author 2001; every other row
--                 one of eight authors 3001..3008 by the id's sequence
--                 number, so each of them wrote one item in eight, in turn
--   users 2..1000 authors 3001..3008 by the id modulo 8
--
-- Muting 3001 in the demo hides one item in eight of every feed; muting
-- 2001 leaves it out of the timelines and hides its fanned-out rows too.
\set ON_ERROR_STOP on
BEGIN;

UPDATE feed_entry f SET author = 2001
  FROM author_post p
 WHERE f.uid = 1 AND f.author IS NULL AND p.author = 2001
   AND p.score = f.score AND p.id = f.id;

UPDATE feed_entry SET author = 3001 + (id & 7)
 WHERE uid BETWEEN 1 AND 1000 AND author IS NULL;

COMMIT;
