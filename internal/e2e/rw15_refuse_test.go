package e2e_test

import (
	"fmt"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/seckill-proxy/seckill-proxy/internal/e2e"
	"github.com/seckill-proxy/seckill-proxy/internal/redistest"
)

// rw15Redis is a single redis-server whose protected configs (dir,
// dbfilename) may be set at run time, for the failed-RDB-save case.
func rw15Redis(t *testing.T) *e2e.Redis {
	t.Helper()
	n := redistest.Start(t, "--enable-protected-configs", "yes")
	return &e2e.Redis{Addrs: []string{n.Addr}, Node: n}
}

// rw15Kinds are the ways a live Redis refuses writes mid-sale.
var rw15Kinds = []string{"oom", "misconf", "noreplicas", "readonly", "busy"}

// rw15Refuse makes r refuse writes the way kind says, checks that it does,
// and returns the function that lifts the refusal (as an operator would:
// memory freed, the disk fixed, the replica back, the node promoted again,
// the runaway script killed).
func rw15Refuse(t *testing.T, r *e2e.Redis, kind string) (lift func()) {
	t.Helper()
	n := r.Node
	must := func(args ...string) string {
		t.Helper()
		out, err := n.Do(args...)
		if err != nil {
			t.Fatalf("%v: %v", args, err)
		}
		return out
	}
	switch kind {
	case "oom":
		must("CONFIG", "SET", "maxmemory-policy", "noeviction")
		used, _ := strconv.ParseInt(n.Info("memory", "used_memory"), 10, 64)
		must("CONFIG", "SET", "maxmemory", strconv.FormatInt(used+(1<<20), 10))
		var filled []string
		v := strings.Repeat("x", 128<<10)
		for i := 0; ; i++ {
			k := "rw15fill:" + strconv.Itoa(i)
			if _, err := n.Do("SET", k, v); err != nil {
				if !strings.Contains(err.Error(), "OOM") {
					t.Fatalf("fill: %v", err)
				}
				break
			}
			filled = append(filled, k)
			if i > 1000 {
				t.Fatal("fill: maxmemory never reached")
			}
		}
		// A refused SET's own query buffer is what went over, freed with
		// its connection: the data alone must be over the limit.
		used, _ = strconv.ParseInt(n.Info("memory", "used_memory"), 10, 64)
		must("CONFIG", "SET", "maxmemory", strconv.FormatInt(used-(256<<10), 10))
		lift = func() {
			must(append([]string{"DEL"}, filled...)...)
			must("CONFIG", "SET", "maxmemory", "0")
		}
	case "misconf":
		// A save point, an RDB that cannot be written (its name is a
		// directory), a failed BGSAVE: stop-writes-on-bgsave-error.
		if err := os.Mkdir(filepath.Join(n.Dir, "isdir"), 0o755); err != nil {
			t.Fatal(err)
		}
		must("CONFIG", "SET", "save", "3600 1")
		must("CONFIG", "SET", "dbfilename", "isdir")
		must("BGSAVE")
		e2e.Eventually(t, 10*time.Second, "the failed BGSAVE", func() bool {
			return n.Info("persistence", "rdb_last_bgsave_status") == "err" && n.Info("persistence", "rdb_bgsave_in_progress") == "0"
		})
		lift = func() {
			must("CONFIG", "SET", "dbfilename", "dump.rdb")
			must("BGSAVE")
			e2e.Eventually(t, 10*time.Second, "a good BGSAVE", func() bool {
				return n.Info("persistence", "rdb_last_bgsave_status") == "ok" && n.Info("persistence", "rdb_bgsave_in_progress") == "0"
			})
		}
	case "noreplicas":
		must("CONFIG", "SET", "min-replicas-to-write", "1")
		lift = func() { must("CONFIG", "SET", "min-replicas-to-write", "0") }
	case "readonly":
		// A failover the proxy is not told of: another server, a replica
		// of this one, is promoted and this one demoted under it. Its data
		// stays (a partial resync from the new master, which wrote nothing).
		b := redistest.Start(t)
		host, port, _ := net.SplitHostPort(n.Addr)
		if _, err := b.Do("REPLICAOF", host, port); err != nil {
			t.Fatal(err)
		}
		e2e.Eventually(t, 10*time.Second, "the replica in sync", func() bool { return b.Info("replication", "master_link_status") == "up" })
		if _, err := b.Do("REPLICAOF", "NO", "ONE"); err != nil {
			t.Fatal(err)
		}
		bhost, bport, _ := net.SplitHostPort(b.Addr)
		must("REPLICAOF", bhost, bport)
		e2e.Eventually(t, 10*time.Second, "the old master demoted", func() bool { return n.Info("replication", "master_link_status") == "up" })
		lift = func() { must("REPLICAOF", "NO", "ONE") }
	case "busy":
		// Another client's script runs on past busy-reply-threshold: every
		// command but a few is answered BUSY until SCRIPT KILL.
		must("CONFIG", "SET", "busy-reply-threshold", "100")
		c, err := net.Dial("tcp", n.Addr)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = c.Close() })
		loop := "local i = 0 while true do i = i + 1 end"
		fmt.Fprintf(c, "*3\r\n$4\r\nEVAL\r\n$%d\r\n%s\r\n$1\r\n0\r\n", len(loop), loop)
		e2e.Eventually(t, 10*time.Second, "Redis busy", func() bool {
			_, err := n.Do("GET", "x")
			return err != nil && strings.Contains(err.Error(), "BUSY")
		})
		lift = func() {
			for i := 0; ; i++ {
				if _, err := n.Do("SCRIPT", "KILL"); err == nil || i > 100 {
					break
				}
				time.Sleep(10 * time.Millisecond)
			}
			e2e.Eventually(t, 10*time.Second, "Redis answering", func() bool { _, err := n.Do("PING"); return err == nil })
		}
	default:
		t.Fatalf("unknown refusal %q", kind)
	}
	if _, err := n.Do("SET", "rw15probe", "1"); err == nil {
		t.Fatalf("%s: Redis still takes writes", kind)
	}
	return lift
}

