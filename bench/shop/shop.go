// Package shop is the demo "legacy shop" behind seckill-proxy: a real order
// table (unique (activity, user, sku), unique token, an order id) on embedded
// SQLite or PostgreSQL, the verify endpoint the proxy's reconciler calls,
// knobs for latency, failures and hangs, and a legacy mode that sells from a
// stock row on its own, as the shops in the published seckill write-ups do.
package shop

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"math/rand/v2"
	"net"
	"strconv"
	"strings"
	"sync/atomic"
	"time"

	"github.com/valyala/fasthttp"
	"go.uber.org/zap"

	"github.com/seckill-proxy/seckill-proxy/internal/signing"
)

// Config is the shop's behaviour; the zero value plus a DB is a plain, fast,
// always-successful shop.
type Config struct {
	// DB is "sqlite:PATH" or a "postgres://" DSN.
	DB string
	// Latency is added to every order attempt (the shop's own work).
	Latency time.Duration
	// FailRate is the fraction of order attempts answered 500 without an order.
	FailRate float64
	// TimeoutRate is the fraction of order attempts that create the order and
	// then sleep Hang before answering, so the proxy times out not knowing
	// the outcome and its reconciler must ask the verify endpoint.
	TimeoutRate float64
	// Hang is how long a "timeout" order sleeps (longer than the proxy's
	// upstream timeout).
	Hang time.Duration
	// Legacy makes the shop sell from its stock table: every order, tokened
	// or not, locks/decrements the SKU's stock row in the order transaction.
	Legacy bool
	// Stock seeds stock rows, key "activity/sku".
	Stock map[string]int64
	// DefaultStock, when > 0, creates a stock row on first sight of a SKU.
	DefaultStock int64
	// SigningSecret, when set, makes tokened orders require a valid
	// X-Seckill-Signature: it is the key "default" (a proxy configured
	// with upstream.signing_secret_env).
	SigningSecret string
	// SigningKeys, when set, are the keys the shop knows (a proxy
	// configured with upstream.signing_keys): a signature verifies with the
	// key its k names. SigningSecret is then ignored.
	SigningKeys signing.Keyring
	// SigningV1Only verifies v1 only (which covers neither method nor
	// path), as a shop from before v2 did; by default v2 is required.
	SigningV1Only bool
	// MaxSkew is how old (or how far ahead) a signature timestamp may be.
	MaxSkew time.Duration
	// Reset empties the tables at start (the demo shop is throwaway).
	Reset bool
}

// Shop serves the demo shop over fasthttp.
type Shop struct {
	cfg  Config
	db   *db
	log  *zap.Logger
	keys signing.Keyring // empty: signatures are not checked
	srv  *fasthttp.Server

	badSignatures atomic.Int64
	untokened     atomic.Int64
}

// New opens the database, migrates it and seeds stock.
func New(ctx context.Context, cfg Config, log *zap.Logger) (*Shop, error) {
	if log == nil {
		log = zap.NewNop()
	}
	if cfg.MaxSkew == 0 {
		cfg.MaxSkew = 5 * time.Minute
	}
	if cfg.Hang == 0 {
		cfg.Hang = 10 * time.Second
	}
	d, err := openDB(ctx, cfg.DB)
	if err != nil {
		return nil, err
	}
	s := &Shop{cfg: cfg, db: d, log: log, keys: cfg.SigningKeys}
	if len(s.keys) == 0 && cfg.SigningSecret != "" {
		s.keys = signing.Keyring{{ID: "default", Secret: []byte(cfg.SigningSecret)}}
	}
	if cfg.Reset {
		if err := d.reset(ctx, ""); err != nil {
			_ = d.close() // the setup error is the one to report
			return nil, err
		}
		if _, err := d.sql.ExecContext(ctx, `DELETE FROM stock`); err != nil {
			_ = d.close() // the setup error is the one to report
			return nil, fmt.Errorf("reset stock: %w", err)
		}
	}
	for key, n := range cfg.Stock {
		act, sku, ok := strings.Cut(key, "/")
		if !ok {
			_ = d.close() // the setup error is the one to report
			return nil, fmt.Errorf("stock key %q: want activity/sku", key)
		}
		if err := d.setStock(ctx, act, sku, n); err != nil {
			_ = d.close() // the setup error is the one to report
			return nil, err
		}
	}
	s.srv = &fasthttp.Server{
		Handler:            s.Handler(),
		Name:               "seckill-bench-shop",
		ReadTimeout:        30 * time.Second,
		WriteTimeout:       30 * time.Second,
		IdleTimeout:        2 * time.Minute, // above the proxy client's idle timeout
		MaxRequestBodySize: 1 << 20,
	}
	return s, nil
}

