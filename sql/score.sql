-- score.sql -- composite scores computed by PostgreSQL, bit for bit as
-- lib/base/score.c computes them (feed_score_pack() in feedcache.h).
--
-- Several ordering fields are packed into one bigint in [0, 2^53 - 1], the
-- range a Redis score (a double) holds exactly. Fields go from most to least
-- significant; a field of width b holds the values 0 .. 2^b - 1 and sits
-- above the fields after it. A smaller-first field (earlier time ranks higher)
-- stores 2^b - 1 - value. A value that does not fit raises an error
-- (SQLSTATE 22003, numeric_value_out_of_range); nothing is ever masked.
-- A bad layout (a width outside 1..53, widths summing past 53) raises 22023,
-- invalid_parameter_value.
--
-- So the score can be a generated column, and the keyset index on
-- (uid, score DESC, id DESC) covers it:
--
--   A C layout                              the same score in SQL
--   static const feed_field hot[] = {
--       { "likes",   20, FEED_LARGER_FIRST },
--       { "replies", 17, FEED_LARGER_FIRST },
--       { "day",     16, FEED_LARGER_FIRST },
--   };
--
--   score bigint NOT NULL GENERATED ALWAYS AS (
--       feed_score_pack(ARRAY[likes, replies, last_reply_day],
--                       '{20,17,16}', '{f,f,f}')) STORED
--
--   or, field by field (the same number; the widths after each field give
--   its shift: 17 + 16 = 33 for likes, 16 for replies, 0 for day):
--
--   score bigint NOT NULL GENERATED ALWAYS AS (
--         (feed_pack_field(likes,          20, false) << 33)
--       + (feed_pack_field(replies,        17, false) << 16)
--       +  feed_pack_field(last_reply_day, 16, false)) STORED
--
--   Keep the parentheses: in PostgreSQL '+' binds tighter than '<<', so
--   a << 33 + b means a << (33 + b). The field-by-field form does not check
--   that the widths sum to at most 53; feed_score_pack() does.
--
--   A leaderboard: points, then paid first, then earliest time first
--   (examples/leaderboard.sql: t = seconds since 2025-01-01):
--   { "points", 24, LARGER }, { "paid", 1, LARGER }, { "t", 28, SMALLER }
--   feed_score_pack(ARRAY[points, paid::int, t], '{24,1,28}', '{f,f,t}')
--
--   A time-ordered feed with snowflake ids (feed_snowflake_score() in C):
--   score bigint NOT NULL GENERATED ALWAYS AS (
--       feed_snowflake_score(id, 22, 1288834974657)) STORED
--
-- The functions are IMMUTABLE (a generated column requires it) and STRICT:
-- a NULL argument gives a NULL score, which a NOT NULL score column refuses.
-- They call no function of their own schema, so they work whatever the
-- search_path (pg_dump restores with an empty one). PostgreSQL does not
-- recompute stored columns when a function is replaced: the results of these
-- functions must never change; change them only together with lib/base/score.c
-- and by adding new functions, not by editing what existing rows rely on.
--
-- Idempotent: CREATE OR REPLACE only; loading it twice changes nothing.

-- The part of the score one field contributes, before shifting: value itself
-- (larger first) or 2^bits - 1 - value (smaller first).
CREATE OR REPLACE FUNCTION feed_pack_field(value bigint, bits integer,
                                           smaller_first boolean)
RETURNS bigint
LANGUAGE plpgsql IMMUTABLE STRICT PARALLEL SAFE
AS $$
DECLARE
    top bigint;
BEGIN
    IF bits < 1 OR bits > 53 THEN
        RAISE EXCEPTION 'feed_pack_field: width % is outside 1..53', bits
            USING ERRCODE = 'invalid_parameter_value';
    END IF;
    top := (1::bigint << bits) - 1;
    IF value < 0 OR value > top THEN
        RAISE EXCEPTION 'feed_pack_field: value % does not fit in % bits (0..%)',
                        value, bits, top
            USING ERRCODE = 'numeric_value_out_of_range';
    END IF;
    IF smaller_first THEN
        RETURN top - value;
    END IF;
    RETURN value;
