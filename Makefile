# feedcache -- build, test, install.
#
#   make                 libfeedcache.a/.so, the event-loop adapters, tests,
#                        examples, feedcache-sync. Without the libraries of
#                        the examples and tests (jansson, libmicrohttpd,
#                        libevent, libuv) it says which are missing and builds
#                        the library alone (what `make lib` builds)
#   make lib             the libraries only: libfeedcache (needs hiredis and
#                        libpq), libfeedcache-libevent and libfeedcache-libuv
#                        (the async API's adapters, each only when its loop's
#                        headers are there)
#   make check           tools/deps.sh (installs what is missing on Debian as
#                        root, else says what is), then start throwaway Redis
#                        and PostgreSQL, run every TAP test with prove, stop
#                        them. FEED_NO_DEPS=1 skips tools/deps.sh (another
#                        distribution, or everything installed by hand)
#   make check SANITIZE=1   the same under AddressSanitizer + UBSan
#   make check REDIS=valkey the servers are Valkey's (valkey-server,
#                        valkey-cli) instead of Redis's
#   make check-compat    the correctness tests alone (COMPAT_TESTS below, a
#                        subset of make check): for a second stack, e.g.
#                        make HIREDIS=DIR check-compat, make check-compat REDIS=valkey
#   make HIREDIS=DIR     build against the hiredis installed under DIR
#                        (DIR/include/hiredis, DIR/lib; found at run time by
#                        rpath) into build-<DIR's name>, TLS compiled in when
#                        DIR has hiredis_ssl. tools/hiredis.sh DIR builds
#                        hiredis 1.2 there from Debian's source package.
#                        Works with every target: make HIREDIS=DIR check
#   make demo            the example web service with sample data (README)
#   make install PREFIX=/usr/local DESTDIR=   headers, libraries, feedcache.pc,
#                        feedcache-libevent.pc, feedcache-libuv.pc,
#                        sql/*.sql into $(PREFIX)/share/feedcache
#
# Conventions: every lib/*/*.c is part of the library, except the event-loop
# adapters lib/drive/libevent.c and lib/drive/libuv.c, which are libraries of
# their own (a program of the blocking API links neither loop); every
# tests/t_*.c is a TAP program linked with tests/testutil.c; lua/*.lua are
# embedded into the library by tools/embed.c at build time (with
# lua/prelude/*.lua where they include it).

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
# Library objects export only what lib/feedcache.h marks FEED_API.
LIB_CFLAGS := -fvisibility=hidden

# A '#' for $(shell ...) lines: written \# inside a function call, make 4.3
# keeps the backslash and older makes need it.
HASH := \#

# hiredis: the system's, or the one installed under HIREDIS=DIR (its
# headers first, its libraries found at run time through the rpath).
ifneq ($(HIREDIS),)
HIREDIS_DIR := $(abspath $(HIREDIS))
CPPFLAGS += -I$(HIREDIS_DIR)/include
HIREDIS_LDFLAGS := -L$(HIREDIS_DIR)/lib -Wl,-rpath,$(HIREDIS_DIR)/lib
LDFLAGS  += $(HIREDIS_LDFLAGS)
HIREDIS_TLS := $(if $(wildcard $(HIREDIS_DIR)/include/hiredis/hiredis_ssl.h),$(if $(wildcard $(HIREDIS_DIR)/lib/libhiredis_ssl.*),1))
HIREDIS_BUILD := -$(notdir $(HIREDIS_DIR))
else
HIREDIS_TLS := $(shell pkg-config --exists hiredis_ssl 2>/dev/null && \
                 printf '$(HASH)include <hiredis/hiredis_ssl.h>\n' | $(CC) -E -x c - -o /dev/null 2>/dev/null && echo 1)
endif
# TLS to Redis (hiredis >= 1.0 built with hiredis_ssl): FEED_HAVE_TLS.
ifeq ($(HIREDIS_TLS),1)
CPPFLAGS += -DFEED_HAVE_TLS=1
TLS_LIBS := -lhiredis_ssl -lssl -lcrypto
endif
LIBS    := $(TLS_LIBS) -lhiredis -lpq -lpthread -lm
# The event-loop adapters' own libraries (lib/drive/libevent.c, libuv.c).
EV_LIB_LIBS := -levent_core
UV_LIB_LIBS := -luv

