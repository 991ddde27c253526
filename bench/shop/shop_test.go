package shop

import (
	"context"
	"database/sql"
	"encoding/json"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/valyala/fasthttp"

	"github.com/seckill-proxy/seckill-proxy/internal/signing"
)

// startShop serves a shop on a free loopback port and returns its base URL.
func startShop(t *testing.T, cfg Config) (*Shop, string) {
	t.Helper()
	if cfg.DB == "" {
		cfg.DB = "sqlite:" + filepath.Join(t.TempDir(), "shop.db")
	}
	s, err := New(context.Background(), cfg, nil)
	if err != nil {
		t.Fatal(err)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	go s.Serve(ln) //nolint:errcheck // ends at Close
	t.Cleanup(func() { s.Close() })
	return s, "http://" + ln.Addr().String()
}

var client = &fasthttp.Client{MaxConnsPerHost: 512}

func post(t *testing.T, url string, hdr map[string]string) (int, []byte) {
	t.Helper()
	req, resp := fasthttp.AcquireRequest(), fasthttp.AcquireResponse()
	defer fasthttp.ReleaseRequest(req)
	defer fasthttp.ReleaseResponse(resp)
	req.SetRequestURI(url)
	req.Header.SetMethod("POST")
	for k, v := range hdr {
		req.Header.Set(k, v)
	}
	req.SetBodyString("{}")
	if err := client.DoTimeout(req, resp, 20*time.Second); err != nil {
		t.Errorf("post %s: %v", url, err)
		return 0, nil
	}
	return resp.StatusCode(), append([]byte(nil), resp.Body()...)
}

func tokened(token, user, sku string) map[string]string {
	return map[string]string{
		"X-Seckill-Token": token, "X-Seckill-Activity": "act_1", "X-Seckill-Sku": sku,
		"X-Seckill-Qty": "1", "X-Seckill-User": user,
	}
}

func TestTokenedOrdersConcurrent(t *testing.T) {
	s, base := startShop(t, Config{})
	var wg sync.WaitGroup
	for i := range 200 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			// Every order is sent twice with the same token (a proxy retry).
			for range 2 {
				code, body := post(t, base+"/api/seckill/act_1/30021/buy", tokened(fmt.Sprintf("tok%d", i), fmt.Sprintf("u%d", i), "30021"))
				if code != 200 {
					t.Errorf("order %d: %d %s", i, code, body)
				}
			}
		}()
	}
	wg.Wait()
	sum, err := s.Summary(context.Background(), "act_1")
	if err != nil {
		t.Fatal(err)
	}
	if sum.Orders != 200 || sum.Units != 200 || sum.Users != 200 || sum.MaxUnitsPerUser != 1 || sum.OrdersWithoutToken != 0 {
		t.Fatalf("summary %+v", sum)
	}
}

func TestTokenedIdempotentAndDuplicate(t *testing.T) {
	_, base := startShop(t, Config{})
	url := base + "/api/seckill/act_1/30021/buy"
	code, b1 := post(t, url, tokened("t1", "alice", "30021"))
	if code != 200 {
		t.Fatalf("first order: %d %s", code, b1)
	}
	code, b2 := post(t, url, tokened("t1", "alice", "30021"))
	if code != 200 || string(b1) != string(b2) {
		t.Fatalf("replay: %d %s, want 200 %s", code, b2, b1)
	}
	if code, b := post(t, url, tokened("t2", "alice", "30021")); code != 409 {
		t.Fatalf("same user other token: %d %s, want 409", code, b)
	}
	if code, _ := post(t, url, tokened("t3", "alice", "99999")); code != 200 {
		t.Fatalf("same user other sku: %d, want 200", code)
	}
	var ob struct {
		OrderID string `json:"order_id"`
	}
	if err := json.Unmarshal(b1, &ob); err != nil || ob.OrderID == "" {
		t.Fatalf("order body %s: %v", b1, err)
	}
	if code, b := get(t, base+"/internal/orders?token=t1"); code != 200 || !json.Valid(b) {
		t.Fatalf("verify existing: %d %s", code, b)
	}
	if code, _ := get(t, base+"/internal/orders?token=nope"); code != 404 {
		t.Fatalf("verify missing: %d, want 404", code)
	}
	if code, b := get(t, base+"/hello"); code != 200 || string(b) != "ok" {
		t.Fatalf("ordinary page: %d %s", code, b)
	}
	if code, _ := post(t, url, map[string]string{"X-User-Id": "bob"}); code != 403 {
		t.Fatalf("untokened buy without legacy: %d, want 403", code)
	}
}

