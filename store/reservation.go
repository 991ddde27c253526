package store

import (
	"context"
	"strconv"
	"strings"
	"time"

	"github.com/redis/rueidis"

	"github.com/seckill-proxy/seckill-proxy/lua"
)

// Reservation is one reservation record as Redis holds it.
type Reservation struct {
	Token     Token
	State     string // queued | pending | confirmed | released
	User      string
	Qty       int64
	CreatedMs int64
	OrderID   string
	Reason    string // why it was released
	// ReleasedMs is when it was released (proxy or CLI clock); 0 otherwise.
	ReleasedMs int64
	// QueueEntry is a queued reservation's stream entry id ("0-<seq>"),
	// its place in the shard's queue; "" otherwise.
	QueueEntry string
}

// Reservation states as shown to buyers and operators. Queued is queue
// mode's "not sent to the shop yet": CreatedMs is then when it was queued;
// once a worker sends it, it is pending and CreatedMs is the send time, from
// which pending_timeout counts.
const (
	StateQueued    = "queued"
	StatePending   = "pending"
	StateConfirmed = "confirmed"
	StateReleased  = "released"
)

func stateName(b byte) string {
	switch b {
	case 'q':
		return StateQueued
	case 'p':
		return StatePending
	case 'c':
		return StateConfirmed
	case 'x':
		return StateReleased
	}
	return "unknown"
}

// parseRecord reads "<state>|<user>|<qty>|<ms>|<order id>|<reason>", and
// "|<released ms>" after the reason on released records; a queued record
// holds its stream entry id where the reason goes (see lua/reserve.lua).
func parseRecord(t Token, rec string) (Reservation, bool) {
	parts := strings.SplitN(rec, "|", 7)
	if len(parts) < 5 || len(parts[0]) != 1 {
		return Reservation{}, false
	}
	r := Reservation{Token: t, State: stateName(parts[0][0]), User: parts[1], OrderID: parts[4]}
	r.Qty = atoi(parts[2])
	r.CreatedMs = atoi(parts[3])
	if len(parts) >= 6 {
		r.Reason = parts[5]
	}
	if r.State == StateQueued {
		r.QueueEntry, r.Reason = r.Reason, ""
	}
	if len(parts) == 7 {
		r.ReleasedMs = atoi(parts[6])
	}
	return r, true
}

func atoi(s string) int64 {
	var n int64
	for i := 0; i < len(s); i++ {
		if s[i] < '0' || s[i] > '9' {
			return n
		}
		n = n*10 + int64(s[i]-'0')
	}
	return n
}

// Lookup reads a reservation; ok is false when there is none.
func (s *Store) Lookup(ctx context.Context, t Token, shards int) (Reservation, bool, error) {
	c, err := s.Client()
	if err != nil {
		return Reservation{}, false, err
	}
	if t.Shard >= shards {
		return Reservation{}, false, nil
	}
	k, err := s.shardKeys(ctx, t.Activity, t.SKU, shards, t.Shard)
	if err != nil {
		return Reservation{}, false, err
	}
	cctx, cancel := s.ctx(ctx)
	defer cancel()
	rec, err := c.Do(cctx, c.B().Hget().Key(k.Res).Field(t.Field()).Build()).ToString()
	if rueidis.IsRedisNil(err) {
		return Reservation{}, false, nil
	}
	if err != nil {
		return Reservation{}, false, wrap(err)
	}
	r, ok := parseRecord(t, rec)
	if !ok {
		return Reservation{}, false, ErrInvalidResponse
	}
	return r, true, nil
}

// sampleConfirmed is how many records one HRANDFIELD reads per shard.
const sampleConfirmed = 32

