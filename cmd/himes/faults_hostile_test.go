package main

import (
	"bufio"
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/himes-rl/himes/internal/sharedtest"
	"github.com/himes-rl/himes/internal/tbevent"
)

// The fault classes of issue 33, added to the campaign of issue 27 (see
// TestFaultCampaign and docs/FAULTS.md): a full disk during runs and
// checkpoints, hostile HTTP against the two servers, races on one run
// directory, and a killed parent of child processes. Every loop is bounded
// in count, every wait in time; every address is loopback.

// Outcomes beyond exact / refused / silently wrong.
const (
	hang     outcome = iota + silentlyWrong + 1 // a wait past its bound: a stalled client, a stuck process
	crash                                       // a server or run that died of the fault
	leftover                                    // a child process that outlived its killed parent
)

// wantClass reports whether HIMES_FAULT_CLASSES (comma-separated; unset:
// all) selects the class.
func wantClass(name string) bool {
	v := os.Getenv("HIMES_FAULT_CLASSES")
	if v == "" {
		return true
	}
	for _, c := range strings.Split(v, ",") {
		if strings.TrimSpace(c) == name {
			return true
		}
	}
	return false
}

// diskFull runs a dense run (checkpoints every 4 steps, TensorBoard on) on
// a tmpfs sized at a fraction of what the run writes, so the disk fills at
// a different point each time (metrics, ledger, checkpoints, events), then
// grows the file system and resumes: the resumed run must equal a
// fault-free run, or the resume must be refused clearly.
func (c *campaign) diskFull() {
	const category = "disk full, then grown and resumed"
	v := variant{name: "dense", sets: []string{"--set", "grpo.checkpoint_every=4", "--set", "grpo.eval_every=4",
		"--set", "grpo.ledger_steps=3", "--set", "run.tensorboard=true"}}
	refDir := c.t.TempDir()
	if out, err := c.run(nil, c.args(refDir, v)...); err != nil {
		c.t.Fatalf("disk-full reference run: %v\n%s", err, out)
	}
	ref := c.read(filepath.Join(refDir, "r"))
	total := duBytes(filepath.Join(refDir, "r"))
	c.notes = append(c.notes, fmt.Sprintf("disk full: the fault-free dense run writes %d KiB; tmpfs sizes are fractions of that", total>>10))
	tbRepaired := 0
	for _, frac := range []float64{0.1, 0.35, 0.6, 0.85} {
		mnt := c.t.TempDir()
		size := int64(float64(total) * frac)
		if err := syscall.Mount("tmpfs", mnt, "tmpfs", 0, fmt.Sprintf("size=%d", size)); err != nil {
			c.notes = append(c.notes, fmt.Sprintf("disk full: cannot mount a tmpfs (%v; it needs root): the class was not run", err))
			return
		}
		func() {
			defer func() { _ = syscall.Unmount(mnt, syscall.MNT_DETACH) }()
			what := fmt.Sprintf("disk full at %d KiB (%.0f%% of the run)", size>>10, frac*100)
			out, err := c.run(nil, c.args(mnt, v)...)
			if err == nil {
				// It fit (tmpfs rounds up to pages): judge the run itself.
				if d := c.read(filepath.Join(mnt, "r")).diff(ref); d != "" {
					c.note(category, what+" (the run fit)", silentlyWrong, d)
				} else {
					c.note(category, what+" (the run fit)", exact, "")
				}
				return
			}
			first := lastErrorLine(out)
			if !strings.Contains(out, "no space left on device") {
				c.note(category, what, silentlyWrong, "the failed run does not name the full disk: "+first)
				return
			}
			if err := syscall.Mount("tmpfs", mnt, "tmpfs", syscall.MS_REMOUNT, fmt.Sprintf("size=%d", 4*total+(8<<20))); err != nil {
				c.t.Fatalf("grow the tmpfs: %v", err)
			}
			extra := "--resume"
			if _, err := os.Stat(filepath.Join(mnt, "r")); errors.Is(err, os.ErrNotExist) {
				extra = "" // failed before any trained work: the directory was removed, run again
			}
			args := c.args(mnt, v)
			if extra != "" {
				args = append(args, extra)
			}
			out, err = c.run(nil, args...)
			if strings.Contains(out, "tensorboard events file repaired on resume") || strings.Contains(out, "tensorboard: an earlier session's events file") {
				tbRepaired++
			}
			switch {
			case err != nil:
				c.note(category, what+", then "+orFresh(extra), refused, lastErrorLine(out))
			default:
				r := c.read(filepath.Join(mnt, "r"))
				if d := r.diff(ref); d != "" {
					c.note(category, what+", then "+orFresh(extra), silentlyWrong, d)
				} else if reps, rerr := tbevent.RepairDir(filepath.Join(mnt, "r", "tb")); rerr != nil || len(reps) > 0 {
					c.note(category, what+", then "+orFresh(extra), silentlyWrong, fmt.Sprintf("TensorBoard files left damaged: %v %v", reps, rerr))
				} else {
					c.note(category, what+", then "+orFresh(extra), exact, "first run: "+first)
				}
			}
		}()
	}
	c.notes = append(c.notes, fmt.Sprintf("disk full: %d resumes cut a TensorBoard file back to its whole records and reported it (log and status.json)", tbRepaired))
}

