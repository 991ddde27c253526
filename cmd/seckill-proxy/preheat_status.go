package main

import (
	"fmt"
	"time"

	"github.com/seckill-proxy/seckill-proxy/config"
	"github.com/seckill-proxy/seckill-proxy/store"
)

// activityStatus is one activity in `status`: its stock and its preheat.
type activityStatus struct {
	store.ActivityStatus
	Preheat *preheatStatus `json:"preheat"`
}

// preheatStatus says when the activity's stock was or will be loaded.
type preheatStatus struct {
	// State is "preheated", "scheduled" (preheat_at ahead), "due"
	// (preheat_at passed, no serve instance has run it) or "not scheduled".
	State string `json:"state"`
	// PreheatAt and ScheduledAt are the configured preheat_at and the
	// moment it names (absent without preheat_at).
	PreheatAt   string     `json:"preheat_at,omitempty"`
	ScheduledAt *time.Time `json:"scheduled_at,omitempty"`
	// PreheatedAt and By say when the stock was loaded, and by whom:
	// "hand" (the preheat command or admin API) or the serve instance
	// whose scheduled preheat did it.
	PreheatedAt *time.Time `json:"preheated_at,omitempty"`
	By          string     `json:"by,omitempty"`

	now time.Time
}

func preheatStatusOf(a *config.Activity, rec store.PreheatRecord, now time.Time) *preheatStatus {
	p := &preheatStatus{State: "not scheduled", now: now}
	if at, ok := a.PreheatMoment(); ok {
		at = at.UTC()
		p.PreheatAt, p.ScheduledAt = a.PreheatAt.String(), &at
		p.State = "scheduled"
		if !now.Before(at) {
			p.State = "due"
		}
	}
	if rec.Ready {
		at := rec.At.UTC()
		p.State, p.PreheatedAt, p.By = "preheated", &at, "hand"
		if rec.ScheduledBy != "" {
			p.By = rec.ScheduledBy
		}
	}
	return p
}

// String is the line `status` prints ("" when there is nothing to say).
func (p *preheatStatus) String() string {
	if p == nil {
		return ""
	}
	switch p.State {
	case "preheated":
		by := "by hand"
		if p.By != "hand" {
			by = "by the scheduled preheat of " + p.By
		}
		return fmt.Sprintf("preheated at %s %s", p.PreheatedAt.Format(time.RFC3339), by)
	case "scheduled":
		return fmt.Sprintf("preheat scheduled at %s (preheat_at %s), in %s", p.ScheduledAt.Format(time.RFC3339), p.PreheatAt,
			p.ScheduledAt.Sub(p.now).Truncate(time.Second))
	case "due":
		return fmt.Sprintf("preheat due since %s (preheat_at %s) and not done: is a serve instance running?", p.ScheduledAt.Format(time.RFC3339), p.PreheatAt)
	}
	return ""
}
