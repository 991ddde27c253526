package main

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/seckill-proxy/seckill-proxy/admin"
	"github.com/seckill-proxy/seckill-proxy/store"
)

// listFlag collects a repeatable flag; commas also separate values.
type listFlag []string

func (l *listFlag) String() string { return strings.Join(*l, ",") }
func (l *listFlag) Set(v string) error {
	for _, p := range strings.Split(v, ",") {
		if p = strings.TrimSpace(p); p != "" {
			*l = append(*l, p)
		}
	}
	return nil
}

func cmdBlock(c *cli) error   { return blockCmd(c, true) }
func cmdUnblock(c *cli) error { return blockCmd(c, false) }

// blockCmd adds to or removes from the shared blocklists; every proxy
// instance obeys within its refresh period (milliseconds).
func blockCmd(c *cli, add bool) error {
	usage := "-c FILE (--ip X | --device D | --user U)..."
	if add {
		usage += " [--ttl 10m]"
	}
	fs := c.flags(usage)
	var ips, devices, users listFlag
	fs.Var(&ips, "ip", "IP `address` (repeatable, or comma-separated)")
	fs.Var(&devices, "device", "device `id` (repeatable)")
	fs.Var(&users, "user", "user `id` (repeatable)")
	var ttl *time.Duration
	if add {
		ttl = fs.Duration("ttl", 0, "how long the entries last (default: until unblocked)")
	}
	if err := c.parse(); err != nil {
		return err
	}
	if len(ips)+len(devices)+len(users) == 0 {
		c.fs.Usage()
		return fail(exitUsage, "seckill-proxy %s: give at least one --ip, --device or --user", c.name)
	}
	if ttl != nil && *ttl < 0 {
		return fail(exitUsage, "seckill-proxy %s: --ttl must be positive", c.name)
	}
	kinds := map[string][]string{store.BlockIP: ips, store.BlockDevice: devices, store.BlockUser: users}
	for _, kind := range store.BlockKinds {
		vals := kinds[kind]
		if len(vals) == 0 {
			continue
		}
		v, err := admin.ValidateListValues(kind, vals)
		if err != nil {
			return fail(exitUsage, "seckill-proxy %s: --%s: %v", c.name, kind, err)
		}
		kinds[kind] = v
	}
	cfg, st, err := c.open()
	if err != nil {
		return err
	}
	defer st.Close()
	// Entries are stored in the canonical form the proxy gives ids under
	// this config (case_fold, numeric), or they would match nobody.
	for _, kind := range store.BlockKinds {
		if len(kinds[kind]) == 0 {
			continue
		}
		if kinds[kind], err = admin.CanonicalListValues(&cfg.Identity, kind, kinds[kind]); err != nil {
			return fail(exitUsage, "seckill-proxy %s: --%s: %v", c.name, kind, err)
		}
	}
	ctx := context.Background()
	var undurable []string
	for _, kind := range store.BlockKinds {
		vals := kinds[kind]
		if len(vals) == 0 {
			continue
		}
		if add {
			err = st.BlockAdd(ctx, kind, vals, *ttl, time.Now())
		} else {
			err = st.BlockRemove(ctx, kind, vals)
		}
		if errors.Is(err, store.ErrNotDurable) {
			// In effect on the master: the other kinds are still changed.
			fmt.Fprintf(c.stderr, "%s %s: %v\n", c.name, kind, err)
			undurable = append(undurable, kind)
			continue
		}
		if err != nil {
			return fail(exitFailed, "%s %s: %v", c.name, kind, err)
		}
		verb := "unblocked"
		if add {
			verb = "blocked"
			if *ttl > 0 {
				verb += " for " + ttl.String()
			}
		}
		fmt.Fprintf(c.stdout, "%s %s: %s\n", verb, kind, strings.Join(vals, ", "))
	}
	if len(undurable) > 0 {
		return fail(exitFailed, "%s: changed on the master but not on its replicas, so a failover could undo it: %s; run it again once the replicas are back", c.name, strings.Join(undurable, ", "))
	}
	return nil
}

// cmdEligible changes an activity's eligibility list (eligible_only: true).
func cmdEligible(c *cli) error {
	fs := c.flags("-c FILE --activity ID (--add U | --remove U)... [--ttl 24h]")
	act := fs.String("activity", "", "activity `ID` (required)")
	var adds, removes listFlag
	fs.Var(&adds, "add", "user `id` to let buy (repeatable, or comma-separated)")
	fs.Var(&removes, "remove", "user `id` to take off the list (repeatable)")
	ttl := fs.Duration("ttl", 0, "how long added users stay eligible (default: until removed)")
	if err := c.parse(); err != nil {
		return err
	}
	if *act == "" || len(adds)+len(removes) == 0 {
		c.fs.Usage()
		return fail(exitUsage, "seckill-proxy eligible: give --activity and at least one --add or --remove")
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
	if a := cfg.Activity(*act); a != nil && !a.EligibleOnly && len(adds) > 0 {
		// The list is kept, but nothing reads it: everyone may buy.
		fmt.Fprintf(c.stderr, "warning: activity %q has no eligible_only: true in %s: its eligibility list is not consulted and every buyer may buy; set eligible_only: true (and reload) to restrict the sale to the list\n", a.ID, cfg.Path)
	}
	*act = acts[0].ID // a shadow activity's list is its shadow copy's
	ctx := context.Background()
	if len(adds) > 0 {
		v, err := admin.CanonicalListValues(&cfg.Identity, store.BlockUser, adds)
		if err != nil {
			return fail(exitUsage, "seckill-proxy eligible: --add: %v", err)
		}
		if err := st.EligibleAdd(ctx, *act, v, *ttl, time.Now()); err != nil {
			return fail(exitFailed, "eligible: %v", err)
		}
		fmt.Fprintf(c.stdout, "eligible for %s: %s\n", *act, strings.Join(v, ", "))
	}
	if len(removes) > 0 {
		v, err := admin.CanonicalListValues(&cfg.Identity, store.BlockUser, removes)
		if err != nil {
			return fail(exitUsage, "seckill-proxy eligible: --remove: %v", err)
		}
		if err := st.EligibleRemove(ctx, *act, v); err != nil {
			return fail(exitFailed, "eligible: %v", err)
		}
		fmt.Fprintf(c.stdout, "no longer eligible for %s: %s\n", *act, strings.Join(v, ", "))
	}
	return nil
}