func orFresh(extra string) string {
	if extra == "" {
		return "run again (the failed run had been removed)"
	}
	return "resumed"
}

// duBytes is the size of the files under dir, in whole 4 KiB pages as
// tmpfs counts them.
func duBytes(dir string) int64 {
	var n int64
	_ = filepath.Walk(dir, func(_ string, fi os.FileInfo, err error) error {
		if err == nil {
			n += (fi.Size() + 4095) / 4096 * 4096
		}
		return nil
	})
	return n
}

// server is a `himes ... serve` process on loopback.
type server struct {
	cmd  *exec.Cmd
	url  string
	addr string
	done chan struct{}
}

func (c *campaign) startServer(args ...string) *server {
	cmd := exec.Command(os.Args[0], args...)
	cmd.Env = append(os.Environ(), "HIMES_TEST_MAIN=1", "CI=true")
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		c.t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		c.t.Fatal(err)
	}
	line, _ := bufio.NewReader(stdout).ReadString('\n')
	url, ok := strings.CutPrefix(strings.TrimSpace(line), "serving on ")
	if !ok {
		_ = cmd.Process.Kill()
		_ = cmd.Wait()
		c.t.Fatalf("%v printed %q", args, line)
	}
	go func() { _, _ = io.Copy(io.Discard, stdout) }()
	s := &server{cmd: cmd, url: url, addr: strings.TrimPrefix(url, "http://"), done: make(chan struct{})}
	go func() { _ = cmd.Wait(); close(s.done) }()
	return s
}

func (s *server) alive() bool {
	select {
	case <-s.done:
		return false
	default:
		return true
	}
}

func (s *server) stop() {
	_ = s.cmd.Process.Kill()
	<-s.done
}

// peakRSS is the process's peak resident set (VmHWM), in MiB.
func peakRSS(pid int) float64 {
	b, _ := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	for _, l := range strings.Split(string(b), "\n") {
		if v, ok := strings.CutPrefix(l, "VmHWM:"); ok {
			kb, _ := strconv.ParseFloat(strings.TrimSuffix(strings.TrimSpace(v), " kB"), 64)
			return kb / 1024
		}
	}
	return 0
}

// probe is the request an ordinary client sends while the attack runs.
type probe struct {
	method, path, body string
}

// timeProbe sends p and returns how long the answer took (bounded by 60 s).
func timeProbe(base string, p probe) (time.Duration, int, error) {
	cl := &http.Client{Timeout: 60 * time.Second}
	req, err := http.NewRequest(p.method, base+p.path, strings.NewReader(p.body))
	if err != nil {
		return 0, 0, err
	}
	if p.body != "" {
		req.Header.Set("Content-Type", "application/json")
	}
	start := time.Now()
	resp, err := cl.Do(req)
	if err != nil {
		return time.Since(start), 0, err
	}
	_, _ = io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	return time.Since(start), resp.StatusCode, nil
}

