package main

import (
	"bytes"
	"os"
	"os/exec"
	"testing"
)

// TestMain lets tests run the himes CLI as a real child process (needed to
// SIGKILL it): with HIMES_TEST_MAIN=1 the test binary is himes.
func TestMain(m *testing.M) {
	if os.Getenv("HIMES_TEST_MAIN") == "1" {
		main()
		os.Exit(0)
	}
	os.Exit(m.Run())
}

// runHimesProcess runs the CLI in a child process and returns its exit error and output.
func runHimesProcess(t *testing.T, env []string, args ...string) (string, error) {
	t.Helper()
	cmd := exec.Command(os.Args[0], args...)
	cmd.Env = append(append(os.Environ(), "HIMES_TEST_MAIN=1", "CI=true"), env...)
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	err := cmd.Run()
	return out.String(), err
}
