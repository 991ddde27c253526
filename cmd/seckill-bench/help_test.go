package main

import (
	"bytes"
	"errors"
	"flag"
	"strings"
	"testing"
)

// SPEC §2: "--help on every command" (seckill-bench's too) and exit 2 for
// bad usage. SPEC audit spa: no test ran seckill-bench's command line.
func TestHelpOnEveryCommand(t *testing.T) {
	var out, errs bytes.Buffer
	if err := run([]string{"--help"}, &out, &errs); err != nil || !strings.Contains(out.String(), "usage: seckill-bench") {
		t.Fatalf("--help: %v\n%s%s", err, out.String(), errs.String())
	}
	for _, c := range commands {
		out.Reset()
		errs.Reset()
		err := run([]string{c.name, "--help"}, &out, &errs)
		if err != nil && !errors.Is(err, flag.ErrHelp) {
			t.Errorf("%s --help: %v (exit would not be 0)\n%s", c.name, err, errs.String())
		}
		if out.Len()+errs.Len() == 0 {
			t.Errorf("%s --help printed nothing", c.name)
		}
	}
	for _, args := range [][]string{nil, {"bogus"}, {"run", "--bogus-flag"}} {
		if err := run(args, &out, &errs); !errors.As(err, new(usageError)) {
			t.Errorf("%q: %v, want a usage error (exit 2)", args, err)
		}
	}
}
