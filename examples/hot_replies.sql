-- hot_replies.sql -- the table behind examples/hot_replies: the replies to a
-- topic, hottest first.
--
-- A reply ranks by its likes, then by how many replies it drew, then by the
-- day of its latest reply (later first); replies equal on all three come
-- newest reply_id first. The three fields are packed, most significant
-- first, into one 53-bit score (feed_score_pack, sql/score.sql), the same
-- number feed_score_pack() computes in C:
--
--   field           bits  holds                        does not fit
--   likes            20   0 .. 1,048,575               the 1,048,576th like
--   replies          17   0 .. 131,071                 the 131,072nd reply
--   last_reply_on    16   days since 2020-01-01,       a day after 2199-06-06
--                         0 .. 65,535                  (or before 2020-01-01)
--
-- A value that does not fit makes the INSERT or UPDATE fail with SQLSTATE
-- 22003 (numeric_value_out_of_range): the statement changes nothing, the row
-- keeps its old values and its old place. Nothing is ever masked.
--
-- feedcache reads the feed from this table as it is (see feed_config):
--   table = hot_reply, owner_column = topic_id, score_column = score,
--   id_column = reply_id
--
-- Needs sql/score.sql loaded first (examples/hot_replies loads it when
-- feed_score_pack is missing). Idempotent: IF NOT EXISTS only.

CREATE TABLE IF NOT EXISTS hot_reply (
    topic_id      bigint  NOT NULL,
    reply_id      bigint  NOT NULL,
    likes         integer NOT NULL DEFAULT 0,
    replies       integer NOT NULL DEFAULT 0,
    last_reply_on date    NOT NULL,   -- the reply's own day until it is answered
    score         bigint  NOT NULL GENERATED ALWAYS AS (
        feed_score_pack(ARRAY[likes, replies, last_reply_on - DATE '2020-01-01'],
                        '{20,17,16}', '{f,f,f}')) STORED,
    PRIMARY KEY (topic_id, reply_id)
);

-- The keyset index feedcache's two queries use:
--   WHERE topic_id = $1 [AND (score, reply_id) < ($2, $3)]
--   ORDER BY score DESC, reply_id DESC LIMIT n
CREATE INDEX IF NOT EXISTS hot_reply_page
    ON hot_reply (topic_id, score DESC, reply_id DESC);