ifeq ($(SANITIZE),1)
OPT     := -O1 -g -fno-omit-frame-pointer
CFLAGS  += -fsanitize=address,undefined -fno-sanitize-recover=all
LDFLAGS += -fsanitize=address,undefined
BUILD   := build-asan$(HIREDIS_BUILD)
else
BUILD   ?= build$(HIREDIS_BUILD)
endif

# What the examples and tests need besides the library: a header the
# compiler does not find is missing (make then builds the library alone).
have_header = $(shell printf '$(HASH)include <$(1)>\n' | $(CC) $(CPPFLAGS) -E -x c - -o /dev/null 2>/dev/null && echo 1)
HAVE_LIBEVENT := $(call have_header,event2/event.h)
HAVE_LIBUV    := $(call have_header,uv.h)
FEED_MISSING  := $(if $(HAVE_LIBEVENT),,libevent-dev) $(if $(HAVE_LIBUV),,libuv1-dev) \
                 $(if $(call have_header,jansson.h),,libjansson-dev) \
                 $(if $(call have_header,microhttpd.h),,libmicrohttpd-dev)
FEED_MISSING  := $(strip $(FEED_MISSING))

ADAPT_SRC := lib/drive/libevent.c lib/drive/libuv.c
LIB_SRC   := $(filter-out $(ADAPT_SRC),$(wildcard lib/*/*.c))
LIB_HDR   := $(wildcard lib/*.h lib/*/*.h)
LIB_OBJ   := $(patsubst lib/%.c,$(BUILD)/lib/%.o,$(LIB_SRC)) $(BUILD)/lib/scripts.o
LUA_SRC   := $(sort $(wildcard lua/*.lua))
LUA_INC   := $(wildcard lua/prelude/*.lua)
TEST_SRC  := $(wildcard tests/t_*.c)
TEST_BIN  := $(patsubst tests/%.c,$(BUILD)/tests/%,$(TEST_SRC))
STATIC    := $(BUILD)/libfeedcache.a
SHARED    := $(BUILD)/libfeedcache.so.$(VERSION)
EV_STATIC := $(BUILD)/libfeedcache-libevent.a
EV_SHARED := $(BUILD)/libfeedcache-libevent.so.$(VERSION)
UV_STATIC := $(BUILD)/libfeedcache-libuv.a
UV_SHARED := $(BUILD)/libfeedcache-libuv.so.$(VERSION)
# A program of the async API (tests, examples, bench) links the adapters'
# static libraries before the library's, and both loops.
ASYNC_STATIC := $(EV_STATIC) $(UV_STATIC) $(STATIC)
ASYNC_LIBS   := $(EV_LIB_LIBS) $(UV_LIB_LIBS) $(LIBS)
LIB_TARGETS  := $(STATIC) $(SHARED) $(if $(HAVE_LIBEVENT),$(EV_STATIC) $(EV_SHARED)) \
                $(if $(HAVE_LIBUV),$(UV_STATIC) $(UV_SHARED)) $(BUILD)/link-static

.PHONY: default all lib tests check install uninstall clean
# `make`: everything when the examples' and tests' libraries are there, else
# the library alone and a word on what is missing.
default:
ifeq ($(FEED_MISSING),)
default: all
else
default: lib
	@echo "make: built the library only: the examples and tests need $(FEED_MISSING)" >&2
	@echo "make: tools/deps.sh installs them (Debian, as root); then make again" >&2
endif

all: lib tests

lib: $(LIB_TARGETS)

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

# An adapter's library: its one object, linked against libfeedcache.so (the
# driver it hands its loop to) and its loop.
$(EV_STATIC): $(BUILD)/lib/drive/libevent.o
	rm -f $@ && ar rcs $@ $^
$(UV_STATIC): $(BUILD)/lib/drive/libuv.o
	rm -f $@ && ar rcs $@ $^

$(BUILD)/libfeedcache-%.so.$(VERSION): $(BUILD)/lib/drive/%.o $(SHARED)
	$(CC) -shared -Wl,-soname,libfeedcache-$*.so.$(SOVER) $(LDFLAGS) -o $@ $< \
	    -L$(BUILD) -lfeedcache $(if $(filter libevent,$*),$(EV_LIB_LIBS),$(UV_LIB_LIBS)) $(LIBS)
	ln -sf libfeedcache-$*.so.$(VERSION) $(BUILD)/libfeedcache-$*.so.$(SOVER)
	ln -sf libfeedcache-$*.so.$(VERSION) $(BUILD)/libfeedcache-$*.so

# The link line of a program on the static libraries, for the tests that
# compile programs of their own (tests/t_readme.t): the same hiredis. And
# which hiredis the build is on (HIREDIS=DIR, empty: the system's), for the
# tests that run make themselves (tests/t_install.t).
$(BUILD)/link-static: Makefile | $(BUILD)/lib
	echo '$(LDFLAGS) $(abspath $(ASYNC_STATIC)) $(ASYNC_LIBS)' > $@
	echo '$(HIREDIS_DIR)' > $(BUILD)/hiredis-dir

tests: $(TEST_BIN) $(BUILD)/tests/keyname

$(BUILD)/tests/testutil.o: tests/testutil.c tests/*.h lib/feedcache.h | $(BUILD)/tests
	$(CC) $(CPPFLAGS) -Itests $(CFLAGS) -c -o $@ $<

$(BUILD)/tests/shim.o: tests/shim.c tests/*.h $(LIB_HDR) | $(BUILD)/tests
	$(CC) $(CPPFLAGS) -Itests $(CFLAGS) -c -o $@ $<

$(BUILD)/tests/t_%: tests/t_%.c $(BUILD)/tests/testutil.o $(BUILD)/tests/shim.o $(ASYNC_STATIC) tests/*.h
	$(CC) $(CPPFLAGS) -Itests $(CFLAGS) $(LDFLAGS) -o $@ $< $(BUILD)/tests/testutil.o $(BUILD)/tests/shim.o $(ASYNC_STATIC) $(ASYNC_LIBS)

# The bash tests' way to name a copy's key (tests/keyname.c).
$(BUILD)/tests/keyname: tests/keyname.c $(BUILD)/tests/testutil.o $(BUILD)/tests/shim.o $(ASYNC_STATIC) tests/*.h
	$(CC) $(CPPFLAGS) -Itests $(CFLAGS) $(LDFLAGS) -o $@ $< $(BUILD)/tests/testutil.o $(BUILD)/tests/shim.o $(ASYNC_STATIC) $(ASYNC_LIBS)

# Everything a test run needs: packages, then the build, then servers + prove.
# Under the sanitizers the clients run two to three times slower, so the
# bounds that catch hangs (tests/fault.h, fault_slack_ms) get valgrind's
# slack: they measure no speed.
check:
	tools/deps.sh
	$(MAKE) all
	BUILD=$(BUILD) $(if $(filter 1,$(SANITIZE)),FEED_TEST_SLOW=1) tests/run.sh

# The pkg-config files: feedcache.pc.in and the adapters' feedcache-*.pc.in.
pc_subst = sed -e 's|@PREFIX@|$(PREFIX)|g' -e 's|@LIBDIR@|$(LIBDIR)|g' \
	    -e 's|@INCDIR@|$(INCDIR)|g' -e 's|@VERSION@|$(VERSION)|g' \
	    -e 's|@LIBS@|$(strip $(HIREDIS_LDFLAGS) $(LIBS))|g'

# The correctness tests, for a second stack (.ci/run runs them on hiredis 1.2
# and on Valkey, the whole suite on the system's): pages, hooks, the model,
# leases, faults, the async API on both loops, cluster, Sentinel and HA
# failover, feedcache-sync, and what the build itself promises (exports,
# install, the documents' samples, the example servers).
COMPAT_TESTS := walk hooks model lease async plain ranked newer merge defaults hostile auth \
                health fault_redis fault_pg fault_hooks invalidate errors format sync \
                ha_sentinel ha_failover kinds tls tls_config filter
COMPAT_RUNS  := $(foreach t,walk hooks model lease merge ranked filter,t_$(t):async t_$(t):cluster) \
                t_walk:async-uv t_hooks:async-uv t_sync:cluster t_cluster:cluster \
                t_ha_cluster:cluster t_cluster:async:cluster t_tls:async
COMPAT_SCRIPTS := symbols install readme http minimal
.PHONY: check-compat
check-compat:
	tools/deps.sh
	$(MAKE) all
	BUILD=$(BUILD) tests/run.sh $(foreach t,$(COMPAT_TESTS),$(BUILD)/tests/t_$(t)) \
	    $(addprefix $(BUILD)/tests/,$(COMPAT_RUNS)) $(foreach t,$(COMPAT_SCRIPTS),tests/t_$(t).t)

install: lib
	install -d $(DESTDIR)$(INCDIR) $(DESTDIR)$(LIBDIR) $(DESTDIR)$(PCDIR) $(DESTDIR)$(DATADIR)
	install -m 644 lib/feedcache.h $(DESTDIR)$(INCDIR)/
	install -m 644 sql/schema.sql sql/score.sql sql/authors.sql $(DESTDIR)$(DATADIR)/
	install -m 644 $(STATIC) $(DESTDIR)$(LIBDIR)/libfeedcache.a
	install -m 755 $(SHARED) $(DESTDIR)$(LIBDIR)/libfeedcache.so.$(VERSION)
	ln -sf libfeedcache.so.$(VERSION) $(DESTDIR)$(LIBDIR)/libfeedcache.so.$(SOVER)
	ln -sf libfeedcache.so.$(VERSION) $(DESTDIR)$(LIBDIR)/libfeedcache.so
	$(pc_subst) feedcache.pc.in > $(DESTDIR)$(PCDIR)/feedcache.pc
	@set -e; for a in $(if $(HAVE_LIBEVENT),libevent) $(if $(HAVE_LIBUV),libuv); do \
	    echo "install feedcache-$$a: feedcache_$$a.h, libfeedcache-$$a.{a,so}, feedcache-$$a.pc"; \
	    install -m 644 lib/feedcache_$$a.h $(DESTDIR)$(INCDIR)/; \
	    install -m 644 $(BUILD)/libfeedcache-$$a.a $(DESTDIR)$(LIBDIR)/; \
	    install -m 755 $(BUILD)/libfeedcache-$$a.so.$(VERSION) $(DESTDIR)$(LIBDIR)/; \
	    ln -sf libfeedcache-$$a.so.$(VERSION) $(DESTDIR)$(LIBDIR)/libfeedcache-$$a.so.$(SOVER); \
	    ln -sf libfeedcache-$$a.so.$(VERSION) $(DESTDIR)$(LIBDIR)/libfeedcache-$$a.so; \
	    $(pc_subst) feedcache-$$a.pc.in > $(DESTDIR)$(PCDIR)/feedcache-$$a.pc; \
	done

uninstall:
	rm -f $(DESTDIR)$(INCDIR)/feedcache.h $(DESTDIR)$(INCDIR)/feedcache_libevent.h \
	      $(DESTDIR)$(INCDIR)/feedcache_libuv.h $(DESTDIR)$(LIBDIR)/libfeedcache.* \
	      $(DESTDIR)$(LIBDIR)/libfeedcache-libevent.* $(DESTDIR)$(LIBDIR)/libfeedcache-libuv.* \
	      $(DESTDIR)$(PCDIR)/feedcache.pc $(DESTDIR)$(PCDIR)/feedcache-libevent.pc \
	      $(DESTDIR)$(PCDIR)/feedcache-libuv.pc $(DESTDIR)$(BINDIR)/feedcache-sync
	rm -rf $(DESTDIR)$(DATADIR)

clean:
	rm -rf build build-*

# Each part of the project keeps its own rules: examples/examples.mk,
# bench/bench.mk, tests/reliability.mk (demo, bench, fuzz, soak, ...).
-include $(wildcard */*.mk tests/*/*.mk)
