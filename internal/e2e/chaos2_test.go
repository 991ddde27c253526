package e2e

import (
	"context"
	"fmt"
	"io"
	"math/rand"
	"net"
	"os"
	"sort"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"go.uber.org/zap"

	"github.com/seckill-proxy/seckill-proxy/admission"
	"github.com/seckill-proxy/seckill-proxy/config"
	"github.com/seckill-proxy/seckill-proxy/internal/redistest"
	"github.com/seckill-proxy/seckill-proxy/metrics"
	"github.com/seckill-proxy/seckill-proxy/proxy"
	"github.com/seckill-proxy/seckill-proxy/reservation"
	"github.com/seckill-proxy/seckill-proxy/store"
)

// Red team chaos2 (2026-12-07, docs/decisions.md §53): what §50 left out
// of TestChaos's mix, selected by seed (chaosMixFor) so `make chaos`
// covers every kind:
//
//   - kill: a proxy instance killed mid-sale, abruptly (chaosInst.kill),
//     then a fresh one started on the same Redis;
//   - durable: redis.durable_winners (WAIT for a replica of the single
//     node; the replica is not stalled by the faults);
//   - restart: a Redis fault that SIGKILLs the node and starts it again
//     from its AOF (appendonly yes, appendfsync always: README asks for
//     appendonly on masters, "everysec or always"; with everysec a kill
//     may lose the last second of acknowledged writes, which README calls
//     "Redis durability is the floor", so the exact checker runs with
//     always);
//   - fair: activity A opens 2 s into the run with fair_start (held buys
//     let on in a random order of buyers after the window); no
//     reservation of A may be stamped before start + fair_start;
//   - bundle: activity C (SKUs a and b, bundles a:1,b:1, limit 2, or 4 on
//     half the seeds: chaosLimitCFor) bought by a third of A's buyers,
//     audited as red team bh audits bundles.
//
// CHAOS_MIX=none|kill,durable,restart overrides the seed's pick.

// chaosMix is what a seed adds to TestChaos's mix.
type chaosMix struct {
	kill, durable, restart, fair, bundle bool
	// §57 (chaos3_test.go): jwt, buyers known by a verified token
	// (identity.user.jwt, keys from a JWKS file rotated mid-sale, bad
	// tokens among the clicks); reckill, serve's background reconciler in
	// every instance and the lease holder killed mid-pass.
	jwt, reckill bool
	// session: buyers known by the shop's session cookie
	// (identity.user.session); the identity bit's kind on seeds whose
	// bit 128 is set.
	session bool
	// §60 (chaos4_test.go): failover, the master failed over mid-sale —
	// on a single node a master, a replica and three sentinels (the
	// proxy reaches Redis through redis.sentinel), on the cluster a
	// replica per master, promoted when the victim master is SIGKILLed
	// or SIGSTOPped past cluster-node-timeout.
	failover bool
}

// The bundle mix: activity C sells SKUs a and b as bundles of one unit
// each (sync mode), beside A and B.
const (
	chaosC      = "cc"
	chaosStockC = 20
	chaosLimitC = 2
)

// chaosLimitCFor is C's per_user_limit for a seed: chaosLimitC (a holder
// of one bundle is at the limit) or, on half the seeds, 4 (a holder of one
// bundle asking for another is under it: docs/decisions.md §61). Drawn
// from a source of its own, so every other draw of the seed is as before.
func chaosLimitCFor(seed int64) int64 {
	if rand.New(rand.NewSource(seed^0xb0d1e)).Intn(2) == 0 {
		return chaosLimitC
	}
	return 4
}

var chaosSKUsC = []string{"a", "b"}

// The fair-start mix: activity A opens 2 s into the run with these.
const (
	chaosFairHold   = 400 * time.Millisecond
	chaosFairSpread = 300 * time.Millisecond
)

