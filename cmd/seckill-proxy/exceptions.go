package main

import (
	"context"
	"encoding/csv"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"strconv"
	"time"

	"github.com/seckill-proxy/seckill-proxy/config"
	"github.com/seckill-proxy/seckill-proxy/store"
)

// exceptionsHeader is the CSV export's header row, in column order.
var exceptionsHeader = []string{"activity", "id", "at", "kind", "severity", "sku", "token", "user", "qty", "state", "shop", "reason"}

func exceptionRow(e store.Exception) []string {
	return []string{e.Activity, e.ID, e.At.UTC().Format(time.RFC3339Nano), e.Kind, e.Severity, e.SKU, e.Token, e.User,
		strconv.FormatInt(e.Qty, 10), e.State, e.Shop, e.Reason}
}

// listExceptions shows (text or JSON) or exports (CSV, to stdout or a
// file) the reconcile exceptions recorded for acts, oldest first per
// activity.
func listExceptions(c *cli, st *store.Store, acts []*config.Activity, asJSON, asCSV bool, out string) error {
	var all []store.Exception
	for _, a := range acts {
		exs, err := st.Exceptions(context.Background(), a.ID)
		if err != nil {
			return fail(exitFailed, "reconcile: reading exceptions of %s: %v", a.ID, err)
		}
		all = append(all, exs...)
	}
	switch {
	case asCSV:
		w := c.stdout
		var f *os.File
		if out != "" {
			var err error
			if f, err = os.Create(out); err != nil {
				return fail(exitFailed, "reconcile: --out: %v", err)
			}
			w = f
		}
		err := writeExceptionsCSV(w, all)
		if f != nil {
			if cerr := f.Close(); err == nil {
				err = cerr
			}
		}
		if err != nil {
			return fail(exitFailed, "reconcile: export: %v", err)
		}
		if out != "" {
			fmt.Fprintf(c.stderr, "exported %d exceptions to %s\n", len(all), out)
		}
	case asJSON:
		if all == nil {
			all = []store.Exception{}
		}
		enc := json.NewEncoder(c.stdout)
		enc.SetIndent("", "  ")
		_ = enc.Encode(struct {
			Exceptions []store.Exception `json:"exceptions"`
		}{all})
	default:
		if len(all) == 0 {
			fmt.Fprintln(c.stdout, "no reconcile exceptions recorded")
		}
		for _, e := range all {
			fmt.Fprintf(c.stdout, "%s %s %s %-18s %-5s sku=%s qty=%d", e.At.UTC().Format(time.RFC3339), e.Activity, e.ID, e.Kind, e.Severity, e.SKU, e.Qty)
			if e.Token != "" {
				fmt.Fprintf(c.stdout, " token=%s user=%s state=%s", e.Token, e.User, e.State)
			}
			if e.Shop != "" {
				fmt.Fprintf(c.stdout, " shop=%s", e.Shop)
			}
			fmt.Fprintf(c.stdout, ": %s\n", e.Reason)
		}
	}
	return nil
}

// writeExceptionsCSV writes a header row and one row per exception, quoted
// by encoding/csv (RFC 4180: commas, quotes and newlines in a reason or a
// user id survive).
func writeExceptionsCSV(w io.Writer, exs []store.Exception) error {
	cw := csv.NewWriter(w)
	if err := cw.Write(exceptionsHeader); err != nil {
		return err
	}
	for _, e := range exs {
		if err := cw.Write(exceptionRow(e)); err != nil {
			return err
		}
	}
	cw.Flush()
	return cw.Error()
}
