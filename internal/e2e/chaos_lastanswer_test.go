package e2e

import (
	"crypto/sha1"
	"encoding/hex"
	"fmt"
	"strings"
	"sync"
	"time"

	"github.com/seckill-proxy/seckill-proxy/lua"
)

// The last-answer check's view of when a reservation was confirmed
// (docs/decisions.md §61): MONITOR's first call of a confirming script
// (confirm.lua, confirmbatch.lua, bundleconfirm.lua and their fenced
// forms) naming the token id. A reservation confirmed at the end whose
// confirm Redis ran after a SOLD_OUT was answered was pending or queued
// while that request was asked.

var (
	chaosConfirmOnce sync.Once
	chaosConfirmSHA  map[string]bool // EVALSHA's first argument
	chaosConfirmRepr []string        // EVAL's script, as MONITOR quotes it
)

func chaosConfirmScripts() {
	chaosConfirmOnce.Do(func() {
		chaosConfirmSHA = map[string]bool{}
		for _, src := range []string{lua.Confirm, lua.ConfirmBatch, lua.FencedConfirm, lua.BundleConfirm, lua.FencedBundleConfirm} {
			h := sha1.Sum([]byte(src))
			chaosConfirmSHA[hex.EncodeToString(h[:])] = true
		}
		// The fenced forms are the fence fragment before these.
		for _, src := range []string{lua.Confirm, lua.ConfirmBatch, lua.BundleConfirm} {
			chaosConfirmRepr = append(chaosConfirmRepr, chaosRepr(src))
		}
	})
}

// chaosRepr is s as Redis's MONITOR quotes an argument (sdscatrepr),
// without the quotes.
func chaosRepr(s string) string {
	var b strings.Builder
	for i := 0; i < len(s); i++ {
		switch ch := s[i]; ch {
		case '\\', '"':
			b.WriteByte('\\')
			b.WriteByte(ch)
		case '\n':
			b.WriteString(`\n`)
		case '\r':
			b.WriteString(`\r`)
		case '\t':
			b.WriteString(`\t`)
		case '\a':
			b.WriteString(`\a`)
		case '\b':
			b.WriteString(`\b`)
		default:
			if ch >= 0x20 && ch < 0x7f {
				b.WriteByte(ch)
			} else {
				fmt.Fprintf(&b, `\x%02x`, ch)
			}
		}
	}
	return b.String()
}

// chaosIsConfirm says whether a MONITOR line's command (from "] ") runs
// a confirming script.
func chaosIsConfirm(rest string) bool {
	chaosConfirmScripts()
	if i := strings.Index(rest, "] \"EVALSHA\" \""); i >= 0 {
		sha := rest[i+len("] \"EVALSHA\" \""):]
		if j := strings.IndexByte(sha, '"'); j >= 0 {
			return chaosConfirmSHA[sha[:j]]
		}
		return false
	}
	if strings.Contains(rest, "] \"EVAL\" \"") {
		for _, r := range chaosConfirmRepr {
			if strings.Contains(rest, r) {
				return true
			}
		}
	}
	return false
}

// confirmedAt is when Redis first ran a confirming script naming token
// id; ok false if none was seen.
func (m *chaosMonitor) confirmedAt(id string) (time.Time, bool) {
	m.mu.Lock()
	defer m.mu.Unlock()
	at, ok := m.confirmed[id]
	return at, ok
}
