package service

import (
	"context"
	"fmt"
	"net/http"

	"github.com/himes-rl/himes/internal/httpcall"
)

// The index-administration calls `himes index push` makes through the same
// hosts, timeouts and retries as the searches.

// Caller is the HTTP layer the backend calls the cluster with.
func (e *Elastic) Caller() *httpcall.Caller { return e.call }

// Header is a copy of the headers every request carries (authentication).
func (e *Elastic) Header() http.Header { return e.hdr.Clone() }

// Retries is the configured number of retries after a first attempt.
func (e *Elastic) Retries() int { return e.cfg.Call.Retries }

// ClusterHealth is the whole cluster's health (the index may not exist yet).
func (e *Elastic) ClusterHealth(ctx context.Context) (ClusterHealth, error) {
	var hl ClusterHealth
	err := e.call.Call(ctx, nil, "cluster", "", func(ctx context.Context, h *httpcall.Host) (int, error) {
		return e.call.DoJSON(ctx, h, http.MethodGet, "/_cluster/health", nil, &hl, e.hdr)
	})
	if err != nil {
		return hl, fmt.Errorf("cluster health: %w", err)
	}
	return hl, nil
}
