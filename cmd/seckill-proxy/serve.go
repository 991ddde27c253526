package main

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"os"
	"os/signal"
	"reflect"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"go.uber.org/zap"

	"github.com/seckill-proxy/seckill-proxy/admin"
	"github.com/seckill-proxy/seckill-proxy/admission"
	"github.com/seckill-proxy/seckill-proxy/collector"
	"github.com/seckill-proxy/seckill-proxy/config"
	"github.com/seckill-proxy/seckill-proxy/metrics"
	"github.com/seckill-proxy/seckill-proxy/preheat"
	"github.com/seckill-proxy/seckill-proxy/proxy"
	"github.com/seckill-proxy/seckill-proxy/reservation"
	"github.com/seckill-proxy/seckill-proxy/store"
)

func cmdServe(c *cli) error {
	c.flags("-c FILE")
	if err := c.parse(); err != nil {
		return err
	}
	cfg, err := c.config()
	if err != nil {
		return err
	}
	log := c.logger()
	m := metrics.New()
	st, err := store.Open(cfg.Redis, log.Named("store"))
	if err != nil {
		return fail(exitFailed, "serve: %v", err)
	}
	defer st.Close()
	st.KeepScriptsLoaded()
	st.Retrier().Observe(func(kind, outcome string) { m.RedisRetries.WithLabelValues(kind, outcome).Inc() })
	m.WatchReserveBatches(st.ReserveBatchStats)
	if err := refuseStrandedQueues(st, cfg, log); err != nil {
		return err
	}
	if err := refuseOpeningRunningSales(st, cfg, log); err != nil {
		return err
	}
	pipe := admission.New(st, m, log.Named("admission"), time.Now)
	pipe.Apply(cfg)
	defer pipe.Close()
	srv, err := proxy.New(cfg, pipe, st, m, log.Named("proxy"))
	if err != nil {
		return fail(exitFailed, "serve: %v", err)
	}
	// Signals are taken from before the listener opens: a SIGTERM in the
	// moments before the loop below waits in sigs and is a graceful stop
	// (it ended serve at once, with no drain: red-team finding).
	// SIGHUP has its own channel: the runtime drops a signal whose channel
	// is full, and with one channel a SIGTERM arriving while a SIGHUP
	// waited in it was lost, so serve never stopped (a config tool
	// reloading every few ms; red-team rr14). Reloads may coalesce; stops
	// may not.
	hups := make(chan os.Signal, 1)
	signal.Notify(hups, syscall.SIGHUP)
	sigs := make(chan os.Signal, 2)
	signal.Notify(sigs, syscall.SIGINT, syscall.SIGTERM)
	defer func() {
		// A SIGHUP while serve stops (a config tool reloading during a
		// deploy) is ignored until the process exits: restored to its
		// default it would kill serve before the deferred closes drain
		// the retry queue, exiting "signal: hangup" (red-team rr14).
		signal.Ignore(syscall.SIGHUP)
		signal.Stop(hups)
		signal.Stop(sigs)
	}()
	// The clock is compared with Redis's before the listener opens: an
	// instance started with a wrong clock takes no buy (server.max_clock_skew).
	cctx, ccancel := context.WithTimeout(context.Background(), 2*time.Second)
	pipe.CheckClock(cctx, st)
	ccancel()
	if p := pipe.ClockProblem(); p != "" {
		log.Error("starting with a clock Redis disagrees with", zap.String("problem", p))
	}
	ln, err := listenPublic(cfg.Listen)
	if err != nil {
		return fail(exitFailed, "serve: listen %s: %v", cfg.Listen, err)
	}
	adm := admin.New(m, readiness{st, srv, pipe}, cfg.AdminToken(), log.Named("admin"))
	aln, err := net.Listen("tcp", cfg.Admin.Listen)
	if err != nil {
		_ = ln.Close() // the admin listen error is the one to report
		return fail(exitFailed, "serve: admin listen %s: %v", cfg.Admin.Listen, err)
	}
	var cur struct {
		sync.Mutex
		cfg *config.Config
	}
	cur.cfg = cfg
	current := func() *config.Config { cur.Lock(); defer cur.Unlock(); return cur.cfg }
	rec := reservation.NewReconciler(st, m, log.Named("reconciler")).WithExceptionsMax(cfg.Reconcile.ExceptionsMax)
	admin.MountAll(adm, st, rec, m, current)
	adminSrv := &http.Server{Handler: adm, ReadHeaderTimeout: 10 * time.Second}

	ctx, stop := context.WithCancel(context.Background())
	defer stop()
	errc := make(chan error, 2)
	go func() { errc <- srv.Serve(ln) }()
	// The listener's workers made ready before the first wave (server.warm_workers).
	go srv.RunWarmups(ctx, ln.Addr().String())
	go func() { errc <- adminSrv.Serve(aln) }()
	go backgroundReconciler(ctx, rec.WithClockCheck(pipe.ClockProblem), current, log)
	// Redis-side gauges of /metrics (per node, per SKU): read once a
	// second here, never per scrape.
	go collector.New(st, m, current, log.Named("collector")).Run(ctx, collector.MinInterval)
	// Queue-mode workers run in every instance: the consumer group shares
	// the streams between them, a Redis bucket shares queue.rate.
	// Their sends take slots of the same in-flight budgets as the sync
	// winners (upstream.max_inflight).
	queue := reservation.NewQueue(st, m, log.Named("queue"), reservation.QueueOptions{Inflight: srv.Inflight(), Hold: pipe.ClockProblem})
	queue.Start(cfg)
	defer queue.Stop()
	// Scheduled preheats (preheat_at): every instance follows the
	// schedule, one loads the stock under a per-activity Redis lease.
	sched := preheat.New(st, current, log.Named("preheat"), preheat.Options{Registerer: m.Registry, LostSale: rec.LostSale})
	go sched.Run(ctx)
	// Local snapshots (flags, sold-out marks, blocklists, eligibility) and
	// the fleet roll call (limits.fleet), left on the way out.
	piped := make(chan struct{})
	go func() { defer close(piped); pipe.Run(ctx) }()
	for _, w := range secretWarnings(cfg) {
		log.Warn(w)
	}
	if st.DurableWinners() {
		go func() {
			for _, w := range st.DurableWarnings(ctx) {
				log.Warn(w)
			}
		}()
	}
	log.Info("serving", zap.String("listen", ln.Addr().String()), zap.String("admin", aln.Addr().String()),
		zap.Int("activities", len(cfg.Activities)), zap.String("upstream", cfg.Upstream.URL))

	reload := func(why string) {
		next, err := config.Load(c.cfgPath)
		if err != nil {
			log.Error("reload refused: config invalid; the old config stays", zap.String("trigger", why), zap.Error(err))
			return
		}
		if err := srv.Apply(next); err != nil {
			log.Error("reload refused", zap.String("trigger", why), zap.Error(err))
			return
		}
		pipe.Apply(next)
		cur.Lock()
		prev := cur.cfg
		cur.cfg = next
		cur.Unlock()
		for _, f := range restartOnly(prev, next) {
			log.Warn("this setting changed in the file but takes effect only on restart", zap.String("setting", f))
		}
		queue.Start(next)
		sched.Kick()
		for _, w := range secretWarnings(next) { // a rotation's new key may not be in the environment yet
			log.Warn(w)
		}
		log.Info("config reloaded", zap.String("trigger", why), zap.Int("activities", len(next.Activities)))
	}
	changed := make(chan struct{}, 1)
	if cfg.Watch {
		go watchFile(ctx, c.cfgPath, changed)
	}

	for {
		select {
		case err := <-errc:
			return fail(exitFailed, "serve: %v", err)
		case <-changed:
			reload("file changed")
		case <-hups:
			reload("SIGHUP")
		case sig := <-sigs:
			// Nothing is admitted from here on: buys held by fair_start are
			// answered 503 BUSY now (never let on early), the fleet roll
			// call is left at once (the others' shares grow), background
			// work stops. gracefulStop stops the queue workers alongside
			// the drain, within shutdown_timeout.
			srv.Drain()
			pipe.Drain()
			stop()
			gracefulStop(srv, queue, adminSrv, current().Server, sig, sigs, log)
			// The others' shares grow at their next beat, not FleetStale later.
			select {
			case <-piped:
			case <-time.After(2 * time.Second):
			}
			return nil
		}
	}
}