// Serve answers on ln until Close.
func (s *Shop) Serve(ln net.Listener) error {
	if err := s.srv.Serve(ln); err != nil {
		return fmt.Errorf("shop serve: %w", err)
	}
	return nil
}

// Close stops the server and closes the database.
func (s *Shop) Close() error {
	err := s.srv.Shutdown()
	if cerr := s.db.close(); err == nil {
		err = cerr
	}
	return err
}

// Summary returns the shop's figures for one activity.
func (s *Shop) Summary(ctx context.Context, activity string) (Summary, error) {
	sum, err := s.db.summary(ctx, activity)
	sum.Legacy = s.cfg.Legacy
	sum.BadSignatures = s.badSignatures.Load()
	return sum, err
}

// Handler returns the shop's request handler.
func (s *Shop) Handler() fasthttp.RequestHandler {
	return func(ctx *fasthttp.RequestCtx) {
		path := string(ctx.Path())
		switch {
		case path == "/internal/orders" && ctx.IsGet():
			s.handleVerify(ctx)
		case path == "/internal/summary" && ctx.IsGet():
			s.handleSummary(ctx)
		case path == "/internal/reset" && ctx.IsPost():
			s.handleReset(ctx)
		case ctx.IsPost() && strings.HasPrefix(path, "/api/") && len(ctx.Request.Header.Peek("X-Seckill-Token")) > 0:
			s.handleTokened(ctx)
		case ctx.IsPost() && isBuyPath(path):
			s.handleUntokenedBuy(ctx, path)
		default:
			ctx.SetContentType("text/plain; charset=utf-8")
			ctx.SetBodyString("ok")
		}
	}
}

// isBuyPath matches /api/seckill/{activity}/{sku}/buy.
func isBuyPath(p string) bool {
	_, _, ok := parseBuyPath(p)
	return ok
}

func parseBuyPath(p string) (activity, sku string, ok bool) {
	rest, found := strings.CutPrefix(p, "/api/seckill/")
	if !found {
		return "", "", false
	}
	parts := strings.Split(rest, "/")
	if len(parts) != 3 || parts[2] != "buy" || parts[0] == "" || parts[1] == "" {
		return "", "", false
	}
	return parts[0], parts[1], true
}

func writeJSON(ctx *fasthttp.RequestCtx, status int, v any) {
	ctx.SetStatusCode(status)
	ctx.SetContentType("application/json")
	b, err := json.Marshal(v)
	if err != nil {
		b = []byte(`{"code":"INTERNAL"}`)
	}
	ctx.SetBody(b)
}

type codeBody struct {
	Code    string `json:"code"`
	Message string `json:"message,omitempty"`
}

type orderBody struct {
	OrderID string `json:"order_id"`
}

// dbCtx bounds every database call: a fasthttp ctx has no deadline.
func dbCtx() (context.Context, context.CancelFunc) {
	return context.WithTimeout(context.Background(), 30*time.Second)
}

