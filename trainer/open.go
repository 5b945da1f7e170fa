package trainer

import (
	"context"
	"fmt"
	"net/url"
	"os"
	"strings"
	"time"
)

// Dial returns a Client of the endpoint URL cfg names (cfg.Endpoint is not
// "embedded": the embedded policy is trainer/embedded's), with cfg's token,
// timeout and retries; the endpoint's info is fetched once to fail early.
func Dial(ctx context.Context, cfg Config) (*Client, error) {
	if cfg.Endpoint == "embedded" {
		return nil, fmt.Errorf("trainer.endpoint is \"embedded\": open the embedded policy (trainer/embedded), not a client")
	}
	if cfg.Endpoint == LaunchEndpoint {
		return nil, fmt.Errorf("trainer.endpoint is %q: this command does not start trainer.launch (himes train and himes eval do); start the trainer yourself and pass --set trainer.endpoint=URL", LaunchEndpoint)
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
	// Restarts are waited out once the endpoint was seen: a wrong endpoint
	// fails at once.
	WithReconnect(time.Duration(cfg.ReconnectSeconds * float64(time.Second)))(c)
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
