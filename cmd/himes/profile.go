package main

import (
	"errors"
	"fmt"
	"log/slog"
	"os"
	"runtime"
	"runtime/pprof"

	"github.com/spf13/cobra"
)

// profileFlags are --cpuprofile and --memprofile (runtime/pprof), for
// commands whose time users wait on (train, eval). Read the files with
// `go tool pprof himes FILE`.
type profileFlags struct{ cpu, mem string }

func (p *profileFlags) register(cmd *cobra.Command) {
	cmd.Flags().StringVar(&p.cpu, "cpuprofile", "", "write a CPU profile of the whole command to this file (go tool pprof)")
	cmd.Flags().StringVar(&p.mem, "memprofile", "", "write a heap profile (allocations, live heap after a GC) at the end of the command to this file (go tool pprof)")
}

// start begins the CPU profile; the returned stop ends it and writes the
// heap profile, joining its errors to err.
func (p *profileFlags) start() (stop func(err error) error, err error) {
	var cpu *os.File
	if p.cpu != "" {
		if cpu, err = os.Create(p.cpu); err != nil {
			return nil, fmt.Errorf("--cpuprofile: %w", err)
		}
		if err := pprof.StartCPUProfile(cpu); err != nil {
			cpu.Close()
			return nil, fmt.Errorf("--cpuprofile %s: %w", p.cpu, err)
		}
	}
	return func(err error) error {
		if cpu != nil {
			pprof.StopCPUProfile()
			if cerr := cpu.Close(); cerr != nil {
				err = errors.Join(err, fmt.Errorf("--cpuprofile %s: %w", p.cpu, cerr))
			} else {
				slog.Info("CPU profile written", "file", p.cpu)
			}
		}
		if p.mem != "" {
			if merr := writeHeapProfile(p.mem); merr != nil {
				err = errors.Join(err, fmt.Errorf("--memprofile %s: %w", p.mem, merr))
			} else {
				slog.Info("heap profile written", "file", p.mem)
			}
		}
		return err
	}, nil
}

func writeHeapProfile(path string) error {
	f, err := os.Create(path)
	if err != nil {
		return err
	}
	runtime.GC() // the live heap as of now
	if err := pprof.WriteHeapProfile(f); err != nil {
		f.Close()
		return err
	}
	return f.Close()
}
