# tests/sim/sim.mk -- the deterministic simulation (tests/sim/, test-only).
# The main Makefile includes it. Its programs link Lua 5.1 (the language
# Redis embeds: the simulated Redis runs lua/*.lua) and libcrypto (SHA1).
#
#   make sim          build/tests/feedsim: SIM_SCHEDULES schedules (default
#                     100000; SIM_SECONDS=n instead runs n seconds) of the
#                     default config, each checked; prints "N schedules"
#                     (half of them with an async handle: several
#                     requests in flight on one core; half of them
#                     contended, swarm testing: SIM_SWARM=0 none, 1 all),
#                     with how many walks were checked to their end, rank
#                     hints checked against the copy, and how often two
#                     handles met in one feed's repair, rebuild or fence
#                     window ("contention in ...")
#   SIM_SEED=n make sim   replay seed n with a readable trace
#   make sim-async    mode async: an async handle in every schedule
#                     (20,000 schedules; SIM_SCHEDULES=n for more)
#   make sim-controls the fence off, writers killed between commit and hook,
#                     a replica with no lag bound: each expected to break;
#                     with the log follower, and with the bound, not. Under
#                     Sentinel and on a cluster the fence off breaks (a
#                     failover to a lagging replica); under Sentinel,
#                     failovers that leave the old primary reachable break
#                     the defaults, not WAIT; the defaults hold when the
#                     old primary dies
#   make sim-topo     every Sentinel and Cluster mode that must hold
#                     (20,000 schedules each; SIM_SCHEDULES=n for more)
#   make sim-mutants  tests/sim/mutants.txt: broken builds the simulation must catch
#
# tests/t_sim_redis.c checks the simulated Redis against the real one.

SIM_SRC  := tests/sim/sim_redis.c tests/sim/sim_pg.c tests/sim/sim_world.c
SIM_OBJ  := $(patsubst tests/sim/%.c,$(BUILD)/tests/sim/%.o,$(SIM_SRC))
SIM_INC  := $(shell pkg-config --cflags lua5.1 2>/dev/null || echo -I/usr/include/lua5.1)
SIM_LIBS := $(shell pkg-config --libs lua5.1 2>/dev/null || echo -llua5.1) -lcrypto
FEEDSIM  := $(BUILD)/tests/feedsim

.PHONY: sim sim-async sim-controls sim-mutants sim-topo

$(SIM_OBJ) $(BUILD)/tests/sim/feedsim.o: $(BUILD)/tests/sim/%.o: tests/sim/%.c tests/sim/*.h $(LIB_HDR)
	@mkdir -p $(dir $@)
	$(CC) $(CPPFLAGS) -Itests $(SIM_INC) $(CFLAGS) -c -o $@ $<

$(FEEDSIM): $(BUILD)/tests/sim/feedsim.o $(SIM_OBJ) $(STATIC)
	$(CC) $(CFLAGS) $(LDFLAGS) -o $@ $^ $(SIM_LIBS) $(LIBS)

# More specific than the $(BUILD)/tests/t_% rule of the Makefile, so make
# takes this one for the t_sim_* programs.
$(BUILD)/tests/t_sim_%: tests/t_sim_%.c $(SIM_OBJ) $(BUILD)/tests/testutil.o $(BUILD)/tests/shim.o $(ASYNC_STATIC) tests/*.h
	$(CC) $(CPPFLAGS) -Itests $(SIM_INC) $(CFLAGS) $(LDFLAGS) -o $@ $< $(SIM_OBJ) \
	    $(BUILD)/tests/testutil.o $(BUILD)/tests/shim.o $(ASYNC_STATIC) $(SIM_LIBS) $(ASYNC_LIBS)

sim: $(FEEDSIM)
	BUILD=$(BUILD) tests/sim/run.sh default

sim-async: $(FEEDSIM)
	BUILD=$(BUILD) SIM_SCHEDULES=$${SIM_SCHEDULES:-20000} tests/sim/run.sh async

sim-controls: $(FEEDSIM)
	SIM_EXPECT=violation SIM_SCHEDULES=$${SIM_SCHEDULES:-20000} BUILD=$(BUILD) tests/sim/run.sh nofence
	SIM_EXPECT=violation SIM_SCHEDULES=$${SIM_SCHEDULES:-20000} BUILD=$(BUILD) tests/sim/run.sh kills
	SIM_EXPECT=violation SIM_SCHEDULES=$${SIM_SCHEDULES:-20000} BUILD=$(BUILD) tests/sim/run.sh replica-unbounded
	BUILD=$(BUILD) SIM_SCHEDULES=$${SIM_SCHEDULES:-20000} tests/sim/run.sh kills-sync
	BUILD=$(BUILD) SIM_SCHEDULES=$${SIM_SCHEDULES:-20000} tests/sim/run.sh replica
	SIM_EXPECT=violation SIM_SCHEDULES=$${SIM_SCHEDULES:-20000} BUILD=$(BUILD) tests/sim/run.sh sentinel-nofence
	SIM_EXPECT=violation SIM_SCHEDULES=$${SIM_SCHEDULES:-20000} BUILD=$(BUILD) tests/sim/run.sh sentinel-nowait
	SIM_EXPECT=violation SIM_SCHEDULES=$${SIM_SCHEDULES:-20000} BUILD=$(BUILD) tests/sim/run.sh cluster-nofence
	BUILD=$(BUILD) SIM_SCHEDULES=$${SIM_SCHEDULES:-20000} tests/sim/run.sh sentinel
	BUILD=$(BUILD) SIM_SCHEDULES=$${SIM_SCHEDULES:-20000} tests/sim/run.sh sentinel-wait

sim-topo: $(FEEDSIM)
	BUILD=$(BUILD) SIM_SCHEDULES=$${SIM_SCHEDULES:-20000} tests/sim/run.sh sentinel
	BUILD=$(BUILD) SIM_SCHEDULES=$${SIM_SCHEDULES:-20000} tests/sim/run.sh sentinel-wait
	BUILD=$(BUILD) SIM_SCHEDULES=$${SIM_SCHEDULES:-20000} tests/sim/run.sh cluster
	BUILD=$(BUILD) SIM_SCHEDULES=$${SIM_SCHEDULES:-20000} tests/sim/run.sh cluster-wait
	BUILD=$(BUILD) SIM_SCHEDULES=$${SIM_SCHEDULES:-20000} tests/sim/run.sh cluster-flap

sim-mutants:
	BUILD=$(BUILD) tests/sim/mutants.sh

# make (and make check) builds the simulation too: tests/t_sim.t runs it.
tests: $(FEEDSIM)
