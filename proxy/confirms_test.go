package proxy

import (
	"context"
	"testing"
	"time"

	"github.com/seckill-proxy/seckill-proxy/admission"
)

// TestRepeatWaitsForRunningConfirm: a winner's confirm runs after the
// answer (issue 10); a repeat this instance decides meanwhile (PENDING
// from Redis) is answered by what the confirm makes true, and one whose
// confirm failed stays PENDING.
func TestRepeatWaitsForRunningConfirm(t *testing.T) {
	tests := []struct {
		name     string
		ok       bool
		wantCode admission.Code
		wantOID  string
	}{
		{name: "confirmed", ok: true, wantCode: admission.AlreadyPurchased, wantOID: "o1"},
		{name: "not confirmed", ok: false, wantCode: admission.Pending},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c := newConfirms()
			rc := &runningConfirm{done: make(chan struct{}), orderID: "o1"}
			c.remember("tok", rc)
			c.running.Add(1)
			go func() {
				time.Sleep(20 * time.Millisecond)
				rc.ok.Store(tt.ok)
				close(rc.done)
				c.running.Add(-1)
			}()
			ans := answer{code: admission.Pending, token: "tok"}
			c.settledAs(ans.token, &ans)
			if ans.code != tt.wantCode || ans.orderID != tt.wantOID {
				t.Errorf("answer = %v %q, want %v %q", ans.code, ans.orderID, tt.wantCode, tt.wantOID)
			}
			ctx, cancel := context.WithTimeout(context.Background(), time.Second)
			defer cancel()
			if err := c.wait(ctx); err != nil {
				t.Errorf("wait: %v", err)
			}
			// Another token's PENDING is left as it is, at once.
			other := answer{code: admission.Pending, token: "other"}
			c.settledAs(other.token, &other)
			if other.code != admission.Pending {
				t.Errorf("other token: %v", other.code)
			}
		})
	}
}

// TestRepeatAfterConfirmDone: the repeat's reserve may have run in Redis
// before the confirm, the confirm done by the time the repeat is answered:
// it is still answered ALREADY_PURCHASED.
func TestRepeatAfterConfirmDone(t *testing.T) {
	c := newConfirms()
	rc := &runningConfirm{done: make(chan struct{}), orderID: "o2"}
	c.remember("tok", rc)
	rc.ok.Store(true)
	close(rc.done)
	ans := answer{code: admission.Pending, token: "tok"}
	c.settledAs(ans.token, &ans)
	if ans.code != admission.AlreadyPurchased || ans.orderID != "o2" {
		t.Errorf("answer = %v %q, want ALREADY_PURCHASED o2", ans.code, ans.orderID)
	}
}