// hostileHTTP attacks `himes retrieval serve` and `himes trainer serve`:
// slow bodies and headers (slowloris), many idle connections, oversized
// bodies and Content-Length headers, and (retrieval) the largest result a
// request may ask for. A fault is "exact" when the server answers it as
// designed and an ordinary client is served within 2 s meanwhile; "hang"
// when the ordinary client waits longer; "crash" when the server dies.
func (c *campaign) hostileHTTP() {
	const category = "hostile HTTP"
	kbWords := []string{"the", "of", "and", "in", "to", "a", "is", "for", "was", "on"}
	queries := make([]string, 400)
	for i := range queries {
		queries[i] = strings.Join(kbWords[i%len(kbWords):], " ")
	}
	big, _ := json.Marshal(map[string]any{"queries": queries, "topk": 1000, "return_scores": true})
	for _, srv := range []struct {
		name   string
		args   []string
		probe  probe
		target string // the path the attacks post to
	}{
		{"retrieval serve", []string{"retrieval", "serve", "--config", c.cfg, "--addr", "127.0.0.1:0", "--log-level", "error"},
			probe{"POST", "/retrieve", `{"queries":["who wrote hamlet"],"topk":5,"return_scores":true}`}, "/retrieve"},
		{"trainer serve", []string{"trainer", "serve", "--config", c.cfg, "--addr", "127.0.0.1:0", "--checkpoint-dir", c.t.TempDir(), "--log-level", "error"},
			probe{"GET", "/v1/info", ""}, "/v1/sample"},
	} {
		s := c.startServer(srv.args...)
		judgeStall := func(what string, hold func() func()) {
			release := hold()
			d, code, err := timeProbe(s.url, srv.probe)
			release()
			switch {
			case !s.alive():
				c.note(category, srv.name+": "+what, crash, "the server died")
			case err != nil || d > 2*time.Second:
				c.note(category, srv.name+": "+what, hang, fmt.Sprintf("an ordinary request took %.1f s (status %d, %v)", d.Seconds(), code, err))
			default:
				c.note(category, srv.name+": "+what, exact, fmt.Sprintf("an ordinary request took %.2f s", d.Seconds()))
			}
		}
		dialN := func(n int, send string) func() {
			var conns []net.Conn
			for i := 0; i < n; i++ {
				cn, err := net.DialTimeout("tcp", s.addr, 5*time.Second)
				if err != nil {
					break
				}
				if send != "" {
					_, _ = cn.Write([]byte(send))
				}
				conns = append(conns, cn)
			}
			time.Sleep(300 * time.Millisecond) // let the server start reading them
			return func() {
				for _, cn := range conns {
					cn.Close()
				}
			}
		}
		host := "Host: " + s.addr + "\r\n"
		judgeStall("5 connections announce a 32 MiB body and send none", func() func() {
			return dialN(5, "POST "+srv.target+" HTTP/1.1\r\n"+host+"Content-Type: application/json\r\nContent-Length: 33554432\r\n\r\n")
		})
		judgeStall("5 connections announce a 1 MiB body and send 10 bytes", func() func() {
			return dialN(5, "POST "+srv.target+" HTTP/1.1\r\n"+host+"Content-Type: application/json\r\nContent-Length: 1048576\r\n\r\n{\"queries\"")
		})
		judgeStall("5 connections send half a header and stall", func() func() {
			return dialN(5, "POST "+srv.target+" HTTP/1.1\r\n"+host+"X-Slow: ")
		})
		judgeStall("300 idle connections", func() func() { return dialN(300, "") })
		// Oversized: a body past the server's limit, and a Content-Length
		// header past it with no body: refused (4xx) within 10 s.
		for _, o := range []struct {
			what string
			req  func() (*http.Request, error)
		}{
			{"a 40 MiB body", func() (*http.Request, error) {
				return http.NewRequest("POST", s.url+srv.target, bytes.NewReader(bytes.Repeat([]byte(" "), 40<<20)))
			}},
			{"64 KiB of headers", func() (*http.Request, error) {
				r, err := http.NewRequest("POST", s.url+srv.target, strings.NewReader("{}"))
				if err == nil {
					r.Header.Set("X-Big", strings.Repeat("a", 64<<10))
				}
				return r, err
			}},
		} {
			req, err := o.req()
			if err != nil {
				c.t.Fatal(err)
			}
			start := time.Now()
			resp, err := (&http.Client{Timeout: 10 * time.Second}).Do(req)
			d := time.Since(start)
			what := srv.name + ": " + o.what
			switch {
			case !s.alive():
				c.note(category, what, crash, "the server died")
			case err != nil && d >= 10*time.Second:
				c.note(category, what, hang, fmt.Sprintf("no answer in %.1f s: %v", d.Seconds(), err))
			case err != nil:
				// The server answered and closed while the body was still
				// being sent: the client sees a broken write, not a hang.
				c.note(category, what, refused, fmt.Sprintf("connection closed by the server after %.2f s (%v)", d.Seconds(), err))
			default:
				_, _ = io.Copy(io.Discard, io.LimitReader(resp.Body, 1<<20))
				resp.Body.Close()
				if resp.StatusCode >= 400 && resp.StatusCode < 500 {
					c.note(category, what, refused, fmt.Sprintf("%d after %.2f s", resp.StatusCode, d.Seconds()))
				} else {
					c.note(category, what, silentlyWrong, fmt.Sprintf("status %d", resp.StatusCode))
				}
			}
		}
		// A Content-Length header of 1 TiB over a raw connection (Go's
		// client refuses to send one its body does not match).
		func() {
			what := srv.name + ": a Content-Length of 1 TiB, 2 bytes sent"
			cn, err := net.DialTimeout("tcp", s.addr, 5*time.Second)
			if err != nil {
				c.t.Fatal(err)
			}
			defer cn.Close()
			_ = cn.SetDeadline(time.Now().Add(10 * time.Second))
			start := time.Now()
			_, _ = cn.Write([]byte("POST " + srv.target + " HTTP/1.1\r\n" + host + "Content-Type: application/json\r\nContent-Length: 1099511627776\r\n\r\n{}"))
			line, err := bufio.NewReader(cn).ReadString('\n')
			d := time.Since(start)
			switch {
			case !s.alive():
				c.note(category, what, crash, "the server died")
			case err != nil:
				c.note(category, what, hang, fmt.Sprintf("no status line in %.1f s: %v", d.Seconds(), err))
			case strings.Contains(line, " 4"):
				c.note(category, what, refused, fmt.Sprintf("%s after %.2f s", strings.TrimSpace(line), d.Seconds()))
			default:
				c.note(category, what, silentlyWrong, strings.TrimSpace(line))
			}
		}()
		if srv.name == "retrieval serve" {
			// The largest result a request may ask for (item 2 of issue 33):
			// 400 common-word queries × topk 1000 with scores.
			start := time.Now()
			resp, err := (&http.Client{Timeout: 120 * time.Second}).Post(s.url+"/retrieve", "application/json", bytes.NewReader(big))
			d := time.Since(start)
			what := srv.name + ": 400 queries × topk 1000 (22 KB request)"
			var n int64
			if err == nil {
				n, _ = io.Copy(io.Discard, resp.Body)
				resp.Body.Close()
			}
			switch {
			case !s.alive():
				c.note(category, what, crash, "the server died")
			case err != nil:
				c.note(category, what, hang, fmt.Sprintf("after %.1f s: %v", d.Seconds(), err))
			case resp.StatusCode == 200:
				c.note(category, what, exact, fmt.Sprintf("200, %d MiB in %.1f s", n>>20, d.Seconds()))
			default:
				c.note(category, what, refused, fmt.Sprintf("%d after %.2f s", resp.StatusCode, d.Seconds()))
			}
		}
		rss := peakRSS(s.cmd.Process.Pid)
		c.notes = append(c.notes, fmt.Sprintf("hostile HTTP: %s peak RSS %.0f MiB (VmHWM after every attack on it)", srv.name, rss))
		if rss > 512 {
			c.t.Errorf("%s: peak RSS %.0f MiB, over the 512 MiB target", srv.name, rss)
		}
		if s.alive() {
			s.stop()
		}
	}
}

