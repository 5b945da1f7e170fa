package ablate

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"time"

	"github.com/himes-rl/himes/internal/launch"
)

// himesBinary is the running himes binary, which sweeps and transfer runs
// start once per training run (each in its own process: a run holds the
// lock on its directory, and a crash stays in its log).
func himesBinary(what string) (string, error) {
	exe, err := os.Executable()
	if err != nil {
		return "", fmt.Errorf("%s: locate the himes binary: %w", what, err)
	}
	return exe, nil
}

// runChild runs the binary with args, its stdout and stderr into logPath.
func runChild(ctx context.Context, exe string, args []string, logPath string) error {
	lf, err := os.Create(logPath)
	if err != nil {
		return fmt.Errorf("sweep log: %w", err)
	}
	defer lf.Close()
	c := exec.CommandContext(ctx, exe, args...)
	c.Stdout, c.Stderr = lf, lf
	// No terminal: the child logs lines instead of drawing a progress bar.
	c.Env = append(os.Environ(), "CI=true")
	c.WaitDelay = 10 * time.Second
	// A killed ablate takes its runs with it: a run left training would hold
	// its lock (--resume refused "in use") and write into the log the
	// resumed ablate truncates (item 4 of issue 33).
	launch.DieWithParent(c)
	if err := c.Run(); err != nil {
		return fmt.Errorf("himes %s: %w (see %s)", args[0], err, logPath)
	}
	return nil
}
