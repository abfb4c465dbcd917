-- examples/mutes.sql -- what the example service needs to hide muted
-- authors (feed_server --item-author-column author): each feed row names
-- its item's author, and each user's mutes are a table of the application.
-- Load it after sql/schema.sql. Idempotent: IF NOT EXISTS only.
--
-- feed_entry.author is the author of the item a row fans out (POST
-- /items/{id}/fanout and POST /users/{uid}/items write it); it never changes
-- once written (feedcache caches it). The library reads it in its filtered
-- statements past the cached copy: WHERE uid = $1 AND (score, id) < (...)
-- AND author <> ALL($n), on the feed's keyset index.
ALTER TABLE feed_entry ADD COLUMN IF NOT EXISTS author bigint;

-- Who each user mutes: the service reads a viewer's row set once per feed
-- or timeline request (GET /users/{uid}/mutes shows it) and passes it to
-- the filtered page as the authors to hide. At most 1000 a user
-- (FEED_FILTER_MAX_AUTHORS; POST /users/{uid}/mutes/{author} refuses more).
CREATE TABLE IF NOT EXISTS mutes (
    uid    bigint NOT NULL,
    author bigint NOT NULL,
    PRIMARY KEY (uid, author)
);