// races runs fresh starts and --overwrite against one run directory at
// once: exactly one process may own it, the others are refused naming the
// holder, and the owner's run equals a fault-free one.
func (c *campaign) races() {
	const category = "races on one run directory"
	v := variant{name: "sparse"}
	ref := c.reference(v)
	start := func(dir string, extra ...string) (*exec.Cmd, *bytes.Buffer, chan error) {
		cmd := exec.Command("nice", append([]string{"-n", "10", os.Args[0]}, c.args(dir, v, extra...)...)...)
		cmd.Env = append(os.Environ(), "HIMES_TEST_MAIN=1", "CI=true")
		var out bytes.Buffer
		cmd.Stdout, cmd.Stderr = &out, &out
		done := make(chan error, 1)
		if err := cmd.Start(); err != nil {
			c.t.Fatal(err)
		}
		go func() { done <- cmd.Wait() }()
		return cmd, &out, done
	}
	waitLines := func(dir string, n int, done chan error) bool {
		for i := 0; i < 12000; i++ { // 60 s
			b, _ := os.ReadFile(filepath.Join(dir, "r", "metrics.jsonl"))
			if bytes.Count(b, []byte("\n")) >= n {
				return true
			}
			select {
			case err := <-done:
				done <- err
				return false
			case <-time.After(5 * time.Millisecond):
			}
		}
		return false
	}
	for round := 0; round < 3; round++ {
		dir := c.t.TempDir()
		what := fmt.Sprintf("two fresh starts at once, then --overwrite during the live run (round %d)", round+1)
		_, outA, doneA := start(dir)
		_, outB, doneB := start(dir)
		live := waitLines(dir, 1, doneA) || waitLines(dir, 1, doneB)
		var outC string
		var errC error
		if live {
			outC, errC = c.run(nil, c.args(dir, v, "--overwrite")...)
		}
		errA, errB := <-doneA, <-doneB
		won := 0
		for _, e := range []error{errA, errB} {
			if e == nil {
				won++
			}
		}
		loser := outA.String()
		if errB != nil {
			loser = outB.String()
		}
		switch {
		case won != 1:
			c.note(category, what, silentlyWrong, fmt.Sprintf("%d of the two fresh starts exited 0", won))
		case !strings.Contains(loser, "in use by") && !strings.Contains(loser, "already exists"):
			c.note(category, what, silentlyWrong, "the loser's error names no holder: "+lastErrorLine(loser))
		case live && errC == nil:
			c.note(category, what, silentlyWrong, "--overwrite ran beside the live run")
		default:
			if d := c.read(filepath.Join(dir, "r")).diff(ref); d != "" {
				c.note(category, what, silentlyWrong, d)
			} else {
				c.note(category, what, exact, "loser: "+lastErrorLine(loser)+"; overwrite: "+lastErrorLine(outC))
			}
		}
	}
	for _, n := range []int{1, 6} {
		dir := c.t.TempDir()
		what := fmt.Sprintf("--overwrite and --resume while a run has %d metrics lines", n)
		_, _, done := start(dir)
		if !waitLines(dir, n, done) {
			<-done
			c.notes = append(c.notes, what+": the run finished first, not counted")
			continue
		}
		outO, errO := c.run(nil, c.args(dir, v, "--overwrite")...)
		outR, errR := c.run(nil, c.args(dir, v, "--resume")...)
		errA := <-done
		switch {
		case errA != nil:
			c.note(category, what, crash, "the live run failed")
		case errO == nil || errR == nil:
			c.note(category, what, silentlyWrong, "a second process ran beside the live run")
		default:
			if d := c.read(filepath.Join(dir, "r")).diff(ref); d != "" {
				c.note(category, what, silentlyWrong, d)
			} else {
				c.note(category, what, refused, lastErrorLine(outO)+" / "+lastErrorLine(outR))
			}
		}
	}
}

