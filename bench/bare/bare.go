// Package bare holds the two ceiling targets of the comparison: a fasthttp
// handler answering a fixed body (what the machine can answer at all, i.e.
// the best case for every answer the proxy gives itself) and a handler making
// exactly one Redis script call per request (the best case of this
// architecture for contended buys, with none of the proxy's checks).
package bare

import (
	"context"
	"errors"
	"fmt"
	"net"
	"strconv"
	"time"

	"github.com/redis/rueidis"
	"github.com/valyala/fasthttp"
)

// fixedBody mimics the proxy's own answer to a loser (SPEC §4).
var fixedBody = []byte(`{"code":"SOLD_OUT","message":"sold out","activity":"act_bare","sku":"30021"}`)

// Handler answers every request 410 with a fixed SOLD_OUT body.
func Handler() fasthttp.RequestHandler {
	return func(ctx *fasthttp.RequestCtx) {
		ctx.SetStatusCode(fasthttp.StatusGone)
		ctx.SetContentType("application/json")
		ctx.SetBody(fixedBody)
	}
}

// Server builds a fasthttp server tuned like a proxy listener.
func Server(h fasthttp.RequestHandler, name string) *fasthttp.Server {
	return &fasthttp.Server{
		Handler:               h,
		Name:                  name,
		ReadTimeout:           30 * time.Second,
		WriteTimeout:          30 * time.Second,
		IdleTimeout:           2 * time.Minute,
		NoDefaultServerHeader: true,
		NoDefaultDate:         true,
	}
}

// decrScript takes one unit if any is left: the contended core of a buy.
const decrScript = `
local v = tonumber(redis.call('GET', KEYS[1]) or '0')
if v > 0 then
  redis.call('DECR', KEYS[1])
  return 1
end
return 0
`

// StockKey is where the bare-redis target keeps its stock.
const StockKey = "seckill-bench:{bare}:stock"

var (
	soldOutBody = []byte(`{"code":"SOLD_OUT","message":"sold out","activity":"act_bare","sku":"30021"}`)
	wonBody     = []byte(`{"order_id":"bare"}`)
	storeBody   = []byte(`{"code":"STORE_UNAVAILABLE","message":"redis unavailable"}`)
)

// RedisTarget is the bare-redis handler and its client.
type RedisTarget struct {
	client  rueidis.Client
	script  *rueidis.Lua
	timeout time.Duration
}

// NewRedisTarget connects to addr and sets the stock to stock units.
func NewRedisTarget(ctx context.Context, addr string, stock int64) (*RedisTarget, error) {
	c, err := rueidis.NewClient(rueidis.ClientOption{
		InitAddress:  []string{addr},
		DisableCache: true, // nothing is read-cached: every request is a script call
	})
	if err != nil {
		return nil, fmt.Errorf("redis %s: %w", addr, err)
	}
	sctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	if err := c.Do(sctx, c.B().Set().Key(StockKey).Value(strconv.FormatInt(stock, 10)).Build()).Error(); err != nil {
		c.Close()
		return nil, fmt.Errorf("set stock: %w", err)
	}
	return &RedisTarget{client: c, script: rueidis.NewLuaScript(decrScript), timeout: 200 * time.Millisecond}, nil
}

// Close closes the Redis client.
func (t *RedisTarget) Close() { t.client.Close() }

// Handler makes one EVALSHA per request: 200 for a unit taken, 410 when none
// is left, 503 when Redis did not answer in time.
func (t *RedisTarget) Handler() fasthttp.RequestHandler {
	keys := []string{StockKey}
	return func(ctx *fasthttp.RequestCtx) {
		// The RequestCtx has no deadline: give Redis its own.
		c, cancel := context.WithTimeout(context.Background(), t.timeout)
		n, err := t.script.Exec(c, t.client, keys, nil).AsInt64()
		cancel()
		ctx.SetContentType("application/json")
		switch {
		case err != nil:
			ctx.SetStatusCode(fasthttp.StatusServiceUnavailable)
			ctx.SetBody(storeBody)
		case n == 1:
			ctx.SetStatusCode(fasthttp.StatusOK)
			ctx.SetBody(wonBody)
		default:
			ctx.SetStatusCode(fasthttp.StatusGone)
			ctx.SetBody(soldOutBody)
		}
	}
}

// ListenAndServe serves h on addr until the context ends.
func ListenAndServe(ctx context.Context, addr string, h fasthttp.RequestHandler, name string) error {
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return fmt.Errorf("listen %s: %w", addr, err)
	}
	srv := Server(h, name)
	errc := make(chan error, 1)
	go func() { errc <- srv.Serve(ln) }()
	select {
	case <-ctx.Done():
		if err := srv.Shutdown(); err != nil {
			return fmt.Errorf("shutdown: %w", err)
		}
		return nil
	case err := <-errc:
		if err != nil && !errors.Is(err, net.ErrClosed) {
			return fmt.Errorf("serve %s: %w", addr, err)
		}
		return nil
	}
}
