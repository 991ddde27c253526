package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strconv"
	"time"

	"go.uber.org/zap"

	"github.com/seckill-proxy/seckill-proxy/config"
	"github.com/seckill-proxy/seckill-proxy/metrics"
	"github.com/seckill-proxy/seckill-proxy/reservation"
	"github.com/seckill-proxy/seckill-proxy/store"
)

// reconcileEvery is how often serve's background reconciler runs.
var reconcileEvery = time.Minute // a var only so a test can shorten it

// backgroundReconciler runs a repairing reconcile pass every minute on the
// one instance that gets the reconciler lease; the others skip the round.
func backgroundReconciler(ctx context.Context, rec *reservation.Reconciler, cfg func() *config.Config, log *zap.Logger) {
	t := time.NewTicker(reconcileEvery)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		acts, _ := activities(cfg(), "")
		rep, err := rec.Run(ctx, acts, true, time.Now())
		// A clock the guard does not trust (it logs why): another
		// instance reconciles meanwhile.
		if errors.Is(err, reservation.ErrLeaseHeld) || errors.Is(err, reservation.ErrClockSkewed) || ctx.Err() != nil {
			continue
		}
		if err != nil {
			log.Warn("background reconcile failed", zap.Error(err))
			continue
		}
		// Activities removed from the config whose reservations are still
		// pending: alerted (and logged) by the reconciler itself.
		if _, err := rec.Dropped(ctx, acts, time.Now()); err != nil && ctx.Err() == nil {
			log.Warn("background reconcile: activities not in the config not checked", zap.Error(err))
		}
		// Alerts and notes are logged by the reconciler itself.
		for _, a := range rep.Activities {
			if len(a.Stale) > 0 || a.MovesSettled > 0 {
				log.Info("reconciled", zap.String("activity", a.ID), zap.Int("stale", len(a.Stale)), zap.Int("moves", a.MovesSettled))
			}
		}
	}
}

func cmdReconcile(c *cli) error {
	fs := c.flags("-c FILE [--activity ID] [--repair] [--json] | --exceptions [--activity ID] [--json] | --export csv [--activity ID] [--out FILE]")
	act := fs.String("activity", "", "only this activity `ID` (default: all)")
	repair := fs.Bool("repair", false, "act on what the shop proves (default: report only)")
	asJSON := fs.Bool("json", false, "machine-readable output")
	wait := fs.Duration("lease-wait", reservation.DefaultLeaseWait, "with --repair, how long to wait for another reconciler's lease")
	exceptions := fs.Bool("exceptions", false, "list the recorded reconcile exceptions instead of running a pass")
	export := fs.String("export", "", "export the recorded reconcile exceptions in `FORMAT` (csv) instead of running a pass")
	out := fs.String("out", "", "with --export, write to `FILE` instead of stdout")
	if err := c.parse(); err != nil {
		return err
	}
	switch {
	case *exceptions && *export != "":
		return fail(exitUsage, "seckill-proxy reconcile: give --exceptions or --export, not both")
	case *export != "" && *export != "csv":
		return fail(exitUsage, "seckill-proxy reconcile: --export %q: the only format is csv", *export)
	case *out != "" && *export == "":
		return fail(exitUsage, "seckill-proxy reconcile: --out needs --export csv")
	case (*exceptions || *export != "") && *repair:
		return fail(exitUsage, "seckill-proxy reconcile: --repair runs a pass; --exceptions and --export only read what passes recorded")
	case *export != "" && *asJSON:
		return fail(exitUsage, "seckill-proxy reconcile: --json goes with --exceptions; --export writes csv")
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
	if *exceptions || *export != "" {
		return listExceptions(c, st, acts, *asJSON, *export != "", *out)
	}
	if *repair && cfg.Server.MaxClockSkew > 0 {
		// Ages are judged by this host's clock: a wrong one releases
		// winners the shop is still taking (server.max_clock_skew).
		cctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		nodes, _ := st.Clocks(cctx, time.Now)
		cancel()
		if _, _, problem := store.JudgeClocks(nodes, cfg.Server.MaxClockSkew); problem != "" {
			return fail(exitFailed, "reconcile --repair: %s: reservation ages would be misjudged; fix the clock (NTP) or run it from another host", problem)
		}
	}
	// A repairing run waits for a serve instance's background pass to
	// finish: two reconcilers never repair at once.
	rec := reservation.NewReconciler(st, metrics.New(), c.logger()).WithLeaseWait(*wait).WithExceptionsMax(cfg.Reconcile.ExceptionsMax)
	rep, err := rec.Run(context.Background(), acts, *repair, time.Now())
	if err != nil {
		return fail(exitFailed, "reconcile: %v", err)
	}
	if *act == "" {
		// The whole config: are activities it no longer names still
		// holding reservations in Redis?
		drops, err := rec.Dropped(context.Background(), acts, time.Now())
		if err != nil {
			fmt.Fprintf(c.stderr, "warning: activities not in the config were not checked: %v\n", err)
		}
		rep.Activities = append(rep.Activities, drops...)
	}
	if *asJSON {
		enc := json.NewEncoder(c.stdout)
		enc.SetIndent("", "  ")
		_ = enc.Encode(rep)
	} else {
		printReport(c, rep)
	}
	if rep.Alerting() {
		return &exitError{code: exitFailed, err: errors.New("reconcile found problems that need a person")}
	}
	return nil
}

func printReport(c *cli, rep reservation.Report) {
	for _, a := range rep.Activities {
		fmt.Fprintf(c.stdout, "activity %s (%s): %d stale pending, %d moves settled\n", a.ID, a.Phase, len(a.Stale), a.MovesSettled)
		for _, k := range a.SKUs {
			shop := "n/a"
			if k.ShopCount != nil {
				shop = strconv.FormatInt(*k.ShopCount, 10)
			}
			fmt.Fprintf(c.stdout, "  sku %s: initial %d remaining %d pending %d confirmed %d released %d shop %s unsettled %d ok=%v\n",
				k.ID, k.Initial, k.Remaining, k.Pending, k.Confirmed, k.Released, shop, k.Unsettled, k.OK)
		}
		for _, f := range a.Stale {
			fmt.Fprintf(c.stdout, "  %s user=%s qty=%d age=%s verdict=%s action=%s %s\n", f.Token, f.User, f.Qty,
				time.Duration(f.AgeMs)*time.Millisecond, f.Verdict, f.Action, f.Detail)
		}
		for _, n := range a.Notes {
			fmt.Fprintf(c.stdout, "  note: %s\n", n)
		}
		for _, al := range a.Alerts {
			fmt.Fprintf(c.stdout, "  ALERT %s\n", al)
		}
		if rep.Repair && len(a.Exceptions) > 0 {
			fmt.Fprintf(c.stdout, "  %d exceptions found, %d new recorded (reconcile --exceptions lists them)\n", len(a.Exceptions), a.ExceptionsRecorded)
		}
	}
}
