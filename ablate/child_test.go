package ablate

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"
)

// parentEnv makes the test binary a parent that runs one child through
// runChild (TestMain), for TestRunChildDiesWithItsParent to kill.
const parentEnv = "HIMES_TEST_RUNCHILD_PARENT"

func TestMain(m *testing.M) {
	if pidFile := os.Getenv(parentEnv); pidFile != "" {
		// The child writes its pid, then sleeps far longer than any test.
		err := runChild(context.Background(), "/bin/sh",
			[]string{"-c", `echo $$ > "$0.tmp" && mv "$0.tmp" "$0" && exec sleep 3600`, pidFile}, pidFile+".log")
		fmt.Fprintln(os.Stderr, "runChild returned:", err)
		os.Exit(3)
	}
	os.Exit(m.Run())
}

// Item 4 of issue 33: after kill -9 of `himes ablate transfer`, its `himes
// train` children ran on. A parent started as a separate process runs a
// child through runChild, the real code path; the test kills the parent
// with SIGKILL and asserts that the child is dead or has SIGKILL pending
// (then waits for it to go), never that it sleeps on.
func TestRunChildDiesWithItsParent(t *testing.T) {
	dir := t.TempDir()
	pidFile := filepath.Join(dir, "child.pid")
	parent := exec.Command(os.Args[0], "-test.run=^$")
	parent.Env = append(os.Environ(), parentEnv+"="+pidFile)
	var stderr bytes.Buffer
	parent.Stderr = &stderr
	if err := parent.Start(); err != nil {
		t.Fatal(err)
	}
	exited := make(chan error, 1)
	go func() { exited <- parent.Wait() }()
	var pid int
	for pid == 0 {
		select {
		case err := <-exited:
			t.Fatalf("the parent exited before its child started (%v): %s", err, stderr.String())
		case <-time.After(20 * time.Millisecond):
		}
		if b, err := os.ReadFile(pidFile); err == nil {
			if pid, err = strconv.Atoi(strings.TrimSpace(string(b))); err != nil {
				t.Fatalf("pid file: %v", err)
			}
		}
	}
	if err := parent.Process.Signal(syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	<-exited
	// The parent is gone and reaped: a parent-death signal was sent during
	// its exit, so the child is dead, a zombie, exiting or has it pending.
	if !dyingOrGone(t, pid) {
		syscall.Kill(pid, syscall.SIGKILL)
		t.Fatalf("the child (pid %d) survives its SIGKILLed parent with no signal pending", pid)
	}
	for !gone(pid) {
		time.Sleep(10 * time.Millisecond)
	}
}

// gone: no such process, or a zombie (a container's init may never reap it).
func gone(pid int) bool {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return true
	}
	f := strings.Fields(string(b[bytes.LastIndexByte(b, ')')+1:]))
	return len(f) > 0 && (f[0] == "Z" || f[0] == "X")
}

// dyingOrGone: gone, exiting (PF_EXITING), or SIGKILL pending.
func dyingOrGone(t *testing.T, pid int) bool {
	if gone(pid) {
		return true
	}
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return true
	}
	f := strings.Fields(string(b[bytes.LastIndexByte(b, ')')+1:]))
	if flags, err := strconv.ParseUint(f[6], 10, 64); err == nil && flags&0x4 != 0 { // PF_EXITING
		return true
	}
	st, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		return true
	}
	for _, line := range strings.Split(string(st), "\n") {
		k, v, ok := strings.Cut(line, ":")
		if !ok || (k != "SigPnd" && k != "ShdPnd") {
			continue
		}
		mask, err := strconv.ParseUint(strings.TrimSpace(v), 16, 64)
		if err != nil {
			t.Fatalf("%s: %v", line, err)
		}
		if mask&(1<<(syscall.SIGKILL-1)) != 0 {
			return true
		}
	}
	return false
}
