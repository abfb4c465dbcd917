# examples/composite.mk -- the composite-score examples (docs/schema.md),
# included by the main Makefile:
#
#   $(BUILD)/examples/hot_replies    replies by likes, replies, latest reply day
#   $(BUILD)/examples/leaderboard    players by points, paid first, earliest first
#
# Each program carries its schema (examples/<name>.sql) and sql/score.sql as C
# arrays generated here, so it can create its table in whatever database it
# connects to, from any folder. Both link examples/example_common.c, the code
# they share. tests/t_composite.c runs them (make check).

COMPOSITE_EXAMPLES := $(BUILD)/examples/hot_replies $(BUILD)/examples/leaderboard
COMPOSITE_COMMON   := examples/example_common.c

.PHONY: examples
examples: $(COMPOSITE_EXAMPLES)
all: $(COMPOSITE_EXAMPLES)
tests: $(COMPOSITE_EXAMPLES)      # tests/t_composite.c runs both

# $(call composite_embed,NAME): the first prerequisite as
# "static const unsigned char NAME[] = { bytes..., 0 };" in $@. od and sed
# only: nothing to build first, and no limit on the length of a literal.
composite_embed = echo '  embed $< > $@'; { \
	printf '/* Generated from %s by examples/composite.mk; do not edit. */\n' '$<'; \
	printf 'static const unsigned char %s[] = {\n' '$(1)'; \
	od -An -v -tu1 '$<' | sed -e 's/[0-9][0-9]*/&,/g'; \
	printf '    0\n};\n'; \
	} > $@.tmp && mv $@.tmp $@

$(BUILD)/examples/score_sql.h: sql/score.sql | $(BUILD)/examples
	@$(call composite_embed,score_sql)

$(BUILD)/examples/hot_replies_sql.h: examples/hot_replies.sql | $(BUILD)/examples
	@$(call composite_embed,hot_replies_sql)

$(BUILD)/examples/leaderboard_sql.h: examples/leaderboard.sql | $(BUILD)/examples
	@$(call composite_embed,leaderboard_sql)

$(BUILD)/examples/hot_replies: examples/hot_replies.c $(BUILD)/examples/hot_replies_sql.h \
		$(COMPOSITE_COMMON) examples/example_common.h \
		$(BUILD)/examples/score_sql.h lib/feedcache.h $(STATIC)
	$(CC) $(CPPFLAGS) -I$(BUILD)/examples $(CFLAGS) $(LDFLAGS) -o $@ $< $(COMPOSITE_COMMON) \
		$(STATIC) $(LIBS)

$(BUILD)/examples/leaderboard: examples/leaderboard.c $(BUILD)/examples/leaderboard_sql.h \
		$(COMPOSITE_COMMON) examples/example_common.h \
		$(BUILD)/examples/score_sql.h lib/feedcache.h $(STATIC)
	$(CC) $(CPPFLAGS) -I$(BUILD)/examples $(CFLAGS) $(LDFLAGS) -o $@ $< $(COMPOSITE_COMMON) \
		$(STATIC) $(LIBS)