func get(t *testing.T, url string) (int, []byte) {
	t.Helper()
	code, body, err := client.GetTimeout(nil, url, 10*time.Second)
	if err != nil {
		t.Fatalf("get %s: %v", url, err)
	}
	return code, body
}

// TestSignature: with SigningV1Only the shop verifies v1 as before key ids
// (the v1-only form an older proxy sends).
func TestSignature(t *testing.T) {
	secret := "s3cret"
	s, base := startShop(t, Config{SigningSecret: secret, SigningV1Only: true})
	url := base + "/api/seckill/act_1/30021/buy"
	h := tokened("t1", "alice", "30021")
	if code, _ := post(t, url, h); code != 401 {
		t.Fatalf("unsigned: %d, want 401", code)
	}
	h["X-Seckill-Signature"] = Sign([]byte("wrong"), time.Now().UnixMilli(), "t1", "act_1", "30021", "1", "alice")
	if code, _ := post(t, url, h); code != 401 {
		t.Fatalf("wrong key: %d, want 401", code)
	}
	h["X-Seckill-Signature"] = Sign([]byte(secret), time.Now().Add(-time.Hour).UnixMilli(), "t1", "act_1", "30021", "1", "alice")
	if code, _ := post(t, url, h); code != 401 {
		t.Fatalf("stale: %d, want 401", code)
	}
	h["X-Seckill-Signature"] = Sign([]byte(secret), time.Now().UnixMilli(), "t1", "act_1", "30021", "1", "alice")
	if code, b := post(t, url, h); code != 200 {
		t.Fatalf("signed: %d %s", code, b)
	}
	sum, err := s.Summary(context.Background(), "act_1")
	if err != nil {
		t.Fatal(err)
	}
	if sum.BadSignatures != 3 || sum.Orders != 1 {
		t.Fatalf("summary %+v", sum)
	}
}

// testLegacyNoOversell fires 3 buys from each of 300 users at 50 units.
func testLegacyNoOversell(t *testing.T, cfg Config) {
	cfg.Legacy = true
	cfg.Stock = map[string]int64{"act_1/30021": 50}
	cfg.Reset = true
	s, base := startShop(t, cfg)
	var wg sync.WaitGroup
	var mu sync.Mutex
	codes := map[int]int{}
	sem := make(chan struct{}, 64)
	for i := range 300 {
		for range 3 {
			wg.Add(1)
			sem <- struct{}{}
			go func() {
				defer wg.Done()
				defer func() { <-sem }()
				code, _ := post(t, base+"/api/seckill/act_1/30021/buy", map[string]string{"X-User-Id": "u" + strconv.Itoa(i)})
				mu.Lock()
				codes[code]++
				mu.Unlock()
			}()
		}
	}
	wg.Wait()
	sum, err := s.Summary(context.Background(), "act_1")
	if err != nil {
		t.Fatal(err)
	}
	if codes[200] != 50 || codes[500] != 0 {
		t.Fatalf("answers %v, want exactly 50 × 200", codes)
	}
	if sum.Orders != 50 || sum.MaxUnitsPerUser != 1 || len(sum.SKUs) != 1 || sum.SKUs[0].StockRemaining != 0 || sum.SKUs[0].StockInitial != 50 {
		t.Fatalf("summary %+v", sum)
	}
	if sum.OrdersWithoutToken != 50 || !sum.Legacy {
		t.Fatalf("legacy orders carry no token: %+v", sum)
	}
}