// bits names the mix's switches, in the order String lists them and
// CHAOS_MIX spells them.
func (m *chaosMix) bits() []struct {
	name string
	on   *bool
} {
	return []struct {
		name string
		on   *bool
	}{{"kill", &m.kill}, {"durable", &m.durable}, {"restart", &m.restart}, {"fair", &m.fair},
		{"bundle", &m.bundle}, {"jwt", &m.jwt}, {"session", &m.session}, {"reckill", &m.reckill},
		{"failover", &m.failover}}
}

func (m chaosMix) String() string {
	var s []string
	for _, b := range m.bits() {
		if *b.on {
			s = append(s, b.name)
		}
	}
	if len(s) == 0 {
		return "none"
	}
	return strings.Join(s, ",")
}

// chaosMixFor picks the seed's mix: seed mod 128 as seven bits (1 kill, 2
// durable, 4 restart, 8 fair start, 16 bundles, 32 verified identity, 64
// reckill), the identity's kind by bit 128 (JWT without it, the shop's
// session with it), so seeds 1–3 (`make test`) cover kill, durable and
// both, any 128 consecutive seeds every combination of the seven bits and
// 256 both kinds of identity with each (32 consecutive seeds every
// combination of the first five). The cluster run takes all but durable
// below seed 256 (its nodes have no replicas there); with restart its
// nodes run with AOF and the stalled master is the one SIGKILLed and
// restarted (§57). Bit 256 is the failover (§60): seeds below 256 —
// every fixed seed of `make test` — draw exactly what they drew before;
// 256–511 add a failover to each of the 256 mixes above. From seed 256
// on the cluster takes durable too (its nodes then have replicas), with
// a failover on 256–511 and without on 512–767.
func chaosMixFor(seed int64, cluster bool) chaosMix {
	if env := os.Getenv("CHAOS_MIX"); env != "" {
		var m chaosMix
		for _, k := range strings.Split(env, ",") {
			for _, b := range m.bits() {
				if b.name == strings.TrimSpace(k) {
					*b.on = true
				}
			}
		}
		return m // on a cluster, durable and failover start a replica per master
	}
	b := seed % 8
	if b < 0 {
		b += 8
	}
	m := chaosMix{kill: b&1 != 0, durable: b&2 != 0, restart: b&4 != 0, fair: seed/8%2 != 0, bundle: seed/16%2 != 0,
		reckill: seed/64%2 != 0}
	if seed/32%2 != 0 {
		// Verified identity: JWT on seeds 32–63 and 96–127 (mod 256),
		// the shop's session on 160–191 and 224–255.
		m.jwt, m.session = seed/128%2 == 0, seed/128%2 != 0
	}
	m.failover = seed/256%2 != 0
	if cluster && (seed < 256 && seed > -256) {
		m.durable = false // no replicas (§57: restarts from AOF run on the cluster too)
	}
	return m
}

// chaosInst is one proxy instance of the chaos: the Proxy, its queue
// workers, the listener it serves on and the relay its shop traffic goes
// through, so that a kill can cut every socket the process had.
type chaosInst struct {
	*Proxy
	gen    int // instances are numbered as started: a killed one's successor has the next number
	q      *reservation.Queue
	ln     *chaosConns
	relay  *chaosRelay
	rrelay *chaosRelay // to the single Redis node (nil on a cluster)
	stop   func()      // admission's loops (Pipeline.Run)
	mu     sync.Mutex
	killed time.Time
	// killDone is when the kill's last cut was made: a request accepted
	// before it may still have reached Redis through the instance (the
	// cuts take a fraction of a millisecond, one after another).
	killDone time.Time
	// The reckill mix (chaos3_test.go): serve's background reconciler.
	rec     *reservation.Reconciler
	recStop func()
	recDone chan struct{}
	cur     *config.Config // the config a reload gave it
	inPass  atomic.Bool    // a background pass is running
}

func (in *chaosInst) killedAt() (time.Time, bool) {
	in.mu.Lock()
	defer in.mu.Unlock()
	return in.killed, !in.killed.IsZero()
}

