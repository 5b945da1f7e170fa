package trainer

import "github.com/himes-rl/himes/internal/fielderr"

// Config is the "trainer" section: where the policy lives.
type Config struct {
	// Endpoint is "embedded" (in-process pure-Go policy) or the URL of a trainer server.
	Endpoint string `yaml:"endpoint"`
	// Token is an optional bearer token; "$ENV" reads it from an environment variable.
	Token string `yaml:"token"`
}

// DefaultConfig uses the embedded policy.
func DefaultConfig() Config { return Config{Endpoint: "embedded"} }

// Validate checks the endpoint.
func (c Config) Validate() error {
	if c.Endpoint == "" {
		return fielderr.New("endpoint", "is required (\"embedded\" or a URL)")
	}
	return nil
}
