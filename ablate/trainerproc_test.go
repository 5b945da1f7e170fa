package ablate

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

func TestStartTrainerReadsThePortAndStops(t *testing.T) {
	dir := t.TempDir()
	// A stand-in server: writes its port and its checkpoint dir, then waits to be stopped.
	cmd := `echo {checkpoint_dir} > ` + filepath.Join(dir, "ck.txt") + `; echo 41234 > {port_file}; sleep 60`
	p, err := StartTrainer(context.Background(), cmd, filepath.Join(dir, "run it"), filepath.Join(dir, "trainer.log"), time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	if p.URL != "http://127.0.0.1:41234" {
		t.Fatalf("URL %q", p.URL)
	}
	start := time.Now()
	if err := p.Stop(); err != nil {
		t.Fatalf("Stop: %v", err)
	}
	if time.Since(start) > 20*time.Second {
		t.Fatalf("Stop took %s: SIGTERM did not reach the process group", time.Since(start))
	}
	if err := p.Stop(); err != nil {
		t.Fatalf("second Stop: %v", err)
	}
	raw, err := os.ReadFile(filepath.Join(dir, "ck.txt"))
	if err != nil {
		t.Fatal(err)
	}
	if got, want := strings.TrimSpace(string(raw)), filepath.Join(dir, "run it", "checkpoints"); got != want {
		t.Fatalf("checkpoint dir %q, want %q (a path with a space, quoted)", got, want)
	}
}

func TestStartTrainerErrors(t *testing.T) {
	dir := t.TempDir()
	cases := []struct{ cmd, want string }{
		{"sleep 1", "must contain {port_file}"},
		{"echo no port; exit 3 # {port_file}", "exited before it was ready"},
		{"echo http > {port_file}; sleep 60", "is not a port"},
		{"sleep 60 # {port_file}", "was not ready within 2s"},
	}
	for _, c := range cases {
		_, err := StartTrainer(context.Background(), c.cmd, filepath.Join(dir, "t"), filepath.Join(dir, "log"), 2*time.Second)
		if err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%q: err %v, want %q", c.cmd, err, c.want)
		}
	}
}

func TestSelectFolds(t *testing.T) {
	folds := []TransferFold{{Name: "a"}, {Name: "b"}, {Name: "c"}}
	got, err := SelectFolds(folds, []string{"c", "a"})
	if err != nil || len(got) != 2 || got[0].Name != "c" || got[1].Name != "a" {
		t.Fatalf("got %v, %v", got, err)
	}
	if all, _ := SelectFolds(folds, nil); len(all) != 3 {
		t.Fatalf("no names: %d folds, want all 3", len(all))
	}
	if _, err := SelectFolds(folds, []string{"d"}); err == nil || !strings.Contains(err.Error(), "have a, b, c") {
		t.Fatalf("unknown fold: %v", err)
	}
}
