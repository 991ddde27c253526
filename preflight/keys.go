package preflight

import (
	"context"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/redis/rueidis"

	"github.com/seckill-proxy/seckill-proxy/config"
	"github.com/seckill-proxy/seckill-proxy/store"
)

// openStore opens the proxy's own client (as serve does: cluster routing,
// client-side caching) and checks its ACL user may do what the proxy
// does on its keys: write, read, run scripts.
func (r *run) openStore(ctx context.Context) {
	reachable := false
	for _, n := range r.nodes {
		reachable = reachable || n.c != nil
	}
	if !reachable {
		return // every node's reachable check says why
	}
	user := r.cfg.Redis.Username
	if user == "" {
		user = "default"
	}
	aclFix := fmt.Sprintf("give ACL user %s the proxy's keys and commands, e.g. ACL SETUSER %s ~%s:* +@all -@dangerous", user, user, r.cfg.Redis.KeyPrefix)
	st, err := store.OpenNow(r.cfg.Redis, r.opt.Log)
	if err != nil {
		fix := aclFix
		if r.cfg.Redis.ClientCache {
			fix += "; client_cache needs CLIENT TRACKING (or set redis.client_cache: false)"
		}
		r.fail("redis-acl", "the proxy's own client could not connect: "+err.Error(), fix)
		return
	}
	r.st = st
	c, err := st.Client()
	if err != nil {
		r.fail("redis-acl", err.Error(), aclFix)
		return
	}
	key := st.Prefix() + ":{preflight}:probe"
	cctx, cancel := r.ctx(ctx)
	defer cancel()
	res := c.DoMulti(cctx,
		c.B().Set().Key(key).Value("1").Px(10*time.Second).Build(),
		c.B().Hgetall().Key(st.MetaKey("preflight")).Build(),
		c.B().Eval().Script("return redis.call('PEXPIRE', KEYS[1], 10000)").Numkeys(1).Key(key).Build(),
		c.B().Del().Key(key).Build(),
	)
	for i, what := range []string{"SET", "HGETALL", "EVAL", "DEL"} {
		if err := res[i].Error(); err != nil {
			r.fail("redis-acl", fmt.Sprintf("%s on %s refused for ACL user %s: %v", what, key, user, err), aclFix)
			return
		}
	}
	r.pass("redis-acl", fmt.Sprintf("ACL user %s may write, read and run scripts on %s:* keys", user, st.Prefix()))
}

// units returns, per master, the units of stock its shards hold (for the
// activities not over), and the units whose shard has no live master.
func (r *run) units() (map[string]int64, int64) {
	out := map[string]int64{}
	var unplaced int64
	for _, a := range r.activities() {
		for _, sku := range a.SKUs {
			for i, o := range r.owners(a, sku.ID, a.Shards) {
				share := sku.Stock / int64(a.Shards)
				if int64(i) < sku.Stock%int64(a.Shards) {
					share++
				}
				if o == "" {
					unplaced += share
				} else {
					out[o] += share
				}
			}
		}
	}
	return out, unplaced
}

// memory compares what the stock on n may cost (BytesPerUnit ×
// HeadroomFactor per unit) with what n has free.
func (r *run) memory(n *node) {
	name := "memory-headroom " + n.addr
	if r.clustered() && r.st == nil {
		return
	}
	units, _ := r.units()
	need := units[n.addr] * BytesPerUnit * HeadroomFactor
	used := atoi(n.info["used_memory"])
	maxmem := atoi(n.info["maxmemory"])
	if v, ok := n.conf["maxmemory"]; ok {
		maxmem = atoi(v)
	}
	limit, what := maxmem, "maxmemory "+mb(maxmem)
	if maxmem == 0 {
		limit, what = atoi(n.info["total_system_memory"]), "no maxmemory; the host has "+mb(atoi(n.info["total_system_memory"]))
	}
	budget := fmt.Sprintf("%d units × %d B × %d = %s for the stock on this node", units[n.addr], BytesPerUnit, HeadroomFactor, mb(need))
	detail := fmt.Sprintf("%s; %s used, %s", budget, mb(used), what)
	if limit <= 0 {
		r.warn(name, detail+": the limit could not be read", "check that "+mb(used+need)+" fits in this node's memory")
		return
	}
	switch {
	case used+need > limit:
		r.fail(name, detail+": it does not fit", fmt.Sprintf("raise maxmemory to at least %s (CONFIG SET maxmemory), or spread the stock over more masters", mb(used+need)))
	case float64(used+need) > MemoryWarnShare*float64(limit):
		r.warn(name, detail+fmt.Sprintf(": above %.0f %% of the limit", 100*MemoryWarnShare), fmt.Sprintf("raise maxmemory to %s or more", mb(int64(float64(used+need)/MemoryWarnShare))))
	case maxmem == 0:
		r.warn(name, detail+": fits, but Redis may grow until the OOM killer stops it", "CONFIG SET maxmemory to what the host can give (with noeviction a full Redis refuses writes instead of dying)")
	default:
		r.pass(name, detail)
	}
}