// watchFile signals changed whenever path's size or modification time
// changes (polled: works on every file system, editors' rename-saves included).
func watchFile(ctx context.Context, path string, changed chan<- struct{}) {
	stamp := func() string {
		fi, err := os.Stat(path)
		if err != nil {
			return ""
		}
		return fmt.Sprint(fi.Size(), fi.ModTime().UnixNano())
	}
	last := stamp()
	t := time.NewTicker(time.Second)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		if now := stamp(); now != "" && now != last {
			last = now
			select {
			case changed <- struct{}{}:
			default:
			}
		}
	}
}

// restartOnly names the settings that differ between two configs but are
// bound at start (listeners, the Redis connection), so a reload that
// changes them says so instead of silently keeping the old values.
func restartOnly(old, next *config.Config) []string {
	var out []string
	if old.Listen != next.Listen {
		out = append(out, "listen")
	}
	if old.Admin != next.Admin {
		out = append(out, "admin")
	}
	if !reflect.DeepEqual(old.Redis, next.Redis) {
		out = append(out, "redis")
	}
	if old.Watch != next.Watch {
		out = append(out, "watch")
	}
	// The listener's limits are set when it starts (fair_start_max_held is
	// applied on reload, by admission; warm_workers at the next warm-up).
	was, is := old.Server, next.Server
	was.FairStartMaxHeld, is.FairStartMaxHeld = 0, 0
	was.WarmWorkers, is.WarmWorkers = 0, 0
	if !reflect.DeepEqual(was, is) {
		out = append(out, "server")
	}
	if old.Reconcile.ExceptionsMax != next.Reconcile.ExceptionsMax {
		out = append(out, "reconcile.exceptions_max")
	}
	return out
}

