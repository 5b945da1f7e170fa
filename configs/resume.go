package configs

import (
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
)

// resumeFreeKeys may differ on a resume: they change where the run lives,
// how far it goes, or a credential, never what a step computes.
var resumeFreeKeys = []string{"run.output_dir", "grpo.steps", "trainer.token"}

// ResumeChanges compares the config a run last ran with (saved) with the
// one it would resume with (now), both rendered YAML, and splits the
// changes: blocking ones change what a step computes; free ones do not
// (resumeFreeKeys, and trainer.endpoint moving from one trainer URL to
// another: a resume checks the trainer's run id and policy version, so a
// trainer restarted on another port serves the same policy or is refused).
//
// A key the saved config lacks (a himes older than the key) whose new value
// is the key's default is free too: keys are added with defaults that keep
// the old behaviour, so the run computed with that value.
func ResumeChanges(saved, now []byte) (blocking, free []Change, err error) {
	fs, err := leaves(saved)
	if err != nil {
		return nil, nil, fmt.Errorf("saved config: %w", err)
	}
	fn, err := leaves(now)
	if err != nil {
		return nil, nil, fmt.Errorf("new config: %w", err)
	}
	raw, err := Default().YAML()
	if err != nil {
		return nil, nil, fmt.Errorf("render the default config: %w", err)
	}
	defaults, err := leaves(raw)
	if err != nil {
		return nil, nil, fmt.Errorf("default config: %w", err)
	}
	savedEndpoint, nowEndpoint := fs["trainer.endpoint"], fn["trainer.endpoint"]
	all := diffLeaves(fs, fn)
	for _, c := range all {
		isFree := c.Old == absent && c.New == defaults[c.Key]
		for _, k := range resumeFreeKeys {
			isFree = isFree || c.Key == k
		}
		if c.Key == "trainer.endpoint" && isTrainerURL(c.Old) && isTrainerURL(c.New) {
			isFree = true
		}
		// The launch section starts the trainer only for endpoint "launch":
		// with a URL on both sides it was not used and is not now.
		if strings.HasPrefix(c.Key, "trainer.launch.") && isTrainerURL(savedEndpoint) && isTrainerURL(nowEndpoint) {
			isFree = true
		}
		if isFree {
			free = append(free, c)
		} else {
			blocking = append(blocking, c)
		}
	}
	return blocking, free, nil
}

func isTrainerURL(v string) bool {
	return strings.HasPrefix(v, "http://") || strings.HasPrefix(v, "https://")
}

var resumeConfigRe = regexp.MustCompile(`^config\.resume-(\d+)\.yaml$`)

// LatestSnapshot is the path of the config snapshot the run in dir last ran
// with: the newest config.resume-N.yaml, else config.yaml.
func LatestSnapshot(dir string) (string, error) {
	entries, err := os.ReadDir(dir)
	if err != nil {
		return "", err
	}
	best, name := -1, "config.yaml"
	for _, e := range entries {
		if m := resumeConfigRe.FindStringSubmatch(e.Name()); m != nil {
			if n, err := strconv.Atoi(m[1]); err == nil && n > best {
				best, name = n, e.Name()
			}
		}
	}
	return filepath.Join(dir, name), nil
}
