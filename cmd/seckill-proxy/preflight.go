package main

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"

	"github.com/seckill-proxy/seckill-proxy/config"
	"github.com/seckill-proxy/seckill-proxy/preflight"
)

func cmdPreflight(c *cli) error {
	fs := c.flags("-c FILE [--json]")
	asJSON := fs.Bool("json", false, `machine-readable output: {"checks":[{"name","result","detail","fix"}]}`)
	if err := c.parse(); err != nil {
		return err
	}
	cfg, err := config.Load(c.cfgPath)
	if err != nil {
		if *asJSON {
			c.printChecks(preflight.Report{Checks: []preflight.Check{{Name: "config", Result: preflight.Fail, Detail: err.Error(),
				Fix: "fix every FILE:LINE above (seckill-proxy validate -c " + c.cfgPath + ")"}}}, true)
		}
		return &exitError{code: exitUsage, err: err}
	}
	rep := preflight.Run(context.Background(), cfg, preflight.Options{})
	rep.Checks = append([]preflight.Check{{Name: "config", Result: preflight.Pass,
		Detail: fmt.Sprintf("%s: valid, %d activities", cfg.Path, len(cfg.Activities))}}, rep.Checks...)
	c.printChecks(rep, *asJSON)
	if rep.Failed() {
		return &exitError{code: exitFailed, err: fmt.Errorf("preflight: %d checks failed", rep.Count(preflight.Fail))}
	}
	return nil
}

func (c *cli) printChecks(rep preflight.Report, asJSON bool) {
	if asJSON {
		enc := json.NewEncoder(c.stdout)
		enc.SetIndent("", "  ")
		_ = enc.Encode(rep)
		return
	}
	for _, ch := range rep.Checks {
		fmt.Fprintf(c.stdout, "%-4s  %s: %s\n", strings.ToUpper(string(ch.Result)), ch.Name, ch.Detail)
		if ch.Fix != "" {
			fmt.Fprintf(c.stdout, "      fix: %s\n", ch.Fix)
		}
	}
	fmt.Fprintf(c.stdout, "preflight: %d passed, %d warnings, %d failed\n", rep.Count(preflight.Pass), rep.Count(preflight.Warn), rep.Count(preflight.Fail))
}
