package httpcall

import (
	"context"
	"errors"
	"net/url"
	"testing"
	"time"
)

func TestHostPoolLeastLoaded(t *testing.T) {
	u1, _ := ParseHost("h1:1")
	u2, _ := ParseHost("h2:1")
	p := NewPool([]*url.URL{u1, u2}, []int{2, 4})
	ctx := t.Context()
	// Loads: h1 0/2, h2 0/4 → tie, h1 first. Then h1 1/2 vs h2 0/4 → h2.
	// Then h1 1/2 vs h2 1/4 → h2. Then 1/2 vs 2/4 → tie → h1. Then h1 full → h2, h2.
	want := []string{"h1:1", "h2:1", "h2:1", "h1:1", "h2:1", "h2:1"}
	for i, w := range want {
		h, err := p.Acquire(ctx, nil)
		if err != nil || h.base.Host != w {
			t.Fatalf("acquire %d = %v, want %s", i, h, w)
		}
	}
	// Full: acquire waits until a release, and honours cancellation.
	cctx, cancel := context.WithCancel(ctx)
	cancel()
	if _, err := p.Acquire(cctx, nil); !errors.Is(err, context.Canceled) {
		t.Errorf("full pool with cancelled ctx: %v", err)
	}
	got := make(chan *Host)
	go func() {
		h, _ := p.Acquire(ctx, nil)
		got <- h
	}()
	p.Release(p.hosts[1])
	if h := <-got; h != p.hosts[1] {
		t.Errorf("woke on %v", h)
	}
	// avoid: with both hosts free, the avoided one is not chosen.
	q := NewPool([]*url.URL{u1, u2}, []int{1, 1})
	if h, _ := q.Acquire(ctx, q.hosts[0]); h != q.hosts[1] {
		t.Errorf("avoided host chosen")
	}
	if h, _ := q.Acquire(ctx, q.hosts[0]); h != q.hosts[0] {
		t.Errorf("the avoided host must still serve when it is the only free one")
	}
}

func TestBackoffBounds(t *testing.T) {
	b := NewBackoff(100*time.Millisecond, time.Second, 1)
	for attempt := 1; attempt <= 8; attempt++ {
		ceil := min(100*time.Millisecond<<(attempt-1), time.Second)
		for range 50 {
			d := b.Delay(attempt)
			if d < ceil/2 || d > ceil {
				t.Fatalf("attempt %d: backoff %v outside [%v, %v]", attempt, d, ceil/2, ceil)
			}
		}
	}
}
