package main

import (
	"context"
	"encoding/json"
	"fmt"
	"sort"
	"strconv"
	"text/tabwriter"

	"github.com/seckill-proxy/seckill-proxy/config"
	"github.com/seckill-proxy/seckill-proxy/store"
)

// cmdShadowReport prints what a mode: shadow activity's funnel decided
// against what the shop answered (issue 13 §2).
func cmdShadowReport(c *cli) error {
	fs := c.flags("-c FILE --activity ID [--json]")
	act := fs.String("activity", "", "shadow activity `ID` (required)")
	asJSON := fs.Bool("json", false, "machine-readable output")
	if err := c.parse(); err != nil {
		return err
	}
	if *act == "" {
		c.fs.Usage()
		return fail(exitUsage, "seckill-proxy shadow-report: give --activity")
	}
	cfg, st, err := c.open()
	if err != nil {
		return err
	}
	defer st.Close()
	a := cfg.Activity(*act)
	if a == nil {
		_, err := activities(cfg, *act) // the error naming the activities there are
		return err
	}
	if !a.IsShadow() {
		return fail(exitUsage, "seckill-proxy shadow-report: activity %q is mode: %s, not shadow", a.ID, a.Mode)
	}
	rep, err := st.ShadowReport(context.Background(), a)
	if err != nil {
		return fail(exitFailed, "shadow-report %s: %v", a.ID, err)
	}
	if *asJSON {
		enc := json.NewEncoder(c.stdout)
		enc.SetIndent("", "  ")
		return enc.Encode(rep)
	}
	printShadowReport(c, a, rep)
	return nil
}

func printShadowReport(c *cli, a *config.Activity, rep store.ShadowReport) {
	w := c.stdout
	fmt.Fprintf(w, "shadow report of %s (stock and decisions under %s): %d buys\n", a.ID, config.ShadowID(a.ID), rep.Total)
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "\nproxy would have answered\tbuys\trefused, yet the shop answered 2xx\t")
	for _, k := range sortedKeys(rep.Decisions) {
		acc := strconv.FormatInt(rep.RefusedButAccepted[k], 10)
		if k == "ADMITTED" {
			acc = "-"
		}
		fmt.Fprintf(tw, "  %s\t%d\t%s\t\n", k, rep.Decisions[k], acc)
	}
	_ = tw.Flush()
	fmt.Fprintf(w, "buys the proxy would have refused that the shop accepted: %d\n", rep.RefusedButAcceptedTotal)
	fmt.Fprintf(w, "\nshop answers by status:")
	for _, k := range sortedKeys(rep.ShopStatus) {
		label := k
		if k == "0" {
			label = "none"
		}
		fmt.Fprintf(w, " %s=%d", label, rep.ShopStatus[k])
	}
	fmt.Fprintln(w)
	tw = tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "sku\tstock\tshop units (2xx)\tbeyond stock\t")
	for _, k := range rep.SKUs {
		fmt.Fprintf(tw, "%s\t%d\t%d\t%d\t\n", k.ID, k.Stock, k.ShopUnits, k.BeyondStock)
	}
	_ = tw.Flush()
	fmt.Fprintf(w, "shop's orders beyond the stock: %d units\n", rep.BeyondStock)
	fmt.Fprintf(w, "users above per_user_limit (%d) at the shop: %d of %d buyers", rep.PerUserLimit, rep.OverLimit, rep.ShopBuyers)
	if len(rep.OverLimitUsers) > 0 {
		fmt.Fprintf(w, " (e.g. %v)", rep.OverLimitUsers)
	}
	fmt.Fprintln(w)
	fmt.Fprintf(w, "latency the proxy would have added (funnel decision): p50 %s, p99 %s, max %s\n",
		usText(rep.LatencyP50Us), usText(rep.LatencyP99Us), usText(rep.LatencyMaxUs))
	fmt.Fprintf(w, "decision log: %d entries (bounded at ~%d)\n", rep.Logged, store.ShadowLogMax)
}

func usText(us int64) string {
	if us < 1000 {
		return fmt.Sprintf("%dµs", us)
	}
	if us < 10000 {
		return fmt.Sprintf("%.1fms", float64(us)/1000)
	}
	return fmt.Sprintf("%dms", us/1000)
}

func sortedKeys(m map[string]int64) []string {
	ks := make([]string, 0, len(m))
	for k := range m {
		ks = append(ks, k)
	}
	sort.Strings(ks)
	return ks
}
