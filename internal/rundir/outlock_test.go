package rundir

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// An output's lock is exclusive: a second LockOutput of the same output
// fails at once naming this process's pid (flock locks are per open file,
// so a second taker in one process is refused as another process would be),
// and succeeds once the first is released.
func TestLockOutputIsExclusive(t *testing.T) {
	out := filepath.Join(t.TempDir(), "sub", "ev")
	l1, err := LockOutput("eval output", out)
	if err != nil {
		t.Fatal(err)
	}
	_, err = LockOutput("eval output", out+string(filepath.Separator))
	if err == nil || !strings.Contains(err.Error(), fmt.Sprintf("eval output %s is in use by pid %d", out, os.Getpid())) {
		t.Fatalf("second lock: %v", err)
	}
	if err := l1.Close(); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(out + ".lock"); !os.IsNotExist(err) {
		t.Errorf("the released lock left its file: %v", err)
	}
	l2, err := LockOutput("eval output", out)
	if err != nil {
		t.Fatalf("after release: %v", err)
	}
	defer l2.Close()
	if _, err := os.Stat(out); !os.IsNotExist(err) {
		t.Errorf("the lock created the output itself: %v", err)
	}
}