// startChaosInst is StartProxyWith (serve's wiring) plus the queue
// workers, serving on a listener and reaching the shop through a relay
// that a kill can cut.
func startChaosInst(t *testing.T, cfg *config.Config, shopAddr string, gen int) *chaosInst {
	t.Helper()
	relay := startChaosRelay(t, shopAddr)
	cfg.Upstream.URL = "http://" + relay.addr
	var rrelay *chaosRelay
	if !cfg.Redis.Cluster && len(cfg.Redis.Addrs) == 1 {
		// Its Redis connections through a relay of its own too: a kill
		// cuts them and every later dial (rueidis' Close racing a redial
		// in progress keeps the new connection: seen in TestChaos).
		rrelay = startChaosRelay(t, cfg.Redis.Addrs[0])
		cfg.Redis.Addrs = []string{rrelay.addr}
	}
	log := zap.NewNop()
	if os.Getenv("CHAOS_ZAP") != "" { // the instances' logs on stderr, for a replay
		log = zap.Must(zap.NewDevelopment()).With(zap.Int("gen", gen))
	}
	st, err := store.Open(cfg.Redis, log)
	if err != nil {
		t.Fatalf("store.Open: %v", err)
	}
	m := metrics.New()
	pipe := admission.New(st, m, log, time.Now)
	pipe.Apply(cfg)
	runCtx, stopRun := context.WithCancel(context.Background())
	ran := make(chan struct{})
	go func() { defer close(ran); pipe.Run(runCtx) }()
	srv, err := proxy.New(cfg, pipe, st, m, log)
	if err != nil {
		t.Fatalf("proxy.New: %v", err)
	}
	raw, err := net.Listen("tcp", cfg.Listen)
	if err != nil {
		t.Fatalf("listen %s: %v", cfg.Listen, err)
	}
	ln := &chaosConns{Listener: raw, conns: map[net.Conn]bool{}}
	served := make(chan struct{})
	go func() { defer close(served); _ = srv.Serve(ln) }()
	in := &chaosInst{Proxy: &Proxy{Addr: raw.Addr().String(), Cfg: cfg, Store: st, Server: srv, Pipeline: pipe, Metrics: m},
		gen: gen, ln: ln, relay: relay, rrelay: rrelay, stop: stopRun}
	in.q = reservation.NewQueue(st, m, log, reservation.QueueOptions{
		Consumer: fmt.Sprintf("chaos-g%d", gen), Inflight: srv.Inflight(), Hold: pipe.ClockProblem,
		ClaimIdle: 3 * time.Second, Poll: 50 * time.Millisecond,
	})
	in.q.Start(cfg)
	t.Cleanup(func() {
		if _, dead := in.killedAt(); dead {
			// What is left of a killed instance: goroutines whose every
			// Redis call, shop request and client write fails.
			in.q.Kill()
			ctx, cancel := context.WithTimeout(context.Background(), time.Second)
			_ = srv.Shutdown(ctx)
			cancel()
			<-served
			stopRun()
			<-ran
			pipe.Close()
			st.Close()
			return
		}
		in.q.Stop()
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		_ = srv.Shutdown(ctx)
		<-served
		stopRun()
		<-ran
		pipe.Close()
		st.Close()
	})
	return in
}

