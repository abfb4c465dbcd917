/* setup.c -- a Redis node's connection set-up, one step at a time.
 *
 * Before a node serves a request it is connected (at most once per
 * retry_ms after a failed attempt, so an outage cannot turn into a connect
 * storm), authenticated, checked to be the primary (under Sentinel), has
 * the scripts loaded (SCRIPT LOAD once per connection, then EVALSHA by
 * SHA), and, with redis_restart_fence, its data set is known to be ours.
 * Each step is at most one trip the driver makes; this file only says which,
 * and what the answers mean. A connection that fails here is dropped, never
 * reused half-read.
 *
 * Under Sentinel, every connect first asks the Sentinels in the configured
 * order, one short connection each, for SENTINEL get-master-addr-by-name;
 * the first usable answer names the primary. After connecting, ROLE must
 * say "master": during a failover a Sentinel may still name the old
 * primary, already demoted (or about to be), and writing there would be
 * lost. (Not covered: Sentinels that require AUTH. TLS is the connection's
 * own, lib/io/tls.c: the Sentinels' connections have it as the nodes' do.)
 *
 * The restart fence: a data set that came back from disk, or from a
 * promoted replica, is never trusted. Redis replicates asynchronously and
 * persists at best every second, so a server that restarts from its
 * RDB/AOF, or a replica promoted in a failover, may hold a cached copy that
 * misses a write whose hook the old server acknowledged: the exact-prefix
 * invariant broken, silently. Both events have one mark in common: the
 * server answering now has another run_id (INFO server) than the one whose
 * writes the copies received, since run_id is new at every start and a
 * promoted replica keeps its own; and master_replid is new at each
 * promotion (a primary that is demoted, resynced from a replica promoted
 * meanwhile, behind it, then promoted again keeps its run_id, and its data
 * set, the replica's, holds what it wrote itself before the failover). So
 * every key names the data set it is written in: its generation, a hash of
 * the server's run_id and master_replid (base.h), read here (INFO) and
 * written into each key as its command is sent (exchange.c). A copy
 * written before a restart or a failover has another generation's name and
 * is never read again; the node serves at once, and the first read of each
 * feed rebuilds it under the new name. Why the identity and not a number
 * kept in Redis: handles never disagree on it, not even one that opens
 * after a FLUSHALL while others keep their connections, and one that never
 * met the old server names copies as those that did.
 *
 * The older generations' keys are swept in the background: a SCAN of 1000
 * keys and an UNLINK of those found, at most once per FEED_SWEEP_GAP_MS per
 * handle, as a step of the set-up of a batch that comes along (so a sweep
 * costs a call two round trips now and then, never a page's answer). The
 * current generation's keys and the fence keys are kept. "<prefix>:fence"
 * then records the data set ("<run_id>:<replid>"): it is replicated and
 * persisted with the copies, so a handle that finds it naming the server
 * answering knows the sweep is over (each step looks first, in its trip),
 * and one that finds another name sweeps again. Several handles may sweep
 * at once, each from its own cursor; the first to end records.
 *
 * A run_id and master_replid that are the same as when this handle last
 * trusted the node mean the same data set: run_id is new at every start,
 * and master_replid changes whenever the node is promoted and whenever it
 * follows another primary (it takes that primary's id), so no other data
 * set can have replaced it since. Then the fence key proves nothing more,
 * and a key that is missing or names another node (on a cluster it lives
 * in the node's lowest slot, and a reshard moves slots with their keys) is
 * written again instead of costing the node a sweep; a key whose slot is
 * served elsewhere (-MOVED) too, but only on a node INFO says is a
 * primary: a demoted one, not yet resynced, answers the same, and may be
 * promoted (a new replid) before the next look. On a cluster a
 * trust also lapses when the node has not been heard from as a primary for
 * redis_timeout_ms (topo.c says why: a demotion and a promotion back that
 * the handle did not see), and the look is taken again: the same identity
 * and key trust the node again with its slots' trust kept; anything else
 * goes on as after a reconnect. Otherwise the key decides; on a cluster a
 * key whose slot the node no longer serves (a stale slot map: -MOVED,
 * -ASK) decides nothing: the request fails, the connection stays, and the
 * next one looks again with a fresh map.
 *
 * On a Redis Cluster each node holds its own copies, so each node has its
 * own fence, and the fence key is one per node: "<prefix>:fence{<n>}", n
 * chosen so that the key hashes to a slot the node owns (its lowest,
 * topo.c). The key then lives in the node's data set, is replicated to the
 * node's replicas with the copies, and a promoted replica finds the old
 * primary's run_id in it: the same test, per node. SCAN on a node sees that
 * node's keys only, and its UNLINKs go one key each, each after ASKING:
 * SCAN also returns the keys of a slot the node is importing, which it
 * serves only to a client that said ASKING (without it every sweep would
 * fail on them until the migration ends). A key that left meanwhile (its
 * slot migrated away: -ASK, -MOVED) is no longer the node's to drop.
 *
 * A node's fence is not enough on a cluster, because copies move between
 * nodes: a replica promoted with a stale copy may give the copy's slot to
 * another primary (a reshard moves it, key by key) before any handle has
 * checked the promoted node's fence, and the copy then sits, whole, on a
 * node whose own fence is right. So each slot has a fence of its own too,
 * "<prefix>:fence:s{<n>}" in that slot: it names the data set (run_id and
 * replid, as above) of the node on which the slot's copies were found
 * right, and it moves with the copies, by replication to a replica and by
 * MIGRATE to another primary. A read of a slot on its owner waits (once per
 * trust of the node, per handle) until the slot's fence key names the
 * owner; when it names another node, or is missing, the slot's copies are
 * dropped first (CLUSTER GETKEYSINSLOT and UNLINK, each key of ours but the
 * fence keys), then the owner's is written. So a slot that arrives, by a
 * failover or a reshard, costs its copies once, and never brings a stale
 * one. A slot whose fence cannot be read (it is migrating and the key left:
 * -ASK, -MOVED) stays unchecked: the set-up still succeeds (a hook may go
 * on), and the exchange sends no read there (exchange.c). Hooks need no
 * check: they only make a copy more right, and the copy is dropped anyway.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/core.h"

enum {
    STEP_START, STEP_SENTINEL, STEP_CONNECT, STEP_AUTH, STEP_ROLE, STEP_SCRIPTS, STEP_AFTER,
    STEP_LOOK, STEP_SCAN, STEP_UNLINK, STEP_CURSOR, STEP_RECORD,
    STEP_SLOT_LOOK, STEP_SLOT_KEYS, STEP_SLOT_UNLINK, STEP_SLOT_RECORD, STEP_DONE
};

/* The first count of keys asked of a slot by GETKEYSINSLOT, and the most
 * (the count grows while a full answer holds none of our keys). */
