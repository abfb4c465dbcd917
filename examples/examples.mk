# examples/examples.mk -- included by the main Makefile.
#
#   make                  also builds the example HTTP service twice over the
#                         same core (examples/server/, server.h): on threads,
#                         $(BUILD)/examples/feed_server (libmicrohttpd), and on
#                         event loops, $(BUILD)/examples/feed_server_evhttp
#                         (libevent's evhttp); its HTML page is embedded by
#                         tools/embed.c. And $(BUILD)/examples/jget (a tiny
#                         JSON picker used by tests/t_http.t and the demo)
#   make demo             install what is missing, build, start Redis and
#                         PostgreSQL in .demo/, load the sample data, start the
#                         service and feedcache-sync, walk through it, keep it
#                         all up until Enter or Ctrl-C, then stop it all
#                         (examples/demo.sh; DEMO_KEEP=1 leaves it running;
#                         SERVER=evhttp runs the event-loop server instead)
#   make demo-stop        stop what DEMO_KEEP=1 left running in .demo/

EX_PKGS   := libmicrohttpd jansson
EX_CFLAGS := $(shell pkg-config --cflags $(EX_PKGS) 2>/dev/null)
EX_LIBS   := $(shell pkg-config --libs $(EX_PKGS) 2>/dev/null || echo -lmicrohttpd -ljansson)
JSON_LIBS := $(shell pkg-config --libs jansson 2>/dev/null || echo -ljansson)
EV_LIBS   := $(shell pkg-config --libs libevent libevent_pthreads 2>/dev/null || echo -levent_pthreads -levent)
EX_BIN    := $(BUILD)/examples/feed_server $(BUILD)/examples/feed_server_evhttp $(BUILD)/examples/jget

.PHONY: examples demo demo-stop
examples: $(EX_BIN)
all: examples
tests: examples      # tests/t_http.t drives both binaries

# The core both servers share (server.h), then each one's adapter and backend.
SRV_CORE  := request routes writes mutes metrics options policy pgtx
SRV_MHD   := mhd backend_sync
SRV_EV    := evhttp backend_loop pg_async
SRV_OBJ    = $(patsubst %,$(BUILD)/examples/server/%.o,$(1))
SRV_HDR   := $(wildcard examples/server/*.h) lib/feedcache.h lib/feedcache_libevent.h

$(BUILD)/examples/server:
	mkdir -p $@

$(BUILD)/examples/page_html.c: examples/server/page.html $(BUILD)/tools/embed | $(BUILD)/examples
	$(BUILD)/tools/embed -p feed_server_ $< > $@.tmp && mv $@.tmp $@

$(BUILD)/examples/server/%.o: examples/server/%.c $(SRV_HDR) | $(BUILD)/examples/server
	$(CC) $(CPPFLAGS) -Iexamples/server $(EX_CFLAGS) $(CFLAGS) -c -o $@ $<

$(BUILD)/examples/feed_server: $(call SRV_OBJ,$(SRV_CORE) $(SRV_MHD)) $(BUILD)/examples/page_html.c $(STATIC)
	$(CC) $(CPPFLAGS) $(CFLAGS) $(LDFLAGS) -o $@ $(call SRV_OBJ,$(SRV_CORE) $(SRV_MHD)) \
	    $(BUILD)/examples/page_html.c $(STATIC) $(EX_LIBS) $(LIBS)

$(BUILD)/examples/feed_server_evhttp: $(call SRV_OBJ,$(SRV_CORE) $(SRV_EV)) $(BUILD)/examples/page_html.c $(EV_STATIC) $(STATIC)
	$(CC) $(CPPFLAGS) $(CFLAGS) $(LDFLAGS) -o $@ $(call SRV_OBJ,$(SRV_CORE) $(SRV_EV)) \
	    $(BUILD)/examples/page_html.c $(EV_STATIC) $(STATIC) $(EV_LIBS) $(JSON_LIBS) $(LIBS)

$(BUILD)/examples/jget: examples/jget.c | $(BUILD)/examples
	$(CC) $(CPPFLAGS) $(EX_CFLAGS) $(CFLAGS) $(LDFLAGS) -o $@ $< $(JSON_LIBS)

# Packages first (a fresh machine has no libmicrohttpd), then the build, then
# the script, which does the rest and stops what it started when it ends.
demo:
	tools/deps.sh
	$(MAKE) $(EX_BIN)
	BUILD=$(BUILD) SERVER=$(SERVER) examples/demo.sh start

demo-stop:
	BUILD=$(BUILD) examples/demo.sh stop

# examples/minimal.c: the README's minimal program (tests/t_minimal.t runs it).
examples: $(BUILD)/examples/minimal
$(BUILD)/examples/minimal: examples/minimal.c $(STATIC) lib/feedcache.h | $(BUILD)/examples
	$(CC) $(CPPFLAGS) $(CFLAGS) $(LDFLAGS) -o $@ $< $(STATIC) $(LIBS)
