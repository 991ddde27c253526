// Package redisinfo reads the Redis figures operators watch during a sale —
// script calls and their cost, Redis CPU, memory — from INFO before and
// after a run. It speaks RESP over a plain connection: one command, no
// client-side caching or pipelining to configure.
package redisinfo

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"strconv"
	"strings"
	"time"
)

// Snapshot is one INFO reading.
type Snapshot struct {
	// ScriptCalls and ScriptUsec sum the commandstats of eval, evalsha and
	// their _ro variants.
	ScriptCalls int64 `json:"script_calls"`
	ScriptUsec  int64 `json:"script_usec"`
	// CPUSeconds is used_cpu_sys + used_cpu_user.
	CPUSeconds float64 `json:"cpu_seconds"`
	UsedMemory int64   `json:"used_memory"`
	// Commands is total_commands_processed.
	Commands int64 `json:"commands"`
}

// Delta is what a run cost Redis.
type Delta struct {
	Before, After Snapshot
	ScriptCalls   int64   `json:"script_calls"`
	UsecPerCall   float64 `json:"usec_per_call"`
	CPUSeconds    float64 `json:"cpu_seconds"`
	Commands      int64   `json:"commands"`
	UsedMemory    int64   `json:"used_memory"`
}

// Diff computes the cost between two snapshots.
func Diff(before, after Snapshot) Delta {
	d := Delta{
		Before: before, After: after,
		ScriptCalls: after.ScriptCalls - before.ScriptCalls,
		CPUSeconds:  after.CPUSeconds - before.CPUSeconds,
		Commands:    after.Commands - before.Commands,
		UsedMemory:  after.UsedMemory,
	}
	if d.ScriptCalls > 0 {
		d.UsecPerCall = float64(after.ScriptUsec-before.ScriptUsec) / float64(d.ScriptCalls)
	}
	return d
}

// ErrProtocol is returned when Redis answers something other than a bulk string.
var ErrProtocol = errors.New("redisinfo: unexpected reply")

// Read runs INFO all against addr.
func Read(ctx context.Context, addr string) (Snapshot, error) {
	raw, err := info(ctx, addr)
	if err != nil {
		return Snapshot{}, err
	}
	return Parse(raw), nil
}

func info(ctx context.Context, addr string) (string, error) {
	var d net.Dialer
	c, err := d.DialContext(ctx, "tcp", addr)
	if err != nil {
		return "", fmt.Errorf("redis %s: %w", addr, err)
	}
	defer func() { _ = c.Close() }() // the reply has been read (or failed) by then
	dl, ok := ctx.Deadline()
	if !ok {
		dl = time.Now().Add(5 * time.Second)
	}
	if err := c.SetDeadline(dl); err != nil {
		return "", fmt.Errorf("redis %s: %w", addr, err)
	}
	if _, err := io.WriteString(c, "*2\r\n$4\r\nINFO\r\n$3\r\nall\r\n"); err != nil {
		return "", fmt.Errorf("redis %s: INFO: %w", addr, err)
	}
	r := bufio.NewReader(c)
	head, err := r.ReadString('\n')
	if err != nil {
		return "", fmt.Errorf("redis %s: INFO: %w", addr, err)
	}
	head = strings.TrimRight(head, "\r\n")
	if !strings.HasPrefix(head, "$") && !strings.HasPrefix(head, "=") {
		return "", fmt.Errorf("redis %s: INFO: %w: %q", addr, ErrProtocol, head)
	}
	n, err := strconv.Atoi(head[1:])
	if err != nil || n < 0 {
		return "", fmt.Errorf("redis %s: INFO: %w: %q", addr, ErrProtocol, head)
	}
	buf := make([]byte, n)
	if _, err := io.ReadFull(r, buf); err != nil {
		return "", fmt.Errorf("redis %s: INFO: %w", addr, err)
	}
	return string(buf), nil
}

// Parse reads the fields of interest from an INFO text.
func Parse(raw string) Snapshot {
	var s Snapshot
	for _, line := range strings.Split(raw, "\n") {
		line = strings.TrimSpace(line)
		k, v, ok := strings.Cut(line, ":")
		if !ok {
			continue
		}
		switch k {
		case "used_cpu_sys", "used_cpu_user":
			f, _ := strconv.ParseFloat(v, 64)
			s.CPUSeconds += f
		case "used_memory":
			s.UsedMemory, _ = strconv.ParseInt(v, 10, 64)
		case "total_commands_processed":
			s.Commands, _ = strconv.ParseInt(v, 10, 64)
		case "cmdstat_eval", "cmdstat_evalsha", "cmdstat_eval_ro", "cmdstat_evalsha_ro", "cmdstat_fcall", "cmdstat_fcall_ro":
			for _, kv := range strings.Split(v, ",") {
				name, num, _ := strings.Cut(kv, "=")
				switch name {
				case "calls":
					n, _ := strconv.ParseInt(num, 10, 64)
					s.ScriptCalls += n
				case "usec":
					n, _ := strconv.ParseInt(num, 10, 64)
					s.ScriptUsec += n
				}
			}
		}
	}
	return s
}
