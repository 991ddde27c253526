package store_test

import (
	"context"
	"net"
	"strconv"
	"testing"
	"time"

	"github.com/seckill-proxy/seckill-proxy/config"
	"github.com/seckill-proxy/seckill-proxy/internal/redistest"
	"github.com/seckill-proxy/seckill-proxy/lua"
	"github.com/seckill-proxy/seckill-proxy/store"
)

// bigActivity is one activity of n SKUs (s0..) of stock units each.
func bigActivity(id string, n int, stock int64, shards int) (*config.Activity, []string) {
	a := newActivity(id, stock, shards, 1)
	a.SKUs = make([]config.SKU, n)
	ids := make([]string, n)
	for i := range a.SKUs {
		ids[i] = "s" + strconv.Itoa(i)
		a.SKUs[i] = config.SKU{ID: ids[i], Stock: stock}
	}
	return a, ids
}

// TestCat16SoldOutManyFollowsInvalidations: the refresher's batched read of
// a big catalog's sold-out marks sees one SKU sell out and reopen on
// another instance as fast as Redis's invalidation, and a pass within the
// cache's bound reads again only the SKU whose flag was invalidated, not
// the other 499 (red team cat16: every pass read every SKU's every flag).
func TestCat16SoldOutManyFollowsInvalidations(t *testing.T) {
	srv := redistest.Start(t)
	a := openStore(t, redisConfig([]string{srv.Addr}, false))
	b := openStore(t, redisConfig([]string{srv.Addr}, false))
	act, ids := bigActivity("big", 500, 1, 1)
	mustPreheat(t, b, act)
	marks := make([]store.OutMark, len(ids))
	read := func() {
		t.Helper()
		if err := a.SoldOutMany(ctx(t), act.ID, ids, act.Shards, marks); err != nil {
			t.Fatal(err)
		}
	}
	read()
	for i, m := range marks {
		if m.Out || m.ReadAt() == 0 {
			t.Fatalf("sku %s: %+v before the sale", ids[i], m)
		}
	}
	const within = 3 * time.Second
	for round := range 5 {
		sku := 7 * (round + 1)
		q := reserveReq(act, "u"+strconv.Itoa(round), 1)
		q.SKU = ids[sku]
		r, err := b.Reserve(ctx(t), q)
		if err != nil || r.Code != lua.OK {
			t.Fatalf("round %d: reserve = %+v, %v", round, r, err)
		}
		before := append([]store.OutMark(nil), marks...)
		start := time.Now()
		eventually(t, within, "the sale on the other instance seen", func() bool { read(); return marks[sku].Out })
		if time.Since(start) < time.Second/2 { // within flagTTL of the last read of them all
			reread := 0
			for i := range marks {
				if i != sku && marks[i].ReadAt() != before[i].ReadAt() {
					reread++
				}
			}
			if reread > 0 {
				t.Errorf("round %d: %d SKUs whose flags nobody invalidated were read again", round, reread)
			}
		}
		for i, m := range marks {
			if m.Out != (i == sku) {
				t.Fatalf("round %d: sku %s out = %v", round, ids[i], m.Out)
			}
		}
		if code, err := b.Release(ctx(t), r.Token, act.Shards, "test", time.Now().UnixMilli(), true); err != nil || code != lua.OK {
			t.Fatalf("release = %v, %v", code, err)
		}
		eventually(t, within, "the release on the other instance seen", func() bool { read(); return !marks[sku].Out })
	}
}

