# feedcache -- build, test, install.
#
#   make                 libfeedcache.a, libfeedcache.so, tests, examples
#   make check           install missing Debian packages, start throwaway Redis
#                        and PostgreSQL, run every TAP test with prove, stop them
#   make check SANITIZE=1   the same under AddressSanitizer + UBSan
#   make demo            the example web service with sample data (README)
#   make install PREFIX=/usr/local DESTDIR=   header, libraries, feedcache.pc,
#                        sql/*.sql into $(PREFIX)/share/feedcache
#
# Conventions: every lib/*.c is part of the library; every tests/t_*.c is a
# TAP program linked with tests/testutil.c; lua/*.lua are embedded into the
# library by tools/embed.c at build time (with lua/prelude/*.lua where they
# include it).

PREFIX  ?= /usr/local
LIBDIR  ?= $(PREFIX)/lib
INCDIR  ?= $(PREFIX)/include
PCDIR   ?= $(LIBDIR)/pkgconfig
DATADIR ?= $(PREFIX)/share/feedcache
DESTDIR ?=

VERSION := 0.1.0
SOVER   := 0

CC      ?= cc
OPT     ?= -O2 -g
WARN    := -Wall -Wextra -Wpedantic -Werror -Wshadow -Wstrict-prototypes
CFLAGS  ?=
CFLAGS  += -std=c11 -D_POSIX_C_SOURCE=200809L $(OPT) $(WARN) -fPIC
PG_INC  := $(shell pg_config --includedir 2>/dev/null || echo /usr/include/postgresql)
CPPFLAGS += -Ilib -I$(PG_INC)
LIBS    := -lhiredis -lpq -levent_core -luv -lpthread -lm
# Library objects export only what lib/feedcache.h marks FEED_API.
LIB_CFLAGS := -fvisibility=hidden

ifeq ($(SANITIZE),1)
OPT     := -O1 -g -fno-omit-frame-pointer
CFLAGS  += -fsanitize=address,undefined -fno-sanitize-recover=all
LDFLAGS += -fsanitize=address,undefined
BUILD   := build-asan
else
BUILD   ?= build
endif