// kill emulates SIGKILL: at one instant every socket the process had is
// gone — its Redis connections (on a single node its relay to Redis is
// cut: no byte of it reaches Redis after that, no redial gets through;
// and rueidis' Close: later calls fail with ErrClosing; what was already
// relayed is Redis's, as the kernel would have sent it), its connections to the shop (the relay
// cuts them: a request written after the kill never arrives, one already
// relayed does), its buyers' connections and its listener — and nothing
// is drained: no retrier job runs again, no confirm, no queue ack, no
// graceful Shutdown, no lease or roll-call left. What it does not
// emulate: the Go process lives on, so goroutines go on running code that
// touches only memory (their every outside call fails), and a reply that
// Redis or the shop had already put on the wire before the kill can still
// be read by them (it changes nothing outside: the next call fails).
func (in *chaosInst) kill() {
	in.mu.Lock()
	in.killed = time.Now()
	in.mu.Unlock()
	if in.rrelay != nil {
		in.rrelay.cut()
	}
	if cl, err := in.Store.Client(); err == nil {
		go cl.Close() // it waits for replies already due; later calls fail at once
	}
	if in.rrelay == nil {
		// A cluster's nodes are dialled at the addresses they announce,
		// past any relay: close the client again and again, for a
		// connection a redial in progress opened after the first Close
		// (or a client the store's background redial made later).
		go func() {
			for i := 0; i < 2000; i++ {
				time.Sleep(5 * time.Millisecond)
				if cl, err := in.Store.Client(); err == nil {
					cl.Close()
				}
			}
		}()
	}
	in.relay.cut()
	in.ln.cut()
	in.stop()
	in.mu.Lock()
	recStop := in.recStop
	in.killDone = time.Now()
	in.mu.Unlock()
	if recStop != nil {
		// Its pass's calls fail, and so does its let-go (ReleaseLease, on
		// a context of its own): the lease stays until its TTL. On a
		// cluster the client is closed, not cut, and a call may still
		// reach a node a few ms after the kill (seed 234, §57; see
		// checkLeaseKills).
		recStop()
	}
	go in.q.Kill()
}

// chaosConns is a listener that remembers its connections, so a kill can
// close them all at once.
type chaosConns struct {
	net.Listener
	mu    sync.Mutex
	conns map[net.Conn]bool
	dead  bool
}

func (l *chaosConns) Accept() (net.Conn, error) {
	c, err := l.Listener.Accept()
	if err != nil {
		return nil, err
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.dead {
		_ = c.Close()
		return nil, net.ErrClosed
	}
	l.conns[c] = true
	return &chaosConn{Conn: c, l: l}, nil
}

func (l *chaosConns) cut() {
	l.mu.Lock()
	l.dead = true
	cs := l.conns
	l.conns = map[net.Conn]bool{}
	l.mu.Unlock()
	_ = l.Listener.Close()
	chaosReset(cs)
}

// chaosReset closes every connection of cs with a reset, as the kernel
// does for a killed process's sockets with unread data.
func chaosReset(cs map[net.Conn]bool) {
	for c := range cs {
		if tc, ok := c.(*net.TCPConn); ok {
			_ = tc.SetLinger(0)
		}
		_ = c.Close()
	}
}

type chaosConn struct {
	net.Conn
	l    *chaosConns
	once sync.Once
}

func (c *chaosConn) Close() error {
	c.once.Do(func() {
		c.l.mu.Lock()
		delete(c.l.conns, c.Conn)
		c.l.mu.Unlock()
	})
	return c.Conn.Close()
}

// chaosRelay is a TCP relay between one instance and the shop: cut
// closes it and every connection through it at once.
type chaosRelay struct {
	addr, to string
	ln       net.Listener
	mu       sync.Mutex
	conns    map[net.Conn]bool
	outs     map[string]bool // local addresses of its connections to the shop
	dead     bool
}

// made says whether the relay connected to the shop from addr.
func (r *chaosRelay) made(addr string) bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.outs[addr]
}

func startChaosRelay(t *testing.T, to string) *chaosRelay {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatalf("relay: %v", err)
	}
	r := &chaosRelay{addr: ln.Addr().String(), to: to, ln: ln, conns: map[net.Conn]bool{}, outs: map[string]bool{}}
	t.Cleanup(r.cut)
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			go r.pipe(c)
		}
	}()
	return r
}

func (r *chaosRelay) track(cs ...net.Conn) bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.dead {
		return false
	}
	for _, c := range cs {
		r.conns[c] = true
	}
	r.outs[cs[1].LocalAddr().String()] = true
	return true
}

func (r *chaosRelay) pipe(in net.Conn) {
	out, err := net.DialTimeout("tcp", r.to, time.Second)
	if err != nil {
		_ = in.Close()
		return
	}
	if !r.track(in, out) {
		_ = in.Close()
		_ = out.Close()
		return
	}
	done := make(chan struct{}, 2)
	cp := func(dst, src net.Conn) {
		_, _ = io.Copy(dst, src)
		if tc, ok := dst.(*net.TCPConn); ok {
			_ = tc.CloseWrite()
		}
		done <- struct{}{}
	}
	go cp(out, in)
	go cp(in, out)
	<-done
	<-done
	_ = in.Close()
	_ = out.Close()
	r.mu.Lock()
	delete(r.conns, in)
	delete(r.conns, out)
	r.mu.Unlock()
}