// secretWarnings names the secrets whose environment variables are empty:
// the proxy still runs, but an operator should hear it at start, not from
// a shop rejecting every winner's signature.
func secretWarnings(cfg *config.Config) []string {
	var out []string
	for i, k := range cfg.SigningKeys() {
		switch {
		case k.Secret() != "":
		case i == 0:
			out = append(out, "signing secret $"+k.SecretEnv+" (key "+strconv.Quote(k.ID)+") is empty: X-Seckill-Signature is computed with an empty key, and a shop that verifies it will refuse every winner")
		default:
			out = append(out, "signing secret $"+k.SecretEnv+" (key "+strconv.Quote(k.ID)+") is empty: it signs nothing while it is not first, but moved first it would sign with an empty key")
		}
	}
	if cfg.AdminToken() == "" {
		out = append(out, "admin token $"+cfg.Admin.TokenEnv+" is empty: the /admin/ API is disabled (403)")
	}
	return out
}

// listenPublic listens for shoppers. Their connections get no TCP
// keep-alive probes: server.idle_timeout (always set) closes an idle
// connection first, so the probes would find nothing, and enabling them
// costs four setsockopt calls on every accepted connection: the first wave
// of a sale is a thousand new connections at once (issue 10).
func listenPublic(addr string) (net.Listener, error) {
	lc := net.ListenConfig{KeepAlive: -1}
	ln, err := lc.Listen(context.Background(), "tcp", addr)
	if err != nil {
		return nil, err
	}
	return patientListener{ln}, nil
}

// patientListener retries an accept that failed for want of file
// descriptors (EMFILE, ENFILE) or buffers, as net/http does: fasthttp takes
// any such error as permanent and its Serve returns, which ended serve —
// a connection flood at the open-file limit stopped the proxy (red-team
// finding). Connections close meanwhile and free descriptors.
type patientListener struct{ net.Listener }

func (l patientListener) Accept() (net.Conn, error) {
	wait := 5 * time.Millisecond
	for {
		c, err := l.Listener.Accept()
		if err == nil || !errors.Is(err, syscall.EMFILE) && !errors.Is(err, syscall.ENFILE) &&
			!errors.Is(err, syscall.ENOBUFS) && !errors.Is(err, syscall.ENOMEM) {
			return c, err
		}
		time.Sleep(wait)
		wait = min(2*wait, time.Second)
	}
}

// refuseStrandedQueues refuses to start serve with a file that no longer
// names an activity whose queue streams still hold buyers told 202 QUEUED:
// a reload drains them (reservation.Queue.Start), but a fresh serve knows
// only its file and would never send them (red-team finding,
// TestRT11FixRestartDroppingQueueActivityStrandsQueuedBuyers). Redis out of
// reach is a warning: serve starts, as it does for any other Redis trouble.
func refuseStrandedQueues(st *store.Store, cfg *config.Config, log *zap.Logger) error {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	ids, err := reservation.StrandedQueues(ctx, st, cfg, time.Now())
	if err != nil {
		log.Warn("serve: could not check for queued buyers of activities the file dropped", zap.Error(err))
		return nil
	}
	if len(ids) == 0 {
		return nil
	}
	file := "the file"
	if cfg.Path != "" {
		file = cfg.Path
	}
	return fail(exitFailed, "serve: %s no longer names %s, whose queue still holds buyers told 202 QUEUED; a fresh serve would never send them. "+
		"Put the activity back in %s and start again, so its queue workers send them (not paused: paused workers wait); "+
		"drop it once status shows its queue empty, or by a reload, which drains it", file, strings.Join(ids, ", "), file)
}

// refuseOpeningRunningSales refuses to start serve with a file that would
// open a running sale's buy path to the shop: one that drops a preheated
// activity before its end + pending_timeout, moves its buy or bundle
// route, or switches it to mode: shadow. A reload refuses the same
// (proxy keepsRunningSales); a fresh serve has no earlier config, so it
// judges by what each preheat recorded in Redis (proxy.OpenedSalesAtStart).
// Redis out of reach is a warning, as for refuseStrandedQueues: serve
// starts, as it does for any other Redis trouble. An activity preheated
// by an older build recorded nothing to judge by: a warning names it.
func refuseOpeningRunningSales(st *store.Store, cfg *config.Config, log *zap.Logger) error {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	refusal, unrecorded, err := proxy.OpenedSalesAtStart(ctx, st, cfg, time.Now())
	if err != nil {
		log.Warn("serve: could not check whether the file opens a running sale's buy path (Redis); starting", zap.Error(err))
	}
	for _, id := range unrecorded {
		in := cfg.Activity(id) != nil
		log.Warn("serve: activity preheated by an older build, which did not record its sale's end and routes: "+
			"serve cannot tell whether this file opens its buy path to the shop (the activity dropped from the file, its route moved, or switched to shadow). "+
			"If its sale still runs, keep it in the file as it runs; a preheat with that file (stock unchanged) records them",
			zap.String("activity", id), zap.Bool("in_file", in))
	}
	if refusal != nil {
		return fail(exitFailed, "serve: %v", refusal)
	}
	return nil
}
