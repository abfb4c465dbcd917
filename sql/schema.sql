CREATE TABLE IF NOT EXISTS feed_entry (
    uid   bigint NOT NULL,
    score bigint NOT NULL,
    id    bigint NOT NULL,
    PRIMARY KEY (uid, id)
);
CREATE INDEX IF NOT EXISTS feed_entry_page ON feed_entry (uid, score DESC, id DESC);
