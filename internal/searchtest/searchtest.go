// Package searchtest gives tests a real OpenSearch cluster: the one CI
// starts (scripts/ci/opensearch.sh start, three nodes on loopback) for tests
// that only search it, or a private one started in a temporary folder for
// tests that kill or stall its nodes. Without Java, the set-up artifacts or
// a running cluster, a test is skipped with the reason; under CI=true it
// fails, so CI can never pass by skipping them.
package searchtest

import (
	"context"
	"encoding/json"
	"fmt"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/himes-rl/himes/internal/sharedtest"
)

// URLEnv overrides where the CI cluster is: its node URLs, comma-separated.
const URLEnv = "HIMES_OPENSEARCH_URL"

// unavailable skips the test with the reason, or fails it under CI=true.
func unavailable(tb testing.TB, format string, args ...any) {
	tb.Helper()
	msg := fmt.Sprintf(format, args...)
	if os.Getenv("CI") == "true" {
		tb.Fatalf("OpenSearch cluster needed under CI=true: %s", msg)
	}
	tb.Skipf("SKIP: no OpenSearch cluster: %s — run scripts/ci/setup-opensearch.sh and scripts/ci/opensearch.sh start", msg)
}

// cacheDir is where scripts/ci/opensearch.sh keeps its files.
func cacheDir() string {
	if d := os.Getenv("HIMES_CACHE"); d != "" {
		return d
	}
	if d := os.Getenv("XDG_CACHE_HOME"); d != "" {
		return filepath.Join(d, "himes")
	}
	home, _ := os.UserHomeDir()
	return filepath.Join(home, ".cache", "himes")
}

// URLs returns the node URLs of the cluster CI started ($HIMES_OPENSEARCH_URL,
// else the urls file scripts/ci/opensearch.sh start writes), once one of
// them answers _cluster/health.
func URLs(tb testing.TB) []string {
	tb.Helper()
	v := os.Getenv(URLEnv)
	src := URLEnv
	if v == "" {
		src = filepath.Join(cacheDir(), "opensearch-cluster", "urls")
		raw, err := os.ReadFile(src)
		if err != nil {
			unavailable(tb, "%s unset and %v", URLEnv, err)
		}
		v = string(raw)
	}
	urls := strings.Split(strings.TrimSpace(v), ",")
	for _, u := range urls {
		if _, err := Health(tb.Context(), u); err == nil {
			return urls
		}
	}
	unavailable(tb, "no node of %s (from %s) answers", v, src)
	return nil
}

// HealthInfo is the part of _cluster/health tests look at.
type HealthInfo struct {
	Status     string `json:"status"`
	Nodes      int    `json:"number_of_nodes"`
	Unassigned int    `json:"unassigned_shards"`
}

// Health asks one node for the cluster's health.
func Health(ctx context.Context, url string) (HealthInfo, error) {
	var h HealthInfo
	ctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url+"/_cluster/health", nil)
	if err != nil {
		return h, err
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return h, err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return h, fmt.Errorf("%s: status %s", url, resp.Status)
	}
	return h, json.NewDecoder(resp.Body).Decode(&h)
}

// Cluster is a private cluster a test started and may hurt.
type Cluster struct {
	Dir    string
	Port   int // node n serves HTTP on Port+n-1
	Nodes  int
	script string
}