// SampleConfirmed finds a confirmed reservation of act (the first found in
// a random sample of each SKU shard's records), for a check of the shop's
// verify endpoint against an order it is known to hold. ok is false when
// the samples held none.
func (s *Store) SampleConfirmed(ctx context.Context, act string, skus []string, shards int) (res Reservation, ok bool, err error) {
	c, err := s.Client()
	if err != nil {
		return Reservation{}, false, err
	}
	for _, sku := range skus {
		for shard := range shards {
			k, err := s.shardKeys(ctx, act, sku, shards, shard)
			if err != nil {
				return Reservation{}, false, err
			}
			cctx, cancel := s.ctx(ctx)
			arr, err := c.Do(cctx, c.B().Hrandfield().Key(k.Res).Count(sampleConfirmed).Withvalues().Build()).ToArray()
			cancel()
			if err != nil && !rueidis.IsRedisNil(err) {
				return Reservation{}, false, wrap(err)
			}
			var pairs [][2]string
			for i := 0; i < len(arr); i++ {
				if kv, err := arr[i].AsStrSlice(); err == nil && len(kv) == 2 { // RESP3: [field, value]
					pairs = append(pairs, [2]string{kv[0], kv[1]})
				} else if i+1 < len(arr) { // RESP2: field, value, ...
					f, _ := arr[i].ToString()
					v, _ := arr[i+1].ToString()
					pairs = append(pairs, [2]string{f, v})
					i++
				}
			}
			for _, kv := range pairs {
				if !strings.HasPrefix(kv[1], "c|") {
					continue
				}
				fsku, id, found := strings.Cut(kv[0], ":")
				if !found {
					continue
				}
				if r, ok := parseRecord(Token{Activity: act, SKU: fsku, Shard: shard, ID: id}, kv[1]); ok && r.State == StateConfirmed {
					return r, true, nil
				}
			}
		}
	}
	return Reservation{}, false, nil
}

// Confirm turns a pending reservation into a confirmed one, recording the
// shop's order id. Replies: OK, Same (already confirmed), Released (it was
// released before: the shop holds an order for released stock, alert),
// Unknown.
func (s *Store) Confirm(ctx context.Context, t Token, shards int, orderID string) (lua.Code, error) {
	return s.confirmAs(ctx, t, shards, orderID, nil, "", "", nil)
}

// ConfirmReplay is Confirm for a winner that came with a request id: in the
// same script it keeps rp, the shop's answer, in the request id's record
// (until the record expires, RequestIDTTL after the first copy), so an exact
// repeat of the request gets that answer again (ReserveResult.Replay) and
// never a state older than the confirm. A nil rp (an answer too large to
// keep) confirms only: repeats then read ALREADY_PURCHASED.
func (s *Store) ConfirmReplay(ctx context.Context, t Token, shards int, orderID, user, requestID string, rp *Replay) (lua.Code, error) {
	return s.confirmAs(ctx, t, shards, orderID, nil, user, requestID, rp)
}

func (s *Store) confirmAs(ctx context.Context, t Token, shards int, orderID string, f *Fence, user, requestID string, rp *Replay) (lua.Code, error) {
	if t.SKU == BundleSKU {
		return s.bundleConfirm(ctx, t, shards, orderID, f) // no replays: bundles take no request id
	}
	// ARGV[3] is always sent (empty: no replay), so the fence's trailing
	// KEYS and ARGV never stand where confirm.lua reads its own.
	args := []string{t.Field(), sanitize(orderID), ""}
	keysOf := func(k ShardKeys) []string { return []string{k.Stock, k.Res, k.Pending} }
	if rp != nil && requestID != "" && f == nil {
		args[2] = rp.encode()
		keysOf = func(k ShardKeys) []string { return []string{k.Stock, k.Res, k.Pending, ridKey(k, user, requestID)} }
	}
	return s.transition(ctx, t, shards, f, s.confirm, s.fencedConfirm, keysOf, args)
}

// Replay is a winner's answer from the shop, kept with the request id so an
// exact repeat of the request gets it again (SPEC §9 "Replays").
type Replay struct {
	Status          int
	ContentType     string
	ContentEncoding string
	Body            []byte
}

// encode is confirm.lua's ARGV[3]: "<status>|<content-type>|<content-encoding>|<body>".
func (rp *Replay) encode() string {
	var b strings.Builder
	b.Grow(len(rp.Body) + len(rp.ContentType) + len(rp.ContentEncoding) + 8)
	b.WriteString(strconv.Itoa(rp.Status))
	b.WriteByte('|')
	b.WriteString(strings.ReplaceAll(rp.ContentType, "|", ""))
	b.WriteByte('|')
	b.WriteString(strings.ReplaceAll(rp.ContentEncoding, "|", ""))
	b.WriteByte('|')
	b.Write(rp.Body)
	return b.String()
}

