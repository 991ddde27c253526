// Package verify checks the consistency promises of SPEC §6 after a run,
// from the proxy's side (`seckill-proxy status --json`) and the shop's side
// (GET /internal/summary): the stock invariant, orders == units sold, no
// oversell, no user above the limit, no order that skipped the proxy.
package verify

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/url"
	"os/exec"
	"strings"
	"time"

	"github.com/valyala/fasthttp"

	"github.com/seckill-proxy/seckill-proxy/bench/shop"
)

// SKUStatus is one SKU of `seckill-proxy status --json` (SPEC §2).
type SKUStatus struct {
	ID        string `json:"id"`
	Initial   int64  `json:"initial"`
	Remaining int64  `json:"remaining"`
	Pending   int64  `json:"pending"`
	Confirmed int64  `json:"confirmed"`
	Released  int64  `json:"released"`
	OK        bool   `json:"ok"`
}

// ActivityStatus is one activity of the status output.
type ActivityStatus struct {
	ID   string      `json:"id"`
	SKUs []SKUStatus `json:"skus"`
}

// Status is the whole `status --json` document.
type Status struct {
	Activities []ActivityStatus `json:"activities"`
}

// ErrNoStatus means the command output held no status document.
var ErrNoStatus = errors.New(`no {"activities":[...]} document in status output`)

// ParseStatus finds the status document in out, which may be surrounded by
// log lines (themselves JSON objects) and may be pretty-printed: every '{'
// is tried as the start of a document that has an "activities" key.
func ParseStatus(out []byte) (*Status, error) {
	for i := 0; i < len(out); i++ {
		if out[i] != '{' {
			continue
		}
		var doc struct {
			Activities *[]ActivityStatus `json:"activities"`
		}
		if err := json.NewDecoder(bytes.NewReader(out[i:])).Decode(&doc); err != nil || doc.Activities == nil {
			continue
		}
		return &Status{Activities: *doc.Activities}, nil
	}
	return nil, ErrNoStatus
}

// RunStatus runs `BIN status -c CFG --activity A --json` and parses it. A
// non-zero exit is expected when the invariant is broken, so the output is
// parsed whatever the exit code; the error is returned only when nothing
// parses.
func RunStatus(ctx context.Context, bin, cfg, activity string) (*Status, error) {
	ctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	args := []string{"status", "-c", cfg, "--json"}
	if activity != "" {
		args = append(args, "--activity", activity)
	}
	out, runErr := exec.CommandContext(ctx, bin, args...).CombinedOutput()
	st, err := ParseStatus(out)
	if err != nil {
		return nil, fmt.Errorf("%s %s: %w (exit: %v; output: %.400s)", bin, strings.Join(args, " "), err, runErr, out)
	}
	return st, nil
}

// FetchSummary asks the shop for its figures of one activity.
func FetchSummary(ctx context.Context, shopURL, activity string) (*shop.Summary, error) {
	u := strings.TrimRight(shopURL, "/") + "/internal/summary?activity=" + url.QueryEscape(activity)
	dl, ok := ctx.Deadline()
	if !ok {
		dl = time.Now().Add(30 * time.Second)
	}
	req, resp := fasthttp.AcquireRequest(), fasthttp.AcquireResponse()
	defer fasthttp.ReleaseRequest(req)
	defer fasthttp.ReleaseResponse(resp)
	req.SetRequestURI(u)
	if err := fasthttp.DoDeadline(req, resp, dl); err != nil {
		return nil, fmt.Errorf("shop summary %s: %w", u, err)
	}
	if resp.StatusCode() != fasthttp.StatusOK {
		return nil, fmt.Errorf("shop summary %s: HTTP %d: %.200s", u, resp.StatusCode(), resp.Body())
	}
	var s shop.Summary
	if err := json.Unmarshal(resp.Body(), &s); err != nil {
		return nil, fmt.Errorf("shop summary %s: %w", u, err)
	}
	return &s, nil
}

