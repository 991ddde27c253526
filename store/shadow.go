package store

import (
	"context"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/redis/rueidis"

	"github.com/seckill-proxy/seckill-proxy/config"
)

// Shadow mode (issue 13 §2): every buy of a shadow activity is forwarded
// to the shop unchanged, while the funnel decides it against the shadow
// copy's stock (config.ShadowID). Each decision is recorded with the
// shop's answer, fleet-wide, under the copy's hash tag:
//
//	<prefix>:{<act>~shadow}:shadow:counts  hash of counters:
//	    d:<code>      decisions by code
//	    s:<status>    the shop's answers by status (s:0 = no answer)
//	    r:<code>      buys the shop answered 2xx that the proxy would have refused
//	    ok:<sku>      units the shop answered 2xx, by SKU
//	    l:<µs>        decision time, µs rounded down to 2 significant digits
//	<prefix>:{<act>~shadow}:shadow:users   hash user -> units the shop answered 2xx
//	<prefix>:{<act>~shadow}:shadow:log     stream of the last ShadowLogMax decisions
//	    (approximately: MAXLEN ~) with code, status, order id, µs, user, sku, qty
//
// Counters are exact whatever the volume; only the log is bounded. Every
// key expires with the activity's other keys, and preheating the copy
// anew starts a new report.

// ShadowLogMax bounds each shadow activity's decision log (XADD MAXLEN ~).
const ShadowLogMax = 100000

// ShadowRecord is one shadow decision and what the shop answered.
type ShadowRecord struct {
	Activity string // the shadow copy's id (config.ShadowID)
	SKU      string // "" when the request named none the activity sells
	User     string
	Qty      int64
	Code     string // the SPEC code the proxy would have answered
	Admitted bool   // the proxy would have forwarded it
	Status   int    // the shop's status; 0: no answer (timeout, connection failed)
	OrderID  string
	// DecisionUs is the funnel's decision time in µs: what the proxy
	// would have added in front of the shop.
	DecisionUs int64
	ExpireAt   int64 // ms: the activity's keys' expiry
}

func shadowKeys(prefix, act string) (counts, users, log string) {
	base := prefix + ":{" + act + "}:shadow:"
	return base + "counts", base + "users", base + "log"
}

// LatencyBucket is the report's bucket of a decision time: us rounded
// down to 2 significant digits.
func LatencyBucket(us int64) int64 {
	if us < 100 {
		return max(us, 0)
	}
	p := int64(1)
	for us/p >= 100 {
		p *= 10
	}
	return us / p * p
}

func shadowOK(status int) bool { return status >= 200 && status <= 299 }

// RecordShadow records a batch of shadow decisions: counters folded per
// field, one log entry each, in one round trip per node.
func (s *Store) RecordShadow(ctx context.Context, recs []ShadowRecord) error {
	c, err := s.Client()
	if err != nil {
		return err
	}
	type acc struct {
		counts map[string]int64
		users  map[string]int64
		exp    int64
	}
	by := map[string]*acc{}
	var cmds rueidis.Commands
	for i := range recs {
		r := &recs[i]
		a := by[r.Activity]
		if a == nil {
			a = &acc{counts: map[string]int64{}, users: map[string]int64{}}
			by[r.Activity] = a
		}
		a.exp = max(a.exp, r.ExpireAt)
		a.counts["d:"+r.Code]++
		a.counts["s:"+strconv.Itoa(r.Status)]++
		a.counts["l:"+itoa(LatencyBucket(r.DecisionUs))]++
		if shadowOK(r.Status) {
			a.counts["ok:"+r.SKU] += r.Qty
			if r.User != "" {
				a.users[r.User] += r.Qty
			}
			if !r.Admitted {
				a.counts["r:"+r.Code]++
			}
		}
		_, _, logKey := shadowKeys(s.prefix, r.Activity)
		cmds = append(cmds, c.B().Xadd().Key(logKey).Maxlen().Almost().Threshold(strconv.Itoa(ShadowLogMax)).Id("*").
			FieldValue().FieldValue("code", r.Code).FieldValue("status", strconv.Itoa(r.Status)).
			FieldValue("order_id", r.OrderID).FieldValue("us", itoa(r.DecisionUs)).
			FieldValue("user", r.User).FieldValue("sku", r.SKU).FieldValue("qty", itoa(r.Qty)).Build())
	}
	for act, a := range by {
		counts, users, logKey := shadowKeys(s.prefix, act)
		for f, n := range a.counts {
			cmds = append(cmds, c.B().Hincrby().Key(counts).Field(f).Increment(n).Build())
		}
		for u, n := range a.users {
			cmds = append(cmds, c.B().Hincrby().Key(users).Field(u).Increment(n).Build())
		}
		if a.exp > 0 {
			for _, k := range []string{counts, users, logKey} {
				cmds = append(cmds, c.B().Pexpireat().Key(k).MillisecondsTimestamp(a.exp).Build())
			}
		}
	}
	cctx, cancel := s.ctx(ctx)
	defer cancel()
	for _, r := range c.DoMulti(cctx, cmds...) {
		if err := r.Error(); err != nil {
			return wrap(err)
		}
	}
	return nil
}

