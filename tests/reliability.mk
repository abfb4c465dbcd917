# tests/reliability.mk -- fuzzing, the soak and valgrind. The main
# Makefile includes it; it uses that file's BUILD, CC, CPPFLAGS, LIB_SRC,
# LIBS and TEST_BIN.
#
#   make fuzz              build the libFuzzer targets of tests/fuzz/ with clang
#                          and run each for FUZZ_SECONDS (default 60); the
#                          corpus grows in $(BUILD)/fuzz/corpus-<target>
#   make fuzz-merge        fold what the last run found into tests/fuzz/corpus/
#   make soak              tests/t_stress for SOAK_SECONDS per phase (default
#                          300), more threads and waves than in make check
#   make valgrind          every C test under valgrind, and t_walk, t_hooks,
#                          t_lease through the Redis Cluster, some through the
#                          async API (:async, :async-uv): any memory error or a
#                          definite/indirect leak fails it
#
# None of these is part of make check; tests/t_fuzz_replay (the fuzz targets
# over their corpus plus seeded mutations) and tests/t_stress (short) are.

FUZZ_CC      ?= clang
FUZZ_SECONDS ?= 60
FUZZ_TARGETS := cursor reply session pgoutput
FUZZ_DIR     := $(BUILD)/fuzz
FUZZ_CFLAGS  := -std=c11 -D_POSIX_C_SOURCE=200809L -g -O1 -fno-omit-frame-pointer \
                -fsanitize=fuzzer,address,undefined -fno-sanitize-recover=all
# fake_pg.c stands in for lib/io/pg.c: no PostgreSQL while fuzzing.
FUZZ_LIB_SRC := $(filter-out lib/io/pg.c,$(LIB_SRC)) tests/fuzz/fake_pg.c
FUZZ_BIN     := $(addprefix $(FUZZ_DIR)/fuzz_,$(FUZZ_TARGETS))

SOAK_SECONDS ?= 300
VALGRIND     ?= valgrind --error-exitcode=99 --leak-check=full \
                --errors-for-leak-kinds=definite,indirect \
                --show-leak-kinds=definite,indirect -q

.PHONY: fuzz fuzz-build fuzz-deps fuzz-merge soak valgrind

# clang and libclang-rt (the libFuzzer runtime) come with tools/deps.sh.
fuzz-deps:
	tools/deps.sh

$(FUZZ_DIR):
	mkdir -p $@

$(FUZZ_DIR)/fuzz_%: tests/fuzz/fuzz_%.c tests/fuzz/fuzz.h $(FUZZ_LIB_SRC) $(LIB_HDR) \
                    $(BUILD)/lib/scripts.c | $(FUZZ_DIR) fuzz-deps
	$(FUZZ_CC) $(CPPFLAGS) -Itests/fuzz $(FUZZ_CFLAGS) -o $@ $< $(FUZZ_LIB_SRC) \
	    $(BUILD)/lib/scripts.c $(LIBS)

fuzz-build: $(FUZZ_BIN)

# Each target: FUZZ_SECONDS of coverage-guided fuzzing, starting from the
# corpus in tests/fuzz/corpus/<target> (read only) and what earlier runs kept.
# FUZZ_JOBS targets at once (default: one per CPU; each is one process), so
# the run takes FUZZ_SECONDS per FUZZ_JOBS targets. A crash fails make with
# the input in $(FUZZ_DIR)/<target>-crash-*.
FUZZ_JOBS ?= $(shell nproc 2>/dev/null || echo 1)
fuzz: fuzz-build
	@set -e; total=0; running=0; \
	fuzz_one() { \
	    mkdir -p $(FUZZ_DIR)/corpus-$$1; \
	    dict=; case $$1 in reply|session) dict=-dict=tests/fuzz/resp.dict;; esac; \
	    rc=0; $(FUZZ_DIR)/fuzz_$$1 -max_total_time=$(FUZZ_SECONDS) -max_len=8192 \
	        -timeout=20 -rss_limit_mb=2048 -print_final_stats=1 $$dict \
	        -artifact_prefix=$(FUZZ_DIR)/$$1- \
	        $(FUZZ_DIR)/corpus-$$1 tests/fuzz/corpus/$$1 >$(FUZZ_DIR)/$$1.log 2>&1 || rc=$$?; \
	    echo $$rc >$(FUZZ_DIR)/$$1.rc; \
	}; \
	for t in $(FUZZ_TARGETS); do \
	    echo "fuzz: $$t, $(FUZZ_SECONDS) s (log: $(FUZZ_DIR)/$$t.log)"; \
	    rm -f $(FUZZ_DIR)/$$t.rc; fuzz_one $$t & \
	    running=$$((running + 1)); \
	    if [ $$running -ge $(FUZZ_JOBS) ]; then wait; running=0; fi; \
	done; \
	wait; \
	for t in $(FUZZ_TARGETS); do \
	    if [ "$$(cat $(FUZZ_DIR)/$$t.rc 2>/dev/null)" != 0 ]; then \
	        tail -n 60 $(FUZZ_DIR)/$$t.log; echo "fuzz: $$t FAILED"; exit 1; \
	    fi; \
	    runs=$$(sed -n 's/^stat::number_of_executed_units: *//p' $(FUZZ_DIR)/$$t.log); \
	    cov=$$(grep -o 'cov: [0-9]*' $(FUZZ_DIR)/$$t.log | tail -n1); \
	    echo "fuzz: $$t: $$runs executions, $$cov, no crash"; \
	    total=$$((total + runs)); \
	done; \
	echo "fuzz: $$total executions in all, no crash"

fuzz-merge: fuzz-build
	@for t in $(FUZZ_TARGETS); do \
	    mkdir -p $(FUZZ_DIR)/corpus-$$t; \
	    $(FUZZ_DIR)/fuzz_$$t -merge=1 tests/fuzz/corpus/$$t $(FUZZ_DIR)/corpus-$$t \
	        2>&1 | grep -E '^MERGE-OUTER: [0-9]+ new files' || true; \
	done

# The replay test includes the fuzz targets' sources.
$(BUILD)/tests/t_fuzz_replay: tests/fuzz/*.c tests/fuzz/*.h sync/*.c sync/*.h

soak: all
	tools/deps.sh
	FEED_STRESS_SECONDS=$(SOAK_SECONDS) FEED_STRESS_WRITERS=4 FEED_STRESS_READERS=6 \
	FEED_STRESS_WAVES=200 BUILD=$(BUILD) tests/run.sh $(BUILD)/tests/t_stress

valgrind: all
	tools/deps.sh
	FEED_TEST_WRAPPER="$(VALGRIND)" FEED_TEST_SLOW=1 FEED_STRESS_SECONDS=2 \
	FEED_STRESS_WAVES=4 BUILD=$(BUILD) tests/run.sh $(TEST_BIN) \
	    $(foreach t,walk hooks lease,$(BUILD)/tests/t_$(t):cluster) \
	    $(foreach t,walk hooks lease model merge,$(BUILD)/tests/t_$(t):async) \
	    $(BUILD)/tests/t_walk:async-uv $(BUILD)/tests/t_hooks:async:cluster
