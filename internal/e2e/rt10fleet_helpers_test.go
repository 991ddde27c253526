package e2e_test

import (
	"context"
	"fmt"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"go.uber.org/zap"

	"github.com/seckill-proxy/seckill-proxy/config"
	"github.com/seckill-proxy/seckill-proxy/internal/e2e"
	"github.com/seckill-proxy/seckill-proxy/internal/redistest"
	"github.com/seckill-proxy/seckill-proxy/store"
)

// rt10fleetBundleRoute is the bundle route of the rt10fleet activities.
const rt10fleetBundleRoute = `{ method: POST, path: "/api/seckill/{activity}/bundle", items_from: "json:/items" }`

// rt10fleetEnv is one Redis (single node or 3-master cluster), one shop and
// several proxy instances with the same config.
type rt10fleetEnv struct {
	redis   *e2e.Redis
	shop    *e2e.Shop
	proxies []*e2e.Proxy
	opts    e2e.Options
	st      *store.Store // an operator's own client (CLI, admin)
}

func rt10fleetStart(t *testing.T, cluster bool, n int, edit func(*e2e.Options)) *rt10fleetEnv {
	t.Helper()
	env := &rt10fleetEnv{shop: e2e.StartShop(t)}
	if cluster {
		env.redis = e2e.StartCluster(t)
	} else {
		env.redis = e2e.StartRedis(t)
	}
	env.opts = e2e.Options{Redis: env.redis.Addrs, Cluster: cluster, ShopURL: env.shop.URL, UpstreamTimeout: 5 * time.Second, RedisTimeout: 2 * time.Second}
	edit(&env.opts)
	for i := 0; i < n; i++ {
		env.proxies = append(env.proxies, e2e.StartProxy(t, env.opts.Config(t)))
	}
	// The operator's client has a generous timeout of its own, whatever
	// the proxies use.
	op := env.opts
	op.RedisTimeout = 5 * time.Second
	st, err := store.OpenNow(op.Config(t).Redis, zap.NewNop())
	if err != nil {
		t.Fatalf("open store: %v", err)
	}
	t.Cleanup(st.Close)
	env.st = st
	for _, a := range env.proxies[0].Cfg.Activities {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		_, err := st.Preheat(ctx, &a, false, time.Now())
		cancel()
		if err != nil {
			t.Fatalf("preheat %s: %v", a.ID, err)
		}
		for _, p := range env.proxies {
			p.WaitPreheated(t, a.ID)
		}
	}
	return env
}

// waitConfirms waits for every instance's winners' confirms.
func (env *rt10fleetEnv) waitConfirms(t *testing.T) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	for _, p := range env.proxies {
		if err := p.Server.WaitConfirms(ctx); err != nil {
			t.Fatalf("confirms: %v", err)
		}
	}
}

// servers are the redis-server processes holding data.
func (env *rt10fleetEnv) servers() []*redistest.Server {
	if env.redis.Nodes != nil {
		return env.redis.Nodes.All()
	}
	return []*redistest.Server{env.redis.Node}
}

// rt10fleetHeld reads, from Redis itself, every user's units in activity
// act two ways: the users hashes (the per-user limit's own count) and the
// reservation records that are not released (pending, queued, confirmed).
func (env *rt10fleetEnv) held(t *testing.T, act string) (usersHash, records map[string]int64) {
	t.Helper()
	usersHash, records = map[string]int64{}, map[string]int64{}
	prefix := env.opts.KeyPrefix
	if prefix == "" {
		prefix = "seckill"
	}
	for _, s := range env.servers() {
		if !s.Alive() {
			continue
		}
		if role := s.Info("replication", "role"); role == "slave" {
			continue
		}
		for _, kind := range []string{"users", "res"} {
			out, err := s.Do("KEYS", prefix+":{"+act+":*}:"+kind)
			if err != nil {
				t.Fatalf("KEYS: %v", err)
			}
			if out == "" {
				continue
			}
			for _, key := range strings.Split(out, "\n") {
				all, err := s.Do("HGETALL", key)
				if err != nil {
					t.Fatalf("HGETALL %s: %v", key, err)
				}
				if all == "" {
					continue
				}
				kv := strings.Split(all, "\n")
				for i := 0; i+1 < len(kv); i += 2 {
					field, val := kv[i], kv[i+1]
					if kind == "users" {
						u, _, _ := strings.Cut(val, "|")
						n, _ := strconv.ParseInt(u, 10, 64)
						usersHash[field] += n
						continue
					}
					if strings.HasSuffix(field, ":i") { // a bundle's items
						continue
					}
					parts := strings.Split(val, "|")
					if len(parts) < 3 || parts[0] == "x" {
						continue
					}
					n, _ := strconv.ParseInt(parts[2], 10, 64)
					records[parts[1]] += n
				}
			}
		}
	}
	return usersHash, records
}

// rt10fleetShopUnits sums the shop's orders: units per user and per SKU
// (a bundle's items counted under their SKUs), and checks every order's
// signature.
func rt10fleetShopUnits(t *testing.T, shop *e2e.Shop, act string) (perUser, perSKU map[string]int64) {
	t.Helper()
	perUser, perSKU = map[string]int64{}, map[string]int64{}
	for tok, o := range shop.Orders() {
		if o.Activity != act {
			continue
		}
		if !o.SigOK || !o.SigV1OK {
			t.Errorf("order %s: signature not verified (%v): %+v", tok, o.SigErr, o)
		}
		q, _ := strconv.ParseInt(o.Qty, 10, 64)
		perUser[o.User] += q
		if o.Items == "" {
			perSKU[o.SKU] += q
			continue
		}
		for _, it := range strings.Split(o.Items, ",") {
			sku, n, _ := strings.Cut(it, ":")
			k, _ := strconv.ParseInt(n, 10, 64)
			perSKU[sku] += k
		}
	}
	return perUser, perSKU
}