#define SLOT_KEYS_FIRST 1000u
#define SLOT_KEYS_MOST  (1u << 24)

static int setup_cluster(const feed_setup *s)
{
    return s->c->topo.cluster;
}

static enum feed_swant setup_finish(feed_setup *s, int code)
{
    s->rc = code;
    s->step = STEP_DONE;
    return FEED_S_DONE;
}

/* The node failed under a step: keep the reason, drop its connection (the
 * driver closes a DOWN node's), and the next connect waits retry_ms.
 * FEED_EREDIS is a refusal (the server answered and said no): the calls
 * held off until then are told so, as a configuration error. */
static void setup_fail(feed_setup *s, int code, int64_t now, const char *fmt, ...)
    __attribute__((format(printf, 4, 5)));
static void setup_fail(feed_setup *s, int code, int64_t now, const char *fmt, ...)
{
    va_list ap;

    va_start(ap, fmt);
    feed__vmsg(s->err, code, fmt, ap);
    va_end(ap);
    s->c->stats.redis_errors++;
    s->node->state = FEED_NODE_DOWN;
    s->node->attempt_ms = feed__attempt_at(s->c, now);
    s->node->refused = code == FEED_EREDIS;
    snprintf(s->node->why, sizeof s->node->why, "%.255s", s->err);
    feed__store_failed(s->c, &s->node->failing, s->err);
    if (setup_cluster(s))
        s->c->topo.stale = 1;
    setup_finish(s, code);
}

/* ---- The commands of a step ------------------------------------------- */

/* One more command of the step's trip: SETUP_ADD(s, "GET", key). */
static void setup_add(feed_setup *s, const char *const *words)
{
    struct feed_scmd *c = &s->cmds[s->ncmds++];

    for (c->argc = 0; words[c->argc]; c->argc++) {
        c->argv[c->argc] = words[c->argc];
        c->lens[c->argc] = strlen(words[c->argc]);
    }
}
#define SETUP_ADD(s, ...) setup_add(s, (const char *const[]){ __VA_ARGS__, NULL })

static int setup_cmd(void *arg, size_t k, const char ***argv, const size_t **lens)
{
    static const char *asking[1] = { "ASKING" };
    static const size_t asking_len[1] = { 6 };
    feed_setup *s = arg;

    if (s->step == STEP_UNLINK && !setup_cluster(s)) {  /* one UNLINK of a SCAN reply's keys */
        *argv = (const char **)s->keys.keys;
        *lens = s->keys.lens;
        return (int)s->keys.n;
    }
    if (s->step == STEP_UNLINK && k % 2 == 0) {     /* keys of many slots: ASKING, UNLINK, each */
        *argv = asking;
        *lens = asking_len;
        return 1;
    }
    if (s->step == STEP_UNLINK || s->step == STEP_SLOT_UNLINK) {
        /* One UNLINK per key (a slot's: it may be migrating): key k, or
         * k / 2 after the ASKINGs. */
        size_t key = (s->step == STEP_UNLINK ? k / 2 : k) + 1;
        s->cmds[0] = (struct feed_scmd){ .argc = 2, .argv = { "UNLINK", s->keys.keys[key] },
                                         .lens = { 6, s->keys.lens[key] } };
        *argv = s->cmds[0].argv;
        *lens = s->cmds[0].lens;
        return 2;
    }
    *argv = s->cmds[k].argv;
    *lens = s->cmds[k].lens;
    return s->cmds[k].argc;
}

static void setup_reply(void *arg, size_t k, const redisReply *r);

/* The step's trip: the commands added (or the UNLINKs). */
static enum feed_swant setup_trip(feed_setup *s, size_t n, enum feed_swant want)
{
    s->trip = (feed_trip){ .node = s->index, .n = n, .arg = s, .cmd = setup_cmd,
                           .reply = setup_reply };
    s->c->stats.redis_calls++;
    return want;
}

