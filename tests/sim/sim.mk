# tests/sim/sim.mk -- the simulated servers (tests/sim/) and the programs
# that use them (tests/t_sim_*.c). The main Makefile includes it. They link
# Lua 5.1 (the language Redis embeds) and libcrypto (SHA1 of scripts).
SIM_SRC  := $(wildcard tests/sim/*.c)
SIM_OBJ  := $(patsubst tests/sim/%.c,$(BUILD)/tests/sim/%.o,$(SIM_SRC))
SIM_INC  := $(shell pkg-config --cflags lua5.1 2>/dev/null || echo -I/usr/include/lua5.1)
SIM_LIBS := $(shell pkg-config --libs lua5.1 2>/dev/null || echo -llua5.1) -lcrypto

$(SIM_OBJ): $(BUILD)/tests/sim/%.o: tests/sim/%.c tests/sim/*.h $(LIB_HDR)
	@mkdir -p $(dir $@)
	$(CC) $(CPPFLAGS) -Itests $(SIM_INC) $(CFLAGS) -c -o $@ $<

# More specific than the $(BUILD)/tests/t_% rule of the Makefile, so make
# takes this one for the t_sim_* programs.
$(BUILD)/tests/t_sim_%: tests/t_sim_%.c $(SIM_OBJ) $(BUILD)/tests/testutil.o $(BUILD)/tests/shim.o $(STATIC) tests/*.h
	$(CC) $(CPPFLAGS) -Itests $(SIM_INC) $(CFLAGS) $(LDFLAGS) -o $@ $< $(SIM_OBJ) \
	    $(BUILD)/tests/testutil.o $(BUILD)/tests/shim.o $(STATIC) $(SIM_LIBS) $(LIBS)