// resetShadow deletes a shadow copy's report (its stock was preheated anew).
func (s *Store) resetShadow(ctx context.Context, c rueidis.Client, act string) error {
	counts, users, logKey := shadowKeys(s.prefix, act)
	for _, k := range []string{counts, users, logKey} {
		// One key per DEL: on a cluster they share a slot anyway.
		if err := c.Do(ctx, c.B().Del().Key(k).Build()).Error(); err != nil {
			return wrap(err)
		}
	}
	return nil
}

// ShadowReport is what shadow-report prints for one shadow activity.
type ShadowReport struct {
	Activity string `json:"activity"`
	// Decisions counts what the proxy would have answered, by SPEC code.
	Decisions map[string]int64 `json:"decisions"`
	Total     int64            `json:"total"`
	// ShopStatus counts the shop's answers by status ("0": no answer).
	ShopStatus map[string]int64 `json:"shop_status"`
	// RefusedButAccepted counts buys the proxy would have refused that
	// the shop answered 2xx, by the code the proxy would have answered.
	RefusedButAccepted      map[string]int64 `json:"refused_but_shop_accepted"`
	RefusedButAcceptedTotal int64            `json:"refused_but_shop_accepted_total"`
	// SKUs: units the shop answered 2xx against the configured stock.
	SKUs []ShadowSKU `json:"skus"`
	// BeyondStock is the shop's 2xx units beyond the configured stock,
	// summed over SKUs.
	BeyondStock int64 `json:"orders_beyond_stock"`
	// ShopBuyers are the users the shop answered 2xx at least once;
	// OverLimit those with more units than per_user_limit (OverLimitUsers:
	// up to 20 of them, for a look at the shop's logs).
	ShopBuyers     int64    `json:"shop_buyers"`
	PerUserLimit   int64    `json:"per_user_limit"`
	OverLimit      int64    `json:"users_over_limit"`
	OverLimitUsers []string `json:"users_over_limit_sample,omitempty"`
	// Decision time the proxy would have added: quantiles of µs rounded
	// down to 2 significant digits.
	LatencyP50Us int64 `json:"latency_p50_us"`
	LatencyP99Us int64 `json:"latency_p99_us"`
	LatencyMaxUs int64 `json:"latency_max_us"`
	// Logged is the decision log's length (at most ~ShadowLogMax).
	Logged int64 `json:"logged"`
}

// ShadowSKU is one SKU's line of a ShadowReport.
type ShadowSKU struct {
	ID          string `json:"sku"`
	Stock       int64  `json:"stock"`
	ShopUnits   int64  `json:"shop_units"`
	BeyondStock int64  `json:"beyond_stock"`
}