/* ---- Replies ----------------------------------------------------------- */

static int setup_is_str(const redisReply *r)
{
    return r->type == REDIS_REPLY_STRING;
}

/* One Sentinel's answer: a two-element array of host and port. */
static int setup_take_addr(feed_addr *a, const redisReply *r)
{
    char num[8];
    char *stop;
    long v;

    if (r->type != REDIS_REPLY_ARRAY || r->elements != 2 || !setup_is_str(r->element[0]) ||
        !setup_is_str(r->element[1]) || r->element[0]->len == 0 ||
        r->element[0]->len >= sizeof a->host || r->element[1]->len == 0 ||
        r->element[1]->len >= sizeof num)
        return 0;
    memcpy(num, r->element[1]->str, r->element[1]->len);
    num[r->element[1]->len] = '\0';
    v = strtol(num, &stop, 10);
    if (*stop || v < 1 || v > 65535)
        return 0;
    memcpy(a->host, r->element[0]->str, r->element[0]->len);
    a->host[r->element[0]->len] = '\0';
    a->port = (int)v;
    return 1;
}

/* The 40 hex digits of INFO's "<field>:" line into out; 0 if absent. */
static int setup_info_field(const redisReply *info, const char *field, char out[41])
{
    return setup_is_str(info) && feed__info_id(info->str, field, out);
}

/* A -MOVED or -ASK: on a cluster node, the key's slot is not (or no
 * longer) served here. */
static int setup_redirected(const redisReply *r)
{
    return r->type == REDIS_REPLY_ERROR &&
           (strncmp(r->str, "MOVED ", 6) == 0 || strncmp(r->str, "ASK ", 4) == 0);
}

/* The node's fence is cleared (on a full set-up, with the fence: the only
 * way here): the set-up is done, or goes on with the slot's fence, on a
 * cluster, on the slot's owner, until the slot is trusted (an ASK target
 * that does not own the slot yet is never asked: nothing is read there,
 * exchange.c). */
static void setup_trusted(feed_setup *s)
{
    const feed_topo *t = &s->c->topo;

    if (setup_cluster(s) && s->node->fence.sweeping)
        setup_finish(s, FEED_OK);   /* being flushed: nothing is read there yet */
    else if (setup_cluster(s) && s->slot < FEED_SLOTS && feed__map_owner(t, s->slot) == s->index &&
        !feed__slot_trusted(t, s->node, s->slot))
        s->step = STEP_SLOT_LOOK;
    else
        setup_finish(s, FEED_OK);
}

/* The node's data set is ours: its fence is cleared, with a new number
 * (every slot's trust on the node was under the old one), and its keys'
 * generation set. setup_trust then goes on as trusted. */
static void setup_trust_data(feed_setup *s)
{
    feed_fence *fc = &s->node->fence;
    feed_topo *t = &s->c->topo;

    fc->state = FEED_FENCE_TRUSTED;
    fc->heard_ms = fc->look_ms;
    memcpy(fc->trusted_run_id, fc->run_id, sizeof fc->run_id);
    memcpy(fc->trusted_replid, fc->replid, sizeof fc->replid);
    /* On a cluster copies move between nodes by MIGRATE, named as the node
     * they were written on named them, while a hook names its keys for the
     * node it reaches: with a generation per node, a copy moved away (not
     * read there, so its slot's fence unchanged) would miss the hooks sent
     * meanwhile and come back readable. So a cluster's keys carry no
     * generation, and a node found new is flushed before its copies are
     * read (setup_trusted). */
    if (setup_cluster(s))
        memcpy(fc->gen, FEED_KEY_GEN_NONE, sizeof fc->gen);
    else
        feed__key_gen(fc->run_id, fc->replid, fc->gen);
    if (++t->epochs == 0)
        ++t->epochs;
    fc->epoch = t->epochs;
}

static void setup_trust(feed_setup *s)
{
    setup_trust_data(s);
    setup_trusted(s);
}

/* The node's sweep of older copies is over (if one was under way). */
static void setup_swept(feed_setup *s)
{
    if (s->node->fence.sweeping)
        s->c->stats.fence_sweeps++;
    s->node->fence.sweeping = 0;
}

/* The slot's fence is found (or made) naming the node. */
static void setup_slot_trust(feed_setup *s)
{
    s->c->topo.slot_epoch[s->slot] = s->node->fence.epoch;
    setup_finish(s, FEED_OK);
}

/* Is k (under "<prefix>:") a copy, lease or index of the node's trusted
 * generation, "<prefix>:3:<tag>:<gen>:...", whatever its table? */
static int setup_current(const feed_setup *s, const redisReply *k)
{
    static const char version[] = ":" FEED_KEY_VERSION ":";
    size_t at_tag = strlen(s->c->cfg.key_prefix) + sizeof version - 1;
    size_t at_gen = at_tag + FEED_KEY_TAG_LEN + 1;

    if (setup_cluster(s))   /* no generations there: a flush drops every copy */
        return 0;
    return k->len > at_gen + FEED_KEY_GEN_LEN &&
           memcmp(k->str + at_tag - (sizeof version - 1), version, sizeof version - 1) == 0 &&
           k->str[at_gen - 1] == ':' && k->str[at_gen + FEED_KEY_GEN_LEN] == ':' &&
           memcmp(k->str + at_gen, s->node->fence.gen, FEED_KEY_GEN_LEN) == 0;
}

