# sync/sync.mk -- feedcache-sync, the program that keeps the cache right from
# PostgreSQL's logical replication slot. Included by the main Makefile.
#
#   make                  also builds $(BUILD)/sync/feedcache-sync
#   make install          also installs it into $(PREFIX)/bin
#   make soak-sync        tests/t_sync_chaos for SOAK_SYNC_SECONDS (default 300)

BINDIR    ?= $(PREFIX)/bin
SYNC_SRC  := sync/feedcache_sync.c sync/stream.c sync/apply.c sync/pgoutput.c
SYNC_OBJ  := $(patsubst sync/%.c,$(BUILD)/sync/%.o,$(SYNC_SRC))
SYNC_BIN  := $(BUILD)/sync/feedcache-sync

.PHONY: sync install-sync soak-sync
sync: $(SYNC_BIN)
all: sync
tests: sync          # the sync tests start the program

$(BUILD)/sync:
	mkdir -p $@

$(BUILD)/sync/%.o: sync/%.c sync/*.h lib/feedcache.h | $(BUILD)/sync
	$(CC) $(CPPFLAGS) -Isync $(CFLAGS) -c -o $@ $<

$(SYNC_BIN): $(SYNC_OBJ) $(STATIC)
	$(CC) $(LDFLAGS) -o $@ $(SYNC_OBJ) $(STATIC) $(LIBS)

# Tests that unit-test the decoder and the batch logic link those files.
$(BUILD)/tests/t_sync_decode: $(BUILD)/sync/pgoutput.o $(BUILD)/sync/apply.o
$(BUILD)/tests/t_sync_decode: LDFLAGS += $(BUILD)/sync/pgoutput.o $(BUILD)/sync/apply.o

install: install-sync
install-sync: $(SYNC_BIN)
	install -d $(DESTDIR)$(BINDIR)
	install -m 755 $(SYNC_BIN) $(DESTDIR)$(BINDIR)/feedcache-sync

SOAK_SYNC_SECONDS ?= 300
soak-sync: all
	tools/deps.sh
	FEED_SYNC_SECONDS=$(SOAK_SYNC_SECONDS) BUILD=$(BUILD) tests/run.sh $(BUILD)/tests/t_sync_chaos

# make bench's section on feedcache-sync (bench/run.sh runs it).
SYNC_BENCH := $(BUILD)/sync/sync-bench
$(SYNC_BENCH): sync/sync_bench.c tests/synctest.h $(BUILD)/tests/testutil.o $(BUILD)/tests/shim.o $(ASYNC_STATIC) | $(BUILD)/sync
	$(CC) $(CPPFLAGS) -Itests $(CFLAGS) $(LDFLAGS) -o $@ $< $(BUILD)/tests/testutil.o $(BUILD)/tests/shim.o $(ASYNC_STATIC) $(ASYNC_LIBS)
bench-build: $(SYNC_BENCH) $(SYNC_BIN)

# make demo runs feedcache-sync next to the example service (examples/demo.sh
# starts it when built): the demo's recipe builds $(EX_BIN) after installing
# the packages, so the program joins that list.
EX_BIN += $(SYNC_BIN)

# The fuzz target of the decoder (tests/fuzz/fuzz_pgoutput.c) includes these.
$(BUILD)/fuzz/fuzz_pgoutput: sync/*.c sync/*.h
