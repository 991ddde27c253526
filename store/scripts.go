package store

import (
	"context"
	"errors"
	"fmt"
	"sort"
	"time"

	"github.com/redis/rueidis"
	"go.uber.org/zap"

	"github.com/seckill-proxy/seckill-proxy/lua"
)

// LoadScripts compiles every script the proxy runs on every node it knows
// (SCRIPT LOAD), so the calls that follow are EVALSHA from the first one.
//
// A script Redis does not hold costs its first callers a wasted round trip
// (EVALSHA answered NOSCRIPT) and then an EVAL each with the whole script:
// rueidis falls back per call, so every buy of the first burst that was in
// flight sends reserve.lua (8 KB) and Redis hashes it again. Measured at a
// cold start (issue 10, BENCHMARKS.md): 264 EVALs of 40 µs in the first
// burst of the 1000users preset. Seed 002 §4.2: load the scripts at start.
// Redis does not pass SCRIPT LOAD to its replicas, so a master that took
// over, or one that restarted, holds none — see KeepScriptsLoaded.
func (s *Store) LoadScripts(ctx context.Context) error {
	c, err := s.Client()
	if err != nil {
		return err
	}
	all := lua.All()
	names := make([]string, 0, len(all))
	for name := range all {
		names = append(names, name)
	}
	sort.Strings(names)
	var errs []error
	for addr, n := range c.Nodes() {
		cmds := make(rueidis.Commands, len(names))
		for i, name := range names {
			cmds[i] = n.B().ScriptLoad().Script(all[name]).Build()
		}
		for i, r := range n.DoMulti(ctx, cmds...) {
			if err := r.Error(); err != nil {
				errs = append(errs, fmt.Errorf("%s: SCRIPT LOAD %s: %w", addr, names[i], err))
				break // one is enough to tell what is wrong with this node
			}
		}
	}
	return errors.Join(errs...)
}

// KeepScriptsLoaded loads the scripts on every node now, in the background,
// retrying while Redis cannot be reached, and again whenever a connection's
// client-side cache is dropped whole: the connection closed, so the node
// may have restarted empty or a replica may have taken over, and neither
// holds scripts. `serve` calls it once; Close stops it.
func (s *Store) KeepScriptsLoaded() {
	go func() {
		const first, most = 250 * time.Millisecond, 5 * time.Second
		wait := first
		failing := false
		for {
			ctx, cancel := context.WithTimeout(context.Background(), max(5*s.timeout, time.Second))
			err := s.LoadScripts(ctx)
			cancel()
			if err != nil {
				if !failing {
					s.log.Warn("redis scripts not loaded yet; retrying", zap.Error(err))
				}
				failing = true
				select {
				case <-s.stop:
					return
				case <-time.After(wait):
				}
				wait = min(2*wait, most)
				continue
			}
			if failing {
				s.log.Info("redis scripts loaded")
			}
			failing, wait = false, first
			select {
			case <-s.stop:
				return
			case <-s.scriptsLost:
			}
		}
	}()
}