/* Is key k of a SCAN or GETKEYSINSLOT reply one to drop? Every key of ours
 * (under "<prefix>:") but the fence keys; of a sweep's SCAN, also but those
 * of the trusted generation (the copies being read and written now).
 * (feed__keys_keep's keep.) */
static int setup_droppable(const void *arg, const redisReply *k)
{
    const feed_setup *s = arg;
    const char *prefix = s->c->cfg.key_prefix;
    size_t plen = strlen(prefix);

    if (!setup_is_str(k) || k->len <= plen || memcmp(k->str, prefix, plen) != 0 ||
        k->str[plen] != ':' || (k->len >= plen + 6 && memcmp(k->str + plen + 1, "fence", 5) == 0))
        return 0;
    return s->step != STEP_SCAN || !setup_current(s, k);
}

/* What a fence key holds for the data set answering: its run_id and its
 * master_replid, "<run_id>:<replid>" (in s->mark). */
static const char *setup_mark(feed_setup *s)
{
    snprintf(s->mark, sizeof s->mark, "%s:%s", s->node->fence.run_id, s->node->fence.replid);
    return s->mark;
}

/* GET's reply of a fence key: right, and FEED_SR_MATCH when it names the
 * data set answering (its run_id and replication id, read just before). */
static int setup_fence_get(feed_setup *s, const redisReply *r)
{
    const char *mark = setup_mark(s);

    if (setup_is_str(r) && r->len == strlen(mark) && memcmp(r->str, mark, r->len) == 0)
        s->said |= FEED_SR_MATCH;
    return setup_is_str(r) || r->type == REDIS_REPLY_NIL;
}

/* A redirect (the fence key's slot not served here) noted as
 * FEED_SR_MOVED: 1 if r was one. */
static int setup_moved(feed_setup *s, const redisReply *r)
{
    if (!setup_redirected(r))
        return 0;
    s->said |= FEED_SR_MOVED;
    return 1;
}

/* setup_slot_reply: what reply k of a slot fence's step says (1: as it
 * must be). A redirect says the slot is not served here (FEED_SR_MOVED). */
static int setup_slot_reply(feed_setup *s, size_t k, const redisReply *r)
{
    if (s->step == STEP_SLOT_UNLINK)
        return r->type == REDIS_REPLY_INTEGER || setup_redirected(r);
    if (s->step == STEP_SLOT_KEYS && k == 1) {
        if (r->type != REDIS_REPLY_ARRAY)
            return 0;
        if (r->elements >= s->count)
            s->said |= FEED_SR_FULL;    /* as many keys as asked */
        if (feed__keys_keep(&s->keys, "UNLINK", r, setup_droppable, s) != FEED_OK)
            s->said |= FEED_SR_NOMEM;
        return 1;
    }
    return setup_moved(s, r) ||
           (s->step == STEP_SLOT_RECORD ? r->type == REDIS_REPLY_STATUS : setup_fence_get(s, r));
}

/* What each reply of the current step says: ok[k], and what it carries
 * (an address, a SHA, a run_id, a cursor and keys). The step's end
 * (feed__setup_tripped) judges. */
static void setup_reply(void *arg, size_t k, const redisReply *r)
{
    feed_setup *s = arg;
    feed_node *n = s->node;
    int ok = 0;

    switch (s->step) {
    case STEP_SENTINEL:
        ok = setup_take_addr(&s->found, r);
        if (!ok)
            feed__msg_keep_n(s->why, sizeof s->why, r->type == REDIS_REPLY_ERROR ? r->str
                             : r->type == REDIS_REPLY_NIL ? "does not know the master name"
                             : "unexpected reply");
        break;
    case STEP_AUTH:
    case STEP_RECORD:
        ok = r->type != REDIS_REPLY_ERROR;
        break;
    case STEP_ROLE:
        ok = r->type == REDIS_REPLY_ARRAY && r->elements >= 1 && setup_is_str(r->element[0]) &&
             strcmp(r->element[0]->str, "master") == 0;
        if (!ok)
            feed__msg_keep_n(s->why, sizeof s->why,
                             r->type == REDIS_REPLY_ARRAY && r->elements > 0 &&
                             setup_is_str(r->element[0]) ? r->element[0]->str : "?");
        break;
    case STEP_SCRIPTS:
        if ((ok = setup_is_str(r) && r->len == 40) != 0) {
            memcpy(s->c->sha[s->script_of[k]], r->str, 40);
            s->c->sha[s->script_of[k]][40] = '\0';
        }
        break;
    case STEP_LOOK:
        if (k == 0) {
            ok = setup_info_field(r, "run_id", n->fence.run_id);
        } else if (k == 1) {    /* INFO replication: the replid, and is it a primary? */
            if (setup_is_str(r) && strstr(r->str, "role:master"))
                s->said |= FEED_SR_PRIMARY;
            ok = setup_info_field(r, "master_replid", n->fence.replid);
        } else {    /* the fence key: its value, or on a cluster a redirect */
            ok = (setup_cluster(s) && setup_moved(s, r)) || setup_fence_get(s, r);
        }
        break;
    case STEP_SCAN:
        if (k == 0) {
            ok = setup_fence_get(s, r);
        } else if ((ok = r->type == REDIS_REPLY_ARRAY && r->elements == 2 &&
                         setup_is_str(r->element[0]) && r->element[0]->len < sizeof s->cursor &&
                         r->element[1]->type == REDIS_REPLY_ARRAY) != 0) {
            memcpy(s->cursor, r->element[0]->str, r->element[0]->len);
            s->cursor[r->element[0]->len] = '\0';
            if (feed__keys_keep(&s->keys, "UNLINK", r->element[1], setup_droppable, s) != FEED_OK)
                s->said |= FEED_SR_NOMEM;
        }
        break;
    case STEP_SLOT_LOOK:
    case STEP_SLOT_RECORD:
    case STEP_SLOT_KEYS:
    case STEP_SLOT_UNLINK:
        ok = setup_slot_reply(s, k, r);
        break;
    case STEP_UNLINK:
        ok = !setup_cluster(s) ? r->type == REDIS_REPLY_INTEGER
           : k % 2 == 0 ? r->type == REDIS_REPLY_STATUS
           : r->type == REDIS_REPLY_INTEGER || setup_redirected(r);
        break;
    default:
        break;
    }
    if (ok)
        return;
    if (!s->why[0])
        feed__msg_keep_n(s->why, sizeof s->why, r->type == REDIS_REPLY_ERROR && r->str[0]
                                                ? r->str : "unexpected reply");
    s->said |= FEED_SR_BAD;
}

