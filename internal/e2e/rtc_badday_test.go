package e2e

import (
	"fmt"
	"io"
	"net"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/seckill-proxy/seckill-proxy/internal/redistest"
)

// rtcAnswers are the shop's answers to a winner on a bad day, each after
// the order is taken (the raw shop records it before answering) unless
// named "no order". The proxy must leave each either confirmed (it read a
// 2xx) or pending for the reconciler, and never release a unit the shop
// holds an order for.
var rtcAnswers = []struct {
	name string
	ans  sp14Answer
}{
	{"200", sp14OK},
	{"huge 200 (5 MiB)", func(c net.Conn, _ sp14Buy, oid string) bool {
		b := `{"order_id":"` + oid + `","pad":"` + strings.Repeat("x", 5<<20) + `"}`
		_, _ = fmt.Fprintf(c, "HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: %d\r\n\r\n%s", len(b), b)
		return true
	}},
	{"101", sp14Raw("HTTP/1.1 101 Switching Protocols\r\nUpgrade: h2c\r\nConnection: Upgrade\r\n\r\n", false)},
	{"103 then 200", func(c net.Conn, b sp14Buy, oid string) bool {
		_, _ = io.WriteString(c, "HTTP/1.1 103 Early Hints\r\nLink: </a.css>; rel=preload\r\n\r\n")
		return sp14OK(c, b, oid)
	}},
	{"reset mid-body", func(c net.Conn, _ sp14Buy, oid string) bool {
		_, _ = io.WriteString(c, "HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: 400\r\n\r\n{\"order_id\":\""+oid)
		if tc, ok := c.(*net.TCPConn); ok {
			_ = tc.SetLinger(0) // RST, not FIN
		}
		return false
	}},
	{"500 after the order", sp14Raw("HTTP/1.1 500 Internal Server Error\r\nContent-Length: 0\r\n\r\n", true)},
	{"slow past the timeout", func(c net.Conn, b sp14Buy, oid string) bool {
		time.Sleep(1500 * time.Millisecond)
		return sp14OK(c, b, oid)
	}},
	{"chunked 200 cut before the last chunk", func(c net.Conn, _ sp14Buy, oid string) bool {
		b := `{"order_id":"` + oid + `"}`
		_, _ = fmt.Fprintf(c, "HTTP/1.1 200 OK\r\nX-Shop: order\r\nTransfer-Encoding: chunked\r\n\r\n%x\r\n%s\r\n", len(b), b)
		return false
	}},
}

// TestRTCBadDayEveryUnitSettles: winners at a shop that answers each way a
// bad day does (a 2xx too large to read, 101, 1xx before the 2xx, a reset
// or a cut in the middle of the 2xx, a 5xx after taking the order, past
// the timeout), while Redis stalls between the reserve and the confirm
// (SIGSTOP, CLIENT PAUSE WRITE, DEBUG SLEEP, timed to the shop's answers).
// After the stall and one reconcile --repair with a truthful verify: every
// unit is confirmed or released, confirmed == the shop's orders, stock
// adds up, no buyer told a win whose token the shop has no order for.
func TestRTCBadDayEveryUnitSettles(t *testing.T) {
	// ≈11 s; held at rtc's commit (docs/decisions.md §70).
	Soak(t)
	for _, mode := range []string{"sync", "queue"} {
		for _, stall := range []string{"sigstop", "pause-write", "debug-sleep"} {
			t.Run(mode+"/"+stall, func(t *testing.T) { rtcBadDay(t, mode, stall) })
		}
	}
}

