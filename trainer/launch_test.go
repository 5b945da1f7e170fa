package trainer

import (
	"reflect"
	"strings"
	"testing"
)

// The launched trainer's command line: plain python -m lora_trainer for one
// process, torchrun (torch.distributed.run, standalone rendezvous) for more,
// with the user's args before the flags himes owns.
func TestLaunchArgv(t *testing.T) {
	c := DefaultConfig().Launch
	c.Args = []string{"--backend", "tiny"}
	extra := []string{"--port", "0"}
	if got, want := c.Argv("/venv/bin/python", extra...), []string{"/venv/bin/python", "-m", "lora_trainer", "--backend", "tiny", "--port", "0"}; !reflect.DeepEqual(got, want) {
		t.Errorf("nproc 1: %q, want %q", got, want)
	}
	c.NProc = 3
	want := []string{"/venv/bin/python", "-m", "torch.distributed.run", "--standalone", "--nproc_per_node", "3",
		"-m", "lora_trainer", "--backend", "tiny", "--port", "0"}
	if got := c.Argv("/venv/bin/python", extra...); !reflect.DeepEqual(got, want) {
		t.Errorf("nproc 3: %q, want %q", got, want)
	}
}

func TestLaunchValidateNProc(t *testing.T) {
	c := DefaultConfig().Launch
	c.Args = []string{"--backend", "tiny"}
	if c.NProc != 1 {
		t.Fatalf("default nproc %d, want 1", c.NProc)
	}
	if err := c.Validate(); err != nil {
		t.Fatalf("nproc 1: %v", err)
	}
	for _, n := range []int{0, -2} {
		c.NProc = n
		err := c.Validate()
		if err == nil || !strings.Contains(err.Error(), "nproc") {
			t.Errorf("nproc %d: error %v, want one naming nproc", n, err)
		}
	}
}
