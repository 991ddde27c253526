// Package bare holds the ceiling targets of the comparison: a fasthttp
// handler answering a fixed body (what the machine can answer at all, i.e.
// the best case for every answer the proxy gives itself), a handler making
// exactly one Redis script call per request (the best case of this
// architecture for contended buys, with none of the proxy's checks;
// optionally with a per-user check), a plain reverse hop (the best case
// of forwarding a winner to the shop), and the two together as the smallest
// sale (SaleTarget: what a winner's round trips cost with nothing added).
package bare

import (
	"context"
	"errors"
	"fmt"
	"net"
	"strconv"
	"sync/atomic"
	"time"

	"github.com/redis/rueidis"
	"github.com/valyala/fasthttp"
)

// fixedBody mimics the proxy's own answer to a loser (SPEC §4).
var fixedBody = []byte(`{"code":"SOLD_OUT","message":"sold out","activity":"act_bare","sku":"30021"}`)

// Handler answers every request 410 with a fixed SOLD_OUT body.
func Handler() fasthttp.RequestHandler { return FixedHandler(fasthttp.StatusGone, fixedBody) }

// FixedHandler answers every request with status and body (JSON). As a
// shop that accepts every order (200, an order id) it is the fastest shop
// there is: behind it, a forwarding benchmark measures the forwarder alone.
func FixedHandler(status int, body []byte) fasthttp.RequestHandler {
	return func(ctx *fasthttp.RequestCtx) {
		ctx.SetStatusCode(status)
		ctx.SetContentType("application/json")
		ctx.SetBody(body)
	}
}