/* ---- The steps --------------------------------------------------------- */

/* The fence key into s->key: "<prefix>:fence" (slot < 0), or on a cluster
 * "<prefix>:fence<kind>{<n>}" in slot, n its tag (feed__slot_tag): kind ""
 * for the node's key, in its fence slot, ":s" for a slot's own. FEED_OK, or
 * FEED_ENOMEM with the message in s->err. */
static int setup_fence_key(feed_setup *s, const char *kind, int slot)
{
    int64_t tag;

    if (slot < 0) {
        snprintf(s->key, sizeof s->key, "%s:fence", s->c->cfg.key_prefix);
        return FEED_OK;
    }
    if ((tag = feed__slot_tag(&s->c->topo, (unsigned)slot)) < 0)
        return feed__msg(s->err, FEED_ENOMEM, "out of memory for the slots' fence keys");
    snprintf(s->key, sizeof s->key, "%s:fence%s{%lld}", s->c->cfg.key_prefix, kind,
             (long long)tag);
    return FEED_OK;
}

/* SCAN's MATCH is a glob: the prefix's own '*', '?', '[', ']' and '\'
 * must match themselves. */
static void setup_scan_pattern(feed_setup *s)
{
    size_t n = 0;

    for (const char *p = s->c->cfg.key_prefix; *p && n + 4 < sizeof s->pattern; p++) {
        if (strchr("*?[]\\", *p))
            s->pattern[n++] = '\\';
        s->pattern[n++] = *p;
    }
    s->pattern[n++] = ':';
    s->pattern[n++] = '*';
    s->pattern[n] = '\0';
}

void feed__setup_begin(feed_setup *s, feed_core *c, int node, int kind, unsigned slot,
                       int64_t now)
{
    memset(s, 0, sizeof *s);
    s->c = c;
    s->index = node;
    s->node = c->topo.nodes[node];
    s->kind = kind;
    s->slot = slot;
    s->step = STEP_START;
    s->deadline = now + c->cfg.redis_timeout_ms;
}

void feed__setup_end(feed_setup *s)
{
    feed__keys_free(&s->keys);
}

/* SETUP_AGAIN: the step changed without a trip, take the next one now. */
enum { SETUP_AGAIN = -1 };

/* The steps of the restart fence: look at the fence key, and then, on a
 * data set found new, a step of the sweep of older generations' copies now
 * and then (SCAN and UNLINK, resumed at the node's cursor), and the
 * identity recorded once it is over. A feed_swant, or SETUP_AGAIN. */