func (s *Shop) handleVerify(ctx *fasthttp.RequestCtx) {
	token := string(ctx.QueryArgs().Peek("token"))
	if token == "" {
		writeJSON(ctx, fasthttp.StatusBadRequest, codeBody{Code: "BAD_REQUEST", Message: "token required"})
		return
	}
	c, cancel := dbCtx()
	defer cancel()
	id, err := s.db.orderByToken(c, token)
	if err != nil {
		s.log.Error("verify", zap.Error(err))
		writeJSON(ctx, fasthttp.StatusInternalServerError, codeBody{Code: "INTERNAL"})
		return
	}
	if id == 0 {
		writeJSON(ctx, fasthttp.StatusNotFound, codeBody{Code: "NOT_FOUND"})
		return
	}
	writeJSON(ctx, fasthttp.StatusOK, orderBody{OrderID: strconv.FormatInt(id, 10)})
}

func (s *Shop) handleSummary(ctx *fasthttp.RequestCtx) {
	act := string(ctx.QueryArgs().Peek("activity"))
	c, cancel := dbCtx()
	defer cancel()
	sum, err := s.Summary(c, act)
	if err != nil {
		s.log.Error("summary", zap.Error(err))
		writeJSON(ctx, fasthttp.StatusInternalServerError, codeBody{Code: "INTERNAL", Message: err.Error()})
		return
	}
	writeJSON(ctx, fasthttp.StatusOK, sum)
}

func (s *Shop) handleReset(ctx *fasthttp.RequestCtx) {
	c, cancel := dbCtx()
	defer cancel()
	if err := s.db.reset(c, string(ctx.QueryArgs().Peek("activity"))); err != nil {
		writeJSON(ctx, fasthttp.StatusInternalServerError, codeBody{Code: "INTERNAL", Message: err.Error()})
		return
	}
	s.badSignatures.Store(0)
	writeJSON(ctx, fasthttp.StatusOK, codeBody{Code: "OK"})
}

// ErrBadSignature is why a tokened order is refused with 401.
var ErrBadSignature = errors.New("bad X-Seckill-Signature")

// Sign computes the v1-only X-Seckill-Signature value of SPEC §5 for the
// given fields, as a proxy from before key ids sent it. Exported so tests
// and tools can forge proxy requests; signing.Keyring.Sign makes v2.
func Sign(secret []byte, tMillis int64, token, activity, sku, qty, user string) string {
	return signing.Sign(secret, tMillis, token, activity, sku, qty, user)
}

// checkSignature verifies v2 over the request line as received (or v1
// with SigningV1Only) with the key the header names.
func (s *Shop) checkSignature(h *fasthttp.RequestHeader, token, act, sku, qty, user string) error {
	r := signing.Request{Token: token, Activity: act, SKU: sku, Qty: qty, User: user,
		Method: string(h.Method()), Target: string(h.RequestURI()),
		Items: string(h.Peek("X-Seckill-Items"))} // a bundle's items are signed too
	verify := s.keys.Verify
	if s.cfg.SigningV1Only {
		verify = s.keys.VerifyV1
	}
	if _, err := verify(string(h.Peek("X-Seckill-Signature")), r, time.Now(), s.cfg.MaxSkew); err != nil {
		return fmt.Errorf("%w: %w", ErrBadSignature, err)
	}
	return nil
}

func (s *Shop) handleTokened(ctx *fasthttp.RequestCtx) {
	h := &ctx.Request.Header
	token := string(h.Peek("X-Seckill-Token"))
	act := string(h.Peek("X-Seckill-Activity"))
	sku := string(h.Peek("X-Seckill-Sku"))
	qtyS := string(h.Peek("X-Seckill-Qty"))
	user := string(h.Peek("X-Seckill-User"))
	if len(s.keys) > 0 {
		if err := s.checkSignature(h, token, act, sku, qtyS, user); err != nil {
			s.badSignatures.Add(1)
			writeJSON(ctx, fasthttp.StatusUnauthorized, codeBody{Code: "BAD_SIGNATURE", Message: err.Error()})
			return
		}
	}
	if qtyS == "" {
		qtyS = "1"
	}
	qty, err := strconv.ParseInt(qtyS, 10, 64)
	if act == "" || sku == "" || user == "" || err != nil || qty < 1 {
		writeJSON(ctx, fasthttp.StatusBadRequest, codeBody{Code: "BAD_REQUEST", Message: "X-Seckill-Activity/Sku/User/Qty required"})
		return
	}
	s.order(ctx, Order{Activity: act, SKU: sku, User: user, Qty: qty, Token: token})
}