// parseReplay reads what encode wrote.
func parseReplay(s string) (*Replay, bool) {
	parts := strings.SplitN(s, "|", 4)
	if len(parts) != 4 {
		return nil, false
	}
	status, err := strconv.Atoi(parts[0])
	if err != nil || status < 100 || status > 999 {
		return nil, false
	}
	return &Replay{Status: status, ContentType: parts[1], ContentEncoding: parts[2], Body: []byte(parts[3])}, true
}

// Release gives a reservation's units back. With pendingOnly, a confirmed
// reservation is left alone (reply Confirmed): that is how the proxy and the
// reconciler release, so a late 2xx is never undone. Replies: OK, Same
// (already released), Unknown, Confirmed, Broken.
func (s *Store) Release(ctx context.Context, t Token, shards int, reason string, nowMs int64, pendingOnly bool) (lua.Code, error) {
	return s.releaseAs(ctx, t, shards, reason, nowMs, pendingOnly, 0, nil)
}

// OperatorRelease is the release of `seckill-proxy release` and POST
// /admin/release (a cancel, an unpaid order, a refund, a buy the shop
// never took). A confirmed or queued reservation is released at once. A
// pending one whose buy the shop may still be taking (sent less than
// inFlight ago) is released only once that window has passed, and only if
// it is still pending from the same send: released at once, the shop could
// take the order after the unit was sold again (red-team finding,
// TestOR15...). If the shop's answer confirmed it meanwhile the reply is
// lua.Confirmed and nothing changed. force releases at once, whatever the
// state. The release is conditional on the record read (release.lua's send
// stamp): a queued reservation a worker claims and sends meanwhile is left
// alone (lua.Restamped). waited is how long it waited for the window.
//
// With durable winners a release (or one found done before: a run again)
// is reported only once the shard's replicas have it: one the master
// acknowledged and a failover then undid left the refunded unit confirmed
// (decisions §64). Not in time: the code with ErrNotDurable, and the
// operator runs it again.
func (s *Store) OperatorRelease(ctx context.Context, t Token, shards int, reason string, inFlight time.Duration, force bool) (code lua.Code, waited time.Duration, err error) {
	code, waited, err = s.operatorRelease(ctx, t, shards, reason, inFlight, force)
	if err == nil && (code == lua.OK || code == lua.Same) && s.dur != nil {
		if ok, _, werr := s.WaitReplicas(ctx, t, shards, 0); !ok {
			err = notOnReplicas("released", werr)
		}
	}
	return code, waited, err
}

func (s *Store) operatorRelease(ctx context.Context, t Token, shards int, reason string, inFlight time.Duration, force bool) (code lua.Code, waited time.Duration, err error) {
	if force {
		code, err = s.releaseAs(ctx, t, shards, reason, time.Now().UnixMilli(), false, 0, nil)
		return code, 0, err
	}
	res, ok, err := s.Lookup(ctx, t, shards)
	if err != nil {
		return 0, 0, err
	}
	if !ok {
		return lua.Unknown, 0, nil
	}
	pendingOnly, stamp := false, int64(0)
	switch res.State {
	case StatePending:
		if wait := time.Until(time.UnixMilli(res.CreatedMs).Add(inFlight)); wait > 0 {
			t := time.NewTimer(wait)
			select {
			case <-ctx.Done():
				t.Stop()
				return 0, 0, ctx.Err()
			case <-t.C:
			}
			waited = wait
		}
		// Still pending from the same send, or nothing: a confirm that
		// landed meanwhile (the shop took the order) is left alone.
		pendingOnly, stamp = true, res.CreatedMs
	case StateQueued:
		// A worker's claim re-stamps it with the send time: then left alone.
		stamp = res.CreatedMs
	}
	code, err = s.releaseAs(ctx, t, shards, reason, time.Now().UnixMilli(), pendingOnly, stamp, nil)
	return code, waited, err
}

// ReleaseSent is a pending-only Release of the send stamped sentMs (the
// record's CreatedMs as its caller claimed or read it): a reservation
// sent again since (a queue worker's takeover re-claimed it, claim.lua's
// SAME) is left alone, reply lua.Restamped, for the new send to settle.
func (s *Store) ReleaseSent(ctx context.Context, t Token, shards int, reason string, nowMs, sentMs int64) (lua.Code, error) {
	return s.releaseAs(ctx, t, shards, reason, nowMs, true, sentMs, nil)
}