static int setup_fence_step(feed_setup *s, int64_t now)
{
    feed_core *c = s->c;
    feed_node *n = s->node;

    switch (s->step) {
    case STEP_AFTER:
        if (n->reload) {
            s->step = STEP_SCRIPTS;
            return SETUP_AGAIN;
        }
        if (s->kind != FEED_SETUP_FULL || !c->cfg.redis_restart_fence)
            return setup_finish(s, FEED_OK);
        if (n->fence.state == FEED_FENCE_TRUSTED && !(n->fence.sweeping && now >= n->fence.sweep_at)) {
            setup_trusted(s);
            return s->step == STEP_DONE ? FEED_S_DONE : SETUP_AGAIN;
        }
        if (setup_fence_key(s, "", feed__fence_slot(&c->topo, s->index, s->slot)) != FEED_OK)
            return setup_finish(s, FEED_ENOMEM);
        setup_scan_pattern(s);
        s->step = n->fence.state == FEED_FENCE_TRUSTED ? STEP_SCAN : STEP_LOOK;
        return SETUP_AGAIN;
    case STEP_LOOK:
        n->fence.look_ms = now;
        SETUP_ADD(s, "INFO", "server");
        SETUP_ADD(s, "INFO", "replication");
        SETUP_ADD(s, "GET", s->key);
        return setup_trip(s, 3, FEED_S_TRIP);
    case STEP_SCAN:
        SETUP_ADD(s, "GET", s->key);
        SETUP_ADD(s, "SCAN", n->fence.cursor, "MATCH", s->pattern, "COUNT", "1000");
        return setup_trip(s, 2, FEED_S_TRIP);
    case STEP_UNLINK:
        if (s->keys.n <= 1) {
            s->step = STEP_CURSOR;
            return SETUP_AGAIN;
        }
        return setup_trip(s, setup_cluster(s) ? 2 * (s->keys.n - 1) : 1, FEED_S_TRIP);
    case STEP_CURSOR:       /* one step of the sweep per set-up */
        memcpy(n->fence.cursor, s->cursor, sizeof n->fence.cursor);
        if (strcmp(n->fence.cursor, "0") == 0) {
            s->step = STEP_RECORD;
        } else if (setup_cluster(s) && now < s->deadline) {
            s->step = STEP_SCAN;    /* a cluster node's flush goes on, for the set-up's time */
        } else {
            n->fence.sweep_at = now + (setup_cluster(s) ? 0 : FEED_SWEEP_GAP_MS);
            setup_trusted(s);
        }
        return SETUP_AGAIN;
    case STEP_SLOT_LOOK:
        if (setup_fence_key(s, ":s", (int)s->slot) != FEED_OK)
            return setup_finish(s, FEED_ENOMEM);
        snprintf(s->slot_words[0], sizeof s->slot_words[0], "%u", s->slot);
        s->count = SLOT_KEYS_FIRST;
        s->deadline = now + c->cfg.redis_timeout_ms;   /* the slot's own flush */
        SETUP_ADD(s, "GET", s->key);
        return setup_trip(s, 1, FEED_S_TRIP);
    case STEP_SLOT_KEYS:
        if (now >= s->deadline)         /* the rest next time: the slot stays unchecked */
            return setup_finish(s, FEED_OK);
        /* The fence first, in the same trip: when another handle has
         * finished the slot meanwhile, the keys listed after it are its
         * fresh copies, not ours to drop. */
        snprintf(s->slot_words[1], sizeof s->slot_words[1], "%u", s->count);
        SETUP_ADD(s, "GET", s->key);
        SETUP_ADD(s, "CLUSTER", "GETKEYSINSLOT", s->slot_words[0], s->slot_words[1]);
        return setup_trip(s, 2, FEED_S_TRIP);
    case STEP_SLOT_UNLINK:
        return setup_trip(s, s->keys.n - 1, FEED_S_TRIP);
    case STEP_RECORD:
    case STEP_SLOT_RECORD:
        SETUP_ADD(s, "SET", s->key, setup_mark(s));
        return setup_trip(s, 1, FEED_S_TRIP);
    default:
        return FEED_S_DONE;
    }
}

/* The connection's steps here (a Sentinel asked, connected, AUTH, ROLE,
 * the scripts loaded), the fence's in setup_fence_step. */
enum feed_swant feed__setup_next(feed_setup *s, int64_t now)
{
    feed_core *c = s->c;
    feed_node *n = s->node;
    int rc;

    s->why[0] = '\0';
    s->said = 0;
    s->ncmds = 0;
    s->sent_ms = now;
    for (;;) {
        switch (s->step) {
        case STEP_START:
            if (n->state == FEED_NODE_READY) {
                s->step = STEP_AFTER;
                continue;
            }
            /* Held off until retry_ms has passed: the answer says why the
             * node went down too (a wrong CA, a plaintext port, a refused
             * AUTH), or "down" would send the user looking for a server
             * that is up. */
            rc = feed__retry_due(c, n->attempt_ms, now, setup_cluster(s) ? "Redis node" : "Redis",
                                 n->why, n->refused ? FEED_EREDIS : 0, s->err);
            if (rc != FEED_OK)
                return setup_finish(s, rc);
            n->attempt_ms = now;
            c->stats.redis_connects++;
            n->fence.state = FEED_FENCE_UNKNOWN;
            s->step = !setup_cluster(s) && c->cfg.redis_sentinels ? STEP_SENTINEL : STEP_CONNECT;
            continue;
        case STEP_SENTINEL:
            if (!feed__addr_at(c->cfg.redis_sentinels, s->sentinel++, &s->probe)) {
                c->stats.redis_errors++;
                feed__msg(s->err, FEED_EUNAVAILABLE, "no Sentinel named the primary \"%s\" "
                          "(last: %s)", c->cfg.redis_master_name, s->last);
                snprintf(n->why, sizeof n->why, "%.255s", s->err);
                return setup_finish(s, FEED_EUNAVAILABLE);
            }
            SETUP_ADD(s, "SENTINEL", "get-master-addr-by-name", c->cfg.redis_master_name);
            return setup_trip(s, 1, FEED_S_PROBE);
        case STEP_CONNECT:
            return FEED_S_CONNECT;
        case STEP_AUTH:
            if (!c->cfg.redis_password) {
                s->step = STEP_ROLE;
                continue;
            }
            if (c->cfg.redis_user)
                SETUP_ADD(s, "AUTH", c->cfg.redis_user, c->cfg.redis_password);
            else
                SETUP_ADD(s, "AUTH", c->cfg.redis_password);
            return setup_trip(s, 1, FEED_S_TRIP);
        case STEP_ROLE:
            if (setup_cluster(s) || !c->cfg.redis_sentinels) {
                s->step = STEP_SCRIPTS;
                continue;
            }
            SETUP_ADD(s, "ROLE");
            return setup_trip(s, 1, FEED_S_TRIP);
        case STEP_SCRIPTS:
            /* Every script on a new connection; on one that lost some
             * (NOSCRIPT: SCRIPT FLUSH, a restart behind a proxy), those. */
            for (int i = 0; i < FEED_SCRIPT_COUNT; i++) {
                if (n->state == FEED_NODE_READY && n->reload && !(n->reload & (1u << i)))
                    continue;
                s->script_of[s->ncmds] = i;
                SETUP_ADD(s, "SCRIPT", "LOAD", feed__script_source(i));
            }
            return setup_trip(s, s->ncmds, FEED_S_TRIP);
        default:
            if ((rc = setup_fence_step(s, now)) != SETUP_AGAIN)
                return (enum feed_swant)rc;
        }
    }
}

