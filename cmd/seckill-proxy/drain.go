package main

import (
	"context"
	"net/http"
	"os"
	"time"

	"go.uber.org/zap"

	"github.com/seckill-proxy/seckill-proxy/admin"
	"github.com/seckill-proxy/seckill-proxy/admission"
	"github.com/seckill-proxy/seckill-proxy/config"
	"github.com/seckill-proxy/seckill-proxy/proxy"
)

// readiness is /readyz: false once a graceful stop has begun, until the
// start-up warm-up is over, while the clock disagrees with Redis's, else
// whether Redis answers.
type readiness struct {
	redis admin.Checker
	srv   *proxy.Server
	pipe  *admission.Pipeline
}

func (r readiness) Ping(ctx context.Context) error {
	if r.srv.Draining() {
		return admin.ErrDraining
	}
	// Buys sent while the start-up warm-up runs wait behind it for the
	// CPU (proxy.Server.StartupWarmed): no buys before it is over.
	if !r.srv.StartupWarmed() {
		return admin.Unready("starting: the listener's workers are being made ready (server.warm_workers)")
	}
	if p := r.pipe.ClockProblem(); p != "" {
		return admin.Unready("clock: " + p)
	}
	return r.redis.Ping(ctx)
}

// queueStopper is the queue workers as gracefulStop stops them
// (reservation.Queue).
type queueStopper interface {
	Shutdown(ctx context.Context) error
}

// gracefulStop is serve's answer to SIGTERM or SIGINT:
//  1. readiness goes false and every new buy is answered 503 BUSY with
//     Retry-After (nothing reserved), for server.drain_delay, while the
//     listener stays open so balancers take the instance out first; buys
//     held by fair_start are answered the same at once (serve calls
//     admission's Drain before this), never let on early. Meanwhile the
//     queue workers stop: they read and claim nothing more, and the sends
//     already claimed finish;
//  2. what the queue workers still send finishes, then the listener
//     closes; buys already admitted finish at the shop and their confirms
//     or releases are written (proxy.Server.Shutdown): all of step 2 in at
//     most server.shutdown_timeout, so the whole stop is bounded by
//     drain_delay + shutdown_timeout (what README sizes
//     terminationGracePeriodSeconds by);
//  3. the admin listener (metrics, /readyz) closes last.
//
// A second signal skips what is left of the drain delay. Whatever the
// timeout cuts off stays pending in Redis for the reconciler; a queue
// entry not claimed stays in its stream for a takeover.
func gracefulStop(srv *proxy.Server, queue queueStopper, adminSrv *http.Server, sv config.Server, sig os.Signal, sigs <-chan os.Signal, log *zap.Logger) {
	t0 := time.Now()
	srv.Drain()
	log.Info("shutting down: not admitting buys, readiness false", zap.Stringer("signal", sig),
		zap.Duration("drain_delay", sv.DrainDelay), zap.Duration("shutdown_timeout", sv.ShutdownTimeout))
	// The queue workers stop from now on, alongside the drain delay; cut
	// (as a crash would) once shutdown_timeout has passed after it.
	qctx, qcut := context.WithCancel(context.Background())
	defer qcut()
	qdone := make(chan error, 1)
	go func() { qdone <- queue.Shutdown(qctx) }()
	if sv.DrainDelay > 0 {
		t := time.NewTimer(sv.DrainDelay)
	wait:
		for {
			select {
			case <-t.C:
				break wait
			case s := <-sigs: // SIGTERM or SIGINT (SIGHUP has its own channel: no reload while stopping)
				t.Stop()
				log.Info("second signal: drain delay cut short", zap.Stringer("signal", s))
				break wait
			}
		}
	}
	sctx, cancel := context.WithTimeout(context.Background(), sv.ShutdownTimeout)
	defer cancel()
	// The queue's sends end while this instance still holds their in-flight
	// slots, which Shutdown then gives back.
	select {
	case err := <-qdone:
		if err != nil {
			log.Warn("shutdown timeout: queue sends still in flight are left pending for the reconciler", zap.Error(err))
		}
	case <-sctx.Done():
		qcut()
		if err := <-qdone; err != nil {
			log.Warn("shutdown timeout: queue sends still in flight are left pending for the reconciler", zap.Error(err))
		}
	}
	if err := srv.Shutdown(sctx); err != nil {
		log.Warn("shutdown timeout: buys still in flight are left pending for the reconciler", zap.Error(err))
	} else {
		log.Info("buys in flight settled", zap.Duration("after", time.Since(t0)))
	}
	actx, acancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer acancel()
	_ = adminSrv.Shutdown(actx)
}