func (r *chaosRelay) cut() {
	r.mu.Lock()
	r.dead = true
	cs := r.conns
	r.conns = map[net.Conn]bool{}
	r.mu.Unlock()
	_ = r.ln.Close()
	chaosReset(cs)
}

// chaosKill is one instance killed: which, when.
type chaosKill struct {
	gen int
	at  time.Time
}

func (c *chaosEnv) shopAddr() string { return strings.TrimPrefix(c.shop.URL, "http://") }

// inst is the instance serving slot i now (maybe killed, its successor
// not started yet: its address refuses connections).
func (c *chaosEnv) inst(i int) *chaosInst {
	c.pmu.Lock()
	defer c.pmu.Unlock()
	return c.insts[i]
}

// live is every instance serving, none killed.
func (c *chaosEnv) live() []*Proxy {
	c.pmu.Lock()
	defer c.pmu.Unlock()
	var out []*Proxy
	for _, in := range c.insts {
		if _, dead := in.killedAt(); !dead {
			out = append(out, in.Proxy)
		}
	}
	return out
}

// killSteps: with the kill mix, one or two instances killed mid-sale
// (chaosInst.kill) and, 100–800 ms later, a fresh instance started in its
// slot on the same Redis with the config the fleet runs then (as an
// orchestrator restarts a crashed pod: a new process, a new queue
// consumer; nothing of the old one's memory).
func (c *chaosEnv) killSteps(chaosFor time.Duration) []chaosStep {
	if !c.mix.kill {
		return nil
	}
	rng := rand.New(rand.NewSource(c.seed ^ 0x6b11))
	var steps []chaosStep
	at := 300*time.Millisecond + time.Duration(rng.Int63n(int64(chaosFor/3)))
	for k, n := 0, 1+rng.Intn(2); k < n && at < chaosFor-500*time.Millisecond; k++ {
		slot := rng.Intn(2)
		gap := time.Duration(100+rng.Intn(700)) * time.Millisecond
		steps = append(steps, chaosStep{at, func() { c.killAndReplace(slot, gap) }})
		at += gap + time.Duration(500+rng.Intn(1500))*time.Millisecond
	}
	return steps
}

// killAndReplace kills the instance in slot and, gap later, starts its
// successor there.
func (c *chaosEnv) killAndReplace(slot int, gap time.Duration) {
	c.killAndReplaceThen(slot, gap, nil)
}

// killAndReplaceThen is killAndReplace, calling killed (if not nil) once
// the instance is dead, before its successor starts.
func (c *chaosEnv) killAndReplaceThen(slot int, gap time.Duration, killed func()) {
	in := c.inst(slot)
	if _, dead := in.killedAt(); dead {
		if killed != nil {
			killed()
		}
		return // its successor is not up yet
	}
	in.kill()
	if killed != nil {
		killed()
	}
	at, _ := in.killedAt()
	c.mu.Lock()
	c.kills = append(c.kills, chaosKill{gen: in.gen, at: at})
	c.mu.Unlock()
	c.logf("killed instance %d (slot %d); its successor in %v", in.gen, slot, gap)
	time.Sleep(gap)
	c.pmu.Lock()
	gen := len(c.all)
	next := startChaosInst(c.t, c.config(c.curB, c.curVar), c.shopAddr(), gen)
	c.startRec(next)
	c.insts[slot] = next
	c.all = append(c.all, next)
	withB := c.curB
	c.pmu.Unlock()
	c.logf("started instance %d in slot %d (B %v)", gen, slot, withB)
}

// killedGen is when instance gen was killed, if it was.
func (c *chaosEnv) killedGen(gen int) (time.Time, bool) {
	c.pmu.Lock()
	defer c.pmu.Unlock()
	for _, in := range c.all {
		if in.gen == gen {
			return in.killedAt()
		}
	}
	return time.Time{}, false
}