// releaseAs runs release.lua; sentMs > 0 makes it conditional on the
// pending record's send stamp (release.lua ARGV[5]). Bundles are never
// queued, so never re-stamped: bundlerelease.lua takes no stamp.
func (s *Store) releaseAs(ctx context.Context, t Token, shards int, reason string, nowMs int64, pendingOnly bool, sentMs int64, f *Fence) (lua.Code, error) {
	if t.SKU == BundleSKU {
		return s.bundleRelease(ctx, t, shards, reason, nowMs, pendingOnly, f)
	}
	only := "0"
	if pendingOnly {
		only = "1"
	}
	sent := ""
	if sentMs > 0 {
		sent = itoa(sentMs)
	}
	// ARGV[5] is always sent (empty: unconditional), so the fence's
	// trailing ARGV never stand where release.lua reads its own.
	return s.transition(ctx, t, shards, f, s.release, s.fencedRelease, releaseKeys,
		[]string{t.Field(), sanitize(reason), itoa(nowMs), only, sent})
}

// releaseKeys are release.lua's KEYS on a reservation's shard.
func releaseKeys(k ShardKeys) []string {
	return []string{k.Stock, k.Users, k.Res, k.Pending, k.Out, k.Epoch}
}

// transition runs one reservation state-change script on the token's
// shard, fenced (the reconciler's repairs) when f is set.
func (s *Store) transition(ctx context.Context, t Token, shards int, f *Fence, plain, fenced *rueidis.Lua,
	keysOf func(ShardKeys) []string, args []string) (lua.Code, error) {
	c, err := s.Client()
	if err != nil {
		return 0, err
	}
	if t.Shard >= shards {
		return lua.Unknown, nil
	}
	k, err := s.shardKeys(ctx, t.Activity, t.SKU, shards, t.Shard)
	if err != nil {
		return 0, err
	}
	return s.execTransition(ctx, c, plain, fenced, keysOf(k), args, f, k)
}

// execTransition runs a state-change script, or its fenced variant under
// f (the fence key of shard fk), and returns the script's code.
func (s *Store) execTransition(ctx context.Context, c rueidis.Client, plain, fenced *rueidis.Lua, keys, args []string, f *Fence, fk ShardKeys) (lua.Code, error) {
	script := plain
	if f != nil {
		keys, args = f.wrap(keys, args, fk)
		script = fenced
	}
	cctx, cancel := s.ctx(ctx)
	defer cancel()
	r, err := ints(script.Exec(cctx, c, keys, args))
	if err != nil {
		return 0, err
	}
	return lua.Code(r[0]), nil
}

// sanitize keeps a free-text field from breaking the '|' record format.
func sanitize(s string) string {
	if len(s) > 128 {
		s = s[:128]
	}
	return strings.ReplaceAll(s, "|", "/")
}

// StalePending hands fn every reservation of one SKU pending since before
// olderThanMs (by their send time), from the pending index (no scan of all
// reservations), page by page: it pages through the whole index, so
// entries fn cannot settle never starve those behind them. The index is
// shared by the SKUs of a shard; the others are skipped. fn may settle
// (remove) what it gets: paging goes by score, not by offset. A record
// gone from res shows as state "missing".
func (s *Store) StalePending(ctx context.Context, act, sku string, shards int, olderThanMs int64, page int64,
	fn func([]Reservation) error) error {
	return s.StalePendingOf(ctx, act, []string{sku}, shards, olderThanMs, page, func(_ string, rs []Reservation) error { return fn(rs) })
}

