// Package reservation settles reservations after admission: the
// reconciler that finds reservations pending too long, asks the shop
// whether their order exists, and confirms or releases them; and finishes
// stock moves between shards that a crash interrupted.
package reservation

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strings"
	"time"

	"go.uber.org/zap"

	"github.com/seckill-proxy/seckill-proxy/config"
	"github.com/seckill-proxy/seckill-proxy/lua"
	"github.com/seckill-proxy/seckill-proxy/metrics"
	"github.com/seckill-proxy/seckill-proxy/store"
)

// Verdict is what the shop said about one reservation's order.
type Verdict string

// Verdicts.
const (
	OrderExists Verdict = "exists"  // verify answered 200
	OrderAbsent Verdict = "absent"  // verify answered 404
	Unverified  Verdict = "unknown" // no verify configured, or any other answer
)

// Finding is one stale pending reservation and what was (or would be) done.
type Finding struct {
	Token   string  `json:"token"`
	User    string  `json:"user"`
	Qty     int64   `json:"qty"`
	AgeMs   int64   `json:"age_ms"`
	Verdict Verdict `json:"verdict"`
	OrderID string  `json:"order_id,omitempty"`
	Action  string  `json:"action"` // confirmed, released, would-confirm, would-release, left
	Detail  string  `json:"detail,omitempty"`
}

// ActivityReport is the reconciler's view of one activity.
type ActivityReport struct {
	ID           string            `json:"id"`
	SKUs         []store.SKUStatus `json:"skus"`
	Stale        []Finding         `json:"stale_pending"`
	MovesSettled int               `json:"moves_settled"`
	Alerts       []string          `json:"alerts,omitempty"`
}

// Report is one reconciler pass.
type Report struct {
	Repair     bool             `json:"repair"`
	Activities []ActivityReport `json:"activities"`
}

// Alerting reports whether anything needs a person.
func (r Report) Alerting() bool {
	for _, a := range r.Activities {
		if len(a.Alerts) > 0 {
			return true
		}
	}
	return false
}

// Reconciler compares Redis with the shop and, with repair, settles what
// the shop can prove. It never guesses: without verify it only reports.
type Reconciler struct {
	st   *store.Store
	http *http.Client
	m    *metrics.Metrics
	log  *zap.Logger
}

// NewReconciler builds a Reconciler.
func NewReconciler(st *store.Store, m *metrics.Metrics, log *zap.Logger) *Reconciler {
	return &Reconciler{st: st, http: &http.Client{Timeout: 5 * time.Second}, m: m, log: log}
}

// moveSettleAge is how old an unsettled stock move must be before the
// reconciler deposits it: far beyond any admission call's deadline.
const moveSettleAge = 30 * time.Second

// maxStalePerShard bounds one pass's work per shard.
const maxStalePerShard = 1000

// Run does one pass over acts.
func (r *Reconciler) Run(ctx context.Context, acts []*config.Activity, repair bool, now time.Time) (Report, error) {
	rep := Report{Repair: repair}
	for _, a := range acts {
		ar, err := r.activity(ctx, a, repair, now)
		if err != nil {
			return rep, fmt.Errorf("reconcile %s: %w", a.ID, err)
		}
		rep.Activities = append(rep.Activities, ar)
	}
	return rep, nil
}