func mb(b int64) string {
	switch {
	case b >= 1<<30:
		return fmt.Sprintf("%.1f GiB", float64(b)/(1<<30))
	case b >= 1<<20:
		return fmt.Sprintf("%.1f MiB", float64(b)/(1<<20))
	}
	return fmt.Sprintf("%.0f KiB", float64(b)/(1<<10))
}

func atoi(s string) int64 {
	n, _ := strconv.ParseInt(strings.TrimSpace(s), 10, 64)
	return n
}

// keys checks, per activity not over, when it is (or will be) preheated,
// and that every key of a preheated one expires, and not before end.
func (r *run) keys(ctx context.Context) {
	if r.st == nil {
		return
	}
	now := r.opt.Now()
	for _, a := range r.activities() {
		rec, err := r.st.PreheatRecord(ctx, a.ID)
		if err != nil {
			r.fail("preheat "+a.ID, "could not read its meta key: "+err.Error(), "check Redis")
			continue
		}
		if rec.Ready {
			if r.stockDrift(ctx, a, rec, now) {
				r.keyTTLs(ctx, a, now)
				continue
			}
		}
		r.preheatState(a, rec, now)
		if rec.Ready {
			r.keyTTLs(ctx, a, now)
		}
	}
}

// stockDrift compares what was preheated for a with its config (the file
// edited after preheat: stock, shards, SKUs) and, when they differ, says
// so as a's preheat check, returning true. Before start with nothing
// sold it fails: the sale would sell what Redis holds, not what the file
// says, and a plain preheat replaces it safely. Once running or with
// sales it warns: Redis holds the sale as it is, and preheat --force
// would delete its reservations, which a person must decide.
func (r *run) stockDrift(ctx context.Context, a *config.Activity, rec store.PreheatRecord, now time.Time) bool {
	name := "preheat " + a.ID
	diffs, err := r.st.StockDrift(ctx, a)
	if err != nil {
		r.fail(name, "could not read its meta key: "+err.Error(), "check Redis")
		return true
	}
	if len(diffs) == 0 {
		return false
	}
	detail := fmt.Sprintf("preheated at %s, but the config differs from what was preheated: %s", ts(rec.At), strings.Join(diffs, "; "))
	var sold int64
	if st, err := r.st.Status(ctx, a); err == nil {
		for _, k := range st.SKUs {
			sold += k.Pending + k.Confirmed + k.Released
		}
	}
	if !now.Before(a.Start) || sold > 0 {
		r.warn(name, detail+fmt.Sprintf(" (the sale has %d units reserved or sold; it sells what Redis holds)", sold),
			"if the file is right, seckill-proxy preheat -c "+r.cfg.Path+" --activity "+a.ID+" --force replaces the stock and deletes every reservation; otherwise restore the file to what was preheated")
		return true
	}
	r.fail(name, detail+": the sale would sell what Redis holds", "seckill-proxy preheat -c "+r.cfg.Path+" --activity "+a.ID+" (nothing is sold yet: it replaces the stock; --force if it refuses)")
	return true
}