// A winner the shop took while Redis refuses writes (memory full, a failed
// RDB save, no replica, a runaway script, a demoted master): its confirm is
// refused with an error reply, which says nothing was written. README
// promises the confirm is retried until Redis takes it ("a shop-accepted
// order is confirmed moments after Redis is back, not when the reconciler
// comes by"). Without verify.url nothing else ever settles it.
func TestRW15ConfirmRefusedIsRetried(t *testing.T) {
	e2e.Soak(t)
	for _, kind := range rw15Kinds {
		t.Run(kind, func(t *testing.T) {
			r := rw15Redis(t)
			shop := e2e.StartShop(t)
			cfg := e2e.Options{Redis: r.Addrs, ShopURL: shop.URL, UpstreamTimeout: 15 * time.Second, Activities: []e2e.Activity{{ID: "rw15c", Stock: 2, Shards: 1, NoVerify: true}}}.Config(t)
			p := e2e.StartProxy(t, cfg)
			p.Preheat(t, "rw15c")

			// Two winners at the shop: one with a request id (its confirm
			// keeps the replay, before its answer), one without (its
			// confirm batched after its answer).
			buy := func(user, rid string) e2e.Resp {
				h := [][2]string{{"X-User-Id", user}}
				if rid != "" {
					h = append(h, [2]string{"X-Request-Id", rid})
				}
				return e2e.Do(nil, p.Addr, e2e.Req{URI: "/api/seckill/rw15c/" + e2e.SKU + "/buy", Timeout: 20 * time.Second, Header: h})
			}
			rel1, rel2 := shop.Hang("w1"), shop.Hang("w2")
			ch1, ch2 := make(chan e2e.Resp, 1), make(chan e2e.Resp, 1)
			go func() { ch1 <- buy("w1", "rq-w1") }()
			go func() { ch2 <- buy("w2", "") }()
			e2e.Eventually(t, 5*time.Second, "the winners at the shop", func() bool { return shop.SeenBuy("w1") && shop.SeenBuy("w2") })
			lift := rw15Refuse(t, r, kind)
			rel1()
			rel2()
			w1, w2 := <-ch1, <-ch2
			if w1.Code != "WIN" || w2.Code != "WIN" {
				t.Fatalf("the winners the shop took were answered %d %s %s and %d %s %s", w1.Status, w1.Code, w1.Body, w2.Status, w2.Code, w2.Body)
			}
			time.Sleep(300 * time.Millisecond)
			lift()
			orders := len(shop.Orders())
			var st struct{ remaining, pending, confirmed int64 }
			deadline := time.Now().Add(8 * time.Second)
			for {
				k := p.SKUStatus(t, "rw15c")
				st.remaining, st.pending, st.confirmed = k.Remaining, k.Pending, k.Confirmed
				if (k.Confirmed == int64(orders) && k.Pending == 0) || time.Now().After(deadline) {
					break
				}
				time.Sleep(50 * time.Millisecond)
			}
			if st.confirmed != int64(orders) || st.pending != 0 {
				t.Fatalf("%s refused the winners' confirms; 8s after it was lifted the shop holds %d orders, Redis confirmed %d pending %d remaining %d: the confirms were dropped, not retried",
					kind, orders, st.confirmed, st.pending, st.remaining)
			}
			// The winner's repeat gets the shop's answer again (SPEC §9).
			if again := buy("w1", "rq-w1"); again.Status != w1.Status || again.Token() != w1.Token() || again.Code == "PENDING" {
				t.Fatalf("the winner's repeat after the confirm landed: %d %s %s, want the shop's answer with token %s", again.Status, again.Code, again.Body, w1.Token())
			}
		})
	}
}

