# examples/examples.mk -- included by the main Makefile.
#
#   make                  also builds $(BUILD)/examples/feed_server (the HTTP
#                         service, examples/server/; its HTML page is embedded
#                         by tools/embed.c) and $(BUILD)/examples/jget (a tiny
#                         JSON picker used by tests/t_http.t and the demo)
#   make demo             install what is missing, build, start Redis and
#                         PostgreSQL in .demo/, load the sample data, start the
#                         service and feedcache-sync, walk through it, keep it
#                         all up until Enter or Ctrl-C, then stop it all
#                         (examples/demo.sh; DEMO_KEEP=1 leaves it running)
#   make demo-stop        stop what DEMO_KEEP=1 left running in .demo/

EX_PKGS   := libmicrohttpd jansson
EX_CFLAGS := $(shell pkg-config --cflags $(EX_PKGS) 2>/dev/null)
EX_LIBS   := $(shell pkg-config --libs $(EX_PKGS) 2>/dev/null || echo -lmicrohttpd -ljansson)
JSON_LIBS := $(shell pkg-config --libs jansson 2>/dev/null || echo -ljansson)
EX_BIN    := $(BUILD)/examples/feed_server $(BUILD)/examples/jget

.PHONY: examples demo demo-stop
examples: $(EX_BIN)
all: examples
tests: examples      # tests/t_http.t drives both binaries

SRV_SRC   := $(wildcard examples/server/*.c)
$(BUILD)/examples/page_html.c: examples/server/page.html $(BUILD)/tools/embed | $(BUILD)/examples
	$(BUILD)/tools/embed -p feed_server_ $< > $@.tmp && mv $@.tmp $@

$(BUILD)/examples/feed_server: $(SRV_SRC) examples/server/server.h $(BUILD)/examples/page_html.c $(STATIC) lib/feedcache.h | $(BUILD)/examples
	$(CC) $(CPPFLAGS) -Iexamples/server $(EX_CFLAGS) $(CFLAGS) $(LDFLAGS) -o $@ \
	    $(SRV_SRC) $(BUILD)/examples/page_html.c $(STATIC) $(EX_LIBS) $(LIBS)

$(BUILD)/examples/jget: examples/jget.c | $(BUILD)/examples
	$(CC) $(CPPFLAGS) $(EX_CFLAGS) $(CFLAGS) $(LDFLAGS) -o $@ $< $(JSON_LIBS)

# Packages first (a fresh machine has no libmicrohttpd), then the build, then
# the script, which does the rest and stops what it started when it ends.
demo:
	tools/deps.sh
	$(MAKE) $(EX_BIN)
	BUILD=$(BUILD) examples/demo.sh start

demo-stop:
	BUILD=$(BUILD) examples/demo.sh stop

# examples/minimal.c: the README's minimal program (tests/t_minimal.t runs it).
examples: $(BUILD)/examples/minimal
$(BUILD)/examples/minimal: examples/minimal.c $(STATIC) lib/feedcache.h | $(BUILD)/examples
	$(CC) $(CPPFLAGS) $(CFLAGS) $(LDFLAGS) -o $@ $< $(STATIC) $(LIBS)
