package launch

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"
)

// The fake services are this test binary run again with HIMES_LAUNCH_FAKE
// set: TestMain then plays the child instead of running the tests.
const fakeEnv = "HIMES_LAUNCH_FAKE"

func TestMain(m *testing.M) {
	if mode := os.Getenv(fakeEnv); mode != "" {
		fake(mode)
		return
	}
	os.Exit(m.Run())
}

// fake is the child: FAKE_PORT_FILE, FAKE_PID_FILE and FAKE_HTTP_PORT are
// its inputs.
func fake(mode string) {
	say := func(format string, args ...any) { fmt.Printf(format+"\n", args...) }
	forever := func() { select {} }
	writePort := func() {
		if f := os.Getenv("FAKE_PORT_FILE"); f != "" {
			if err := os.WriteFile(f+".tmp", []byte("43210\n"), 0o644); err != nil {
				panic(err)
			}
			if err := os.Rename(f+".tmp", f); err != nil {
				panic(err)
			}
		}
	}
	switch mode {
	case "serve", "stubborn":
		if mode == "stubborn" {
			signal.Ignore(syscall.SIGTERM)
		}
		// A grandchild in the same process group, as a shell or a worker pool
		// would leave: Stop must end it too.
		gc := exec.Command(os.Args[0])
		gc.Env = append(os.Environ(), fakeEnv+"=sleep")
		if err := gc.Start(); err != nil {
			panic(err)
		}
		if err := os.WriteFile(os.Getenv("FAKE_PID_FILE"), []byte(strconv.Itoa(gc.Process.Pid)), 0o644); err != nil {
			panic(err)
		}
		say("loading the model")
		writePort()
		say("serving")
		forever()
	case "sleep":
		signal.Ignore(syscall.SIGTERM)
		forever()
	case "silent":
		if f := os.Getenv("FAKE_PID_FILE"); f != "" {
			if err := os.WriteFile(f, []byte(strconv.Itoa(os.Getpid())), 0o644); err != nil {
				panic(err)
			}
		}
		for i := 1; i <= 30; i++ {
			say("starting, line %d", i)
		}
		forever()
	case "exit-early":
		say("lora_trainer: error: unrecognized arguments: --bogus")
		os.Exit(2)
	case "crash-later":
		writePort()
		say("serving")
		time.Sleep(300 * time.Millisecond)
		say("RuntimeError: out of memory in grpo_step")
		os.Exit(3)
	case "http":
		// Ready only after a while: /api/version answers 503 first.
		start := time.Now()
		http.HandleFunc("/api/version", func(w http.ResponseWriter, _ *http.Request) {
			if time.Since(start) < 300*time.Millisecond {
				w.WriteHeader(http.StatusServiceUnavailable)
				return
			}
			fmt.Fprint(w, `{"version":"fake"}`)
		})
		l, err := net.Listen("tcp", "127.0.0.1:"+os.Getenv("FAKE_HTTP_PORT"))
		if err != nil {
			panic(err)
		}
		say("listening on %s", l.Addr())
		panic(http.Serve(l, nil))
	default:
		panic("unknown fake mode " + mode)
	}
}

func fakeSpec(t *testing.T, mode string, env ...string) (Spec, string) {
	t.Helper()
	dir := t.TempDir()
	portFile := filepath.Join(dir, "port")
	return Spec{
		Name:         "fake-" + mode,
		Argv:         []string{os.Args[0], "-test.run=^$"},
		Env:          append([]string{fakeEnv + "=" + mode, "FAKE_PORT_FILE=" + portFile, "FAKE_PID_FILE=" + filepath.Join(dir, "pid")}, env...),
		Log:          filepath.Join(dir, "service.log"),
		Ready:        PortFile(portFile),
		StopTimeout:  5 * time.Second,
		PollInterval: 20 * time.Millisecond,
	}, dir
}

// alive reports whether pid is a live process (a zombie is dead).
func alive(pid int) bool {
	raw, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return false
	}
	// "pid (comm) S ...": the state follows the last ')'.
	s := string(raw)
	i := strings.LastIndexByte(s, ')')
	return i < 0 || i+2 >= len(s) || s[i+2] != 'Z'
}

// waitDead polls until pid is gone; a process killed by SIGKILL is reaped by
// its parent (or init) shortly after.
func waitDead(t *testing.T, pid int) {
	t.Helper()
	for i := 0; i < 500 && alive(pid); i++ {
		time.Sleep(10 * time.Millisecond)
	}
	if alive(pid) {
		t.Fatalf("process %d is still alive", pid)
	}
}

func TestStartReadyAndStopKillsGroup(t *testing.T) {
	for _, mode := range []string{"serve", "stubborn"} {
		t.Run(mode, func(t *testing.T) {
			spec, dir := fakeSpec(t, mode)
			if mode == "stubborn" {
				spec.StopTimeout = 200 * time.Millisecond // SIGTERM is ignored: SIGKILL after this
			}
			p, err := Start(context.Background(), spec)
			if err != nil {
				t.Fatal(err)
			}
			if p.URL() != "http://127.0.0.1:43210" {
				t.Errorf("URL = %q, want the port file's port", p.URL())
			}
			raw, err := os.ReadFile(filepath.Join(dir, "pid"))
			if err != nil {
				t.Fatal(err)
			}
			gc, _ := strconv.Atoi(string(raw))
			if !alive(p.Pid()) || !alive(gc) {
				t.Fatal("child or grandchild not running after Start")
			}
			if err := p.Stop(); err != nil {
				t.Errorf("Stop: %v", err)
			}
			select {
			case <-p.Exited():
			default:
				t.Error("Exited not closed after Stop")
			}
			waitDead(t, gc) // the grandchild ignores SIGTERM: the group's SIGKILL ended it
			if err := p.Stop(); err != nil {
				t.Errorf("second Stop: %v", err)
			}
			log, _ := os.ReadFile(spec.Log)
			if !strings.Contains(string(log), "serving") {
				t.Errorf("log %s lacks the child's output: %q", spec.Log, log)
			}
		})
	}
}

