package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/seckill-proxy/seckill-proxy/config"
	"github.com/seckill-proxy/seckill-proxy/lua"
	"github.com/seckill-proxy/seckill-proxy/metrics"
	"github.com/seckill-proxy/seckill-proxy/reservation"
	"github.com/seckill-proxy/seckill-proxy/store"
)

func cmdValidate(c *cli) error {
	c.flags("-c FILE")
	if err := c.parse(); err != nil {
		return err
	}
	cfg, err := c.config()
	if err != nil {
		return err
	}
	fmt.Fprintf(c.stdout, "%s: ok (%d activities)\n", cfg.Path, len(cfg.Activities))
	return nil
}

// open loads the config and connects to Redis for a one-shot command.
func (c *cli) open() (*config.Config, *store.Store, error) {
	cfg, err := c.config()
	if err != nil {
		return nil, nil, err
	}
	st, err := store.OpenNow(cfg.Redis, c.logger())
	if err != nil {
		return nil, nil, fail(exitFailed, "seckill-proxy %s: %v", c.name, err)
	}
	return cfg, st, nil
}

// openActivities is open plus the activities a command acts on: the one
// named by --activity, or all of them.
func (c *cli) openActivities(id string) (*store.Store, []*config.Activity, error) {
	cfg, st, err := c.open()
	if err != nil {
		return nil, nil, err
	}
	acts, err := activities(cfg, id)
	if err != nil {
		st.Close()
		return nil, nil, err
	}
	return st, acts, nil
}

func cmdPreheat(c *cli) error {
	fs := c.flags("-c FILE [--activity ID] [--force]")
	act := fs.String("activity", "", "only this activity `ID` (default: all)")
	force := fs.Bool("force", false, "overwrite stock of a running activity, deleting its reservations")
	if err := c.parse(); err != nil {
		return err
	}
	st, acts, err := c.openActivities(*act)
	if err != nil {
		return err
	}
	defer st.Close()
	failed := false
	ctx := context.Background()
	rec := reservation.NewReconciler(st, metrics.New(), c.logger())
	for _, a := range acts {
		now := time.Now()
		if !*force {
			// Redis lost a running sale (restarted empty, keys evicted):
			// it reads as never preheated, and loading it again sells
			// what the shop already sold. Only the shop can tell.
			lost, err := rec.PreheatRefusal(ctx, a, now)
			if err != nil {
				return fail(exitFailed, "preheat %s: %v", a.ID, err)
			}
			if lost != "" {
				failed = true
				fmt.Fprintf(c.stderr, "%s: refused: %s. Compare the shop's orders with what is to be sold, then preheat --force loads the configured stock anyway (pause the activity first)\n", a.ID, lost)
				continue
			}
		}
		var wiped store.ActivityStatus
		if *force {
			wiped, _ = st.Status(ctx, a) // what --force deletes, said after it
		}
		out, err := st.Preheat(ctx, a, *force, now)
		switch {
		case errors.Is(err, store.ErrRunning):
			failed = true
			fmt.Fprintf(c.stderr, "%s: refused: %v\n", a.ID, err)
		case err != nil:
			return fail(exitFailed, "preheat %s: %v", a.ID, err)
		default:
			var total int64
			for _, k := range a.SKUs {
				total += k.Stock
			}
			fmt.Fprintf(c.stdout, "%s: %s (%d SKUs, %d units, %d shards)\n", a.ID, out, len(a.SKUs), total, a.Shards)
			if w := wipedNote(wiped); w != "" && out == store.PreheatOverwritten {
				fmt.Fprintf(c.stderr, "warning: %s: %s\n", a.ID, w)
			}
			if out == store.PreheatCreated && !now.Before(a.Start) && a.Verify.CountURL == "" {
				fmt.Fprintf(c.stderr, "warning: %s: stock created inside its window (open since %s): if it was on sale before and Redis lost its keys (restarted without persistence, evicted), the units sold then are on sale again; with verify.count_url set, preheat asks the shop first and refuses\n",
					a.ID, a.Start.UTC().Format(time.RFC3339))
			}
		}
	}
	if ws := st.SettingsWarnings(context.Background()); len(ws) > 0 {
		for _, w := range ws {
			fmt.Fprintln(c.stderr, "warning: "+w)
		}
		fmt.Fprintln(c.stderr, "(seckill-proxy preflight -c "+c.cfgPath+" runs every sale-day check)")
	}
	if failed {
		return &exitError{code: exitFailed, err: errors.New("")}
	}
	return nil
}

// wipedNote says what a forced preheat deleted: the reservations st (read
// just before it) held, or "" when there were none.
func wipedNote(st store.ActivityStatus) string {
	var pending, confirmed, released int64
	for _, k := range st.SKUs {
		pending, confirmed, released = pending+k.Pending, confirmed+k.Confirmed, released+k.Released
	}
	if pending+confirmed+released == 0 {
		return ""
	}
	return fmt.Sprintf("--force deleted its reservations of %d unit(s) (%d pending, %d confirmed; %d released before), as read just before: their units are on sale again while the shop keeps the orders it took, their buyers may buy again, and nothing settles the pending ones any more",
		pending+confirmed, pending, confirmed, released)
}