void feed__setup_connected(feed_setup *s, int ok, const char *why, int64_t now)
{
    if (!ok) {
        setup_fail(s, FEED_EUNAVAILABLE, now, "Redis connect to %s:%d: %s", s->node->addr.host,
                   s->node->addr.port, why);
        return;
    }
    s->node->state = FEED_NODE_UP;
    s->step = STEP_AUTH;
}

/* setup_slot_tripped: the next step of a slot fence that answered as it
 * must: trusted, or its copies listed, dropped, the fence written. */
static void setup_slot_tripped(feed_setup *s)
{
    /* The slot's fence key answered, not redirected: the node was a
     * primary after the trip was sent (topo.c). Not an UNLINK's: they take
     * a redirect as done. */
    if (s->step != STEP_SLOT_UNLINK)
        feed__fence_heard(s->node, s->sent_ms);
    switch (s->step) {
    case STEP_SLOT_LOOK:
    case STEP_SLOT_KEYS:
        if (s->said & FEED_SR_MATCH)        /* (in KEYS: another handle finished the slot) */
            setup_slot_trust(s);
        else if (s->step == STEP_SLOT_LOOK)
            s->step = STEP_SLOT_KEYS;
        else if (s->said & FEED_SR_NOMEM)
            setup_finish(s, feed__msg(s->err, FEED_ENOMEM, "out of memory flushing a slot"));
        else if (s->keys.n > 1)
            s->step = STEP_SLOT_UNLINK;
        else if (!(s->said & FEED_SR_FULL))
            s->step = STEP_SLOT_RECORD;     /* none of ours left */
        else if (s->count < SLOT_KEYS_MOST)
            s->count *= 8;                  /* a full answer of other keys: ask for more */
        else
            setup_finish(s, FEED_OK);       /* unchecked: its reads go to PostgreSQL */
        return;
    case STEP_SLOT_UNLINK:
        s->step = STEP_SLOT_KEYS;
        return;
    case STEP_SLOT_RECORD:
        setup_slot_trust(s);
        return;
    default:
        return;
    }
}

/* What the look at a node's identity and fence key says (STEP_LOOK's
 * trip answered as it must): trusted as it was, trusted anew, the key to
 * write again, or a data set found new. */
static void setup_looked(feed_setup *s, int64_t now)
{
    feed_core *c = s->c;
    feed_fence *fc = &s->node->fence;
    int same = fc->trusted_run_id[0] && strcmp(fc->trusted_run_id, fc->run_id) == 0 &&
               strcmp(fc->trusted_replid, fc->replid) == 0;

    if (fc->state == FEED_FENCE_LAPSED && same && (s->said & FEED_SR_MATCH)) {
        /* A trust lapsed by time alone (topo.c) and the same data set
         * still: no promotion, no resync since, so the slots' trust
         * stands (same epoch). */
        fc->state = FEED_FENCE_TRUSTED;
        fc->heard_ms = fc->look_ms;
        setup_trusted(s);
    } else if (s->said & FEED_SR_MATCH) {  /* swept (by another handle, maybe) */
        setup_swept(s);
        setup_trust(s);
    } else if ((s->said & FEED_SR_MOVED) && same && (s->said & FEED_SR_PRIMARY)) {
        setup_trust(s);                     /* MOVED from a primary: a reshard */
    } else if (s->said & FEED_SR_MOVED) {
        c->stats.redis_errors++;
        c->topo.stale = 1;
        setup_finish(s, feed__msg(s->err, FEED_EREDIS, "Redis restart fence: the fence "
                                  "key's slot moved; the slot map is asked again"));
    } else if (same && !fc->sweeping) {
        s->step = STEP_RECORD;
    } else if (same) {
        setup_trust(s);                     /* a sweep under way goes on */
    } else {
        /* A data set this handle never trusted and no handle swept:
         * its copies are of other generations, never read, so it serves
         * at once, and they are swept in the background from this step
         * on (on a cluster, flushed before it serves). */
        strcpy(fc->cursor, "0");
        fc->sweeping = 1;
        fc->sweep_at = now;
        c->stats.fence_flushes++;
        setup_trust_data(s);
        s->step = STEP_SCAN;
    }
}

