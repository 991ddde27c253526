package store

import (
	"context"
	"strconv"
	"strings"
	"time"

	"github.com/redis/rueidis"
)

// Exception is one reconcile finding kept for people (finance, support):
// what the reconciler found, with its evidence. Reservation-level findings
// (unsettled, order_for_released) name the token, user and state;
// SKU-level ones (shop_missing, shop_extra, invariant) carry the units in
// Qty and the shop's count in Shop.
type Exception struct {
	// ID is the stream entry id ("<ms>-<seq>"), set when read back.
	ID       string `json:"id,omitempty"`
	Activity string `json:"activity"`
	// Kind is the finding: unsettled, shop_missing, shop_extra,
	// order_for_released, invariant, queued_stale, queued_unlisted.
	Kind string `json:"kind"`
	// Severity is "alert" (needs a person) or "note" (within tolerance
	// while the activity runs).
	Severity string `json:"severity"`
	SKU      string `json:"sku,omitempty"`
	Token    string `json:"token,omitempty"`
	User     string `json:"user,omitempty"`
	Qty      int64  `json:"qty"`
	// State is the reservation's state when found (pending, released...).
	State string `json:"state,omitempty"`
	// Shop is what the shop answered: a verify verdict (exists, absent,
	// unknown) with the order id, or "count=N" from verify.count_url.
	Shop string `json:"shop,omitempty"`
	// At is when the reconcile pass that found it ran.
	At     time.Time `json:"at"`
	Reason string    `json:"reason"`
}

// exceptionFields is the order of an entry's fields in the stream.
var exceptionFields = []string{"kind", "severity", "sku", "token", "user", "qty", "state", "shop", "at", "reason"}

func (e Exception) values() []string {
	return []string{e.Kind, e.Severity, e.SKU, e.Token, e.User, strconv.FormatInt(e.Qty, 10), e.State, e.Shop,
		strconv.FormatInt(e.At.UnixMilli(), 10), e.Reason}
}

// fingerprint names a finding for deduplication: the same finding with
// the same evidence found by the next pass is not recorded again; a
// changed count or state is new evidence and is.
func (e Exception) fingerprint() string {
	return strings.Join([]string{e.Kind, e.Severity, e.SKU, e.Token, strconv.FormatInt(e.Qty, 10), e.State, e.Shop}, "\x1f")
}

// ExceptionsKey is the activity's stream of reconcile exceptions; SeenKey
// the hash of fingerprints already recorded. Both share the activity's
// meta hash tag, so one script writes both on a cluster.
func (s *Store) ExceptionsKey(act string) string { return s.prefix + ":{" + act + "}:exceptions" }

func (s *Store) exceptionsSeenKey(act string) string {
	return s.prefix + ":{" + act + "}:exceptions:seen"
}

// recordException adds one exception unless its fingerprint was recorded
// already; trims the stream to about ARGV[3] entries (MAXLEN ~) and keeps
// the fingerprint hash under twice that (forgetting them all when over: at
// worst a finding is recorded once more); both expire at ARGV[2] (ms).
const recordException = `
if redis.call('HSETNX', KEYS[2], ARGV[1], '1') == 0 then return 0 end
local max = tonumber(ARGV[3])
if redis.call('HLEN', KEYS[2]) > 2 * max then
  redis.call('DEL', KEYS[2])
  redis.call('HSET', KEYS[2], ARGV[1], '1')
end
local args = {KEYS[1], 'MAXLEN', '~', ARGV[3], '*'}
for i = 4, #ARGV do args[#args + 1] = ARGV[i] end
redis.call('XADD', unpack(args))
redis.call('PEXPIREAT', KEYS[1], ARGV[2])
redis.call('PEXPIREAT', KEYS[2], ARGV[2])
return 1`

// RecordExceptions stores exs in the activity's bounded exceptions stream
// (at most about max entries, expiring at expireAtMs like the activity's
// keys), skipping those recorded before with the same evidence. It returns
// how many were new.
func (s *Store) RecordExceptions(ctx context.Context, act string, exs []Exception, max int, expireAtMs int64) (int, error) {
	if len(exs) == 0 {
		return 0, nil
	}
	c, err := s.Client()
	if err != nil {
		return 0, err
	}
	cctx, cancel := context.WithTimeout(ctx, 10*s.timeout+5*time.Second)
	defer cancel()
	keys := []string{s.ExceptionsKey(act), s.exceptionsSeenKey(act)}
	cmds := make(rueidis.Commands, 0, len(exs))
	for _, e := range exs {
		args := []string{e.fingerprint(), strconv.FormatInt(expireAtMs, 10), strconv.Itoa(max)}
		for i, v := range e.values() {
			args = append(args, exceptionFields[i], v)
		}
		cmds = append(cmds, c.B().Eval().Script(recordException).Numkeys(2).Key(keys...).Arg(args...).Build())
	}
	n := 0
	for _, r := range c.DoMulti(cctx, cmds...) {
		v, err := r.AsInt64()
		if err != nil {
			return n, wrap(err)
		}
		n += int(v)
	}
	return n, nil
}