// killSpan is when instance gen's kill began and when its last cut was
// made (the kill's instant, as the emulation makes it).
func (c *chaosEnv) killSpan(gen int) (from, to time.Time, ok bool) {
	c.pmu.Lock()
	defer c.pmu.Unlock()
	for _, in := range c.all {
		if in.gen == gen {
			in.mu.Lock()
			defer in.mu.Unlock()
			return in.killed, in.killDone, !in.killed.IsZero()
		}
	}
	return time.Time{}, time.Time{}, false
}

// senderGen is the instance whose relay made the shop connection from
// addr (the shop's RemoteAddr), -1 if none.
func (c *chaosEnv) senderGen(addr string) int {
	c.pmu.Lock()
	defer c.pmu.Unlock()
	for _, in := range c.all {
		if in.relay.made(addr) {
			return in.gen
		}
	}
	return -1
}

// leftByAKill says whether an untold reservation of user (record field)
// may be one a killed instance made and never answered: the user had a
// request on that instance, sent before the kill, that got no answer or
// STORE_UNAVAILABLE (its abort was in the dead retrier), and the reserve
// ran between that request and the kill. When the reserve ran is Redis's
// first script call naming the token id (MONITOR), else the record's
// stamp (the proxy's clock before the call; a queue worker's claim
// re-stamps it with the send, so MONITOR's comes first). SPEC §6: such a
// reservation is the reconciler's, or (queue mode, its entry written) the
// workers'; the final repair checks it settles.
func (c *chaosEnv) leftByAKill(answers []chaosAnswer, act, user, field string, createdMs int64) bool {
	_, id, _ := strings.Cut(field, ":")
	if ran, ok := c.mon.ran(id); ok && ran.UnixMilli() < createdMs {
		createdMs = ran.UnixMilli()
	}
	for _, a := range answers {
		if a.act != act || a.user != user || a.bad != "" || (a.err == nil && a.code != "STORE_UNAVAILABLE") {
			continue
		}
		// Sent before the kill's last cut (§57: seed 95's request reached
		// the instance 0.1 ms into its kill, its reserve reached Redis
		// before the relay's cut closed that connection).
		_, k, dead := c.killSpan(a.gen)
		if dead && !k.IsZero() && !a.sent.After(k) && createdMs >= a.sent.UnixMilli()-1 && createdMs <= k.UnixMilli()+1 {
			return true
		}
	}
	return false
}

// resentAfterAKill says whether a token sent twice is a queue-mode entry
// a killed instance's worker sent before it died and another instance's
// worker sent again after taking the entry over (README, queue mode: "A
// worker killed mid-request leaves its entry for another (XAUTOCLAIM),
// which re-sends with the same X-Seckill-Token or settles it by
// verify.url"). Sync mode never sends again.
func (c *chaosEnv) resentAfterAKill(s chaosSent) bool {
	if s.act != chaosB || s.n != 2 || len(s.from) != 2 {
		return false
	}
	first := c.senderGen(s.from[0])
	k, dead := c.killedGen(first)
	return dead && !s.at[0].After(k) && c.senderGen(s.from[1]) != first
}

// quiet waits until what the checker reads from Redis stops changing:
// every stock and reservations hash of both activities the same in two
// reads 600 ms apart (longer than a queue worker's settle backs off
// between tries, 100–400 ms, before it hands the settle to the retrier).
// The checker reads a shard's counters and its records in two commands;
// a settle landing between them is not a broken invariant.
func (c *chaosEnv) quiet() {
	snap := func() string {
		var b strings.Builder
		for _, addr := range c.addrs() {
			for _, act := range []string{chaosA, chaosB, chaosC} {
				keys, _ := redistest.Do(addr, "KEYS", "*{"+act+":*")
				ks := rtLines(keys)
				sort.Strings(ks)
				for _, k := range ks {
					if strings.Contains(k, ":stock:") || strings.HasSuffix(k, ":res") {
						v, _ := redistest.Do(addr, "HGETALL", k)
						b.WriteString(k + "=" + v + "\n")
					}
				}
			}
		}
		return b.String()
	}
	deadline := time.Now().Add(15 * time.Second)
	prev := snap()
	for time.Now().Before(deadline) {
		time.Sleep(600 * time.Millisecond)
		cur := snap()
		if cur == prev {
			return
		}
		prev = cur
	}
	c.t.Logf("Redis still changing 15 s after the chaos")
}

