package trainer

import (
	"context"
	"fmt"
	"net/url"
	"os"
	"strings"
	"time"
)

// Open returns the policy cfg names: the embedded policy for Endpoint
// "embedded" (stats may be nil: the idf feature is then 0), otherwise a
// Client of the endpoint URL, whose info is fetched once to fail early.
func Open(ctx context.Context, cfg Config, stats TermStats) (Policy, error) {
	if cfg.Endpoint == "embedded" {
		return NewEmbedded(cfg.Embedded, stats)
	}
	token, err := resolveToken(cfg.Token)
	if err != nil {
		return nil, err
	}
	timeout := time.Duration(cfg.TimeoutSeconds * float64(time.Second))
	if timeout <= 0 {
		timeout = 10 * time.Minute
	}
	c := NewClient(cfg.Endpoint, token, WithTimeout(timeout), WithRetries(cfg.Retries))
	if _, err := c.Info(ctx); err != nil {
		return nil, fmt.Errorf("open trainer: %w", err)
	}
	return c, nil
}

// resolveToken reads "$NAME" from the environment.
func resolveToken(tok string) (string, error) {
	name, ok := strings.CutPrefix(tok, "$")
	if !ok {
		return tok, nil
	}
	v, set := os.LookupEnv(name)
	if !set || v == "" {
		return "", fmt.Errorf("trainer.token: environment variable %s is not set", name)
	}
	return v, nil
}

// parseBaseURL checks an endpoint URL and strips a trailing slash.
func parseBaseURL(raw string) (string, error) {
	u, err := url.Parse(raw)
	if err != nil {
		return "", err
	}
	if u.Scheme != "http" && u.Scheme != "https" {
		return "", fmt.Errorf("%q: scheme must be http or https", raw)
	}
	if u.Host == "" {
		return "", fmt.Errorf("%q: no host", raw)
	}
	return strings.TrimRight(raw, "/"), nil
}