func (s *Shop) handleUntokenedBuy(ctx *fasthttp.RequestCtx, path string) {
	if !s.cfg.Legacy {
		// Behind the proxy, a buy without a token bypassed it.
		s.untokened.Add(1)
		writeJSON(ctx, fasthttp.StatusForbidden, codeBody{Code: "NO_TOKEN", Message: "buy through seckill-proxy"})
		return
	}
	act, sku, _ := parseBuyPath(path)
	user := string(ctx.Request.Header.Peek("X-User-Id"))
	if user == "" {
		writeJSON(ctx, fasthttp.StatusBadRequest, codeBody{Code: "BAD_REQUEST", Message: "X-User-Id required"})
		return
	}
	s.order(ctx, Order{Activity: act, SKU: sku, User: user, Qty: 1})
}

// order applies the knobs and places the order.
func (s *Shop) order(ctx *fasthttp.RequestCtx, o Order) {
	if s.cfg.Latency > 0 {
		time.Sleep(s.cfg.Latency)
	}
	if s.cfg.FailRate > 0 && rand.Float64() < s.cfg.FailRate {
		writeJSON(ctx, fasthttp.StatusInternalServerError, codeBody{Code: "INTERNAL", Message: "injected failure"})
		return
	}
	hang := s.cfg.TimeoutRate > 0 && rand.Float64() < s.cfg.TimeoutRate
	c, cancel := dbCtx()
	defer cancel()
	var (
		id  int64
		out Outcome
		err error
	)
	if s.cfg.Legacy {
		id, out, err = s.db.legacyBuy(c, o, s.cfg.DefaultStock)
	} else {
		id, out, err = s.db.createTokened(c, o)
	}
	if err != nil {
		s.log.Warn("order", zap.String("activity", o.Activity), zap.String("sku", o.SKU), zap.Error(err))
		writeJSON(ctx, fasthttp.StatusInternalServerError, codeBody{Code: "INTERNAL", Message: err.Error()})
		return
	}
	if hang {
		// The order exists but the answer comes too late: the proxy sees an
		// unknown outcome and its reconciler must find the order via verify.
		time.Sleep(s.cfg.Hang)
	}
	switch out {
	case Created, Existing:
		writeJSON(ctx, fasthttp.StatusOK, orderBody{OrderID: strconv.FormatInt(id, 10)})
	case Duplicate:
		writeJSON(ctx, fasthttp.StatusConflict, codeBody{Code: "ALREADY_PURCHASED", Message: "already ordered"})
	case SoldOut:
		writeJSON(ctx, fasthttp.StatusGone, codeBody{Code: "SOLD_OUT", Message: "sold out"})
	case UnknownItem:
		writeJSON(ctx, fasthttp.StatusNotFound, codeBody{Code: "UNKNOWN_ITEM", Message: "no stock row for this sku"})
	}
}

// ParseStock parses --stock values: "activity/sku=N" or a bare "N" default.
func ParseStock(vals []string) (map[string]int64, int64, error) {
	m := map[string]int64{}
	var def int64
	for _, v := range vals {
		key, num, ok := strings.Cut(v, "=")
		if !ok {
			num, key = key, ""
		}
		n, err := strconv.ParseInt(strings.TrimSpace(num), 10, 64)
		if err != nil || n < 0 {
			return nil, 0, fmt.Errorf("--stock %q: want activity/sku=N or N", v)
		}
		if key == "" {
			def = n
			continue
		}
		if !strings.Contains(key, "/") {
			return nil, 0, fmt.Errorf("--stock %q: key must be activity/sku", v)
		}
		m[key] = n
	}
	return m, def, nil
}
