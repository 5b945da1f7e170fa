// Package buildinfo says which binary produced a run (module, Go version,
// VCS revision), for the run's version.json and `himes version`.
package buildinfo

import (
	"os/exec"
	"runtime"
	"runtime/debug"
	"strings"
)

// Version describes the binary that produced a run.
type Version struct {
	Module    string `json:"module"`
	Version   string `json:"version"`
	GoVersion string `json:"go_version"`
	Revision  string `json:"vcs_revision,omitempty"`
	Modified  bool   `json:"vcs_modified,omitempty"`
}

// Current reads the build info, falling back to asking git in the
// working directory when the binary was built without VCS stamping (go run,
// -buildvcs=false).
func Current() Version {
	v := Version{GoVersion: runtime.Version(), Version: "(devel)"}
	if bi, ok := debug.ReadBuildInfo(); ok {
		v.Module = bi.Main.Path
		if bi.Main.Version != "" {
			v.Version = bi.Main.Version
		}
		for _, s := range bi.Settings {
			switch s.Key {
			case "vcs.revision":
				v.Revision = s.Value
			case "vcs.modified":
				v.Modified = s.Value == "true"
			}
		}
	}
	if v.Revision == "" {
		if out, err := exec.Command("git", "rev-parse", "HEAD").Output(); err == nil {
			v.Revision = strings.TrimSpace(string(out))
			if st, err := exec.Command("git", "status", "--porcelain", "--untracked-files=no").Output(); err == nil {
				v.Modified = len(strings.TrimSpace(string(st))) > 0
			}
		}
	}
	return v
}