// descendants lists the processes below pid (children's children too).
func descendants(pid int) []int {
	kids := map[int][]int{}
	ents, _ := os.ReadDir("/proc")
	for _, e := range ents {
		p, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		b, err := os.ReadFile("/proc/" + e.Name() + "/stat")
		if err != nil {
			continue
		}
		f := strings.Fields(string(b[bytes.LastIndexByte(b, ')')+1:]))
		if len(f) > 1 {
			pp, _ := strconv.Atoi(f[1])
			kids[pp] = append(kids[pp], p)
		}
	}
	var out []int
	stack := []int{pid}
	for len(stack) > 0 {
		p := stack[len(stack)-1]
		stack = stack[:len(stack)-1]
		for _, k := range kids[p] {
			out = append(out, k)
			stack = append(stack, k)
		}
	}
	return out
}

// running: the process exists and is not a zombie.
func running(pid int) bool {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return false
	}
	f := strings.Fields(string(b[bytes.LastIndexByte(b, ')')+1:]))
	return len(f) > 0 && f[0] != "Z" && f[0] != "X"
}

// children kills `himes ablate transfer` with SIGKILL once its runs train
// and checks that every process below it dies within 10 s; after the first
// kill, `--resume` of the transfer must finish and its logs hold no NUL.
func (c *campaign) children() {
	const category = "killed parent of child processes"
	root := sharedtest.RepoRoot(c.t)
	demo := filepath.Join(root, "datasets", "demo")
	for round, wait := range []time.Duration{0, 2 * time.Second, 6 * time.Second} {
		out := c.t.TempDir()
		args := []string{"ablate", "transfer", "--config", c.cfg,
			"--collections", filepath.Join(demo, "train.jsonl") + "," + filepath.Join(demo, "eval.jsonl"),
			"--set", "grpo.steps=2", "--set", "grpo.eval_every=0", "--set", "grpo.prompts_per_step=4",
			"--set", "grpo.group_size=4", "--set", "grpo.sft.epochs=1", "--jobs", "2", "--out", out}
		cmd := exec.Command(os.Args[0], args...)
		cmd.Env = append(os.Environ(), "HIMES_TEST_MAIN=1", "CI=true")
		var buf bytes.Buffer
		cmd.Stdout, cmd.Stderr = &buf, &buf
		if err := cmd.Start(); err != nil {
			c.t.Fatal(err)
		}
		done := make(chan struct{})
		go func() { _ = cmd.Wait(); close(done) }()
		what := fmt.Sprintf("kill -9 of ablate transfer %v after its first child", wait)
		var below []int
		for i := 0; i < 6000 && len(below) == 0; i++ { // 60 s
			below = descendants(cmd.Process.Pid)
			select {
			case <-done:
				i = 6000
			case <-time.After(10 * time.Millisecond):
			}
		}
		if len(below) == 0 {
			<-done
			c.notes = append(c.notes, what+": no child was seen before the transfer ended, not counted")
			continue
		}
		time.Sleep(wait)
		below = append(below, descendants(cmd.Process.Pid)...)
		_ = cmd.Process.Signal(syscall.SIGKILL)
		<-done
		var alive []int
		for i := 0; i < 1000; i++ { // 10 s
			alive = alive[:0]
			for _, p := range below {
				if running(p) {
					alive = append(alive, p)
				}
			}
			if len(alive) == 0 {
				break
			}
			time.Sleep(10 * time.Millisecond)
		}
		if len(alive) > 0 {
			for _, p := range alive {
				_ = syscall.Kill(p, syscall.SIGKILL)
			}
			c.note(category, what, leftover, fmt.Sprintf("%d of %d processes below it still ran 10 s later", len(alive), len(below)))
			continue
		}
		if round > 0 {
			c.note(category, what, exact, fmt.Sprintf("all %d processes below it died", len(below)))
			continue
		}
		o, err := c.run(nil, append(args, "--resume")...)
		nul := 0
		logs, _ := filepath.Glob(filepath.Join(out, "*", "*.log"))
		more, _ := filepath.Glob(filepath.Join(out, "*.log"))
		for _, l := range append(logs, more...) {
			b, _ := os.ReadFile(l)
			nul += bytes.Count(b, []byte{0})
		}
		switch {
		case err != nil:
			c.note(category, what+", then --resume", refused, lastErrorLine(o))
		case nul > 0:
			c.note(category, what+", then --resume", silentlyWrong, fmt.Sprintf("%d NUL bytes in the runs' logs", nul))
		default:
			c.note(category, what+", then --resume", exact, fmt.Sprintf("all %d processes below it died; the resume finished", len(below)))
		}
	}
}

// leftovers counts the processes other than this one that run this test
// binary (every himes the campaign starts is it), once the classes ran.
func leftovers() []int {
	self, _ := os.Readlink("/proc/self/exe")
	var out []int
	ents, _ := os.ReadDir("/proc")
	for _, e := range ents {
		p, err := strconv.Atoi(e.Name())
		if err != nil || p == os.Getpid() {
			continue
		}
		if exe, err := os.Readlink("/proc/" + e.Name() + "/exe"); err == nil && exe == self && running(p) {
			out = append(out, p)
		}
	}
	return out
}