func cmdPause(c *cli) error  { return switchCmd(c, true) }
func cmdResume(c *cli) error { return switchCmd(c, false) }

func switchCmd(c *cli, paused bool) error {
	fs := c.flags("-c FILE (ID | --all)")
	all := fs.Bool("all", false, "every activity in the config")
	c.takesArgs = true
	if err := c.parse(); err != nil {
		return err
	}
	if *all == (len(c.positional) == 1) || len(c.positional) > 1 {
		return fail(exitUsage, "seckill-proxy %s: give exactly one activity ID, or --all", c.name)
	}
	cfg, st, err := c.open()
	if err != nil {
		return err
	}
	defer st.Close()
	id := ""
	if !*all {
		id = c.positional[0]
	}
	acts, err := activities(cfg, id)
	if err != nil {
		return err
	}
	// Every activity is tried: a kill switch that stopped at the first
	// unreachable node would leave the rest on sale, unnamed.
	var failed, undurable []string
	for _, a := range acts {
		if err := st.SetPaused(context.Background(), a.ID, paused); err != nil {
			fmt.Fprintf(c.stderr, "%s %s: %v\n", c.name, a.ID, err)
			if errors.Is(err, store.ErrNotDurable) {
				undurable = append(undurable, a.ID)
			} else {
				failed = append(failed, a.ID)
			}
			continue
		}
		fmt.Fprintf(c.stdout, "%s: %sd\n", a.ID, c.name)
		// A switch on a sale never preheated here is legitimate (pause
		// before the preheat), but it is also what a file pointing at
		// the wrong Redis or key_prefix does: say which.
		if f, err := st.Flags(context.Background(), a.ID); err == nil && !f.Ready {
			fmt.Fprintf(c.stderr, "warning: %s is not preheated on %s (key_prefix %q): the switch is set there and takes effect once it is preheated; if the sale runs elsewhere, this file points at the wrong Redis or key_prefix\n",
				a.ID, strings.Join(cfg.Redis.Addrs, ","), cfg.Redis.KeyPrefix)
		}
	}
	switch {
	case len(failed) > 0:
		return fail(exitFailed, "%s: %d of %d activities NOT %sd: %s (the rest are%s); run it again once Redis answers",
			c.name, len(failed), len(acts), c.name, strings.Join(failed, ", "), undurableNote(undurable))
	case len(undurable) > 0:
		return fail(exitFailed, "%s: %d of %d activities %sd on the master but not on its replicas, so a failover could undo it: %s; run it again once the replicas are back",
			c.name, len(undurable), len(acts), c.name, strings.Join(undurable, ", "))
	}
	return nil
}

// undurableNote names the activities a switch set on the master only.
func undurableNote(ids []string) string {
	if len(ids) == 0 {
		return ""
	}
	return ", " + strings.Join(ids, ", ") + " on the master only, not on its replicas"
}

func cmdRelease(c *cli) error {
	fs := c.flags("-c FILE TOKEN [--reason R] [--force]")
	reason := fs.String("reason", "manual", "why: cancel, unpaid, refund, ...")
	force := fs.Bool("force", false, "release a pending reservation at once, without waiting until the shop can no longer take its buy (2 x upstream.timeout + 2s after the send)")
	c.takesArgs = true
	if err := c.parse(); err != nil {
		return err
	}
	if len(c.positional) != 1 {
		return fail(exitUsage, "seckill-proxy release: give exactly one TOKEN")
	}
	tok, err := store.ParseToken(c.positional[0])
	if err != nil {
		return fail(exitUsage, "seckill-proxy release: %q is not a reservation token", c.positional[0])
	}
	cfg, st, err := c.open()
	if err != nil {
		return err
	}
	defer st.Close()
	a := cfg.Activity(tok.Activity)
	if a == nil {
		return fail(exitFailed, "release: activity %q of the token is not in %s", tok.Activity, cfg.Path)
	}
	ctx := context.Background()
	f, err := st.Flags(ctx, tok.Activity)
	if err != nil {
		return fail(exitFailed, "release: %v", err)
	}
	code, waited, err := st.OperatorRelease(ctx, tok, f.Shards, *reason, config.MinPendingTimeout(cfg.Upstream), *force)
	if err != nil {
		return fail(exitFailed, "release: %v", err)
	}
	if waited > 0 {
		fmt.Fprintf(c.stderr, "%s: pending: waited %s, until the shop could no longer take its buy (2 x upstream.timeout + 2s after the send)\n", c.positional[0], waited.Round(100*time.Millisecond))
	}
	switch code {
	case lua.OK:
		fmt.Fprintf(c.stdout, "%s: released (%s)\n", c.positional[0], *reason)
	case lua.Confirmed:
		return fail(exitFailed, "release: not released: the shop took the order meanwhile (confirmed); release it again to cancel it, once the order is cancelled at the shop")
	case lua.Restamped:
		return fail(exitFailed, "release: refused: the reservation was sent to the shop meanwhile (a queue worker took it); try again once the shop has answered")
	case lua.Same:
		fmt.Fprintf(c.stdout, "%s: already released; nothing changed\n", c.positional[0])
	case lua.Unknown:
		if !f.Ready {
			// Not a mistyped token: nothing of the sale is there to find.
			return fail(exitFailed, "release: no reservation %s: Redis holds no stock of %s (its keys expire at end + key_ttl_after_end, %s; a Redis restarted without persistence loses them; or this file points at another Redis or key_prefix)",
				c.positional[0], a.ID, time.UnixMilli(store.ExpireAt(a)).UTC().Format(time.RFC3339))
		}
		return fail(exitFailed, "release: no reservation %s", c.positional[0])
	default:
		return fail(exitFailed, "release: refused (%s): stock counters of the shard are inconsistent; run status", code)
	}
	return nil
}