func (r *run) preheatState(a *config.Activity, rec store.PreheatRecord, now time.Time) {
	name := "preheat " + a.ID
	moment, scheduled := a.PreheatMoment()
	running := !now.Before(a.Start)
	switch {
	case rec.Ready:
		by := "by hand"
		if rec.ScheduledBy != "" {
			by = "by the scheduled preheat of " + rec.ScheduledBy
		}
		r.pass(name, fmt.Sprintf("preheated at %s %s", ts(rec.At), by))
	case rec.Loading:
		r.fail(name, "not ready: a preheat is writing its stock, or stopped midway (its old stock may be partly wiped); buyers are answered 503 NOT_READY",
			"wait for the preheat in progress, or run seckill-proxy preheat -c "+r.cfg.Path+" --activity "+a.ID+" (it finishes the load)")
	case running:
		r.fail(name, "running and not preheated: every buyer is answered 503 NOT_READY",
			"seckill-proxy preheat -c "+r.cfg.Path+" --activity "+a.ID)
	case scheduled && now.Before(moment):
		r.pass(name, fmt.Sprintf("serve preheats it at %s (preheat_at %s, in %s)", ts(moment), a.PreheatAt, ago(moment.Sub(now))))
	case scheduled:
		r.warn(name, fmt.Sprintf("preheat_at passed at %s and it is not preheated: no serve instance has run it", ts(moment)),
			"start serve (it preheats at once), or seckill-proxy preheat -c "+r.cfg.Path+" --activity "+a.ID)
	default:
		r.warn(name, fmt.Sprintf("not preheated and no preheat_at; it starts in %s", ago(a.Start.Sub(now))),
			"set preheat_at: -5m on the activity, or run seckill-proxy preheat before start")
	}
}

// keyTTLs reads PTTL of the meta key and of every shard key of the SKUs.
func (r *run) keyTTLs(ctx context.Context, a *config.Activity, now time.Time) {
	name := "key-ttl " + a.ID
	c, err := r.st.Client()
	if err != nil {
		return
	}
	keys := []string{r.st.MetaKey(a.ID)}
	stock := map[string]bool{}
	seen := map[string]bool{keys[0]: true}
	for _, sku := range a.SKUs {
		for _, sk := range r.st.SKUKeys(a.ID, sku.ID, a.Shards).Shards {
			stock[sk.Stock] = true
			for _, k := range []string{sk.Stock, sk.Users, sk.Res, sk.Pending, sk.Log, sk.Out, sk.MovesIn, sk.Moves, sk.Fence, sk.RidBits, sk.Epoch} {
				if !seen[k] {
					seen[k] = true
					keys = append(keys, k)
				}
			}
		}
	}
	cmds := make(rueidis.Commands, len(keys))
	for i, k := range keys {
		cmds[i] = c.B().Pttl().Key(k).Build()
	}
	cctx, cancel := context.WithTimeout(ctx, 5*r.timeout())
	defer cancel()
	var forever, early, gone []string
	var first string
	n := 0
	untilEnd := a.End.Sub(now)
	for i, res := range c.DoMulti(cctx, cmds...) {
		ms, err := res.AsInt64()
		if err != nil {
			r.fail(name, "PTTL "+keys[i]+": "+err.Error(), "check Redis")
			return
		}
		switch {
		case ms == -2:
			if stock[keys[i]] {
				gone = append(gone, keys[i])
			}
		case ms == -1:
			forever = append(forever, keys[i])
		case time.Duration(ms)*time.Millisecond < untilEnd:
			early = append(early, keys[i])
		default:
			n++
			if first == "" {
				first = ago(time.Duration(ms) * time.Millisecond)
			}
		}
	}
	exp := time.UnixMilli(store.ExpireAt(a))
	switch {
	case len(gone) > 0:
		r.fail(name, fmt.Sprintf("%d stock keys are gone (expired or deleted), e.g. %s: their units cannot be sold", len(gone), gone[0]),
			"check status; before start, seckill-proxy preheat --force reloads the stock")
	case len(forever) > 0:
		r.fail(name, fmt.Sprintf("%d keys never expire, e.g. %s: they outlive the sale and fill Redis", len(forever), list(forever)),
			fmt.Sprintf("redis-cli PEXPIREAT <key> %d on each (end + key_ttl_after_end)", exp.UnixMilli()))
	case len(early) > 0:
		r.fail(name, fmt.Sprintf("%d keys expire before end %s, e.g. %s: stock or reservations vanish mid-sale", len(early), ts(a.End), list(early)),
			"seckill-proxy preheat -c "+r.cfg.Path+" --activity "+a.ID+" (unchanged stock: it extends the keys to end + key_ttl_after_end)")
	default:
		r.pass(name, fmt.Sprintf("%d keys expire after end (first in %s; end + key_ttl_after_end is %s)", n, first, ts(exp)))
	}
}

func list(keys []string) string {
	if len(keys) > 3 {
		return strings.Join(keys[:3], ", ") + ", …"
	}
	return strings.Join(keys, ", ")
}
