-- authors.sql -- a table of authors' own posts for read-time merge
-- (feed_config.author_table = "author_post", docs/merge.md): the posts of
-- the authors whose followers are too many to fan out to. Columns as the
-- feed table's, the owner being the author; the index answers every read
-- the library makes as a seek plus the rows it returns.
CREATE TABLE IF NOT EXISTS author_post (
    author bigint NOT NULL,
    score  bigint NOT NULL,
    id     bigint NOT NULL,
    PRIMARY KEY (author, id)
);
CREATE INDEX IF NOT EXISTS author_post_page ON author_post (author, score DESC, id DESC);