// rt10fleetWantStatus is the HTTP status each SPEC code must carry.
var rt10fleetWantStatus = map[string]int{
	"QUEUED": 202, "PENDING": 202, "ALREADY_PURCHASED": 409, "SOLD_OUT": 410,
	"NOT_STARTED": 403, "ENDED": 403, "NOT_READY": 503, "PAUSED": 503, "BUSY": 503,
	"RATE_LIMITED": 429, "BLOCKED": 403, "UNKNOWN_ITEM": 404, "BAD_REQUEST": 400,
	"STORE_UNAVAILABLE": 503, "UPSTREAM_FAILED": 502, "UPSTREAM_TIMEOUT": 504,
	"UNAUTHENTICATED": 401, "AUTH_UNAVAILABLE": 503,
}

// rt10fleetCheckCode fails when r's status does not match its code.
func rt10fleetCheckCode(t *testing.T, what string, r e2e.Resp) {
	t.Helper()
	if r.Err != nil {
		t.Errorf("%s: transport error %v", what, r.Err)
		return
	}
	if r.Code == "WIN" {
		if r.Status != 200 {
			t.Errorf("%s: win with status %d", what, r.Status)
		}
		return
	}
	want, ok := rt10fleetWantStatus[r.Code]
	if !ok {
		t.Errorf("%s: answer with no SPEC code: %d %s", what, r.Status, r.Body)
		return
	}
	if r.Status != want {
		t.Errorf("%s: %s with status %d, want %d: %s", what, r.Code, r.Status, want, r.Body)
	}
	if r.Header["Content-Type"] != "application/json" {
		t.Errorf("%s: %s with Content-Type %q", what, r.Code, r.Header["Content-Type"])
	}
}

// rt10fleetCheckStock fails unless every SKU of act adds up and its
// confirmed units are what the shop holds.
func (env *rt10fleetEnv) checkStock(t *testing.T, act string, shopPerSKU map[string]int64, wantPending bool) map[string]store.SKUStatus {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	s, err := env.st.Status(ctx, env.proxies[0].Activity(t, act))
	if err != nil {
		t.Fatalf("status: %v", err)
	}
	out := map[string]store.SKUStatus{}
	for _, k := range s.SKUs {
		out[k.ID] = k
		if !k.OK || k.Remaining+k.Pending+k.Confirmed != k.Initial || k.Remaining < 0 || k.Confirmed > k.Initial {
			t.Errorf("%s sku %s does not add up: %+v", act, k.ID, k)
		}
		if !wantPending && k.Pending != 0 {
			t.Errorf("%s sku %s: %d units still pending: %+v", act, k.ID, k.Pending, k)
		}
		if shopPerSKU != nil && k.Confirmed != shopPerSKU[k.ID] {
			t.Errorf("%s sku %s: Redis confirmed %d, the shop holds %d", act, k.ID, k.Confirmed, shopPerSKU[k.ID])
		}
	}
	return out
}

// rt10fleetSKUs is a list of SKUs with one stock each.
func rt10fleetSKUs(stock int64, ids ...string) []config.SKU {
	out := make([]config.SKU, len(ids))
	for i, id := range ids {
		out[i] = config.SKU{ID: id, Stock: stock}
	}
	return out
}

// rt10fleetItems renders a bundle body.
func rt10fleetItems(items map[string]int) string {
	var parts []string
	for sku, q := range items {
		parts = append(parts, fmt.Sprintf(`{"sku":%q,"qty":%d}`, sku, q))
	}
	return `{"items":[` + strings.Join(parts, ",") + `]}`
}

// rt10fleetTally counts answers by code, safely.
type rt10fleetTally struct {
	mu sync.Mutex
	m  map[string]int
}

func (c *rt10fleetTally) add(code string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.m == nil {
		c.m = map[string]int{}
	}
	c.m[code]++
}

func (c *rt10fleetTally) String() string {
	c.mu.Lock()
	defer c.mu.Unlock()
	return fmt.Sprint(c.m)
}

// dumpUser logs every reservation record and request-id record of user
// in act (a failing test's evidence).
func (env *rt10fleetEnv) dumpUser(t *testing.T, act, user string) {
	t.Helper()
	for _, s := range env.servers() {
		out, _ := s.Do("KEYS", "seckill:{"+act+":*}:res")
		for _, key := range strings.Split(out, "\n") {
			if key == "" {
				continue
			}
			all, _ := s.Do("HGETALL", key)
			kv := strings.Split(all, "\n")
			for i := 0; i+1 < len(kv); i += 2 {
				if strings.Contains(kv[i+1], "|"+user+"|") {
					t.Logf("  %s %s = %s", key, kv[i], kv[i+1])
				}
			}
		}
		out, _ = s.Do("KEYS", "seckill:{"+act+":*}:rid:"+user+"|*")
		for _, key := range strings.Split(out, "\n") {
			if key == "" {
				continue
			}
			v, _ := s.Do("GET", key)
			t.Logf("  %s = %.80s", key, v)
		}
	}
}
