package retrieval

import (
	"context"
	"log/slog"
	"time"

	"golang.org/x/sync/errgroup"
)

// RetryFailed gives each request whose batched retrieval failed a call of
// its own, where retry(err) allows it (nil: every failure). One batch shares
// one retry window, so a search node stalled while it runs fails many
// requests at once, which call-by-call retrieval (each call retrying on its
// own, later calls after the node recovered) rides out. It updates res and
// errs in place, runs at most conc calls at once, and returns each request's
// seconds in its own call (0 where none was made). It stops early only when
// ctx ends; the caller checks ctx.
func RetryFailed(ctx context.Context, r Retriever, reqs []Request, res []Result, errs []error, conc int, retry func(error) bool) []float64 {
	var failed []int
	for i, err := range errs {
		if err != nil && (retry == nil || retry(err)) {
			failed = append(failed, i)
		}
	}
	if len(failed) == 0 {
		return nil
	}
	slog.Warn("retrieval: retrying on their own the requests whose batched retrieval failed",
		"requests", len(failed), "of", len(reqs), "e.g.", errs[failed[0]])
	extra := make([]float64, len(reqs))
	var g errgroup.Group
	g.SetLimit(max(1, conc))
	for _, i := range failed {
		g.Go(func() error {
			t0 := time.Now()
			res[i], errs[i] = r.Retrieve(ctx, reqs[i].User, reqs[i].Rewrite, reqs[i].Query)
			extra[i] = time.Since(t0).Seconds()
			return nil
		})
	}
	_ = g.Wait()
	return extra
}
