package e2e

import (
	"fmt"
	"math/rand"
	"os"
	"slices"
	"sort"
	"time"
)

// Red team chaos5 (2026-12-07, docs/decisions.md §66): the kill switch's
// promise (SPEC §2: `pause` — "every proxy instance obeys within 1 s")
// checked under the chaos. The operators' pauses (100–700 ms) are shorter
// than the bound, so on half the seeds one of them (or, with none early
// enough, one more) lasts 1.6–2.5 s and pauses every activity on sale (A,
// B once added, C with the bundle mix). Between pausedAt + 1 s (pausedAt:
// SetPaused(true) returned for all of them) and the resume's start:
//
//   - no buy the chaos buyers sent at or after the bound and answered
//     before the resume was admitted (a win, QUEUED, or a reservation the
//     shop failed: UPSTREAM_TIMEOUT, UPSTREAM_FAILED) for a paused
//     activity, on any instance; a replay of a win told before the bound
//     (same token) is no admission; nor answered anything else a buy on
//     sale gets (SOLD_OUT, PENDING, ALREADY_PURCHASED, ...: decided after
//     the switch is read; chaosBeforeTheSwitch lists what may still come);
//   - no reservation record of a paused activity is stamped in the window
//     (the stamp is the deciding instance's clock when Decide began,
//     reserve.lua's ARGV[5], the test's clock too), whatever was answered.
//
// Drawn from a source of its own (seed ^ chaosLongPauseSalt): every other
// draw of the seed, and so every `make test` seed's schedule, is as before.

const chaosLongPauseSalt = 0x9a05e

// chaosPauseBound is SPEC's "every proxy instance obeys within 1 s".
const chaosPauseBound = time.Second

// chaosStampSlack: records are stamped in whole ms (the window's ends are
// cut to ms too), so a stamp within a ms of the bound is not judged.
const chaosStampSlack = 2 * time.Millisecond

// chaosResumeSlack is how long before the resume's start a stamp is still
// judged: the stamp is taken as Decide begins and the flags are read after
// it, at most a Redis timeout (100 ms here: a snapshot older than 1 s is
// read again from Redis) and the scheduler's delays later, so a buy
// stamped just before the resume began may have read the flags after it
// landed. 150 ms of a 600–1,500 ms window.
const chaosResumeSlack = 150 * time.Millisecond

// chaosBeforeTheSwitch are the answers a paused activity may still give:
// decided before Decide reads the switch (the window: NOT_STARTED, ENDED;
// the identity: UNAUTHENTICATED, AUTH_UNAVAILABLE, BAD_REQUEST), or with
// it unread (STORE_UNAVAILABLE: the snapshot too old and Redis not
// answering, nothing reserved), or a buy the fair-start pen refused
// (BUSY: full or draining; a held buy reads the switch again when let
// on). Every other answer is decided after the switch, so PAUSED.
var chaosBeforeTheSwitch = map[string]bool{"PAUSED": true, "STORE_UNAVAILABLE": true, "NOT_STARTED": true, "ENDED": true,
	"UNAUTHENTICATED": true, "AUTH_UNAVAILABLE": true, "BAD_REQUEST": true, "BUSY": true}

// chaosLongPause is the seed's long pause: what it paused and when.
type chaosLongPause struct {
	d      time.Duration
	withC  bool
	acts   []string  // the activities it paused
	paused time.Time // SetPaused(true) returned for every one of them
	resume time.Time // SetPaused(false) began
	done   bool      // both landed (else nothing is judged)
}

// longPauseStep makes one of the operator pauses (pauseAt: their steps in
// ops) a long pause, or adds one at a drawn moment, on the seeds that draw
// it; CHAOS_LONGPAUSE=0 or 1 overrides the draw.
func (c *chaosEnv) longPauseStep(ops []chaosStep, pauseAt []int, chaosFor time.Duration) []chaosStep {
	rng := rand.New(rand.NewSource(c.seed ^ chaosLongPauseSalt))
	on := rng.Intn(2) == 0
	d := time.Duration(1600+rng.Intn(900)) * time.Millisecond
	pick := rng.Intn(1 << 20)
	at := time.Duration(300+rng.Intn(int((chaosFor-2500*time.Millisecond)/time.Millisecond))) * time.Millisecond
	switch os.Getenv("CHAOS_LONGPAUSE") {
	case "0":
		on = false
	case "1":
		on = true
	}
	if !on {
		return ops
	}
	if c.mix.failover && !c.mix.durable {
		// Without durable winners a failover may lose the pause itself:
		// the master acknowledged the HSET, its replica never had it, and
		// the promoted replica is on sale (README: Redis durability is the
		// floor, §10, §24). With durable winners SetPaused returns once a
		// replica has it (§64), so the check holds there; here it would
		// judge Redis, not the proxy: no long pause on these seeds.
		c.t.Logf("seed %d: long pause drawn, not taken (failover without durable winners can lose the pause: §66)", c.seed)
		return ops
	}
	lp := &chaosLongPause{d: d, withC: c.mix.bundle}
	c.lp = lp
	step := func() { c.longPause(lp) }
	var early []int
	for _, i := range pauseAt {
		if ops[i].at < chaosFor-time.Second {
			early = append(early, i)
		}
	}
	if len(early) > 0 {
		i := early[pick%len(early)]
		ops[i].do = step
		c.t.Logf("seed %d: operator step %d (at %v) is a long pause of %v (§66)", c.seed, i, ops[i].at, d)
		return ops
	}
	// None early enough: one more step, in its order in the lane (the
	// lane runs one step at a time, so no other pause overlaps it).
	i := sort.Search(len(ops), func(i int) bool { return ops[i].at > at })
	ops = slices.Insert(ops, i, chaosStep{at, step})
	c.t.Logf("seed %d: a long pause of %v added at %v (operator step %d) (§66)", c.seed, d, at, i)
	return ops
}