// Start runs scripts/ci/opensearch.sh start in a temporary folder with nodes
// on HTTP ports port..port+nodes-1 (transport: +100) and stops the cluster
// when the test ends. It skips (fails under CI=true) when Java or the
// set-up artifacts are missing or a port is taken.
func Start(tb testing.TB, port, nodes int) *Cluster {
	tb.Helper()
	if _, err := exec.LookPath("java"); err != nil {
		unavailable(tb, "no java on PATH")
	}
	root := sharedtest.RepoRoot(tb)
	c := &Cluster{Dir: tb.TempDir(), Port: port, Nodes: nodes, script: filepath.Join(root, "scripts", "ci", "opensearch.sh")}
	matches, _ := filepath.Glob(filepath.Join(cacheDir(), "opensearch-*", "stamp"))
	if len(matches) == 0 {
		unavailable(tb, "OpenSearch is not set up under %s", cacheDir())
	}
	for n := 1; n <= nodes; n++ {
		for _, p := range []int{port + n - 1, port + 100 + n - 1} {
			if l, err := net.Listen("tcp", "127.0.0.1:"+strconv.Itoa(p)); err != nil {
				unavailable(tb, "port %d is taken: %v", p, err)
			} else {
				l.Close()
			}
		}
	}
	tb.Cleanup(func() {
		if out, err := c.run("stop"); err != nil {
			tb.Errorf("stop the test cluster: %v\n%s", err, out)
		}
	})
	start := time.Now()
	if out, err := c.run("start"); err != nil {
		tb.Fatalf("start a %d-node cluster: %v\n%s", nodes, err, out)
	}
	tb.Logf("started a %d-node OpenSearch cluster on port %d in %s", nodes, port, time.Since(start).Round(time.Second))
	return c
}

func (c *Cluster) run(args ...string) (string, error) {
	cmd := exec.Command("bash", append([]string{c.script}, args...)...)
	cmd.Env = append(os.Environ(), "HIMES_OPENSEARCH_DIR="+c.Dir, "HIMES_OPENSEARCH_PORT="+strconv.Itoa(c.Port),
		"HIMES_OPENSEARCH_NODES="+strconv.Itoa(c.Nodes))
	out, err := cmd.CombinedOutput()
	return string(out), err
}

// URL is node n's HTTP address (1-based).
func (c *Cluster) URL(n int) string { return "http://127.0.0.1:" + strconv.Itoa(c.Port+n-1) }

// URLs lists every node's address.
func (c *Cluster) URLs() []string {
	var out []string
	for n := 1; n <= c.Nodes; n++ {
		out = append(out, c.URL(n))
	}
	return out
}

// PID is node n's process id.
func (c *Cluster) PID(tb testing.TB, n int) int {
	tb.Helper()
	raw, err := os.ReadFile(filepath.Join(c.Dir, "node-"+strconv.Itoa(n), "pid"))
	if err != nil {
		tb.Fatalf("node-%d: %v", n, err)
	}
	pid, err := strconv.Atoi(strings.TrimSpace(string(raw)))
	if err != nil {
		tb.Fatalf("node-%d pid: %v", n, err)
	}
	return pid
}

// Signal sends sig to node n's JVM: SIGKILL kills it, SIGSTOP stalls it
// (connections stay open, nothing answers), SIGCONT resumes it.
func (c *Cluster) Signal(tb testing.TB, n int, sig syscall.Signal) {
	tb.Helper()
	if err := syscall.Kill(c.PID(tb, n), sig); err != nil {
		tb.Fatalf("signal %v to node-%d: %v", sig, n, err)
	}
}

// StartNode restarts node n on its data.
func (c *Cluster) StartNode(tb testing.TB, n int) {
	tb.Helper()
	if out, err := c.run("start-node", strconv.Itoa(n)); err != nil {
		tb.Fatalf("start node-%d: %v\n%s", n, err, out)
	}
}

// WaitFor polls node n until the cluster reports status with the given
// number of nodes, or fails the test after limit.
func (c *Cluster) WaitFor(tb testing.TB, n int, status string, nodes int, limit time.Duration) {
	tb.Helper()
	deadline := time.Now().Add(limit)
	var last HealthInfo
	var err error
	for time.Now().Before(deadline) {
		if last, err = Health(tb.Context(), c.URL(n)); err == nil && last.Status == status && last.Nodes == nodes {
			return
		}
		time.Sleep(time.Second)
	}
	tb.Fatalf("cluster not %s with %d nodes after %s: last %+v, %v", status, nodes, limit, last, err)
}