func TestStartTimeoutNamesCommandAndLogTail(t *testing.T) {
	spec, _ := fakeSpec(t, "silent")
	spec.ReadyTimeout = 300 * time.Millisecond
	p, err := Start(context.Background(), spec)
	if err == nil {
		p.Stop()
		t.Fatal("Start succeeded for a service that never gets ready")
	}
	msg := err.Error()
	for _, want := range []string{"was not ready within 300ms", os.Args[0], spec.Log, "starting, line 30", "starting, line 11"} {
		if !strings.Contains(msg, want) {
			t.Errorf("error lacks %q:\n%s", want, msg)
		}
	}
	// 20 lines are quoted: line 10 is the 21st from the end.
	if strings.Contains(msg, "starting, line 10\n") {
		t.Errorf("error quotes more than the last %d lines:\n%s", tailLines, msg)
	}
}

func TestStartReportsEarlyExit(t *testing.T) {
	spec, _ := fakeSpec(t, "exit-early")
	p, err := Start(context.Background(), spec)
	if err == nil {
		p.Stop()
		t.Fatal("Start succeeded for a service that exited")
	}
	for _, want := range []string{"exited before it was ready", "exit status 2", "unrecognized arguments: --bogus"} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("error lacks %q:\n%s", want, err)
		}
	}
}

func TestStartCancelledStopsChild(t *testing.T) {
	spec, dir := fakeSpec(t, "silent")
	ctx, cancel := context.WithCancel(context.Background())
	pid := 0
	spec.Ready = func(context.Context) (string, bool, error) {
		if raw, err := os.ReadFile(filepath.Join(dir, "pid")); err == nil && pid == 0 {
			pid, _ = strconv.Atoi(string(raw))
			cancel() // an interrupt while waiting
		}
		return "", false, nil
	}
	_, err := Start(ctx, spec)
	if !errors.Is(err, context.Canceled) {
		t.Fatalf("Start = %v, want context.Canceled", err)
	}
	if pid == 0 {
		t.Fatal("the child never wrote its pid")
	}
	waitDead(t, pid)
}

func TestWatchReportsCrash(t *testing.T) {
	spec, _ := fakeSpec(t, "crash-later")
	p, err := Start(context.Background(), spec)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancelCause(context.Background())
	p.Watch(cancel)
	<-ctx.Done() // the training would be running here
	cause := context.Cause(ctx)
	for _, want := range []string{"exited while in use", "exit status 3", "out of memory in grpo_step"} {
		if cause == nil || !strings.Contains(cause.Error(), want) {
			t.Errorf("cause lacks %q: %v", want, cause)
		}
	}
	// Stop after a crash reports it too (a caller that did not watch).
	if err := p.Stop(); err == nil || !strings.Contains(err.Error(), "exit status 3") {
		t.Errorf("Stop after a crash = %v, want the crash", err)
	}
}

func TestWatchQuietOnStop(t *testing.T) {
	spec, _ := fakeSpec(t, "serve")
	p, err := Start(context.Background(), spec)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancelCause(context.Background())
	judged := p.Watch(cancel)
	if err := p.Stop(); err != nil {
		t.Fatal(err)
	}
	<-judged
	select {
	case <-ctx.Done():
		t.Errorf("Watch cancelled after a requested Stop: %v", context.Cause(ctx))
	default:
	}
}

func TestHTTPReady(t *testing.T) {
	port, err := FreePort()
	if err != nil {
		t.Fatal(err)
	}
	spec, _ := fakeSpec(t, "http", "FAKE_HTTP_PORT="+strconv.Itoa(port))
	base := "http://127.0.0.1:" + strconv.Itoa(port)
	spec.Ready = HTTPGet(base, "/api/version")
	p, err := Start(context.Background(), spec)
	if err != nil {
		t.Fatal(err)
	}
	defer p.Stop()
	if p.URL() != base {
		t.Errorf("URL = %q, want %q", p.URL(), base)
	}
	resp, err := http.Get(base + "/api/version")
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != 200 {
		t.Errorf("ready, but /api/version answers %d", resp.StatusCode)
	}
}

func TestPortFileRejectsGarbage(t *testing.T) {
	f := filepath.Join(t.TempDir(), "port")
	ready := PortFile(f)
	if _, ok, err := ready(context.Background()); ok || err != nil {
		t.Errorf("missing file: ok=%v err=%v, want not yet", ok, err)
	}
	for _, bad := range []string{"http\n", "0\n", "70000\n"} {
		if err := os.WriteFile(f, []byte(bad), 0o644); err != nil {
			t.Fatal(err)
		}
		if _, _, err := ready(context.Background()); err == nil || !strings.Contains(err.Error(), f) {
			t.Errorf("port file %q: err = %v, want one naming %s", bad, err, f)
		}
	}
}

func TestLastLines(t *testing.T) {
	f := filepath.Join(t.TempDir(), "log")
	if err := os.WriteFile(f, []byte("a\n\nb\r\nc\n  \nd"), 0o644); err != nil {
		t.Fatal(err)
	}
	got, err := LastLines(f, 3)
	if err != nil {
		t.Fatal(err)
	}
	if strings.Join(got, "|") != "b|c|d" {
		t.Errorf("LastLines = %q, want [b c d]", got)
	}
}
