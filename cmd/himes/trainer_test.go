package main

import (
	"bufio"
	"bytes"
	"context"
	"io"
	"strings"
	"testing"
)

// TestTrainerServeThenCheck runs `himes trainer serve` on a free port and
// `himes trainer check` against it, as a user would.
func TestTrainerServeThenCheck(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	pr, pw := io.Pipe()
	serve := newRootCmd()
	serve.SetArgs([]string{"trainer", "serve", "--addr", "127.0.0.1:0", "--checkpoint-dir", t.TempDir(), "--token", "sesame", "--log-level", "warn"})
	serve.SetOut(pw)
	serve.SetErr(io.Discard)
	done := make(chan error, 1)
	go func() { done <- serve.ExecuteContext(ctx); pw.Close() }()

	line, err := bufio.NewReader(pr).ReadString('\n')
	if err != nil {
		t.Fatalf("no address line from serve: %v", err)
	}
	go func() { _, _ = io.Copy(io.Discard, pr) }()
	url, ok := strings.CutPrefix(strings.TrimSpace(line), "serving on ")
	if !ok {
		t.Fatalf("unexpected first line %q", line)
	}

	var out bytes.Buffer
	check := newRootCmd()
	check.SetArgs([]string{"trainer", "check", "--endpoint", url, "--token", "sesame", "--log-level", "warn"})
	check.SetOut(&out)
	check.SetErr(io.Discard)
	if err := check.ExecuteContext(ctx); err != nil {
		t.Fatalf("check failed: %v\n%s", err, out.String())
	}
	// 17 properties, delete, weight_decay, clip_low_zero and optimizer_reset included: the embedded endpoint supports them.
	if strings.Contains(out.String(), "FAIL") || strings.Count(out.String(), "PASS") != 17 || !strings.Contains(out.String(), "PASS  delete:") ||
		!strings.Contains(out.String(), "PASS  weight_decay:") || !strings.Contains(out.String(), "PASS  clip_low_zero:") ||
		!strings.Contains(out.String(), "PASS  optimizer_reset:") {
		t.Errorf("want 17 PASS lines (delete, weight_decay, clip_low_zero and optimizer_reset included) and no FAIL:\n%s", out.String())
	}

	// A wrong token fails every property and the command exits non-zero.
	out.Reset()
	bad := newRootCmd()
	bad.SetArgs([]string{"trainer", "check", "--endpoint", url, "--token", "wrong", "--log-level", "error"})
	bad.SetOut(&out)
	bad.SetErr(io.Discard)
	if err := bad.ExecuteContext(ctx); err == nil || !strings.Contains(out.String(), "FAIL  info:") {
		t.Errorf("wrong token: err %v\n%s", err, out.String())
	}

	cancel()
	if err := <-done; err != nil {
		t.Errorf("serve exited with %v", err)
	}
}
