package main

import (
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"strings"

	"github.com/himes-rl/himes/configs"
	"github.com/himes-rl/himes/internal/atomicfile"
	"github.com/himes-rl/himes/internal/buildinfo"
	"github.com/himes-rl/himes/internal/rundir"
)

// checkConfigChange refuses to resume with a config that differs from the
// one the run in dir last ran with, unless allowed, listing the differing
// keys. It only reads, so it runs before the run directory is opened.
func checkConfigChange(dir string, cfg configs.Config, allow bool) error {
	path, err := configs.LatestSnapshot(dir)
	if err != nil {
		return fmt.Errorf("--resume: %w", err)
	}
	saved, err := os.ReadFile(path)
	if errors.Is(err, os.ErrNotExist) && allow {
		slog.Warn("resume: the run has no config snapshot to compare with", "path", path)
		return nil
	}
	if err != nil {
		return fmt.Errorf("--resume: the run's config snapshot: %w (pass --allow-config-change to resume without it)", err)
	}
	now, err := cfg.YAML()
	if err != nil {
		return fmt.Errorf("render config: %w", err)
	}
	blocking, free, err := configs.ResumeChanges(saved, now)
	if err != nil {
		return fmt.Errorf("--resume: compare with %s: %w", path, err)
	}
	for _, c := range free {
		slog.Info("resume: config changed", "change", c.String())
	}
	var changes []string
	for _, c := range blocking {
		changes = append(changes, c.String())
	}
	if len(changes) == 0 {
		return nil
	}
	if allow {
		slog.Warn("resume: continuing with a changed config (--allow-config-change)", "saved", path, "changes", changes)
		return nil
	}
	return fmt.Errorf("--resume: the config differs from the one the run last ran with (%s):\n  %s\npass --allow-config-change to resume with it anyway, or start a new run",
		filepath.Base(path), strings.Join(changes, "\n  "))
}

// snapshotRun records what produced the run: the resolved config and the
// binary's version. A resumed process writes config.resume-N.yaml and
// version.resume-N.json (N counts the resumes) beside the originals, so the
// run's history stays visible.
func snapshotRun(run *rundir.RunDir, cfg configs.Config) error {
	confData, versionData, err := provenance(cfg)
	if err != nil {
		return err
	}
	conf, version := "config.yaml", "version.json"
	if g := run.Generation(); g > 0 {
		conf, version = fmt.Sprintf("config.resume-%d.yaml", g), fmt.Sprintf("version.resume-%d.json", g)
	}
	if err := atomicfile.WriteFile(run.File(conf), confData, 0o644); err != nil {
		return err
	}
	return atomicfile.WriteFile(run.File(version), versionData, 0o644)
}

// provenance is what records what produced a run or an evaluation: the
// resolved config as YAML and the binary's version as indented JSON.
func provenance(cfg configs.Config) (conf, version []byte, err error) {
	if conf, err = cfg.YAML(); err != nil {
		return nil, nil, fmt.Errorf("render config: %w", err)
	}
	v, err := json.MarshalIndent(buildinfo.Current(), "", "  ")
	if err != nil {
		return nil, nil, fmt.Errorf("encode version: %w", err)
	}
	return conf, append(v, '\n'), nil
}
