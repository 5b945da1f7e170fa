package main

import (
	"fmt"

	"github.com/spf13/cobra"

	"github.com/himes-rl/himes/configs"
)

// configFlags are shared by every command that reads a run config.
type configFlags struct {
	path string
	sets []string
}

func (f *configFlags) register(cmd *cobra.Command, required bool) {
	cmd.Flags().StringVarP(&f.path, "config", "c", "", "run config (YAML)")
	cmd.Flags().StringArrayVar(&f.sets, "set", nil, "override a config key, e.g. --set grpo.group_size=8 (repeatable)")
	if required {
		_ = cmd.MarkFlagRequired("config")
	}
}

func (f *configFlags) load() (configs.Config, error) {
	if f.path == "" {
		return configs.Config{}, fmt.Errorf("--config is required")
	}
	return configs.Load(f.path, f.sets)
}

// loadOrDefaults is load for a command whose --config is optional: without
// --config, the defaults with the --set overrides applied.
func (f *configFlags) loadOrDefaults() (configs.Config, error) {
	if f.path == "" {
		return configs.Defaults(f.sets)
	}
	return f.load()
}

func newConfigCmd() *cobra.Command {
	cmd := &cobra.Command{Use: "config", Short: "Inspect run configs"}
	var cf configFlags
	show := &cobra.Command{
		Use:   "show",
		Short: "Print the fully resolved config (defaults, file, overrides)",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			cfg, err := cf.load()
			if err != nil {
				return err
			}
			out, err := cfg.YAML()
			if err != nil {
				return fmt.Errorf("render config: %w", err)
			}
			_, err = cmd.OutOrStdout().Write(out)
			return err
		},
	}
	cf.register(show, true)
	cmd.AddCommand(show)
	return cmd
}
