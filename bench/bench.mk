# bench/bench.mk -- included by the main Makefile.
#
#   make bench        install what is missing, build the library and the
#                     benchmark programs, start throwaway Redis + PostgreSQL,
#                     load 1,000,000 rows, measure everything against its
#                     peers, write the run's latest.md and charts into
#                     bench/results/<UTC date and time>/ (bench/results/latest
#                     points to the newest), stop the servers (bench/run.sh)
#   make bench-build  only build $(BUILD)/bench/feedbench, client_cpu and
#                     loop_cpu
#
# BENCH_QUICK=1 make bench   a short run (fewer, shorter rounds) for trying
#                            things out; its figures are noisier.
#
# Section "hiredis" (bench/run.sh) runs this tree's client_cpu and loop_cpu
# built against the system's hiredis and against the one under
# BENCH_HIREDIS, side by side: by default build/hiredis-1.2 when
# tools/hiredis.sh has built it there, else the section says it was not
# measured. BENCH_HIREDIS= (empty) leaves it out.

BENCH_DIR  := $(BUILD)/bench
BENCH_LUA  := $(sort $(wildcard bench/lua/*.lua))
BENCH_HDR  := $(wildcard bench/*.h) lib/feedcache.h
BENCH_OWN  := bench/client_cpu.c bench/loop_cpu.c    # programs of their own, not feedbench's
BENCH_OBJ  := $(patsubst bench/%.c,$(BENCH_DIR)/%.o,$(filter-out $(BENCH_OWN),$(wildcard bench/*.c)))
BENCH_BIN  := $(BENCH_DIR)/feedbench $(BENCH_DIR)/client_cpu $(BENCH_DIR)/loop_cpu
BENCH_HIREDIS ?= $(if $(wildcard build/hiredis-1.2/include/hiredis/hiredis.h),build/hiredis-1.2)

.PHONY: bench bench-build
bench-build: $(BENCH_BIN)

bench:
	tools/deps.sh
	$(MAKE) lib bench-build
	BUILD=$(BUILD) BENCH_COMPARE_HIREDIS=$(BENCH_HIREDIS) bench/run.sh

$(BENCH_DIR):
	mkdir -p $@

# The peers' Lua scripts become C strings (feed_lua_peer_*), like lua/*.lua.
$(BENCH_DIR)/peers.c: $(BENCH_LUA) $(BUILD)/tools/embed | $(BENCH_DIR)
	$(BUILD)/tools/embed $(BENCH_LUA) > $@.tmp && mv $@.tmp $@

$(BENCH_DIR)/peers.o: $(BENCH_DIR)/peers.c
	$(CC) $(CPPFLAGS) $(CFLAGS) -c -o $@ $<

$(BENCH_DIR)/%.o: bench/%.c $(BENCH_HDR) | $(BENCH_DIR)
	$(CC) $(CPPFLAGS) -Ibench $(CFLAGS) -c -o $@ $<

$(BENCH_DIR)/feedbench: $(BENCH_OBJ) $(BENCH_DIR)/peers.o $(ASYNC_STATIC)
	$(CC) $(CFLAGS) $(LDFLAGS) -o $@ $(filter %.o,$^) $(ASYNC_STATIC) $(ASYNC_LIBS)

$(BENCH_DIR)/client_cpu: $(BENCH_DIR)/client_cpu.o $(BENCH_DIR)/util.o $(BENCH_DIR)/peers.o $(STATIC)
	$(CC) $(CFLAGS) $(LDFLAGS) -o $@ $(filter %.o,$^) $(STATIC) $(LIBS)

$(BENCH_DIR)/loop_cpu: $(BENCH_DIR)/loop_cpu.o $(BENCH_DIR)/util.o $(BENCH_DIR)/peers.o $(ASYNC_STATIC)
	$(CC) $(CFLAGS) $(LDFLAGS) -o $@ $(filter %.o,$^) $(ASYNC_STATIC) $(ASYNC_LIBS)
