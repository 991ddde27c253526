package e2e_test

import (
	"runtime"
	"testing"
	"time"
	"weak"

	"github.com/seckill-proxy/seckill-proxy/internal/e2e"
	"github.com/seckill-proxy/seckill-proxy/proxy"
	"github.com/seckill-proxy/seckill-proxy/store"
)

// TestShutdownLetsGoOfTheServer: once Shutdown has closed every
// connection, nothing keeps the stopped Server (its caches, limiters,
// store) reachable. fasthttp's worker pool keeps its cleaner goroutine, and
// with it the fasthttp.Server and its handler, for MaxIdleWorkerDuration (a
// minute here) after Serve returns; before the handler went through a
// reference Shutdown drops, a test process starting proxy after proxy held
// gigabytes of stopped ones, and a memory test once measured one going away.
func TestShutdownLetsGoOfTheServer(t *testing.T) {
	var srv weak.Pointer[proxy.Server]
	var st weak.Pointer[store.Store]
	t.Run("serve", func(t *testing.T) {
		f := newFixture(t)
		// Workers in the pool: a buy, a page, both answered.
		if r := f.buy(actOpen, "u1"); r.Code != "WIN" {
			t.Fatalf("buy: %+v", r)
		}
		if r := f.do(e2e.Req{Method: "GET", URI: "/page"}); r.Status != 200 {
			t.Fatalf("page: %+v", r)
		}
		srv, st = weak.Make(f.p.Server), weak.Make(f.p.Store)
	}) // the fixture's cleanups: Shutdown, the pipeline stopped, the store closed
	e2e.Eventually(t, 10*time.Second, "the stopped Server and its store collected", func() bool {
		runtime.GC()
		return srv.Value() == nil && st.Value() == nil
	})
}
