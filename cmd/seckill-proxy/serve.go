package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"net/http"
	"os"
	"os/signal"
	"sync"
	"syscall"
	"time"

	"go.uber.org/zap"

	"github.com/seckill-proxy/seckill-proxy/admin"
	"github.com/seckill-proxy/seckill-proxy/admission"
	"github.com/seckill-proxy/seckill-proxy/config"
	"github.com/seckill-proxy/seckill-proxy/metrics"
	"github.com/seckill-proxy/seckill-proxy/proxy"
	"github.com/seckill-proxy/seckill-proxy/reservation"
	"github.com/seckill-proxy/seckill-proxy/store"
)

// reconcileEvery is how often serve's background reconciler runs.
const reconcileEvery = time.Minute

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
	pipe := admission.New(st, m, log.Named("admission"), time.Now)
	srv, err := proxy.New(cfg, pipe, st, m, log.Named("proxy"))
	if err != nil {
		return fail(exitFailed, "serve: %v", err)
	}
	ln, err := net.Listen("tcp", cfg.Listen)
	if err != nil {
		return fail(exitFailed, "serve: listen %s: %v", cfg.Listen, err)
	}
	adm := admin.New(m, st, cfg.AdminToken(), log.Named("admin"))
	aln, err := net.Listen("tcp", cfg.Admin.Listen)
	if err != nil {
		ln.Close()
		return fail(exitFailed, "serve: admin listen %s: %v", cfg.Admin.Listen, err)
	}
	var cur struct {
		sync.Mutex
		cfg *config.Config
	}
	cur.cfg = cfg
	current := func() *config.Config { cur.Lock(); defer cur.Unlock(); return cur.cfg }
	rec := reservation.NewReconciler(st, m, log.Named("reconciler"))
	registerAdminAPI(adm, st, rec, m, current)
	adminSrv := &http.Server{Handler: adm, ReadHeaderTimeout: 10 * time.Second}

	ctx, stop := context.WithCancel(context.Background())
	defer stop()
	errc := make(chan error, 2)
	go func() { errc <- srv.Serve(ln) }()
	go func() { errc <- adminSrv.Serve(aln) }()
	go backgroundReconciler(ctx, st, rec, current, log)
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
		cur.Lock()
		cur.cfg = next
		cur.Unlock()
		log.Info("config reloaded", zap.String("trigger", why), zap.Int("activities", len(next.Activities)))
	}
	changed := make(chan struct{}, 1)
	if cfg.Watch {
		go watchFile(ctx, c.cfgPath, changed)
	}

	sigs := make(chan os.Signal, 1)
	signal.Notify(sigs, syscall.SIGHUP, syscall.SIGINT, syscall.SIGTERM)
	defer signal.Stop(sigs)
	for {
		select {
		case err := <-errc:
			return fail(exitFailed, "serve: %v", err)
		case <-changed:
			reload("file changed")
		case sig := <-sigs:
			if sig == syscall.SIGHUP {
				reload("SIGHUP")
				continue
			}
			log.Info("shutting down", zap.Stringer("signal", sig))
			stop()
			sctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			_ = srv.Shutdown(sctx)
			_ = adminSrv.Shutdown(sctx)
			cancel()
			return nil
		}
	}
}

// backgroundReconciler runs a repairing reconcile pass every minute on the
// one instance holding the lease.
func backgroundReconciler(ctx context.Context, st *store.Store, rec *reservation.Reconciler, cfg func() *config.Config, log *zap.Logger) {
	host, _ := os.Hostname()
	holder := fmt.Sprintf("%s/%d/%d", host, os.Getpid(), time.Now().UnixNano())
	t := time.NewTicker(reconcileEvery)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		ok, err := st.TryLease(ctx, "reconciler", holder, 2*reconcileEvery)
		if err != nil || !ok {
			continue
		}
		acts, _ := activities(cfg(), "")
		rep, err := rec.Run(ctx, acts, true, time.Now())
		if err != nil {
			log.Warn("background reconcile failed", zap.Error(err))
			continue
		}
		for _, a := range rep.Activities {
			for _, al := range a.Alerts {
				log.Error("reconcile alert", zap.String("activity", a.ID), zap.String("alert", al))
			}
			if len(a.Stale) > 0 || a.MovesSettled > 0 {
				log.Info("reconciled", zap.String("activity", a.ID), zap.Int("stale", len(a.Stale)), zap.Int("moves", a.MovesSettled))
			}
		}
	}
}

func cmdReconcile(c *cli) error {
	fs := c.flags("-c FILE [--activity ID] [--repair] [--json]")
	act := fs.String("activity", "", "only this activity `ID` (default: all)")
	repair := fs.Bool("repair", false, "act on what the shop proves (default: report only)")
	asJSON := fs.Bool("json", false, "machine-readable output")
	if err := c.parse(); err != nil {
		return err
	}
	cfg, st, err := c.open()
	if err != nil {
		return err
	}
	defer st.Close()
	acts, err := activities(cfg, *act)
	if err != nil {
		return err
	}
	rec := reservation.NewReconciler(st, metrics.New(), c.logger())
	rep, err := rec.Run(context.Background(), acts, *repair, time.Now())
	if err != nil {
		return fail(exitFailed, "%v", err)
	}
	if *asJSON {
		enc := json.NewEncoder(c.stdout)
		enc.SetIndent("", "  ")
		_ = enc.Encode(rep)
	} else {
		for _, a := range rep.Activities {
			fmt.Fprintf(c.stdout, "activity %s: %d stale pending, %d moves settled\n", a.ID, len(a.Stale), a.MovesSettled)
			for _, k := range a.SKUs {
				fmt.Fprintf(c.stdout, "  sku %s: initial %d remaining %d pending %d confirmed %d released %d ok=%v\n",
					k.ID, k.Initial, k.Remaining, k.Pending, k.Confirmed, k.Released, k.OK)
			}
			for _, f := range a.Stale {
				fmt.Fprintf(c.stdout, "  %s user=%s qty=%d age=%s verdict=%s action=%s %s\n", f.Token, f.User, f.Qty,
					time.Duration(f.AgeMs)*time.Millisecond, f.Verdict, f.Action, f.Detail)
			}
			for _, al := range a.Alerts {
				fmt.Fprintf(c.stdout, "  ALERT %s\n", al)
			}
		}
	}
	if rep.Alerting() {
		return &exitError{code: exitFailed, err: errors.New("reconcile found problems that need a person")}
	}
	return nil
}

func registerAdminAPI(adm *admin.Server, st *store.Store, rec *reservation.Reconciler, m *metrics.Metrics, cfg func() *config.Config) {
	(&admin.API{Store: st, Reconciler: rec, Config: cfg}).Register(adm)
	(&admin.Dashboard{Store: st, Metrics: m, Config: cfg}).Register(adm)
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