// A buy the shop refused (409) while Redis refuses writes: the buyer is told
// UPSTREAM_FAILED ("the reservation was released"), but the release is
// refused. It must be retried like a release Redis did not answer, or the
// unit stays held pending: without verify.url nothing else gives it back,
// and the buyer, at their limit, is told PENDING for a buy the shop refused.
func TestRW15ReleaseRefusedIsRetried(t *testing.T) {
	e2e.Soak(t)
	for _, kind := range rw15Kinds {
		t.Run(kind, func(t *testing.T) {
			r := rw15Redis(t)
			shop := e2e.StartShop(t)
			cfg := e2e.Options{Redis: r.Addrs, ShopURL: shop.URL, UpstreamTimeout: 15 * time.Second, Activities: []e2e.Activity{{ID: "rw15r", Stock: 1, Shards: 1, NoVerify: true}}}.Config(t)
			p := e2e.StartProxy(t, cfg)
			p.Preheat(t, "rw15r")

			release := shop.HangThen("l1", 409)
			ch := make(chan e2e.Resp, 1)
			go func() {
				ch <- e2e.Do(nil, p.Addr, e2e.Req{URI: "/api/seckill/rw15r/" + e2e.SKU + "/buy", Timeout: 20 * time.Second, Header: [][2]string{{"X-User-Id", "l1"}}})
			}()
			e2e.Eventually(t, 5*time.Second, "the buy at the shop", func() bool { return shop.SeenBuy("l1") })
			lift := rw15Refuse(t, r, kind)
			release()
			l := <-ch
			if l.Code != "UPSTREAM_FAILED" {
				t.Fatalf("the refused buy was answered %d %s %s", l.Status, l.Code, l.Body)
			}
			time.Sleep(300 * time.Millisecond)
			lift()
			var k struct{ remaining, pending int64 }
			deadline := time.Now().Add(8 * time.Second)
			for {
				s := p.SKUStatus(t, "rw15r")
				k.remaining, k.pending = s.Remaining, s.Pending
				if (s.Remaining == 1 && s.Pending == 0) || time.Now().After(deadline) {
					break
				}
				time.Sleep(50 * time.Millisecond)
			}
			if k.remaining != 1 || k.pending != 0 {
				t.Fatalf("%s refused the release of a buy the shop refused; 8s after it was lifted Redis holds remaining %d pending %d (stock 1, shop orders %d): the release was dropped",
					kind, k.remaining, k.pending, len(shop.Orders()))
			}
			shop.Answer("l1", 200)
			// The status above reads Redis; this instance learns of the
			// reopened unit from the invalidation, which wakes its
			// refresher (a few ms, more on a loaded CI machine; flagTTL
			// at worst). A SOLD_OUT in between holds nothing: ask again.
			var again e2e.Resp
			e2e.Eventually(t, 3*time.Second, "the reopened unit sold to the buyer the shop refused", func() bool {
				again = e2e.Buy(p.Addr, "rw15r", "l1")
				return again.Code != "SOLD_OUT"
			})
			if again.Code != "WIN" {
				t.Fatalf("the buyer the shop refused, buying again: %d %s, want a win", again.Status, again.Code)
			}
		})
	}
}