// BenchmarkCat16RefresherPass is one pass of admission's refresher over a
// catalog's sold-out marks after an invalidation of some other key (a busy
// sale: request-id bitsets, epochs, other SKUs' flags), nothing having
// changed for these SKUs: perSKU is the loop before red team cat16
// (SoldOut SKU by SKU), batched is SoldOutMany.
//
//	go test -run XXX -bench Cat16RefresherPass -benchmem ./store/
func BenchmarkCat16RefresherPass(b *testing.B) {
	srv := redistest.Start(b)
	s := openStore(b, redisConfig([]string{srv.Addr}, false))
	for _, n := range []int{10, 500, 2000} {
		act, ids := bigActivity("bench"+strconv.Itoa(n), n, 100, 4)
		mustPreheat(b, s, act)
		b.Run("perSKU/skus="+strconv.Itoa(n), func(b *testing.B) {
			for i := 0; i < b.N; i++ {
				s.BumpInvalGen()
				for _, id := range ids {
					if _, err := s.SoldOut(ctx(b), act.ID, id, act.Shards); err != nil {
						b.Fatal(err)
					}
				}
			}
		})
		b.Run("batched/skus="+strconv.Itoa(n), func(b *testing.B) {
			marks := make([]store.OutMark, len(ids))
			for i := 0; i < b.N; i++ {
				s.BumpInvalGen()
				if err := s.SoldOutMany(ctx(b), act.ID, ids, act.Shards, marks); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}

// farRedis relays TCP to addr with each chunk of bytes delivered delay
// after it arrived, both ways: a Redis a round trip of 2×delay away (another
// zone, a managed Redis), for as long as the test runs.
func farRedis(t testing.TB, addr string, delay time.Duration) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ln.Close() })
	pipe := func(dst, src net.Conn) {
		type chunk struct {
			b  []byte
			at time.Time
		}
		ch := make(chan chunk, 1024)
		go func() {
			defer close(ch)
			for {
				buf := make([]byte, 64<<10)
				n, err := src.Read(buf)
				if n > 0 {
					ch <- chunk{buf[:n], time.Now().Add(delay)}
				}
				if err != nil {
					return
				}
			}
		}()
		for c := range ch {
			time.Sleep(time.Until(c.at))
			if _, err := dst.Write(c.b); err != nil {
				break
			}
		}
		dst.Close()
		src.Close()
	}
	go func() {
		for {
			in, err := ln.Accept()
			if err != nil {
				return
			}
			out, err := net.Dial("tcp", addr)
			if err != nil {
				in.Close()
				continue
			}
			go pipe(out, in)
			go pipe(in, out)
		}
	}()
	return ln.Addr().String()
}

// TestCat16BigCatalogOverAFarRedis: preheat and status of an activity of
// 3,000 SKUs of 4 shards over a Redis 1 ms away complete. Each went one
// round trip per SKU (status) or per shard of each SKU (preheat): 12,000
// round trips outlasted preheat's bound (10 × redis.timeout + 5 s), 3,000
// status's (10 × redis.timeout, at least 2 s), and neither ever completed
// — nor did what reads status: the dashboard, /metrics' stock gauges, the
// public activity page, reconcile (red team cat16).
func TestCat16BigCatalogOverAFarRedis(t *testing.T) {
	if testing.Short() {
		t.Skip("seconds of relayed round trips")
	}
	srv := redistest.Start(t)
	far := farRedis(t, srv.Addr, 500*time.Microsecond)
	cfg := redisConfig([]string{far}, false)
	cfg.Timeout = 200 * time.Millisecond
	s := openStore(t, cfg)
	act, _ := bigActivity("far", 3000, 10, 4)
	if _, err := s.Preheat(context.Background(), act, false, time.Now()); err != nil {
		t.Fatalf("preheat of %d SKUs × %d shards: %v", len(act.SKUs), act.Shards, err)
	}
	st, err := s.Status(context.Background(), act)
	if err != nil {
		t.Fatalf("status of %d SKUs: %v", len(act.SKUs), err)
	}
	if len(st.SKUs) != len(act.SKUs) || !st.OK() {
		t.Fatalf("status: %d SKUs, ok %v", len(st.SKUs), st.OK())
	}
	for i, k := range st.SKUs {
		if k.ID != act.SKUs[i].ID || !k.Preheated || k.Initial != 10 || k.Remaining != 10 {
			t.Fatalf("sku %d: %+v", i, k)
		}
	}
	// A forced preheat wipes the 12,000 shards first, the same way.
	if _, err := s.Preheat(context.Background(), act, true, time.Now()); err != nil {
		t.Fatalf("forced preheat: %v", err)
	}
}