// longPause is pause for the seed's long pause, with its moments kept.
func (c *chaosEnv) longPause(lp *chaosLongPause) {
	acts := []string{chaosA}
	if c.bReady.Load() {
		acts = append(acts, chaosB) // B is added by this lane only: as setPausedActs sees it
	}
	if lp.withC {
		acts = append(acts, chaosC)
	}
	c.logf("long pause of %v: %v", lp.d, acts)
	if !c.setPausedActs(true, lp.withC) {
		return
	}
	paused := time.Now()
	c.logf("long pause landed")
	time.Sleep(lp.d)
	resume := time.Now()
	ok := c.setPausedActs(false, lp.withC)
	c.logf("long pause resumed (%v)", ok)
	c.mu.Lock()
	lp.acts, lp.paused, lp.resume, lp.done = acts, paused, resume, true
	c.mu.Unlock()
}

// longPauseWindow is the window judged: [from, to) in ms.
func (lp *chaosLongPause) window() (from, to time.Time) {
	return lp.paused.Add(chaosPauseBound), lp.resume
}

// checkLongPause judges act's answers and records (recs, by token field)
// against the long pause.
func (c *chaosEnv) checkLongPause(act string, recs map[string]rtRecord, answers []chaosAnswer) {
	t := c.t
	t.Helper()
	c.mu.Lock()
	lp := c.lp
	var done bool
	var acts []string
	if lp != nil {
		done, acts = lp.done, lp.acts
	}
	c.mu.Unlock()
	if lp == nil || !done || !slices.Contains(acts, act) {
		return
	}
	from, to := lp.window()
	if !from.Before(to) {
		return
	}
	// Answers: sent at or after the bound, answered before the resume.
	toldBefore := map[string]bool{}
	for _, a := range answers {
		if a.act == act && a.token != "" && a.sent.Before(from) {
			toldBefore[a.token] = true
		}
	}
	judged, admitted, onSale := 0, 0, 0
	codes := map[string]int{}
	for _, a := range answers {
		if a.act != act || a.sent.Before(from) || !a.got.Before(to) {
			continue
		}
		judged++
		codes[fmt.Sprintf("%s/%d", a.code, a.status)]++
		if !(a.win || a.code == "QUEUED" || a.code == "UPSTREAM_TIMEOUT" || a.code == "UPSTREAM_FAILED") {
			if a.err == nil && !chaosBeforeTheSwitch[a.code] {
				// Not admitted, but answered as if on sale (SOLD_OUT,
				// PENDING, ALREADY_PURCHASED, ...: decided after the
				// switch is read, so PAUSED while it is on).
				onSale++
				t.Errorf("%s: %s on instance %d (gen %d) sent %s, answered %s %d at %s: not PAUSED while paused (paused %s, bound %s, resume %s)",
					act, a.user, a.inst, a.gen, a.sent.Format("15:04:05.000"), a.code, a.status, a.got.Format("15:04:05.000"),
					lp.paused.Format("15:04:05.000"), from.Format("15:04:05.000"), to.Format("15:04:05.000"))
			}
			continue
		}
		if a.win && toldBefore[a.token] {
			c.logf("%s: %s replayed a win told before the pause's bound (%s)", act, a.user, a.token)
			continue
		}
		admitted++
		t.Errorf("%s: %s on instance %d (gen %d) sent %s, answered %s %d (token %s) at %s: admitted while paused (paused %s, bound %s, resume %s)",
			act, a.user, a.inst, a.gen, a.sent.Format("15:04:05.000"), a.code, a.status, a.token, a.got.Format("15:04:05.000"),
			lp.paused.Format("15:04:05.000"), from.Format("15:04:05.000"), to.Format("15:04:05.000"))
	}
	// Records: none stamped in [from, to - chaosResumeSlack).
	lo, hi := from.Add(chaosStampSlack).UnixMilli(), to.Add(-chaosResumeSlack).UnixMilli()
	stamped, tombs := 0, 0
	for field, r := range recs {
		if r.CreatedMs < lo || r.CreatedMs >= hi {
			continue
		}
		if r.State == "x" && r.Qty == 0 {
			// abort.lua's tombstone for a reserve whose reply never came
			// ('x|user|0|ms|…', stamped with the abort's time, holding
			// nothing): it stops that reserve, it admits no one.
			tombs++
			continue
		}
		stamped++
		t.Errorf("%s: reservation %s of %s (%s, %d units) stamped %s, inside the pause (paused %s, bound %s, resume %s); their answers: %s",
			act, field, r.User, r.State, r.Qty, time.UnixMilli(r.CreatedMs).Format("15:04:05.000"), lp.paused.Format("15:04:05.000"),
			from.Format("15:04:05.000"), to.Format("15:04:05.000"), c.answersOf(answers, act, r.User))
	}
	t.Logf("%s: long pause %v, paused %s, judged %s–%s: %d answers (%v; %d admitted, %d others as if on sale), %d of %d records stamped inside (and %d abort tombstones)",
		act, lp.d, lp.paused.Format("15:04:05.000"), from.Format("15:04:05.000"), to.Format("15:04:05.000"),
		judged, chaosSorted(codes), admitted, onSale, stamped, len(recs), tombs)
	if judged == 0 {
		// The pause landed after the buyers stopped (a failover held the
		// lane's earlier steps, or the pause itself, until the replicas
		// were back): only the records were judged, and no buy was made.
		t.Logf("%s: no buy inside the long pause's window (it landed at %s, buyers stopped at %s)", act,
			lp.paused.Format("15:04:05.000"), c.end.Format("15:04:05.000"))
	}
}