// ResetShop empties one activity's orders and restores its stock rows, so
// several targets can be run against the same shop one after another.
func ResetShop(ctx context.Context, shopURL, activity string) error {
	u := strings.TrimRight(shopURL, "/") + "/internal/reset?activity=" + url.QueryEscape(activity)
	req, resp := fasthttp.AcquireRequest(), fasthttp.AcquireResponse()
	defer fasthttp.ReleaseRequest(req)
	defer fasthttp.ReleaseResponse(resp)
	req.SetRequestURI(u)
	req.Header.SetMethod(fasthttp.MethodPost)
	if err := fasthttp.DoTimeout(req, resp, 30*time.Second); err != nil {
		return fmt.Errorf("shop reset %s: %w", u, err)
	}
	if resp.StatusCode() != fasthttp.StatusOK {
		return fmt.Errorf("shop reset %s: HTTP %d", u, resp.StatusCode())
	}
	return nil
}

// Check is one verified promise.
type Check struct {
	Name   string `json:"name"`
	OK     bool   `json:"ok"`
	Detail string `json:"detail"`
}

// Input is what verification looks at; nil sources are skipped.
type Input struct {
	Activity     string
	Status       *Status       // from the proxy, nil if not asked
	Shop         *shop.Summary // from the shop, nil if not asked
	PerUserLimit int64
	// LegacyTarget is true when the bench hit the shop directly, so its
	// orders carry no token by design.
	LegacyTarget bool
}

// Verify runs every check its inputs allow.
func Verify(in Input) []Check {
	var checks []Check
	add := func(name string, ok bool, format string, args ...any) {
		checks = append(checks, Check{Name: name, OK: ok, Detail: fmt.Sprintf(format, args...)})
	}
	var skus []SKUStatus
	if in.Status != nil {
		found := false
		for _, a := range in.Status.Activities {
			if in.Activity != "" && a.ID != in.Activity {
				continue
			}
			found = true
			skus = append(skus, a.SKUs...)
		}
		add("proxy status found", found && len(skus) > 0, "activity %q: %d sku(s)", in.Activity, len(skus))
		for _, s := range skus {
			sum := s.Remaining + s.Pending + s.Confirmed
			add("stock invariant "+s.ID, sum == s.Initial && s.OK && s.Remaining >= 0 && s.Remaining <= s.Initial,
				"initial %d = remaining %d + pending %d + confirmed %d (= %d), status ok=%v",
				s.Initial, s.Remaining, s.Pending, s.Confirmed, sum, s.OK)
			add("no oversell (proxy) "+s.ID, s.Confirmed <= s.Initial, "confirmed %d ≤ initial %d", s.Confirmed, s.Initial)
		}
	}
	if in.Shop != nil {
		sh := in.Shop
		shopSKU := map[string]shop.SKUSummary{}
		for _, s := range sh.SKUs {
			shopSKU[s.SKU] = s
		}
		for _, s := range skus {
			units := shopSKU[s.ID].Units
			if s.Pending == 0 {
				add("shop orders == units sold "+s.ID, units == s.Confirmed,
					"shop units %d, proxy confirmed %d", units, s.Confirmed)
			} else {
				// Unsettled reservations may or may not have an order yet;
				// the reconciler decides. Only the bounds are certain.
				add("shop orders == units sold "+s.ID, units >= s.Confirmed && units <= s.Confirmed+s.Pending,
					"shop units %d, proxy confirmed %d + %d pending (unsettled: reconciler pending)", units, s.Confirmed, s.Pending)
			}
			add("no oversell (shop) "+s.ID, units <= s.Initial, "shop units %d ≤ initial %d", units, s.Initial)
		}
		for _, s := range sh.SKUs {
			if !s.HasStock {
				continue
			}
			add("shop stock row "+s.SKU, s.StockRemaining >= 0 && s.Units+s.StockRemaining == s.StockInitial,
				"shop units %d + stock remaining %d = initial %d", s.Units, s.StockRemaining, s.StockInitial)
		}
		if in.PerUserLimit > 0 {
			add("per-user limit", sh.MaxUnitsPerUser <= in.PerUserLimit,
				"max units per user %d ≤ limit %d (%d users, %d orders)", sh.MaxUnitsPerUser, in.PerUserLimit, sh.Users, sh.Orders)
		}
		if !in.LegacyTarget {
			add("no order without token", sh.OrdersWithoutToken == 0, "%d order(s) without X-Seckill-Token", sh.OrdersWithoutToken)
		}
		add("signatures", sh.BadSignatures == 0, "%d request(s) with a bad X-Seckill-Signature", sh.BadSignatures)
	}
	return checks
}

// Failed returns the checks that did not hold.
func Failed(checks []Check) []Check {
	var f []Check
	for _, c := range checks {
		if !c.OK {
			f = append(f, c)
		}
	}
	return f
}
