// Command seckill-proxy is the flash-sale admission proxy: serve, and the
// operator's commands (validate, preheat, pause, resume, release,
// reconcile, status, preflight). See README.md.
package main

import (
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"strings"

	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"

	"github.com/seckill-proxy/seckill-proxy/config"
)

// Exit codes (SPEC §2).
const (
	exitOK      = 0
	exitFailed  = 1 // operation failed or invariant broken
	exitUsage   = 2 // bad usage or bad config
	usageHeader = `seckill-proxy: flash-sale admission proxy

Usage:
  seckill-proxy serve     -c FILE                          run the proxy
  seckill-proxy validate  -c FILE                          check a config
  seckill-proxy preflight -c FILE [--json]                 check Redis, shop, secrets, windows before a sale
  seckill-proxy preheat   -c FILE [--activity ID] [--force] load stock into Redis
  seckill-proxy pause     -c FILE (ID | --all)             kill switch off
  seckill-proxy resume    -c FILE (ID | --all)             kill switch on
  seckill-proxy release   -c FILE TOKEN [--reason R]       give a reservation's stock back
  seckill-proxy reconcile -c FILE [--activity ID] [--repair] [--json]
  seckill-proxy reconcile -c FILE --exceptions [--activity ID] [--json]   recorded findings
  seckill-proxy reconcile -c FILE --export csv [--activity ID] [--out FILE]
  seckill-proxy status    -c FILE [--activity ID] [--json] stock per SKU; exit 1 if broken
  seckill-proxy block     -c FILE (--ip X | --device D | --user U)... [--ttl 10m]
  seckill-proxy unblock   -c FILE (--ip X | --device D | --user U)...
  seckill-proxy eligible  -c FILE --activity ID (--add U | --remove U)... [--ttl 24h]
  seckill-proxy shadow-report -c FILE --activity ID [--json] a mode: shadow activity's decisions vs the shop

Every command takes --help, and --log-format json|console.
Exit codes: 0 ok, 1 operation failed or invariant broken, 2 bad usage or bad config.
`
)

func main() {
	os.Exit(run(os.Args[1:], os.Stdout, os.Stderr))
}

// exitError carries an exit code out of a command.
type exitError struct {
	code int
	err  error
}

func (e *exitError) Error() string { return e.err.Error() }
func (e *exitError) Unwrap() error { return e.err }

func fail(code int, format string, args ...any) error {
	return &exitError{code: code, err: fmt.Errorf(format, args...)}
}

func run(args []string, stdout, stderr io.Writer) int {
	if len(args) == 0 || args[0] == "-h" || args[0] == "--help" || args[0] == "help" {
		fmt.Fprint(stdout, usageHeader)
		if len(args) == 0 {
			return exitUsage
		}
		return exitOK
	}
	cmds := map[string]func(*cli) error{
		"serve": cmdServe, "validate": cmdValidate, "preheat": cmdPreheat, "preflight": cmdPreflight,
		"pause": cmdPause, "resume": cmdResume, "release": cmdRelease,
		"reconcile": cmdReconcile, "status": cmdStatus,
		"block": cmdBlock, "unblock": cmdUnblock, "eligible": cmdEligible,
		"shadow-report": cmdShadowReport,
	}
	f, ok := cmds[args[0]]
	if !ok {
		fmt.Fprintf(stderr, "seckill-proxy: unknown command %q\n\n%s", args[0], usageHeader)
		return exitUsage
	}
	c := &cli{name: args[0], args: args[1:], stdout: stdout, stderr: stderr}
	err := f(c)
	if c.log != nil {
		_ = c.log.Sync()
	}
	if err == nil {
		return exitOK
	}
	if errors.Is(err, flag.ErrHelp) {
		return exitOK
	}
	var ee *exitError
	if errors.As(err, &ee) {
		if ee.err.Error() != "" {
			fmt.Fprintln(stderr, ee.err)
		}
		if ee.code != exitUsage {
			printHints(c, stderr)
		}
		return ee.code
	}
	fmt.Fprintln(stderr, "seckill-proxy "+c.name+": "+err.Error())
	printHints(c, stderr)
	return exitFailed
}

// printHints writes what may explain a failed command (hints.go).
func printHints(c *cli, w io.Writer) {
	for _, h := range c.hints() {
		fmt.Fprintln(w, h)
	}
}

// cli is one command invocation: its flags, positional args and output.
type cli struct {
	name           string
	args           []string
	stdout, stderr io.Writer
	fs             *flag.FlagSet
	cfgPath        string
	logFormat      string
	positional     []string
	// takesArgs says the command has positional arguments (pause, resume,
	// release); the others refuse any, rather than ignore them.
	takesArgs bool
	log       *zap.Logger
	// cfg is the config once loaded, for the hints of a failed command.
	cfg *config.Config
}