// bundleOptions is C's harness activity.
func chaosBundleActivity(start, end time.Time, limit int64) Activity {
	return Activity{ID: chaosC, SKUs: []config.SKU{{ID: "a", Stock: chaosStockC}, {ID: "b", Stock: chaosStockC}},
		PerUserLimit: limit, Shards: 2, Pending: 4 * time.Second, Start: start, End: end, BundleRoute: bhBundleRoute}
}

// bundleBody is the bundle a:1,b:1.
var chaosBundleBody = []byte(`{"items":[{"sku":"a","qty":1},{"sku":"b","qty":1}]}`)

// do runs one command on the node that holds its key (the first
// argument after the command name).
func (c *chaosEnv) do() func(args ...string) (string, error) {
	if c.cluster {
		return bhKeyedDo(c.redis.Nodes)
	}
	return func(args ...string) (string, error) { return redistest.Do(c.addrs()[0], args...) }
}

// checkBundles is check for C: before the repair, bhAudit (per SKU shard
// i = r + p + c, records == counters, users == records, nobody above the
// limit) and no held bundle whose token no client was told (unless a
// killed instance left it, as for A and B); after the repair
// (bundleAfter), nothing pending, every SKU adds up, one order per
// confirmed bundle, every WIN confirmed with its order.
func (c *chaosEnv) checkBundles(answers []chaosAnswer) {
	t := c.t
	t.Helper()
	p := c.live()[0]
	states := bhAudit(t, c.do(), p, chaosC, chaosSKUsC, 2, chaosStockC, c.limitC)
	told := map[string]bool{}
	for _, a := range answers {
		if a.act == chaosC && a.token != "" {
			if tk, err := store.ParseToken(a.token); err == nil {
				told[tk.Field()] = true
			}
		}
	}
	left := 0
	for field, st := range states {
		if st == "x" || told[field] {
			continue
		}
		user, created := c.bundleRecord(p, field)
		if c.leftByAKill(answers, chaosC, user, field, created) {
			left++
			continue
		}
		if _, id, _ := strings.Cut(field, ":"); c.settledBeforeAFailover(id) {
			// §60: its settle ran on the master a failover replaced (§24).
			t.Logf("%s: bundle %s of %s is %s, untold, settled on the master a failover lost (%s)", chaosC, field, user, st, c.failoversText())
			continue
		}
		t.Errorf("%s: bundle %s of %s is %s but no client was told its token (STORE_UNAVAILABLE holds nothing)", chaosC, field, user, st)
	}
	if left > 0 {
		t.Logf("%s: %d held bundles left untold by killed instances", chaosC, left)
	}
}

