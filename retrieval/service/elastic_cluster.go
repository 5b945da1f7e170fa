package service

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"time"

	"github.com/himes-rl/himes/retrieval/corpus"
)

// ClusterHealth is what _cluster/health says about the index a run searches.
type ClusterHealth struct {
	ClusterName  string `json:"cluster_name"`
	Status       string `json:"status"` // green, yellow or red
	TimedOut     bool   `json:"timed_out"`
	Nodes        int    `json:"number_of_nodes"`
	DataNodes    int    `json:"number_of_data_nodes"`
	Primaries    int    `json:"active_primary_shards"`
	Active       int    `json:"active_shards"`
	Relocating   int    `json:"relocating_shards"`
	Initializing int    `json:"initializing_shards"`
	Unassigned   int    `json:"unassigned_shards"`
}

func (h ClusterHealth) String() string {
	return fmt.Sprintf("cluster %s is %s for the index (%d nodes, %d data nodes; shards: %d active primaries, %d active, %d initializing, %d relocating, %d unassigned)",
		h.ClusterName, h.Status, h.Nodes, h.DataNodes, h.Primaries, h.Active, h.Initializing, h.Relocating, h.Unassigned)
}

// healthTimeout bounds one health request: it describes a failure or gates a
// start, and must never hold either up for a whole call timeout.
const healthTimeout = 5 * time.Second

// Health asks the hosts in turn (the first that answers wins) for the
// health of the configured index.
func (e *Elastic) Health(ctx context.Context) (ClusterHealth, error) {
	var errs []error
	for _, h := range e.call.Pool().Hosts() {
		var hl ClusterHealth
		cctx, cancel := context.WithTimeout(ctx, min(healthTimeout, e.cfg.Call.Timeout))
		// timeout: the health of a missing index is awaited (30s by default).
		_, err := e.call.DoJSON(cctx, h, http.MethodGet, "/_cluster/health/"+e.cfg.Index+"?timeout=1s", nil, &hl, e.hdr)
		cancel()
		if err == nil && hl.Status == "" {
			err = errors.New(`the response has no "status"`)
		}
		if err == nil {
			return hl, nil
		}
		errs = append(errs, fmt.Errorf("%s: %w", h, err))
		if ctx.Err() != nil {
			break
		}
	}
	return ClusterHealth{}, fmt.Errorf("no host answered _cluster/health: %w", errors.Join(errs...))
}

// checkHealth refuses to start on a red index (a primary shard is missing:
// whole parts of the corpus would be absent from every ranking) and warns
// on yellow (a replica is missing: results are complete, one node less
// stands between the run and red). It runs first, as a red index fails the
// other probes with less telling errors; when there is no health to read
// (no such index, no cluster), those probes say why.
func (e *Elastic) checkHealth(ctx context.Context) error {
	hl, err := e.Health(ctx)
	if err != nil {
		slog.Debug("elasticsearch: no index health before the probe", "index", e.cfg.Index, "err", err)
		return nil
	}
	switch hl.Status {
	case "green":
		return nil
	case "yellow":
		slog.Warn("elasticsearch: the index is yellow: every primary shard is up, some replica is not", "index", e.cfg.Index, "health", hl.String())
		return nil
	}
	return fmt.Errorf("elasticsearch index %s: refusing to search: %s; a red index misses primary shards, so rankings would silently lack their documents",
		e.cfg.Index, hl)
}

// withClusterState adds the cluster's state to a failed search, so the
// error that stops a run says whether a node, a shard or the whole cluster
// is down.
func (e *Elastic) withClusterState(ctx context.Context, err error) error {
	if ctx.Err() != nil {
		return err
	}
	return fmt.Errorf("%w (%s)", err, e.clusterState(ctx))
}

// clusterState is the index's health in words, or why there is none.
func (e *Elastic) clusterState(ctx context.Context) string {
	hl, err := e.Health(context.WithoutCancel(ctx))
	if err != nil {
		return err.Error()
	}
	return hl.String()
}

// msearchItemShards is an _msearch item's shard accounting.
type msearchItemShards struct {
	Total      int             `json:"total"`
	Successful int             `json:"successful"`
	Failed     int             `json:"failed"`
	Failures   json.RawMessage `json:"failures"`
}

// ResultUnavailable is the ResultError kind of an _msearch item that failed
// in a way a retry can fix: 429 or 5xx, a failed shard, a timeout.
// ResultUnavailable: the cluster could not answer the query whole (failed shards, a timeout) after the retries.
const ResultUnavailable = "unavailable"

// partial fails an _msearch item that answered but not for the whole index:
// a shard failed (its documents are missing from the ranking) or the search
// timed out (the ranking stops where the clock did). Such an answer is
// never scored.
func (e *Elastic) partial(i int, timedOut bool, sh *msearchItemShards) error {
	switch {
	case timedOut:
		return resultErr(e.name, ResultUnavailable, "query %d: the search timed out: its ranking is partial", i+1)
	case sh != nil && (sh.Failed > 0 || sh.Successful < sh.Total):
		return resultErr(e.name, ResultUnavailable, "query %d: %d of %d shards failed (%s): its ranking is partial",
			i+1, sh.Total-sh.Successful, sh.Total, shardFailure(sh.Failures))
	}
	return nil
}

// searchBatch runs one _msearch and sends the items that failed transiently
// (429, 5xx, a failed shard, a timeout: a node that just died, a full search
// queue) again, with the configured retries and backoff. An item still
// failing after them fails alone, its error naming the cluster's state; the
// batch's other items keep their answers.
func (e *Elastic) searchBatch(ctx context.Context, queries []string, k int) ([][]corpus.Ranked, []error, error) {
	lists, errs, err := e.msearch(ctx, queries, k)
	if err != nil {
		return nil, nil, err
	}
	for round := 1; ; round++ {
		var again []int
		for i, err := range errs {
			var re *ResultError
			if errors.As(err, &re) && re.Kind == ResultUnavailable {
				again = append(again, i)
			}
		}
		if len(again) == 0 {
			return lists, errs, nil
		}
		if round > e.cfg.Call.Retries {
			state := e.clusterState(ctx)
			for _, i := range again {
				re := *errs[i].(*ResultError)
				re.Msg += fmt.Sprintf(" (after %d retries; %s)", e.cfg.Call.Retries, state)
				errs[i] = &re
			}
			return lists, errs, nil
		}
		slog.Warn("elasticsearch: items failed, sending them again", "index", e.cfg.Index, "items", len(again), "retry", round, "example", errs[again[0]])
		select {
		case <-time.After(e.itemBackoff.Delay(round)):
		case <-ctx.Done():
			return lists, errs, nil
		}
		sub := make([]string, len(again))
		for j, i := range again {
			sub[j] = queries[i]
		}
		got, gotErrs, err := e.msearch(ctx, sub, k)
		if err != nil {
			return nil, nil, err
		}
		for j, i := range again {
			lists[i], errs[i] = got[j], gotErrs[j]
		}
	}
}

// shardFailure is the first shard failure's reason.
func shardFailure(raw json.RawMessage) string {
	var fs []struct {
		Index  string          `json:"index"`
		Shard  int             `json:"shard"`
		Reason json.RawMessage `json:"reason"`
	}
	if json.Unmarshal(raw, &fs) != nil || len(fs) == 0 {
		return "no reason given"
	}
	return fmt.Sprintf("shard %d of %s: %s", fs[0].Shard, fs[0].Index, ESReason(fs[0].Reason))
}