// Buyers during the refusal (single reserves with a request id, batched
// ones without): each is answered STORE_UNAVAILABLE with nothing held, and
// a refused reserve, which wrote nothing, queues nothing to settle — the
// retrier (now retrying refusals until Redis takes them) would otherwise
// hold one abort per refused buyer, up to its bound, ahead of the winners'
// confirms. Once lifted, every unit sells.
func TestRW15BuyersDuringARefusal(t *testing.T) {
	e2e.Soak(t)
	for _, kind := range rw15Kinds {
		t.Run(kind, func(t *testing.T) {
			r := rw15Redis(t)
			shop := e2e.StartShop(t)
			cfg := e2e.Options{Redis: r.Addrs, ShopURL: shop.URL, Activities: []e2e.Activity{{ID: "rw15b", Stock: 6, Shards: 1, NoVerify: true}}}.Config(t)
			p := e2e.StartProxy(t, cfg)
			p.Preheat(t, "rw15b")
			// A first buyer before: this instance holds admission tokens
			// (the fleet bucket is written in Redis), so the buys below
			// reach the reserve.
			if w := e2e.Buy(p.Addr, "rw15b", "early"); w.Code != "WIN" {
				t.Fatalf("first buyer: %d %s", w.Status, w.Code)
			}
			// Its confirm runs after the answer (confirmAfter): refused by
			// the refusal below it would be the retrier's one job, not a
			// refused reserve's (a CI flake under load).
			e2e.Eventually(t, 3*time.Second, "the first buyer's confirm lands", func() bool {
				return p.SKUStatus(t, "rw15b").Confirmed == 1
			})
			lift := rw15Refuse(t, r, kind)
			codes := make(chan string, 40)
			for i := 0; i < 40; i++ {
				go func() {
					h := [][2]string{{"X-User-Id", "u" + strconv.Itoa(i)}}
					if i%2 == 0 {
						h = append(h, [2]string{"X-Request-Id", "rq" + strconv.Itoa(i)})
					}
					codes <- e2e.Do(nil, p.Addr, e2e.Req{URI: "/api/seckill/rw15b/" + e2e.SKU + "/buy", Header: h}).Code
				}()
			}
			for i := 0; i < 40; i++ {
				if c := <-codes; c != "STORE_UNAVAILABLE" {
					t.Fatalf("%s: a buyer during the refusal was answered %q", kind, c)
				}
			}
			if n := p.Store.Retrier().Len(); n != 0 {
				t.Fatalf("%s: 40 refused reserves left %d jobs in the retrier", kind, n)
			}
			lift()
			wins := 0
			for i := 0; i < 40 && wins < 5; i++ {
				if e2e.Buy(p.Addr, "rw15b", "u"+strconv.Itoa(i)).Code == "WIN" {
					wins++
				}
			}
			st := p.SKUStatus(t, "rw15b")
			if wins != 5 || st.Remaining != 0 || st.Pending != 0 || st.Confirmed != 6 || len(shop.Orders()) != 6 {
				t.Fatalf("%s lifted: %d more wins, Redis %+v, shop %d orders; want all 6 sold", kind, wins, st, len(shop.Orders()))
			}
		})
	}
}
