// Command seckill-bench is the load generator, demo shop and comparison
// harness of seckill-proxy (SPEC §8). See bench/README.md.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"runtime/pprof"
	"strings"
	"syscall"
)

// usageError makes main exit 2.
type usageError struct{ err error }

func (u usageError) Error() string { return u.err.Error() }
func (u usageError) Unwrap() error { return u.err }

func usagef(format string, a ...any) error { return usageError{fmt.Errorf(format, a...)} }

func main() {
	err := run(os.Args[1:], os.Stdout, os.Stderr)
	switch {
	case err == nil, errors.Is(err, flag.ErrHelp):
		os.Exit(0)
	case errors.As(err, new(usageError)):
		fmt.Fprintln(os.Stderr, "seckill-bench:", err)
		os.Exit(2)
	default:
		// Failed operations and broken invariants (bench.ErrInvariant) alike.
		fmt.Fprintln(os.Stderr, "seckill-bench:", err)
		os.Exit(1)
	}
}

type command struct {
	name, summary string
	run           func(ctx context.Context, args []string, stdout, stderr io.Writer) error
}

var commands = []command{
	{"run", "drive a target with N users and a spike waveform; report and verify", cmdRun},
	{"shop", "the demo legacy shop (SQLite or PostgreSQL order table, verify endpoint)", cmdShop},
	{"compare", "run the same spike against several targets and print one table", cmdCompare},
	{"demo", "one-shot demo: redis-server + shop + seckill-proxy + spike + verdict", cmdDemo},
	{"bare", "bare fasthttp handler with a fixed body (the machine's ceiling)", cmdBare},
	{"bare-redis", "bare fasthttp handler with one Redis script call per request", cmdBareRedis},
	{"hop", "plain fasthttp reverse hop to a shop (the forwarding ceiling)", cmdHop},
	{"bare-sale", "bare-redis with a per-user check, a local sold-out flag and winners hopped to a shop (the smallest sale)", cmdBareSale},
}

func topUsage(w io.Writer) {
	fmt.Fprintln(w, "usage: seckill-bench <command> [flags]   (seckill-bench <command> --help)")
	fmt.Fprintln(w)
	for _, c := range commands {
		fmt.Fprintf(w, "  %-11s %s\n", c.name, c.summary)
	}
}

func run(args []string, stdout, stderr io.Writer) error {
	if len(args) == 0 {
		topUsage(stderr)
		return usagef("no command given")
	}
	switch args[0] {
	case "-h", "-help", "--help", "help":
		topUsage(stdout)
		return nil
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	for _, c := range commands {
		if c.name == args[0] {
			if path := os.Getenv("SECKILL_BENCH_CPUPROFILE"); path != "" {
				// The generator's own CPU profile (or a bare target's, until
				// SIGTERM): is the bench the bottleneck?
				stopProfile, err := startCPUProfile(path)
				if err != nil {
					return err
				}
				defer stopProfile()
			}
			return c.run(ctx, args[1:], stdout, stderr)
		}
	}
	topUsage(stderr)
	return usagef("unknown command %q", args[0])
}

// newFlagSet builds a FlagSet whose parse errors become usage errors.
func newFlagSet(name, synopsis string, stderr io.Writer) *flag.FlagSet {
	fs := flag.NewFlagSet("seckill-bench "+name, flag.ContinueOnError)
	fs.SetOutput(stderr)
	fs.Usage = func() {
		fmt.Fprintf(fs.Output(), "usage: seckill-bench %s %s\n\nflags:\n", name, synopsis)
		fs.PrintDefaults()
	}
	return fs
}

func parse(fs *flag.FlagSet, args []string) error {
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return err
		}
		return usageError{err}
	}
	if fs.NArg() > 0 {
		return usagef("unexpected arguments: %s", strings.Join(fs.Args(), " "))
	}
	return nil
}

// listFlag is a repeatable flag that also splits on commas.
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

func startCPUProfile(path string) (stop func(), err error) {
	f, err := os.Create(path)
	if err != nil {
		return nil, fmt.Errorf("SECKILL_BENCH_CPUPROFILE: %w", err)
	}
	if err := pprof.StartCPUProfile(f); err != nil {
		_ = f.Close() // the profiler's error is the one to report
		return nil, fmt.Errorf("SECKILL_BENCH_CPUPROFILE: %w", err)
	}
	return func() {
		pprof.StopCPUProfile()
		if err := f.Close(); err != nil {
			fmt.Fprintln(os.Stderr, "seckill-bench: SECKILL_BENCH_CPUPROFILE:", err)
		}
	}, nil
}