// bundleAfter checks C after the final repair.
func (c *chaosEnv) bundleAfter(ctx context.Context, answers []chaosAnswer, orders map[string]string) {
	t := c.t
	t.Helper()
	p := c.live()[0]
	states := bhAudit(t, c.do(), p, chaosC, chaosSKUsC, 2, chaosStockC, c.limitC)
	mine := map[string]string{}
	lost := map[string]bool{}
	sends := c.shop.sends()
	for tok, o := range orders {
		if tk, err := store.ParseToken(tok); err == nil && tk.Activity == chaosC {
			if _, held := states[tk.Field()]; !held && c.lostToAFailoverAt(tk.ID, rtRecord{}, c.firstSeen(sends[tok], time.Now())) {
				// §10, §24: a bundle the dead master acknowledged and its
				// replica never got (no durable winners): the shop holds
				// its order, Redis no record, its units back on sale.
				lost[tok] = true
				continue
			}
			mine[tok] = o
		}
	}
	if c.mix.failover {
		t.Logf("%s: %d shop orders for bundles a failover lost (%s)", chaosC, len(lost), c.failoversText())
	}
	confirmed := settledStates(t, states, mine)
	st, err := c.op.Status(ctx, c.actC)
	if err != nil {
		t.Fatalf("status %s: %v", chaosC, err)
	}
	for _, k := range st.SKUs {
		t.Logf("%s after reconcile: %+v; shop orders %d, confirmed bundles %d", chaosC, k, len(mine), confirmed)
		if !k.OK || k.Pending != 0 || k.InTransit != 0 || k.Remaining+k.Confirmed != chaosStockC || k.Confirmed != int64(len(mine)) {
			t.Errorf("%s: sku %s does not add up after the reconcile: %+v, shop orders %d", chaosC, k.ID, k, len(mine))
		}
	}
	if confirmed != len(mine) {
		t.Errorf("%s: %d confirmed bundles, the shop holds %d orders", chaosC, confirmed, len(mine))
	}
	for _, a := range answers {
		if a.act != chaosC || !a.win {
			continue
		}
		tk, err := store.ParseToken(a.token)
		if err != nil {
			t.Errorf("%s: told token %q: %v", chaosC, a.token, err)
			continue
		}
		if lost[a.token] {
			continue // served by the shop; Redis lost it (counted above)
		}
		if _, held := states[tk.Field()]; !held && c.lostToAFailoverAt(tk.ID, rtRecord{}, c.firstSeen(sends[a.token], a.got)) {
			t.Logf("%s: %s told a win with %s, lost with the failed-over master, no order (§10, §24)", chaosC, a.user, a.token)
			continue
		}
		if states[tk.Field()] != "c" || orders[a.token] == "" {
			t.Errorf("%s: %s told a win (%d at %s) with %s: now %q, shop order %q", chaosC, a.user, a.status, a.got.Format("15:04:05.000"), a.token, states[tk.Field()], orders[a.token])
		}
	}
}

// bundleRecords is C's records by token field ("*:<id>"), from every
// shard's reservations hash (a bundle's record lives on its home shard),
// parsed as rtAuditAt parses A's and B's, for soldOut.
func (c *chaosEnv) bundleRecords(p *Proxy) map[string]rtRecord {
	t := c.t
	t.Helper()
	out := map[string]rtRecord{}
	for s := 0; s < 2; s++ {
		sk := p.Store.SKUKeys(chaosC, chaosSKUsC[0], 2).Shards[s]
		raw, err := c.do()("HGETALL", sk.Res)
		if err != nil {
			t.Errorf("HGETALL %s: %v", sk.Res, err)
			continue
		}
		f := rtLines(raw)
		for j := 0; j+1 < len(f); j += 2 {
			if strings.HasSuffix(f[j], ":i") {
				continue
			}
			parts := strings.Split(f[j+1], "|")
			if len(parts) < 3 {
				continue // bhAudit reports it
			}
			out[f[j]] = rtParseRecord(parts)
		}
	}
	return out
}

// bundleRecord is the user and stamp of C's record field.
func (c *chaosEnv) bundleRecord(p *Proxy, field string) (string, int64) {
	for s := 0; s < 2; s++ {
		sk := p.Store.SKUKeys(chaosC, chaosSKUsC[0], 2).Shards[s]
		rec, err := c.do()("HGET", sk.Res, field)
		if err != nil || rec == "" {
			continue
		}
		parts := strings.Split(rec, "|")
		var created int64
		if len(parts) > 3 {
			created, _ = strconv.ParseInt(parts[3], 10, 64)
		}
		return parts[1], created
	}
	return "", 0
}

// killsText lists the kills, for a failing run.
func (c *chaosEnv) killsText() string {
	c.mu.Lock()
	defer c.mu.Unlock()
	var out []string
	for _, k := range c.kills {
		out = append(out, fmt.Sprintf("gen %d at %s", k.gen, k.at.Format("15:04:05.000000")))
	}
	return strings.Join(out, ", ")
}