// HopHandler forwards every request to the host:port upstream with one
// fasthttp HostClient and copies its answer back: a plain reverse hop,
// nothing added, nothing checked. It is the reference for the proxy's
// winner path (reserve, forward, confirm) in front of the same shop.
func HopHandler(upstream string, timeout time.Duration) fasthttp.RequestHandler {
	hc := &fasthttp.HostClient{
		Addr:                          upstream,
		MaxConns:                      1024,
		ReadTimeout:                   timeout,
		WriteTimeout:                  timeout,
		NoDefaultUserAgentHeader:      true,
		DisableHeaderNamesNormalizing: true,
		DisablePathNormalizing:        true,
	}
	return func(ctx *fasthttp.RequestCtx) {
		if err := hc.DoTimeout(&ctx.Request, &ctx.Response, timeout); err != nil {
			ctx.Response.Reset()
			ctx.Error("bad gateway", fasthttp.StatusBadGateway)
		}
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

// userScript is decrScript with the per-user check of a real buy: one
// unit per user, the buyers kept in a set (the same reads and writes the
// issue-10 reference names: GET stock, SISMEMBER user, DECRBY, SADD).
const userScript = `
if redis.call('SISMEMBER', KEYS[2], ARGV[1]) == 1 then
  return 2
end
local v = tonumber(redis.call('GET', KEYS[1]) or '0')
if v > 0 then
  redis.call('DECRBY', KEYS[1], 1)
  redis.call('SADD', KEYS[2], ARGV[1])
  return 1
end
return 0
`

// StockKey is where the bare-redis target keeps its stock.
const StockKey = "seckill-bench:{bare}:stock"

// UsersKey is the bare-redis target's set of buyers (with per-user checks).
const UsersKey = "seckill-bench:{bare}:users"

var (
	soldOutBody = []byte(`{"code":"SOLD_OUT","message":"sold out","activity":"act_bare","sku":"30021"}`)
	wonBody     = []byte(`{"order_id":"bare"}`)
	storeBody   = []byte(`{"code":"STORE_UNAVAILABLE","message":"redis unavailable"}`)
	boughtBody  = []byte(`{"code":"ALREADY_PURCHASED","message":"already purchased","activity":"act_bare","sku":"30021"}`)
)

// RedisTarget is the bare-redis handler and its client.
type RedisTarget struct {
	client  rueidis.Client
	script  *rueidis.Lua
	timeout time.Duration
	perUser bool
}

// NewRedisTarget connects to addr and sets the stock to stock units.
func NewRedisTarget(ctx context.Context, addr string, stock int64) (*RedisTarget, error) {
	return NewRedisTargetUsers(ctx, addr, stock, false)
}

// NewRedisTargetUsers is NewRedisTarget; with perUser, each request's
// X-User-Id buys at most one unit and a repeat is answered 409
// ALREADY_PURCHASED by the same script call (the buyers set is emptied).
func NewRedisTargetUsers(ctx context.Context, addr string, stock int64, perUser bool) (*RedisTarget, error) {
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
	if err := c.Do(sctx, c.B().Del().Key(UsersKey).Build()).Error(); err != nil {
		c.Close()
		return nil, fmt.Errorf("reset buyers: %w", err)
	}
	src := decrScript
	if perUser {
		src = userScript
	}
	return &RedisTarget{client: c, script: rueidis.NewLuaScript(src), timeout: 200 * time.Millisecond, perUser: perUser}, nil
}

// Close closes the Redis client.
func (t *RedisTarget) Close() { t.client.Close() }

// Handler makes one EVALSHA per request: 200 for a unit taken, 410 when none
// is left, 503 when Redis did not answer in time.
func (t *RedisTarget) Handler() fasthttp.RequestHandler {
	keys := []string{StockKey}
	if t.perUser {
		keys = append(keys, UsersKey)
	}
	return func(ctx *fasthttp.RequestCtx) {
		var args []string
		if t.perUser {
			args = []string{string(ctx.Request.Header.Peek("X-User-Id"))}
		}
		// The RequestCtx has no deadline: give Redis its own.
		c, cancel := context.WithTimeout(context.Background(), t.timeout)
		n, err := t.script.Exec(c, t.client, keys, args).AsInt64()
		cancel()
		ctx.SetContentType("application/json")
		switch {
		case err != nil:
			ctx.SetStatusCode(fasthttp.StatusServiceUnavailable)
			ctx.SetBody(storeBody)
		case n == 1:
			ctx.SetStatusCode(fasthttp.StatusOK)
			ctx.SetBody(wonBody)
		case n == 2:
			ctx.SetStatusCode(fasthttp.StatusConflict)
			ctx.SetBody(boughtBody)
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

// SaleTarget is the smallest sale that makes the round trips a winner makes
// through the proxy: one per-user script call per request until the stock
// is gone (userScript), a winner forwarded to the shop (HopHandler), and a
// local sold-out flag after the first "none left" (every later buyer is
// answered from memory, as the proxy answers them). Nothing else: no
// limits, no token, no confirm, no metrics. It is the reference for the
// 1000users tail with winners in it: the bare handler makes no round trip
// at all (BENCHMARKS.md, seventeenth round).
type SaleTarget struct {
	rt      *RedisTarget
	hop     fasthttp.RequestHandler
	stock   int64
	soldOut atomic.Bool
}

// NewSaleTarget connects to Redis at addr, sets the stock and forwards
// winners to the host:port upstream.
func NewSaleTarget(ctx context.Context, addr, upstream string, stock int64, timeout time.Duration) (*SaleTarget, error) {
	rt, err := NewRedisTargetUsers(ctx, addr, stock, true)
	if err != nil {
		return nil, err
	}
	return &SaleTarget{rt: rt, hop: HopHandler(upstream, timeout), stock: stock}, nil
}

// Close closes the Redis client.
func (t *SaleTarget) Close() { t.rt.Close() }

// Reset sets the stock again, forgets the buyers and clears the sold-out
// flag: a new sale on the same process (POST /_reset does it over HTTP).
func (t *SaleTarget) Reset(ctx context.Context) error {
	c := t.rt.client
	if err := c.Do(ctx, c.B().Set().Key(StockKey).Value(strconv.FormatInt(t.stock, 10)).Build()).Error(); err != nil {
		return err
	}
	if err := c.Do(ctx, c.B().Del().Key(UsersKey).Build()).Error(); err != nil {
		return err
	}
	t.soldOut.Store(false)
	return nil
}

// Handler answers a buy: 410 from memory once sold out, else the script's
// answer, a winner's being the shop's.
func (t *SaleTarget) Handler() fasthttp.RequestHandler {
	keys := []string{StockKey, UsersKey}
	return func(ctx *fasthttp.RequestCtx) {
		if string(ctx.Path()) == "/_reset" {
			c, cancel := context.WithTimeout(context.Background(), 5*time.Second)
			err := t.Reset(c)
			cancel()
			if err != nil {
				ctx.Error(err.Error(), fasthttp.StatusServiceUnavailable)
			}
			return
		}
		ctx.SetContentType("application/json")
		if t.soldOut.Load() {
			ctx.SetStatusCode(fasthttp.StatusGone)
			ctx.SetBody(soldOutBody)
			return
		}
		user := string(ctx.Request.Header.Peek("X-User-Id"))
		c, cancel := context.WithTimeout(context.Background(), t.rt.timeout)
		n, err := t.rt.script.Exec(c, t.rt.client, keys, []string{user}).AsInt64()
		cancel()
		switch {
		case err != nil:
			ctx.SetStatusCode(fasthttp.StatusServiceUnavailable)
			ctx.SetBody(storeBody)
		case n == 1:
			t.hop(ctx)
		case n == 2:
			ctx.SetStatusCode(fasthttp.StatusConflict)
			ctx.SetBody(boughtBody)
		default:
			t.soldOut.Store(true)
			ctx.SetStatusCode(fasthttp.StatusGone)
			ctx.SetBody(soldOutBody)
		}
	}
}