func (r *Reconciler) activity(ctx context.Context, a *config.Activity, repair bool, now time.Time) (ActivityReport, error) {
	ar := ActivityReport{ID: a.ID}
	f, err := r.st.Flags(ctx, a.ID)
	if err != nil {
		return ar, err
	}
	if !f.Ready {
		st, err := r.st.Status(ctx, a)
		ar.SKUs = st.SKUs
		return ar, err
	}
	if repair {
		n, err := r.st.SettleMoves(ctx, withShards(a, f.Shards), moveSettleAge, now)
		if err != nil {
			return ar, err
		}
		ar.MovesSettled = n
	}
	cutoff := now.Add(-a.PendingTimeout).UnixMilli()
	for _, sku := range a.SKUs {
		stale, err := r.st.StalePending(ctx, a.ID, sku.ID, f.Shards, cutoff, maxStalePerShard)
		if err != nil {
			return ar, err
		}
		for _, res := range stale {
			ar.Stale = append(ar.Stale, r.settle(ctx, a, f.Shards, res, repair, now))
		}
	}
	st, err := r.st.Status(ctx, a)
	if err != nil {
		return ar, err
	}
	ar.SKUs = st.SKUs
	for _, k := range st.SKUs {
		if k.Preheated && !k.OK {
			ar.Alerts = append(ar.Alerts, fmt.Sprintf("sku %s: %s", k.ID, k.Problem))
			r.m.ReconcileAlerts.WithLabelValues(a.ID, "invariant").Inc()
		}
	}
	return ar, nil
}

func withShards(a *config.Activity, shards int) *config.Activity {
	if a.Shards == shards {
		return a
	}
	c := *a
	c.Shards = shards
	return &c
}

// settle asks the shop about one stale reservation and, with repair, acts
// on a definite answer.
func (r *Reconciler) settle(ctx context.Context, a *config.Activity, shards int, res store.Reservation, repair bool, now time.Time) Finding {
	f := Finding{Token: res.Token.String(), User: res.User, Qty: res.Qty, AgeMs: now.UnixMilli() - res.CreatedMs, Action: "left"}
	if a.Verify.URL == "" {
		f.Verdict, f.Detail = Unverified, "no verify.url configured: reported, never guessed"
		return f
	}
	f.Verdict, f.OrderID, f.Detail = r.verify(ctx, a.Verify.URL, f.Token)
	if !repair {
		switch f.Verdict {
		case OrderExists:
			f.Action = "would-confirm"
		case OrderAbsent:
			f.Action = "would-release"
		}
		return f
	}
	switch f.Verdict {
	case OrderExists:
		code, err := r.st.Confirm(ctx, res.Token, shards, f.OrderID)
		f.Action, f.Detail = actionOf("confirmed", code, err)
		r.m.Settlements.WithLabelValues("reconcile_confirm", code.String()).Inc()
	case OrderAbsent:
		code, err := r.st.Release(ctx, res.Token, shards, "verify_absent", now.UnixMilli(), true)
		f.Action, f.Detail = actionOf("released", code, err)
		r.m.Settlements.WithLabelValues("reconcile_release", code.String()).Inc()
	}
	return f
}

func actionOf(done string, code lua.Code, err error) (string, string) {
	if err != nil {
		return "left", err.Error()
	}
	switch code {
	case lua.OK:
		return done, ""
	case lua.Same, lua.Confirmed, lua.Released:
		return "left", "already " + strings.ToLower(code.String())
	}
	return "left", code.String()
}

// verify asks the shop's verify endpoint: 200 = the order exists, 404 = it
// does not, anything else (or no answer) = unknown.
func (r *Reconciler) verify(ctx context.Context, tmpl, token string) (Verdict, string, string) {
	u := strings.ReplaceAll(tmpl, "{token}", url.QueryEscape(token))
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, u, nil)
	if err != nil {
		return Unverified, "", err.Error()
	}
	resp, err := r.http.Do(req)
	if err != nil {
		return Unverified, "", err.Error()
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(io.LimitReader(resp.Body, 64<<10))
	switch resp.StatusCode {
	case http.StatusOK:
		var v struct {
			OrderID json.RawMessage `json:"order_id"`
		}
		_ = json.Unmarshal(body, &v)
		return OrderExists, strings.Trim(string(v.OrderID), `"`), ""
	case http.StatusNotFound:
		return OrderAbsent, "", ""
	}
	return Unverified, "", fmt.Sprintf("verify answered %d", resp.StatusCode)
}