func cmdStatus(c *cli) error {
	fs := c.flags("-c FILE [--activity ID] [--json]")
	act := fs.String("activity", "", "only this activity `ID` (default: all)")
	asJSON := fs.Bool("json", false, "machine-readable output")
	if err := c.parse(); err != nil {
		return err
	}
	st, acts, err := c.openActivities(*act)
	if err != nil {
		return err
	}
	defer st.Close()
	var doc struct {
		Activities []activityStatus `json:"activities"`
	}
	ok := true
	now := time.Now()
	for _, a := range acts {
		s, err := st.Status(context.Background(), a)
		if err != nil {
			return fail(exitFailed, "status %s: %v", a.ID, err)
		}
		rec, err := st.PreheatRecord(context.Background(), a.ID)
		if err != nil {
			return fail(exitFailed, "status %s: %v", a.ID, err)
		}
		ok = ok && s.OK()
		st.WithPlacement(context.Background(), &s)
		doc.Activities = append(doc.Activities, activityStatus{ActivityStatus: s, Preheat: preheatStatusOf(a, rec, now)})
	}
	if *asJSON {
		enc := json.NewEncoder(c.stdout)
		enc.SetIndent("", "  ")
		if err := enc.Encode(doc); err != nil {
			return err
		}
	} else {
		tw := tabwriter.NewWriter(c.stdout, 0, 4, 2, ' ', tabwriter.AlignRight)
		fmt.Fprintln(tw, "activity\tsku\tinitial\tremaining\tpending\tconfirmed\treleased\tok\t")
		for _, a := range doc.Activities {
			for _, k := range a.SKUs {
				okText := "ok"
				switch {
				case !k.Preheated:
					okText = "not preheated"
				case !k.OK:
					okText = "BROKEN: " + k.Problem
				}
				if k.NotInConfig {
					okText += " (not in the config)"
				}
				fmt.Fprintf(tw, "%s\t%s\t%d\t%d\t%d\t%d\t%d\t%s\t\n", a.ID, k.ID, k.Initial, k.Remaining, k.Pending, k.Confirmed, k.Released, okText)
			}
		}
		_ = tw.Flush()
		for _, a := range doc.Activities {
			if line := a.Preheat.String(); line != "" {
				fmt.Fprintf(c.stdout, "%s: %s\n", a.ID, line)
			}
			if a.Placement != nil {
				fmt.Fprintf(c.stdout, "%s: %s\n", a.ID, a.Placement.Line())
			}
		}
	}
	// Shards per master: a reshard may have piled an activity's shards on
	// fewer masters since preheat (issue 11 §3).
	for _, a := range doc.Activities {
		switch {
		case a.PlacementError != "":
			fmt.Fprintf(c.stderr, "warning: %s: shard placement unknown: %s\n", a.ID, a.PlacementError)
		case a.Placement != nil && !a.Placement.Even:
			fmt.Fprintln(c.stderr, "warning: "+store.PlacementWarning(a.ID, *a.Placement))
		}
	}
	if *act == "" {
		// Activities removed from the config: nothing settles their
		// pending reservations (reconcile lists them).
		drops, err := st.DroppedActivities(context.Background(), activityIDs(acts), now)
		if err != nil {
			fmt.Fprintf(c.stderr, "warning: activities not in the config were not checked: %v\n", err)
		}
		for _, d := range drops {
			s, err := st.Status(context.Background(), d)
			if err != nil {
				fmt.Fprintf(c.stderr, "warning: %s: not in the config, but Redis holds its stock: %v\n", d.ID, err)
				continue
			}
			var pending int64
			for _, k := range s.SKUs {
				pending += k.Pending
			}
			if pending > 0 || !s.OK() {
				fmt.Fprintf(c.stderr, "warning: %s: not in the config, but Redis holds its stock with %d unit(s) pending: nothing settles them (seckill-proxy reconcile -c %s lists them)\n", d.ID, pending, c.cfgPath)
			}
		}
	}
	if !ok {
		return &exitError{code: exitFailed, err: errors.New("stock invariant broken: initial != remaining + pending + confirmed")}
	}
	return nil
}

// activityIDs is the ids of acts.
func activityIDs(acts []*config.Activity) []string {
	ids := make([]string, len(acts))
	for i, a := range acts {
		ids[i] = a.ID
	}
	return ids
}