/* What a trip of the fence's steps says. A step whose trip failed, or whose
 * replies were not right, fails the set-up (a slot's fence: leaves the slot
 * unchecked). */
static void setup_fence_tripped(feed_setup *s, int64_t now)
{
    static const char *const cmd[STEP_SLOT_RECORD + 1] = {
        [STEP_LOOK] = "INFO", [STEP_SCAN] = "SCAN", [STEP_UNLINK] = "UNLINK", [STEP_RECORD] = "SET",
        [STEP_SLOT_LOOK] = "GET", [STEP_SLOT_KEYS] = "CLUSTER GETKEYSINSLOT",
        [STEP_SLOT_UNLINK] = "UNLINK", [STEP_SLOT_RECORD] = "SET"
    };
    feed_core *c = s->c;
    feed_fence *fc = &s->node->fence;

    if (s->step >= STEP_SLOT_LOOK && s->step <= STEP_SLOT_RECORD && s->trip.io == FEED_IO_OK &&
        (s->said & (FEED_SR_BAD | FEED_SR_MOVED))) {
        /* The slot's fence could not be read or written (it is migrating,
         * or the map is old): the slot stays unchecked, the connection is
         * fine. */
        if (s->said & FEED_SR_MOVED)
            c->topo.stale = 1;
        setup_finish(s, FEED_OK);
        return;
    }
    if (s->step <= STEP_SLOT_RECORD && cmd[s->step] &&
        (s->trip.io != FEED_IO_OK || (s->said & FEED_SR_BAD))) {
        setup_fail(s, FEED_EREDIS, now, "Redis %s (restart fence): %s", cmd[s->step],
                   s->trip.io != FEED_IO_OK ? s->trip.why : s->why);
        s->node->refused = s->trip.io == FEED_IO_OK;     /* not when it did not answer */
        return;
    }
    switch (s->step) {
    case STEP_LOOK:
        setup_looked(s, now);
        return;
    case STEP_SCAN:
        if (s->said & FEED_SR_NOMEM) {
            setup_finish(s, feed__msg(s->err, FEED_ENOMEM, "out of memory sweeping after a "
                                      "restart"));
        } else if (s->said & FEED_SR_MATCH) {   /* another handle finished the sweep */
            setup_swept(s);
            setup_trusted(s);
        } else {
            s->step = STEP_UNLINK;
        }
        return;
    case STEP_UNLINK:
        s->step = STEP_CURSOR;
        return;
    case STEP_RECORD:
        if (fc->state == FEED_FENCE_TRUSTED) {  /* the end of a sweep */
            setup_swept(s);
            setup_trusted(s);
        } else {
            setup_trust(s);
        }
        return;
    default:
        setup_slot_tripped(s);
        return;
    }
}

/* What a step's trip says: the connection's steps here, the fence's in
 * setup_fence_tripped. */
void feed__setup_tripped(feed_setup *s, int64_t now)
{
    feed_node *n = s->node;
    int io = s->trip.io != FEED_IO_OK, bad = (s->said & FEED_SR_BAD) != 0;

    switch (s->step) {
    case STEP_SENTINEL:
        if (!io && !bad) {
            n->addr = s->found;
            s->step = STEP_CONNECT;
        } else {
            snprintf(s->last, sizeof s->last, "%.255s:%d: %.200s", s->probe.host, s->probe.port,
                     io ? s->trip.why : s->why);
        }
        return;
    case STEP_AUTH:
        if (io)
            setup_fail(s, FEED_EUNAVAILABLE, now, "Redis AUTH: %s", s->trip.why);
        else if (bad)
            setup_fail(s, FEED_EREDIS, now, "Redis refused AUTH: %s", s->why);
        else
            s->step = STEP_ROLE;
        return;
    case STEP_ROLE:
        if (io) {
            setup_fail(s, FEED_EUNAVAILABLE, now, "Redis ROLE at %s:%d: %s", n->addr.host,
                       n->addr.port, s->trip.why);
        } else if (bad) {
            s->c->stats.failovers++;
            setup_fail(s, FEED_EUNAVAILABLE, now, "Redis at %s:%d is not the primary (ROLE %s): "
                       "a failover is under way", n->addr.host, n->addr.port, s->why);
        } else {
            s->step = STEP_SCRIPTS;
        }
        return;
    case STEP_SCRIPTS:
        if (io) {
            setup_fail(s, FEED_EUNAVAILABLE, now, "Redis SCRIPT LOAD: %s", s->trip.why);
        } else if (bad) {
            setup_fail(s, FEED_EREDIS, now, "Redis SCRIPT LOAD refused: %s", s->why);
        } else {
            n->reload = 0;
            n->refused = 0;
            {
                char who[sizeof n->addr.host + 24];
                snprintf(who, sizeof who, "Redis at %s:%d", n->addr.host, n->addr.port);
                feed__store_back(s->c, &n->failing, who);
            }
            if (n->state != FEED_NODE_READY) {
                n->state = FEED_NODE_READY;
                n->fresh = 1;
            }
            s->step = STEP_AFTER;
        }
        return;
    default:
        setup_fence_tripped(s, now);
    }
}