// flags starts the command's flag set with the flags every command shares.
func (c *cli) flags(usage string) *flag.FlagSet {
	fs := flag.NewFlagSet(c.name, flag.ContinueOnError)
	fs.SetOutput(c.stderr)
	fs.StringVar(&c.cfgPath, "c", "", "config `FILE` (required)")
	fs.StringVar(&c.cfgPath, "config", "", "config `FILE` (same as -c)")
	fs.StringVar(&c.logFormat, "log-format", "json", "log format: json or console")
	fs.Usage = func() {
		fmt.Fprintf(c.stderr, "Usage: seckill-proxy %s %s\n\nFlags:\n", c.name, usage)
		fs.PrintDefaults()
	}
	c.fs = fs
	return fs
}

// parse parses flags that may come before or after positional arguments.
func (c *cli) parse() error {
	rest := c.args
	for {
		if err := c.fs.Parse(rest); err != nil {
			if errors.Is(err, flag.ErrHelp) {
				return err
			}
			return &exitError{code: exitUsage, err: errors.New("")}
		}
		args := c.fs.Args()
		if n := len(rest) - len(args); n > 0 && rest[n-1] == "--" {
			// Everything after "--" is an argument, even if it looks like a flag.
			c.positional = append(c.positional, args...)
			break
		}
		rest = args
		if len(rest) == 0 {
			break
		}
		c.positional = append(c.positional, rest[0])
		rest = rest[1:]
	}
	if len(c.positional) > 0 && !c.takesArgs {
		c.fs.Usage()
		return fail(exitUsage, "seckill-proxy %s: unexpected argument %q", c.name, c.positional[0])
	}
	// An empty ID is never "all": `pause -c f "$ACT"` with $ACT unset must
	// not resume, pause or force-preheat every activity.
	for _, p := range c.positional {
		if strings.TrimSpace(p) == "" {
			return fail(exitUsage, "seckill-proxy %s: an argument is empty (an unset shell variable?); give the ID, or --all where the command takes it", c.name)
		}
	}
	var empty string
	c.fs.Visit(func(f *flag.Flag) {
		if f.Name == "activity" && strings.TrimSpace(f.Value.String()) == "" {
			empty = f.Name
		}
	})
	if empty != "" {
		return fail(exitUsage, "seckill-proxy %s: --%s is empty (an unset shell variable?); give an activity ID, or leave the flag out for all", c.name, empty)
	}
	if c.cfgPath == "" {
		c.fs.Usage()
		return fail(exitUsage, "seckill-proxy %s: -c FILE is required", c.name)
	}
	if c.logFormat != "json" && c.logFormat != "console" {
		return fail(exitUsage, "seckill-proxy %s: --log-format must be json or console", c.name)
	}
	return nil
}

// config loads the config; a bad one is exit 2 with every FILE:LINE error.
func (c *cli) config() (*config.Config, error) {
	cfg, err := config.Load(c.cfgPath)
	if err != nil {
		return nil, &exitError{code: exitUsage, err: err}
	}
	c.cfg = cfg
	return cfg, nil
}

// logger builds the structured logger: JSON to stderr by default.
func (c *cli) logger() *zap.Logger {
	if c.log != nil {
		return c.log
	}
	encCfg := zap.NewProductionEncoderConfig()
	encCfg.TimeKey = "ts"
	encCfg.EncodeTime = zapcore.ISO8601TimeEncoder
	var enc zapcore.Encoder
	if c.logFormat == "console" {
		encCfg.EncodeLevel = zapcore.CapitalColorLevelEncoder
		enc = zapcore.NewConsoleEncoder(encCfg)
	} else {
		enc = zapcore.NewJSONEncoder(encCfg)
	}
	core := zapcore.NewCore(enc, zapcore.Lock(zapcore.AddSync(c.stderr)), zap.InfoLevel)
	// The hot path may log per request under failure: sample so a Redis
	// outage during a spike does not turn into a logging outage.
	core = zapcore.NewSamplerWithOptions(core, 1e9, 10, 100)
	c.log = zap.New(core).With(zap.String("cmd", c.name))
	return c.log
}

// activities picks the activities a command acts on: one by --activity, or all.
func activities(cfg *config.Config, id string) ([]*config.Activity, error) {
	if id != "" {
		a := cfg.Activity(id)
		if a == nil {
			var ids []string
			for _, x := range cfg.Activities {
				ids = append(ids, x.ID)
			}
			return nil, fail(exitUsage, "no activity %q in %s (activities: %s)", id, cfg.Path, strings.Join(ids, ", "))
		}
		return []*config.Activity{a.ShadowOrSelf()}, nil
	}
	// A shadow activity's stock, flags and reservations are its shadow
	// copy's (id <ID>~shadow): preheat, status, pause, reconcile... act on it.
	out := make([]*config.Activity, 0, len(cfg.Activities))
	for i := range cfg.Activities {
		out = append(out, cfg.Activities[i].ShadowOrSelf())
	}
	return out, nil
}