// StalePendingOf is StalePending for several SKUs of one activity in one
// pass over each shard's pending index (which the SKUs share): fn gets
// each page's reservations SKU by SKU. The reconciler called StalePending
// once per SKU, and each call paged through every SKU's entries of the
// index: 2,000 SKUs with one stale reservation each took 14,000 ZRANGEs
// and 4.3 s to find 2,000 reservations, growing as SKUs × pending (red
// team cat16).
func (s *Store) StalePendingOf(ctx context.Context, act string, skus []string, shards int, olderThanMs int64, page int64,
	fn func(sku string, rs []Reservation) error) error {
	c, err := s.Client()
	if err != nil {
		return err
	}
	if len(skus) == 0 {
		return nil
	}
	want := make(map[string]bool, len(skus))
	for _, id := range skus {
		want[id] = true
	}
	// The shards' keys (shared by every SKU but Stock, Out, RidBits).
	k, err := s.skuKeys(ctx, act, skus[0], shards)
	if err != nil {
		return err
	}
	hi := itoa(olderThanMs)
	for i, sk := range k.Shards {
		lo := "-inf"
		for done := false; !done; {
			cctx, cancel := s.ctx(ctx)
			zs, err := c.Do(cctx, c.B().Zrange().Key(sk.Pending).Min(lo).Max(hi).Byscore().Limit(0, page).Withscores().Build()).AsZScores()
			cancel()
			if err != nil {
				return wrap(err)
			}
			if len(zs) == 0 {
				break
			}
			fields := make([]string, 0, len(zs))
			if done = int64(len(zs)) < page; done {
				for _, z := range zs {
					fields = append(fields, z.Member)
				}
			} else {
				// The page may end inside a run of equal scores (one ms):
				// take the whole run, then go on after its score.
				last := zs[len(zs)-1].Score
				for _, z := range zs {
					if z.Score < last {
						fields = append(fields, z.Member)
					}
				}
				at := strconv.FormatFloat(last, 'f', -1, 64)
				cctx, cancel := s.ctx(ctx)
				ties, err := c.Do(cctx, c.B().Zrange().Key(sk.Pending).Min(at).Max(at).Byscore().Build()).AsStrSlice()
				cancel()
				if err != nil {
					return wrap(err)
				}
				fields, lo = append(fields, ties...), "("+at
			}
			batch, err := s.records(ctx, c, act, want, i, sk, fields)
			if err != nil {
				return err
			}
			// SKU by SKU, in the order of skus.
			bySKU := map[string][]Reservation{}
			for _, r := range batch {
				bySKU[r.Token.SKU] = append(bySKU[r.Token.SKU], r)
			}
			for _, id := range skus {
				if rs := bySKU[id]; len(rs) > 0 {
					delete(bySKU, id) // a SKU named twice gets its reservations once
					if err := fn(id, rs); err != nil {
						return err
					}
				}
			}
		}
	}
	return nil
}

// records reads the reservations of the SKUs in skus among the fields of
// one shard in one call.
func (s *Store) records(ctx context.Context, c rueidis.Client, act string, skus map[string]bool, shard int, sk ShardKeys, fields []string) ([]Reservation, error) {
	toks := make([]Token, 0, len(fields))
	mine := make([]string, 0, len(fields))
	for _, f := range fields {
		if t, ok := tokenOfField(act, shard, f); ok && skus[t.SKU] {
			toks, mine = append(toks, t), append(mine, f)
		}
	}
	if len(mine) == 0 {
		return nil, nil
	}
	cctx, cancel := s.ctx(ctx)
	defer cancel()
	vals, err := c.Do(cctx, c.B().Hmget().Key(sk.Res).Field(mine...).Build()).ToArray()
	if err != nil {
		return nil, wrap(err)
	}
	if len(vals) != len(mine) {
		return nil, ErrInvalidResponse
	}
	out := make([]Reservation, 0, len(mine))
	for i, v := range vals {
		rec, err := v.ToString()
		if rueidis.IsRedisNil(err) || v.IsNil() {
			out = append(out, Reservation{Token: toks[i], State: "missing"})
			continue
		}
		if err != nil {
			return nil, ErrInvalidResponse
		}
		r, ok := parseRecord(toks[i], rec)
		if !ok {
			return nil, ErrInvalidResponse
		}
		out = append(out, r)
	}
	return out, nil
}

// TryLease takes or renews a named lease for holder for ttl. It returns
// true while holder has it. Callers that repair use AcquireLease, whose
// fencing token every repair carries.
func (s *Store) TryLease(ctx context.Context, name, holder string, ttl time.Duration) (bool, error) {
	l, err := s.AcquireLease(ctx, name, holder, ttl)
	return l.Held, err
}