END
$$;

-- feed_score_pack(values, bits, smaller_first): the whole score, as the C
-- function of the same name: values[k] goes in field k (of width bits[k]
-- and direction smaller_first[k]), the first field the most significant.
-- Raises 22023 for a bad layout, 22003 for a value that does not fit.
-- A NULL among the values gives NULL, as a NULL argument does (STRICT).
CREATE OR REPLACE FUNCTION feed_score_pack(vals bigint[], bits integer[],
                                           smaller_first boolean[])
RETURNS bigint
LANGUAGE plpgsql IMMUTABLE STRICT PARALLEL SAFE
AS $$
DECLARE
    n      integer;
    vlo    integer := array_lower(vals, 1);
    blo    integer := array_lower(bits, 1);
    slo    integer := array_lower(smaller_first, 1);
    score  bigint := 0;
    v      bigint;
    b      integer;
    top    bigint;
    k      integer;
BEGIN
    -- The layout checks of feed_layout_init(), written out here and in
    -- feed_score_unpack() rather than shared: no call into our own schema
    -- (see the top of the file).
    n := cardinality(bits);
    IF array_ndims(bits) IS DISTINCT FROM 1
       OR array_ndims(smaller_first) IS DISTINCT FROM 1
       OR cardinality(smaller_first) <> n OR n > 16 THEN
        RAISE EXCEPTION 'feed_score_pack: need 1..16 widths and as many directions'
            USING ERRCODE = 'invalid_parameter_value';
    END IF;
    IF array_ndims(vals) IS DISTINCT FROM 1 OR cardinality(vals) <> n THEN
        RAISE EXCEPTION 'feed_score_pack: % values for a layout of % fields',
                        cardinality(vals), n
            USING ERRCODE = 'invalid_parameter_value';
    END IF;
    IF array_position(smaller_first, NULL) IS NOT NULL THEN
        RAISE EXCEPTION 'feed_score_pack: NULL direction'
            USING ERRCODE = 'invalid_parameter_value';
    END IF;
    top := 0;                                   -- here: the total width
    FOREACH b IN ARRAY bits LOOP
        IF b IS NULL OR b < 1 OR b > 53 THEN
            RAISE EXCEPTION 'feed_score_pack: width % is outside 1..53', b
                USING ERRCODE = 'invalid_parameter_value';
        END IF;
        top := top + b;
    END LOOP;
    IF top > 53 THEN
        RAISE EXCEPTION 'feed_score_pack: widths sum to % bits, more than 53', top
            USING ERRCODE = 'invalid_parameter_value';
    END IF;

    -- Horner's form of sum(field_k << shift_k); below 2^53 at every step.
    FOR k IN 0 .. n - 1 LOOP
        v := vals[vlo + k];
        IF v IS NULL THEN
            RETURN NULL;
        END IF;
        b := bits[blo + k];
        top := (1::bigint << b) - 1;
        IF v < 0 OR v > top THEN
            RAISE EXCEPTION 'feed_score_pack: field %: % does not fit in % bits (0..%)',
                            k + 1, v, b, top
                USING ERRCODE = 'numeric_value_out_of_range';
        END IF;
        IF smaller_first[slo + k] THEN
            v := top - v;
        END IF;
        score := (score << b) | v;
    END LOOP;
    RETURN score;
END
$$;

-- The inverse: the values packed into score, as feed_score_unpack() in C.
-- Raises 22023 for a bad layout, 22003 when score is negative or at least
-- 2^(sum of bits), so not a score of this layout. For inspecting rows:
--   SELECT id, feed_score_unpack(score, '{20,17,16}', '{f,f,f}') FROM ...
CREATE OR REPLACE FUNCTION feed_score_unpack(score bigint, bits integer[],
                                             smaller_first boolean[])