// ShadowReport reads the report of shadow activity a (the activity as
// configured, mode: shadow).
func (s *Store) ShadowReport(ctx context.Context, a *config.Activity) (ShadowReport, error) {
	rep := ShadowReport{Activity: a.ID, Decisions: map[string]int64{}, ShopStatus: map[string]int64{},
		RefusedButAccepted: map[string]int64{}, PerUserLimit: a.PerUserLimit}
	c, err := s.Client()
	if err != nil {
		return rep, err
	}
	counts, users, logKey := shadowKeys(s.prefix, config.ShadowID(a.ID))
	cctx, cancel := context.WithTimeout(ctx, 10*s.timeout+5*time.Second)
	defer cancel()
	m, err := c.Do(cctx, c.B().Hgetall().Key(counts).Build()).AsIntMap()
	if err != nil {
		return rep, wrap(err)
	}
	ok := map[string]int64{}
	type bucket struct{ us, n int64 }
	var lat []bucket
	for f, n := range m {
		kind, v, _ := strings.Cut(f, ":")
		switch kind {
		case "d":
			rep.Decisions[v] += n
			rep.Total += n
		case "s":
			rep.ShopStatus[v] += n
		case "r":
			rep.RefusedButAccepted[v] += n
			rep.RefusedButAcceptedTotal += n
		case "ok":
			ok[v] += n
		case "l":
			us, _ := strconv.ParseInt(v, 10, 64)
			lat = append(lat, bucket{us, n})
		}
	}
	for _, k := range a.SKUs {
		sk := ShadowSKU{ID: k.ID, Stock: k.Stock, ShopUnits: ok[k.ID]}
		sk.BeyondStock = max(sk.ShopUnits-k.Stock, 0)
		rep.BeyondStock += sk.BeyondStock
		rep.SKUs = append(rep.SKUs, sk)
	}
	slices.SortFunc(lat, func(x, y bucket) int { return int(x.us - y.us) })
	var seen int64
	var total int64
	for _, b := range lat {
		total += b.n
	}
	for _, b := range lat {
		seen += b.n
		if rep.LatencyP50Us == 0 && seen*2 >= total {
			rep.LatencyP50Us = b.us
		}
		if rep.LatencyP99Us == 0 && seen*100 >= total*99 {
			rep.LatencyP99Us = b.us
		}
		rep.LatencyMaxUs = b.us
	}
	// Users the shop sold to: a scan, so a hash of millions never blocks Redis.
	var cursor uint64
	for {
		e, err := c.Do(cctx, c.B().Hscan().Key(users).Cursor(cursor).Count(1000).Build()).AsScanEntry()
		if err != nil {
			return rep, wrap(err)
		}
		for i := 0; i+1 < len(e.Elements); i += 2 {
			rep.ShopBuyers++
			if n, _ := strconv.ParseInt(e.Elements[i+1], 10, 64); n > a.PerUserLimit {
				rep.OverLimit++
				if len(rep.OverLimitUsers) < 20 {
					rep.OverLimitUsers = append(rep.OverLimitUsers, e.Elements[i])
				}
			}
		}
		if cursor = e.Cursor; cursor == 0 {
			break
		}
	}
	slices.Sort(rep.OverLimitUsers)
	if rep.Logged, err = c.Do(cctx, c.B().Xlen().Key(logKey).Build()).AsInt64(); err != nil {
		return rep, wrap(err)
	}
	return rep, nil
}

// ShadowShopUnits is what a shadow run of activity id (the activity's own
// id: its copy's keys are read) recorded the shop selling: 2xx units by
// SKU, none when no shadow run was recorded. One HGETALL of the counters
// hash (a few fields per code, status, SKU and latency bucket).
func (s *Store) ShadowShopUnits(ctx context.Context, id string) (map[string]int64, error) {
	c, err := s.Client()
	if err != nil {
		return nil, err
	}
	counts, _, _ := shadowKeys(s.prefix, config.ShadowID(id))
	cctx, cancel := s.ctx(ctx)
	defer cancel()
	m, err := c.Do(cctx, c.B().Hgetall().Key(counts).Build()).AsIntMap()
	if err != nil {
		return nil, wrap(err)
	}
	out := map[string]int64{}
	for f, n := range m {
		if sku, ok := strings.CutPrefix(f, "ok:"); ok && n > 0 {
			out[sku] += n
		}
	}
	return out, nil
}
