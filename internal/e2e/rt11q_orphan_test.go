package e2e_test

import (
	"bytes"
	"context"
	"crypto/sha1"
	"encoding/hex"
	"net"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"go.uber.org/zap"

	"github.com/seckill-proxy/seckill-proxy/config"
	"github.com/seckill-proxy/seckill-proxy/internal/e2e"
	"github.com/seckill-proxy/seckill-proxy/lua"
	"github.com/seckill-proxy/seckill-proxy/metrics"
	"github.com/seckill-proxy/seckill-proxy/reservation"
)

// rt11qRelay is a TCP relay in front of Redis for one proxy instance. Once
// armed, it forwards the first client chunk that carries one of the
// trigger strings and then cuts the instance off (a partition, or the
// instance dying right there): nothing more passes either way, on any
// connection, until healed.
type rt11qRelay struct {
	Addr     string
	target   string
	triggers [][]byte
	armed    atomic.Bool
	cut      atomic.Bool
	tripped  chan struct{}
	once     sync.Once
}

func rt11qStartRelay(t *testing.T, target string, triggers ...string) *rt11qRelay {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	r := &rt11qRelay{Addr: ln.Addr().String(), target: target, tripped: make(chan struct{})}
	for _, s := range triggers {
		r.triggers = append(r.triggers, []byte(s))
	}
	t.Cleanup(func() { _ = ln.Close() })
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			go r.serve(c)
		}
	}()
	return r
}

func (r *rt11qRelay) serve(c net.Conn) {
	defer func() { _ = c.Close() }()
	s, err := net.Dial("tcp", r.target)
	if err != nil {
		return
	}
	defer func() { _ = s.Close() }()
	go func() {
		buf := make([]byte, 64<<10)
		for {
			n, err := s.Read(buf)
			if n > 0 && !r.cut.Load() {
				if _, werr := c.Write(buf[:n]); werr != nil {
					return
				}
			}
			if err != nil {
				return
			}
		}
	}()
	buf := make([]byte, 64<<10)
	for {
		n, err := c.Read(buf)
		if n > 0 && !r.cut.Load() {
			chunk := buf[:n]
			hit := false
			if r.armed.Load() {
				for _, tr := range r.triggers {
					if bytes.Contains(chunk, tr) {
						hit = true
					}
				}
			}
			if hit { // cut before the chunk goes: its reply never comes back
				r.cut.Store(true)
			}
			if _, werr := s.Write(chunk); werr != nil {
				return
			}
			if hit {
				r.once.Do(func() { close(r.tripped) })
			}
		}
		if err != nil {
			return
		}
	}
}

func rt11qSHA(src string) string {
	h := sha1.Sum([]byte(src))
	return hex.EncodeToString(h[:])
}

// TestRT11QStoreUnavailableBuyerSentByOrphanRepair: queue mode. Instance
// A's reserve script reaches Redis and runs, but A is cut off from Redis
// right then (a partition, or A dies there): its buyer is answered 503
// STORE_UNAVAILABLE, and the abort that would release the late
// reservation (README "Failure behaviour": "STORE_UNAVAILABLE means
// nothing is held, also when Redis answered late") cannot land. The record
// is queued without a stream entry. A minute later the reconciler's
// repair (background pass on instance B) takes it for a reservation "whose
// instance stopped before enqueueing it" (queued_unlisted) and enqueues
// it; B's workers send it and the shop creates an order for a buyer told
// STORE_UNAVAILABLE. In sync mode the same crash leaves a pending
// reservation the reconciler releases by verify (README "A crash between a
// timeout and its settlement"); in queue mode it is sent instead.
//
// Expected (SPEC §9 "STORE_UNAVAILABLE means nothing is held"): the
// buyer told STORE_UNAVAILABLE gets no order; the unit goes back on sale.
//
// Fixed: the orphan repair releases queued records without a stream entry
// (reason unlisted) instead of enqueueing them; Redis cannot tell this
// buyer from one told QUEUED whose enqueue never landed, and only the
// release keeps the STORE_UNAVAILABLE promise (README "Failure behaviour
// and limits").
func TestRT11QStoreUnavailableBuyerSentByOrphanRepair(t *testing.T) {
	e2e.Soak(t)
	r := e2e.StartRedis(t)
	shop := e2e.StartShop(t)
	relay := rt11qStartRelay(t, r.Addrs[0], rt11qSHA(lua.Reserve), rt11qSHA(lua.ReserveBatch))
	act := e2e.Activity{ID: "rt11qo", Stock: 1, Shards: 1, Mode: "queue"}
	optsA := e2e.Options{Redis: []string{relay.Addr}, ShopURL: shop.URL, RedisTimeout: 150 * time.Millisecond,
		Activities: []e2e.Activity{act}}
	optsB := e2e.Options{Redis: r.Addrs, ShopURL: shop.URL, Activities: []e2e.Activity{act}}
	pb := rqProxy(t, optsB, nil)
	pa := e2e.StartProxy(t, optsA.Config(t))
	pa.WaitPreheated(t, "rt11qo")
	a := pb.Activity(t, "rt11qo")

	relay.armed.Store(true)
	got := e2e.Buy(pa.Addr, "rt11qo", "rt11qo-s")
	select {
	case <-relay.tripped:
	default:
		t.Fatalf("the reserve never passed the relay; buy: %d %s", got.Status, got.Body)
	}
	t.Logf("buyer s at A: %d %s", got.Status, got.Body)
	if got.Code != "STORE_UNAVAILABLE" {
		t.Skipf("buyer s was answered %d %s, not STORE_UNAVAILABLE: the scenario did not happen", got.Status, got.Body)
	}
	st := opsStore(t, pb.Cfg)
	k := rqWantStock(t, st, a)
	t.Logf("after the cut: %+v", k)

	// B: queue workers, and serve's background repair a minute later.
	pb.StartQueue(t)
	rec := reservation.NewReconciler(st, metrics.New(), zap.NewNop())
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	rep, err := rec.Run(ctx, []*config.Activity{a}, true, time.Now().Add(a.PendingTimeout+time.Minute))
	if err != nil {
		t.Fatalf("reconcile: %v", err)
	}
	for _, ar := range rep.Activities {
		t.Logf("reconcile notes: %v", ar.Notes)
	}
	time.Sleep(2 * time.Second) // the workers' turn
	if n := len(shop.Orders()); n != 0 {
		for tok, o := range shop.Orders() {
			t.Errorf("the shop holds order %s (token %s) for user %s, who was told 503 STORE_UNAVAILABLE (nothing held)", o.OrderID, tok, o.User)
		}
	}
	// The partition heals: A's abort lands now.
	relay.cut.Store(false)
	relay.armed.Store(false)
	time.Sleep(time.Second)
	k = rqWantStock(t, st, a)
	t.Logf("after the heal: %+v", k)
	if k.Confirmed != int64(len(shop.Orders())) {
		t.Errorf("shop orders %d, confirmed %d", len(shop.Orders()), k.Confirmed)
	}
	if k.Confirmed != 0 {
		t.Errorf("a unit is confirmed for a buyer told STORE_UNAVAILABLE: %+v", k)
	}
}