RETURNS bigint[]
LANGUAGE plpgsql IMMUTABLE STRICT PARALLEL SAFE
AS $$
DECLARE
    n      integer;
    total  integer := 0;
    blo    integer := array_lower(bits, 1);
    slo    integer := array_lower(smaller_first, 1);
    rest   bigint;
    vals   bigint[];
    b      integer;
    top    bigint;
    k      integer;
BEGIN
    n := cardinality(bits);
    IF array_ndims(bits) IS DISTINCT FROM 1
       OR array_ndims(smaller_first) IS DISTINCT FROM 1
       OR cardinality(smaller_first) <> n OR n > 16 THEN
        RAISE EXCEPTION 'feed_score_unpack: need 1..16 widths and as many directions'
            USING ERRCODE = 'invalid_parameter_value';
    END IF;
    IF array_position(smaller_first, NULL) IS NOT NULL THEN
        RAISE EXCEPTION 'feed_score_unpack: NULL direction'
            USING ERRCODE = 'invalid_parameter_value';
    END IF;
    FOREACH b IN ARRAY bits LOOP
        IF b IS NULL OR b < 1 OR b > 53 THEN
            RAISE EXCEPTION 'feed_score_unpack: width % is outside 1..53', b
                USING ERRCODE = 'invalid_parameter_value';
        END IF;
        total := total + b;
    END LOOP;
    IF total > 53 THEN
        RAISE EXCEPTION 'feed_score_unpack: widths sum to % bits, more than 53', total
            USING ERRCODE = 'invalid_parameter_value';
    END IF;
    IF score < 0 OR score > (1::bigint << total) - 1 THEN
        RAISE EXCEPTION 'feed_score_unpack: % is not a score of a %-bit layout',
                        score, total
            USING ERRCODE = 'numeric_value_out_of_range';
    END IF;

    -- Peel the fields off from the least significant (the last) up.
    vals := array_fill(0::bigint, ARRAY[n]);
    rest := score;
    FOR k IN REVERSE n - 1 .. 0 LOOP
        b := bits[blo + k];
        top := (1::bigint << b) - 1;
        vals[k + 1] := rest & top;
        IF smaller_first[slo + k] THEN
            vals[k + 1] := top - vals[k + 1];
        END IF;
        rest := rest >> b;
    END LOOP;
    RETURN vals;
END
$$;

-- The score of a snowflake id, as feed_snowflake_score() in C: its creation
-- time in unix milliseconds, (id >> timestamp_shift) + epoch_ms. Ordering by
-- (score DESC, id DESC) is then exactly ordering by id DESC (the score never
-- decreases as the id grows; ties fall to the id), and the score, unlike an
-- id above 2^53, is exact in a Redis double.
-- Raises 22023 for a negative id, a shift outside 0..63 or an epoch outside
-- 0..2^53-1; 22003 when the result exceeds 2^53 - 1.
CREATE OR REPLACE FUNCTION feed_snowflake_score(id bigint,
                                                timestamp_shift integer,
                                                epoch_ms bigint)
RETURNS bigint
LANGUAGE plpgsql IMMUTABLE STRICT PARALLEL SAFE
AS $$
DECLARE
    ms bigint;
BEGIN
    IF id < 0 OR timestamp_shift < 0 OR timestamp_shift > 63
       OR epoch_ms < 0 OR epoch_ms > 9007199254740991 THEN
        RAISE EXCEPTION 'feed_snowflake_score: bad argument (id %, shift %, epoch %)',
                        id, timestamp_shift, epoch_ms
            USING ERRCODE = 'invalid_parameter_value';
    END IF;
    ms := id >> timestamp_shift;
    IF ms > 9007199254740991 - epoch_ms THEN
        RAISE EXCEPTION 'feed_snowflake_score: % ms is past 2^53 - 1', ms
            USING ERRCODE = 'numeric_value_out_of_range';
    END IF;
    RETURN ms + epoch_ms;
END
$$;
