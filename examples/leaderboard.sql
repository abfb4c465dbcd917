-- leaderboard.sql -- the table behind examples/leaderboard: a board's
-- players, best first.
--
-- A player ranks by points; among equal points a paying player first; then
-- whoever reached those points earliest; players equal on all three come
-- larger player_id first. The three fields are packed, most significant
-- first, into one 53-bit score, field by field with feed_pack_field
-- (sql/score.sql), the same number feed_score_pack() computes in C:
--
--   field        bits  order           holds                        does not fit
--   points        24   larger first    0 .. 16,777,215              16,777,216 points
--   paid           1   larger first    0 (free), 1 (paid)           (a boolean always fits)
--   reached_at    28   smaller first   seconds since 2025-01-01     a time after
--                                      00:00 UTC, 0 .. 268,435,455  2033-07-04 21:24:15 UTC
--                                                                   (or before 2025)
--
-- Times count whole seconds: two players who reach the same points in the
-- same second (and are both paid or both free) tie, and the larger
-- player_id comes first.
--
-- A value that does not fit makes the INSERT or UPDATE fail with SQLSTATE
-- 22003 (numeric_value_out_of_range): the statement changes nothing, the row
-- keeps its old values and its old place. Nothing is ever masked.
--
-- feedcache reads the feed from this table as it is (see feed_config):
--   table = leaderboard, owner_column = board_id, score_column = score,
--   id_column = player_id
--
-- Needs sql/score.sql loaded first (examples/leaderboard loads it when
-- feed_pack_field is missing). Idempotent: CREATE OR REPLACE and IF NOT
-- EXISTS only.

-- Whole seconds from 2025-01-01 00:00 UTC to t (negative before). IMMUTABLE,
-- as a generated column requires: extract(epoch FROM timestamptz) is only
-- STABLE, but AT TIME ZONE 'UTC' and interval arithmetic are immutable.
-- Stored scores depend on it: never change what it returns.
CREATE OR REPLACE FUNCTION leaderboard_seconds(t timestamptz)
RETURNS bigint
LANGUAGE sql IMMUTABLE STRICT PARALLEL SAFE
RETURN floor(extract(epoch FROM (t AT TIME ZONE 'UTC') - TIMESTAMP '2025-01-01 00:00:00'))::bigint;

CREATE TABLE IF NOT EXISTS leaderboard (
    board_id   bigint      NOT NULL,
    player_id  bigint      NOT NULL,
    points     bigint      NOT NULL DEFAULT 0,
    paid       boolean     NOT NULL DEFAULT false,
    reached_at timestamptz NOT NULL,   -- when points last changed
    -- Shifts: the widths below each field, 1 + 28 = 29 for points, 28 for
    -- paid. Keep the parentheses: '+' binds tighter than '<<'.
    score      bigint      NOT NULL GENERATED ALWAYS AS (
          (feed_pack_field(points, 24, false) << 29)
        + (feed_pack_field(paid::int, 1, false) << 28)
        +  feed_pack_field(leaderboard_seconds(reached_at), 28, true)) STORED,
    PRIMARY KEY (board_id, player_id)
);

-- The keyset index feedcache's two queries use:
--   WHERE board_id = $1 [AND (score, player_id) < ($2, $3)]
--   ORDER BY score DESC, player_id DESC LIMIT n
CREATE INDEX IF NOT EXISTS leaderboard_page
    ON leaderboard (board_id, score DESC, player_id DESC);