func rtcBadDay(t *testing.T, mode, stall string) {
	node := redistest.Start(t, "--enable-debug-command", "yes")
	r := &Redis{Addrs: []string{node.Addr}, Node: node}
	const perKind = 3
	stock := int64(len(rtcAnswers) * perKind)

	// The shop answers winner i with rtcAnswers[i % n]; it holds every
	// answer until the stall has begun, so the confirms meet it.
	var mu sync.Mutex
	kinds := map[string]int{} // user -> answer index
	gate := make(chan struct{})
	shop := sp14StartShop(t, func(c net.Conn, b sp14Buy, oid string) bool {
		<-gate
		mu.Lock()
		k := kinds[b.User]
		mu.Unlock()
		return rtcAnswers[k].ans(c, b, oid)
	})
	o := Options{Redis: r.Addrs, ShopURL: shop.URL, UpstreamTimeout: time.Second,
		Activities: []Activity{{ID: "rtcbd", Stock: stock, Shards: 2, Pending: 10 * time.Second, Mode: mode}}}
	p := StartProxy(t, o.Config(t))
	p.Preheat(t, "rtcbd")
	if mode == "queue" {
		p.StartQueue(t)
	}

	type result struct {
		user string
		r    Resp
	}
	results := make(chan result, stock)
	var wg sync.WaitGroup
	for i := 0; i < int(stock); i++ {
		user := fmt.Sprintf("rtc-bd-%d", i)
		mu.Lock()
		kinds[user] = i % len(rtcAnswers)
		mu.Unlock()
		wg.Add(1)
		go func() {
			defer wg.Done()
			rid := ""
			if i%2 == 0 {
				rid = "rid-" + user // the confirm before the answer (settleBeforeAnswer)
			}
			results <- result{user, sp14BuyReq(p, "rtcbd", user, rid)}
		}()
	}
	atShop := int(stock)
	if mode == "queue" {
		atShop = 1 // the workers send a few at a time
	}
	Eventually(t, 10*time.Second, "winners at the shop", func() bool { return len(shop.Buys()) >= atShop })

	// Redis stalls, then the shop answers: confirms and releases meet it.
	stopped := make(chan struct{})
	go func() {
		defer close(stopped)
		switch stall {
		case "sigstop":
			node.Pause(t)
			time.Sleep(1200 * time.Millisecond)
			node.Resume(t)
		case "pause-write":
			_, _ = node.Do("CLIENT", "PAUSE", "1200", "WRITE")
			time.Sleep(1200 * time.Millisecond)
		case "debug-sleep":
			_, _ = node.Do("DEBUG", "SLEEP", "1.2")
		}
	}()
	time.Sleep(100 * time.Millisecond)
	close(gate)
	wg.Wait()
	close(results)
	<-stopped
	if mode == "queue" {
		Eventually(t, 30*time.Second, "every queued buyer sent", func() bool { return len(shop.Buys()) >= int(stock) })
	}

	wins := map[string]string{}
	for res := range results {
		if res.r.Code == "WIN" || ra12Replay(res.r) || res.r.Code == "QUEUED" {
			wins[res.user] = res.r.Token()
		}
		if !ra12SpecCode(res.r) && res.r.Code != "WIN" && !(res.r.Status/100 == 2 && res.r.Token() != "") {
			t.Errorf("%s (%s): %d %.200s, not a SPEC answer", res.user, rtcAnswers[kinds[res.user]].name, res.r.Status, res.r.Body)
		}
	}
	for u, tok := range wins {
		if !shop.hasOrder(tok) && mode == "sync" {
			t.Errorf("%s told a win (%s) with token %s: the shop holds no order", u, rtcAnswers[kinds[u]].name, tok)
		}
	}
	// The retrier lands what the stall ate; then the reconciler settles
	// what stayed unknown.
	Eventually(t, 15*time.Second, "the stall's settlements landed", func() bool {
		return p.Store.Retrier().Len() == 0
	})
	before := p.SKUStatus(t, "rtcbd")
	sp14Settle(t, p, shop, "rtcbd")
	k := p.SKUStatus(t, "rtcbd")
	t.Logf("%s/%s: %d told a win (or QUEUED); before the repair %+v; after %+v; shop orders %d", mode, stall, len(wins), before, k, shop.Orders())
	if k.Remaining+k.Confirmed != stock {
		t.Errorf("remaining %d + confirmed %d != stock %d (%+v)", k.Remaining, k.Confirmed, stock, k)
	}
}