// exceptionsPage is how many entries one XRANGE reads.
const exceptionsPage = 1000

// Exceptions reads the activity's exceptions, oldest first.
func (s *Store) Exceptions(ctx context.Context, act string) ([]Exception, error) {
	c, err := s.Client()
	if err != nil {
		return nil, err
	}
	var out []Exception
	start := "-"
	for {
		cctx, cancel := s.ctx(ctx)
		entries, err := c.Do(cctx, c.B().Xrange().Key(s.ExceptionsKey(act)).Start(start).End("+").Count(exceptionsPage).Build()).AsXRange()
		cancel()
		if err != nil {
			return out, wrap(err)
		}
		for _, en := range entries {
			out = append(out, exceptionOf(act, en))
		}
		if len(entries) < exceptionsPage {
			return out, nil
		}
		start = "(" + entries[len(entries)-1].ID
	}
}

func exceptionOf(act string, en rueidis.XRangeEntry) Exception {
	f := en.FieldValues
	e := Exception{ID: en.ID, Activity: act, Kind: f["kind"], Severity: f["severity"], SKU: f["sku"], Token: f["token"],
		User: f["user"], State: f["state"], Shop: f["shop"], Reason: f["reason"]}
	e.Qty, _ = strconv.ParseInt(f["qty"], 10, 64)
	if ms, err := strconv.ParseInt(f["at"], 10, 64); err == nil {
		e.At = time.UnixMilli(ms).UTC()
	}
	return e
}

// verifyReleasedKey is the activity's sorted set of reservations the
// reconciler released on verify's 404 (token, scored by the release's ms):
// later passes ask verify about them again, since a verify read from a
// replica that lags the shop's primary (or before the shop's insert
// commits) says 404 for an order the shop holds. Same hash tag as the
// exceptions stream.
func (s *Store) verifyReleasedKey(act string) string {
	return s.prefix + ":{" + act + "}:verify_released"
}

// NoteVerifyReleased remembers that tok was released on verify's 404 at
// atMs, until the activity's keys expire (expireAtMs) or it is forgotten.
func (s *Store) NoteVerifyReleased(ctx context.Context, tok Token, atMs, expireAtMs int64) error {
	c, err := s.Client()
	if err != nil {
		return err
	}
	k := s.verifyReleasedKey(tok.Activity)
	cctx, cancel := s.ctx(ctx)
	defer cancel()
	for _, r := range c.DoMulti(cctx,
		c.B().Zadd().Key(k).ScoreMember().ScoreMember(float64(atMs), tok.String()).Build(),
		c.B().Pexpireat().Key(k).MillisecondsTimestamp(expireAtMs).Build()) {
		if err := r.Error(); err != nil {
			return wrap(err)
		}
	}
	return nil
}

// VerifyReleased returns at most n of the activity's reservations released
// on verify's 404 in [sinceMs, beforeMs), newest first; with forget, those
// released before sinceMs are dropped first (past the horizon in which a
// lagging verify is expected to catch up).
func (s *Store) VerifyReleased(ctx context.Context, act string, sinceMs, beforeMs int64, n int, forget bool) ([]Token, error) {
	c, err := s.Client()
	if err != nil {
		return nil, err
	}
	k := s.verifyReleasedKey(act)
	cctx, cancel := s.ctx(ctx)
	defer cancel()
	if forget {
		if err := c.Do(cctx, c.B().Zremrangebyscore().Key(k).Min("-inf").Max("("+strconv.FormatInt(sinceMs, 10)).Build()).Error(); err != nil {
			return nil, wrap(err)
		}
	}
	members, err := c.Do(cctx, c.B().Zrevrangebyscore().Key(k).Max("("+strconv.FormatInt(beforeMs, 10)).Min(strconv.FormatInt(sinceMs, 10)).
		Limit(0, int64(n)).Build()).AsStrSlice()
	if err != nil {
		return nil, wrap(err)
	}
	out := make([]Token, 0, len(members))
	for _, m := range members {
		if t, err := ParseToken(m); err == nil {
			out = append(out, t)
		}
	}
	return out, nil
}

// ForgetVerifyReleased stops asking verify about tok again (its order was
// found and alerted, or its record is gone).
func (s *Store) ForgetVerifyReleased(ctx context.Context, tok Token) error {
	c, err := s.Client()
	if err != nil {
		return err
	}
	cctx, cancel := s.ctx(ctx)
	defer cancel()
	return wrap(c.Do(cctx, c.B().Zrem().Key(s.verifyReleasedKey(tok.Activity)).Member(tok.String()).Build()).Error())
}