func TestLegacySQLiteNoOversell(t *testing.T) { testLegacyNoOversell(t, Config{}) }

func TestLegacyPostgresNoOversell(t *testing.T) {
	dsn := os.Getenv("SECKILL_BENCH_PG")
	if dsn == "" {
		dsn = "postgres://postgres@127.0.0.1:5432/test?sslmode=disable"
	}
	c, err := net.DialTimeout("tcp", "127.0.0.1:5432", 300*time.Millisecond)
	if err != nil {
		t.Skip("PostgreSQL not reachable on 127.0.0.1:5432")
	}
	c.Close()
	// Own schema: Reset empties the tables, and the database is shared.
	pg, err := sql.Open("pgx", dsn)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := pg.Exec(`CREATE SCHEMA IF NOT EXISTS seckill_bench_test`); err != nil {
		pg.Close()
		t.Skipf("cannot create a schema in %s: %v", dsn, err)
	}
	pg.Close()
	testLegacyNoOversell(t, Config{DB: dsn + "&search_path=seckill_bench_test"})
}

func TestParseStock(t *testing.T) {
	m, def, err := ParseStock([]string{"a/1=10", "5"})
	if err != nil || m["a/1"] != 10 || def != 5 {
		t.Fatalf("got %v %d %v", m, def, err)
	}
	for _, bad := range []string{"x", "a=1", "a/1=-1"} {
		if _, _, err := ParseStock([]string{bad}); err == nil {
			t.Errorf("%q accepted", bad)
		}
	}
}

// TestSignatureV2Keyring: by default the shop verifies v2 over the request
// line it received, with the key the header names: a signature made for
// another path or method, a v1-only one, or one by a key the shop was not
// given is refused; after a rotation the shop, given both keys, verifies.
func TestSignatureV2Keyring(t *testing.T) {
	oldK := signing.Key{ID: "2026-11", Secret: []byte("old")}
	newK := signing.Key{ID: "2026-12", Secret: []byte("new")}
	s, base := startShop(t, Config{SigningKeys: signing.Keyring{oldK, newK}})
	const path = "/api/seckill/act_1/30021/buy?ref=1"
	sign := func(kr signing.Keyring, tok, method, target string) map[string]string {
		h := tokened(tok, "u-"+tok, "30021")
		h["X-Seckill-Signature"] = kr.Sign(time.Now().UnixMilli(), signing.Request{Token: tok, Activity: "act_1", SKU: "30021",
			Qty: "1", User: "u-" + tok, Method: method, Target: target})
		return h
	}
	tests := []struct {
		name string
		hdr  map[string]string
		want int
	}{
		{"other path", sign(signing.Keyring{oldK}, "t1", "POST", "/api/seckill/act_1/30022/buy?ref=1"), 401},
		{"other method", sign(signing.Keyring{oldK}, "t2", "PUT", path), 401},
		{"v1 only", func() map[string]string {
			h := tokened("t3", "u-t3", "30021")
			h["X-Seckill-Signature"] = Sign(oldK.Secret, time.Now().UnixMilli(), "t3", "act_1", "30021", "1", "u-t3")
			return h
		}(), 401},
		{"unknown key", sign(signing.Keyring{{ID: "2027-01", Secret: []byte("new")}}, "t4", "POST", path), 401},
		{"old key signs", sign(signing.Keyring{oldK, newK}, "t5", "POST", path), 200},
		{"new key moved first", sign(signing.Keyring{newK, oldK}, "t6", "POST", path), 200},
	}
	for _, tt := range tests {
		if code, b := post(t, base+path, tt.hdr); code != tt.want {
			t.Errorf("%s: %d %s, want %d", tt.name, code, b, tt.want)
		}
	}
	sum, err := s.Summary(context.Background(), "act_1")
	if err != nil {
		t.Fatal(err)
	}
	if sum.BadSignatures != 4 || sum.Orders != 2 {
		t.Fatalf("summary %+v", sum)
	}
}
