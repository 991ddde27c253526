package store_test

import (
	"strconv"
	"testing"
	"time"

	"github.com/seckill-proxy/seckill-proxy/internal/redistest"
)

// TestLeaseTokenAfterALostIncrement (red team chaosfo, docs/decisions.md
// §60 "Left"): a failover loses the writes its old master acknowledged
// and had not sent to the replica, the lease counter's last increment
// among them. The next holder was then handed the token the old holder
// had (a fencing token twice: the shards' fences could not tell the two
// reconcilers apart). Here the counter is set back by hand, as the
// promoted replica would hold it, a few ms after the old holder's pass:
// the next token must still be greater than every one handed out before.
func TestLeaseTokenAfterALostIncrement(t *testing.T) {
	srv := redistest.Start(t)
	s := openStore(t, redisConfig([]string{srv.Addr}, false))
	const name = "reconcile"
	first, err := s.AcquireLease(ctx(t), name, "a", time.Second)
	if err != nil || !first.Held {
		t.Fatalf("a: %+v, %v", first, err)
	}
	if err := s.ReleaseLease(ctx(t), name, "a"); err != nil {
		t.Fatal(err)
	}
	// The replica promoted had the counter before a's increment.
	counter := "seckill:{lease}:" + name + ":fence"
	if _, err := srv.Do("SET", counter, strconv.FormatInt(first.Token-1, 10)); err != nil {
		t.Fatal(err)
	}
	time.Sleep(5 * time.Millisecond) // a failover takes seconds; a few ms suffice here
	next, err := s.AcquireLease(ctx(t), name, "b", time.Second)
	if err != nil || !next.Held {
		t.Fatalf("b: %+v, %v", next, err)
	}
	if next.Token <= first.Token {
		t.Fatalf("b was handed token %d after a had %d: a fencing token again (or an older one) after a lost increment", next.Token, first.Token)
	}
	// Renewals keep the token; hand-overs keep growing.
	again, _ := s.AcquireLease(ctx(t), name, "b", time.Second)
	if again.Token != next.Token {
		t.Fatalf("b's renewal: token %d, want %d", again.Token, next.Token)
	}
	if err := s.ReleaseLease(ctx(t), name, "b"); err != nil {
		t.Fatal(err)
	}
	third, _ := s.AcquireLease(ctx(t), name, "c", time.Second)
	if third.Token <= next.Token {
		t.Fatalf("c: token %d after b's %d", third.Token, next.Token)
	}
}