LIB_SRC   := $(wildcard lib/*/*.c)
LIB_HDR   := $(wildcard lib/*.h lib/*/*.h)
LIB_OBJ   := $(patsubst lib/%.c,$(BUILD)/lib/%.o,$(LIB_SRC)) $(BUILD)/lib/scripts.o
LUA_SRC   := $(sort $(wildcard lua/*.lua))
LUA_INC   := $(wildcard lua/prelude/*.lua)
TEST_SRC  := $(wildcard tests/t_*.c)
TEST_BIN  := $(patsubst tests/%.c,$(BUILD)/tests/%,$(TEST_SRC))
STATIC    := $(BUILD)/libfeedcache.a
SHARED    := $(BUILD)/libfeedcache.so.$(VERSION)

.PHONY: all lib tests check install uninstall clean
all: lib tests

lib: $(STATIC) $(SHARED)

$(BUILD)/lib $(BUILD)/tests $(BUILD)/tools $(BUILD)/examples:
	mkdir -p $@

$(BUILD)/tools/embed: tools/embed.c | $(BUILD)/tools
	$(CC) -std=c11 -O1 -Wall -Wextra -Werror -o $@ $<

# The scripts become C strings (feed_lua_<name>) in one generated file;
# lua/prelude/*.lua is what scripts share, placed by their include lines.
$(BUILD)/lib/scripts.c: $(LUA_SRC) $(LUA_INC) $(BUILD)/tools/embed | $(BUILD)/lib
	$(BUILD)/tools/embed $(LUA_SRC) > $@.tmp && mv $@.tmp $@

$(BUILD)/lib/scripts.o: $(BUILD)/lib/scripts.c
	$(CC) $(CPPFLAGS) $(CFLAGS) $(LIB_CFLAGS) -c -o $@ $<

$(BUILD)/lib/%.o: lib/%.c $(LIB_HDR) | $(BUILD)/lib
	@mkdir -p $(dir $@)
	$(CC) $(CPPFLAGS) $(CFLAGS) $(LIB_CFLAGS) -c -o $@ $<

$(STATIC): $(LIB_OBJ)
	rm -f $@ && ar rcs $@ $^

$(SHARED): $(LIB_OBJ)
	$(CC) -shared -Wl,-soname,libfeedcache.so.$(SOVER) $(LDFLAGS) -o $@ $^ $(LIBS)
	ln -sf libfeedcache.so.$(VERSION) $(BUILD)/libfeedcache.so.$(SOVER)
	ln -sf libfeedcache.so.$(VERSION) $(BUILD)/libfeedcache.so

tests: $(TEST_BIN)

$(BUILD)/tests/testutil.o: tests/testutil.c tests/*.h lib/feedcache.h | $(BUILD)/tests
	$(CC) $(CPPFLAGS) -Itests $(CFLAGS) -c -o $@ $<

$(BUILD)/tests/shim.o: tests/shim.c tests/*.h $(LIB_HDR) | $(BUILD)/tests
	$(CC) $(CPPFLAGS) -Itests $(CFLAGS) -c -o $@ $<

$(BUILD)/tests/t_%: tests/t_%.c $(BUILD)/tests/testutil.o $(BUILD)/tests/shim.o $(STATIC) tests/*.h
	$(CC) $(CPPFLAGS) -Itests $(CFLAGS) $(LDFLAGS) -o $@ $< $(BUILD)/tests/testutil.o $(BUILD)/tests/shim.o $(STATIC) $(LIBS)

# Everything a test run needs: packages, then the build, then servers + prove.
check:
	tools/deps.sh
	$(MAKE) all
	BUILD=$(BUILD) tests/run.sh

install: lib
	install -d $(DESTDIR)$(INCDIR) $(DESTDIR)$(LIBDIR) $(DESTDIR)$(PCDIR) $(DESTDIR)$(DATADIR)
	install -m 644 lib/feedcache.h lib/feedcache_libevent.h lib/feedcache_libuv.h \
	    $(DESTDIR)$(INCDIR)/
	install -m 644 sql/schema.sql sql/score.sql sql/authors.sql $(DESTDIR)$(DATADIR)/
	install -m 644 $(STATIC) $(DESTDIR)$(LIBDIR)/libfeedcache.a
	install -m 755 $(SHARED) $(DESTDIR)$(LIBDIR)/libfeedcache.so.$(VERSION)
	ln -sf libfeedcache.so.$(VERSION) $(DESTDIR)$(LIBDIR)/libfeedcache.so.$(SOVER)
	ln -sf libfeedcache.so.$(VERSION) $(DESTDIR)$(LIBDIR)/libfeedcache.so
	sed -e 's|@PREFIX@|$(PREFIX)|g' -e 's|@LIBDIR@|$(LIBDIR)|g' \
	    -e 's|@INCDIR@|$(INCDIR)|g' -e 's|@VERSION@|$(VERSION)|g' \
	    feedcache.pc.in > $(DESTDIR)$(PCDIR)/feedcache.pc

uninstall:
	rm -f $(DESTDIR)$(INCDIR)/feedcache.h $(DESTDIR)$(INCDIR)/feedcache_libevent.h \
	      $(DESTDIR)$(INCDIR)/feedcache_libuv.h $(DESTDIR)$(LIBDIR)/libfeedcache.* \
	      $(DESTDIR)$(PCDIR)/feedcache.pc
	rm -rf $(DESTDIR)$(DATADIR)

clean:
	rm -rf build build-*

# Each part of the project keeps its own rules: examples/examples.mk,
# bench/bench.mk, tests/reliability.mk (demo, bench, fuzz, soak, ...).
-include $(wildcard */*.mk tests/*/*.mk)
